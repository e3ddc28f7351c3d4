#include "sim/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/json_writer.h"
#include "core/table.h"
#include "core/units.h"
#include "sim/models/ledger.h"
#include "sim/series.h"

namespace tierflow::sim {
namespace {

/// The plan's demand prefetches (routing misses, planner/realize.h) as they ran.
struct DemandTotals {
  bool any = false;  ///< the plan has demand steps
  uint64_t count = 0;
  uint64_t bytes = 0;
  Time exposed = 0;
};

DemandTotals demand_totals(const SimResult& r, const Plan& plan) {
  DemandTotals d;
  for (const Program& p : plan.programs) {
    for (const Step& s : p.steps) d.any = d.any || s.demand;
  }
  for (const TransferRecord& x : r.transfers) {
    if (!plan.programs[x.program].steps[x.step].demand) continue;
    ++d.count;
    d.bytes += x.bytes;
    d.exposed += x.exposed;
  }
  return d;
}

std::string dur(Time ps) {
  return to_string_approx(Duration{ps});
}
std::string bytes(uint64_t b) {
  return to_string_approx(Bytes{b});
}
std::string rate(double bps) {
  return to_string(Bandwidth{bps});
}
std::string pct(double x) {
  return fmt::format("{:.1f}%", 100.0 * x);
}

std::string_view resource_kind(ResourceKind k) {
  switch (k) {
    case ResourceKind::kTierRead:
      return "tier-read";
    case ResourceKind::kTierWrite:
      return "tier-write";
    case ResourceKind::kLink:
      return "link";
  }
  return "link";
}

std::string live_name(const LiveTensor& l, const Workload& w) {
  if (l.what & kWorkspaceBit) return fmt::format("workspace of op {}", l.what & ~kWorkspaceBit);
  return w.tensors[l.what].name;
}

std::string_view kind_name(size_t k) {
  return kKindSlotNames[k];
}

}  // namespace

std::string_view error_kind_name(SimError::Kind k) {
  switch (k) {
    case SimError::Kind::kPlanRule:
      return "plan rule";
    case SimError::Kind::kCapacity:
      return "capacity";
    case SimError::Kind::kDeadlock:
      return "deadlock";
    case SimError::Kind::kTopology:
      return "topology";
    case SimError::Kind::kTimeLimit:
      return "time limit";
  }
  return "plan rule";
}

std::string report_table(const SimResult& r, const ReportContext& c) {
  std::string out;
  fmt::format_to(std::back_inserter(out), "plan {} on {} ({}, {} steps, {} transfers)\n",
                 c.plan.name.empty() ? c.plan_file : c.plan.name, c.topology.name,
                 count_text(c.plan.programs.size(), "program"), r.steps, r.transfers.size());
  // A plan from whatif --plan-out ran on an enlarged device: the table says so.
  if (!c.sets.empty())
    fmt::format_to(std::back_inserter(out), "overrides {}\n", fmt::join(c.sets, " "));
  fmt::format_to(std::back_inserter(out), "makespan {}\n", dur(r.makespan));

  // Host steps (core/plan.h) add the host CPU's time and op count.
  const bool host = std::any_of(r.devices.begin(), r.devices.end(),
                                [](const DeviceResult& d) { return d.host_ops > 0; });
  std::vector<std::string> head = {
      "device", "compute", "stall: transfer", "stall: memory", "busy", "ops", "in", "out"};
  if (host) head.insert(head.end(), {"host CPU", "host ops"});
  std::vector<Table::Align> align(head.size(), Table::Align::kRight);
  align[0] = Table::Align::kLeft;
  Table dev(head, align);
  for (const DeviceResult& d : r.devices) {
    std::vector<std::string> row = {
        std::to_string(d.device),
        dur(d.compute_ps),
        dur(d.stall_transfer_ps),
        dur(d.stall_memory_ps),
        r.makespan > 0 ? pct(double(d.compute_ps) / double(r.makespan)) : "-",
        std::to_string(d.ops),
        bytes(d.bytes_in),
        bytes(d.bytes_out)};
    if (host) row.insert(row.end(), {dur(d.host_compute_ps), std::to_string(d.host_ops)});
    dev.add_row(row);
  }
  out += "\ndevices\n" + dev.render();

  Table tiers({"tier", "capacity", "peak", "at", "average", "at peak"},
              {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight,
               Table::Align::kRight, Table::Align::kRight, Table::Align::kLeft});
  for (const TierResult& t : r.tiers) {
    std::string kinds;
    for (size_t k = 0; k < t.peak_by_kind.size(); ++k) {
      if (t.peak_by_kind[k] == 0) continue;
      if (!kinds.empty()) kinds += ", ";
      kinds += fmt::format("{} {}", kind_name(k), bytes(t.peak_by_kind[k]));
    }
    tiers.add_row({t.name, bytes(t.capacity), bytes(t.peak), dur(t.peak_time),
                   bytes(static_cast<uint64_t>(t.average)), kinds});
  }
  out += "\ntiers (peak, time-weighted average, what was live at the peak)\n" + tiers.render();
  for (const TierResult& t : r.tiers) {
    if (t.largest.empty()) continue;
    std::string list;
    for (const LiveTensor& l : t.largest) {
      if (!list.empty()) list += ", ";
      list += fmt::format("{}{} {}", live_name(l, c.workload),
                          r.devices.size() > 1 ? fmt::format(" (program {})", l.program) : "",
                          bytes(l.bytes));
    }
    fmt::format_to(std::back_inserter(out), "  largest live at the peak of {}: {}\n", t.name, list);
  }

  Table res({"resource", "capacity", "bytes", "busy", "mean flows", "peak rate", "transfers",
             "queued (mean)", "queued (max)"},
            {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
             Table::Align::kRight, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
             Table::Align::kRight});
  std::vector<const LinkResult*> order;
  for (const LinkResult& l : r.links) order.push_back(&l);
  std::stable_sort(order.begin(), order.end(), [](const LinkResult* a, const LinkResult* b) {
    return a->busy_ps > b->busy_ps;
  });
  const size_t shown = std::min<size_t>(order.size(), 20);
  for (size_t i = 0; i < shown; ++i) {
    const LinkResult& l = *order[i];
    res.add_row({l.name, rate(l.capacity), bytes(static_cast<uint64_t>(l.bytes)),
                 r.makespan > 0 ? pct(double(l.busy_ps) / double(r.makespan)) : "-",
                 fmt::format("{:.2f}", l.mean_concurrency), rate(l.peak_rate),
                 std::to_string(l.transfers),
                 dur(l.transfers > 0 ? l.queue_ps / static_cast<Time>(l.transfers) : 0),
                 dur(l.max_queue_ps)});
  }
  out += "\nlinks and tier ports (busiest first)\n" + res.render();
  if (order.size() > shown) {
    fmt::format_to(std::back_inserter(out), "  ... and {} more (see --json or --csv)\n",
                   order.size() - shown);
  }
  // The transfers that cost the most waiting.
  std::vector<const TransferRecord*> exposed;
  for (const TransferRecord& x : r.transfers) {
    if (x.exposed > 0) exposed.push_back(&x);
  }
  std::stable_sort(
      exposed.begin(), exposed.end(),
      [](const TransferRecord* a, const TransferRecord* b) { return a->exposed > b->exposed; });
  if (!exposed.empty()) {
    Table ex({"transfer", "program", "step", "bytes", "issued", "took", "exposed"},
             {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
              Table::Align::kRight, Table::Align::kRight, Table::Align::kRight});
    Time total = 0;
    for (const TransferRecord* x : exposed) total += x->exposed;
    for (size_t i = 0; i < exposed.size() && i < 10; ++i) {
      const TransferRecord& x = *exposed[i];
      ex.add_row(
          {fmt::format("{} {}", kStepKindNames[size_t(x.kind)], c.workload.tensors[x.tensor].name),
           std::to_string(x.program), std::to_string(x.step), bytes(x.bytes), dur(x.issue),
           dur(x.end - x.issue), dur(x.exposed)});
    }
    fmt::format_to(std::back_inserter(out),
                   "\ntransfers waited on ({} of them, {} exposed in all; largest first)\n",
                   exposed.size(), dur(total));
    out += ex.render();
  }
  if (const DemandTotals d = demand_totals(r, c.plan); d.any) {
    fmt::format_to(std::back_inserter(out),
                   "\nrouting misses (demand prefetches of experts the plan did not foresee): {}, "
                   "{}, {} exposed\n",
                   d.count, bytes(d.bytes), dur(d.exposed));
  }
  if (r.error) {
    const SimError& e = *r.error;
    fmt::format_to(std::back_inserter(out), "\nerror ({}){}: {}\n", error_kind_name(e.kind),
                   e.time >= 0 ? fmt::format(" at {}", dur(e.time)) : "", e.message);
  }
  return out;
}

std::string report_json(const SimResult& r, const ReportContext& c, bool with_transfers) {
  std::string o;
  JsonWriter w(o);
  w.begin_object(JsonLayout::kLines);
  w.key("format").string("tierflow.report/1");
  w.key("plan").string(c.plan.name);
  w.key("topology").string(c.topology.name);
  w.key("makespan_ps").integer(r.makespan);
  w.key("steps").integer(r.steps);
  w.key("events").integer(r.events);
  if (const DemandTotals d = demand_totals(r, c.plan); d.any) {
    w.key("routing_misses").begin_object();
    w.key("count").integer(d.count).key("bytes").integer(d.bytes);
    w.key("exposed_ps").integer(d.exposed);
    w.end_object();
  }
  w.key("error");
  if (r.error) {
    const SimError& e = *r.error;
    w.begin_object();
    w.key("kind").string(error_kind_name(e.kind));
    w.key("program").integer(e.program).key("step").integer(e.step);
    w.key("tensor").integer(e.tensor).key("time_ps").integer(e.time);
    w.key("message").string(e.message);
    w.end_object();
  } else {
    w.null();
  }
  // The lists close on a line of their own even when empty.
  w.key("devices").begin_array(JsonLayout::kLinesAlwaysBreak);
  for (const DeviceResult& d : r.devices) {
    w.begin_object();
    w.key("device").integer(d.device).key("compute_ps").integer(d.compute_ps);
    w.key("stall_transfer_ps").integer(d.stall_transfer_ps);
    w.key("stall_memory_ps").integer(d.stall_memory_ps);
    w.key("compute_end_ps").integer(d.compute_end).key("end_ps").integer(d.end);
    w.key("ops").integer(d.ops).key("transfers").integer(d.transfers);
    w.key("bytes_in").integer(d.bytes_in).key("bytes_out").integer(d.bytes_out);
    if (d.host_ops > 0) {
      w.key("host_compute_ps").integer(d.host_compute_ps).key("host_ops").integer(d.host_ops);
    }
    w.end_object();
  }
  w.end_array();
  w.key("tiers").begin_array(JsonLayout::kLinesAlwaysBreak);
  for (const TierResult& t : r.tiers) {
    w.begin_object();
    w.key("name").string(t.name).key("tier").string(c.topology.tiers[t.tier].id);
    w.key("instance").integer(t.instance).key("capacity").integer(t.capacity);
    w.key("peak").integer(t.peak).key("peak_time_ps").integer(t.peak_time);
    w.key("average").fixed(t.average, /*decimals=*/0).key("final").integer(t.final_level);
    w.key("live_at_peak").integer(t.live_count);
    w.key("peak_by_kind").begin_object();
    for (size_t k = 0; k < t.peak_by_kind.size(); ++k) {
      if (t.peak_by_kind[k] != 0) w.key(kind_name(k)).integer(t.peak_by_kind[k]);
    }
    w.end_object();
    w.key("largest").begin_array();
    for (const LiveTensor& l : t.largest) {
      w.begin_object().key("program").integer(l.program);
      if (l.what & kWorkspaceBit) {
        w.key("workspace_of_op").integer(l.what & ~kWorkspaceBit);
      } else {
        w.key("tensor").integer(l.what).key("name").string(c.workload.tensors[l.what].name);
      }
      w.key("bytes").integer(l.bytes).key("home_copy").boolean(l.is_static);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("resources").begin_array(JsonLayout::kLinesAlwaysBreak);
  for (const LinkResult& l : r.links) {
    w.begin_object();
    w.key("name").string(l.name).key("kind").string(resource_kind(l.kind));
    w.key("capacity").number(l.capacity).key("bytes").fixed(l.bytes, /*decimals=*/0);
    w.key("busy_ps").integer(l.busy_ps).key("mean_flows").number(l.mean_concurrency);
    w.key("peak_rate").number(l.peak_rate).key("transfers").integer(l.transfers);
    w.key("queued_ps").integer(l.queue_ps).key("max_queued_ps").integer(l.max_queue_ps);
    w.end_object();
  }
  w.end_array();
  if (with_transfers) {
    w.key("transfers").begin_array(JsonLayout::kLinesAlwaysBreak);
    for (const TransferRecord& x : r.transfers) {
      w.begin_object();
      w.key("program").integer(x.program).key("step").integer(x.step);
      w.key("kind").string(kStepKindNames[size_t(x.kind)]).key("tensor").integer(x.tensor);
      w.key("event").integer(x.event).key("bytes").integer(x.bytes);
      w.key("from").string(c.topology.tiers[x.from].id);
      w.key("to").string(c.topology.tiers[x.to].id);
      w.key("issue_ps").integer(x.issue).key("start_ps").integer(x.start);
      w.key("active_ps").integer(x.active).key("end_ps").integer(x.end);
      w.key("exposed_ps").integer(x.exposed);
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  o += '\n';
  return o;
}

std::string report_csv(const SimResult& r, const ReportContext& c) {
  std::string o = "section,name,metric,value\n";
  auto out = std::back_inserter(o);
  fmt::format_to(out, "run,{},makespan_ps,{}\n", csv_field(c.plan.name), r.makespan);
  fmt::format_to(out, "run,{},steps,{}\n", csv_field(c.plan.name), r.steps);
  fmt::format_to(out, "run,{},error,{}\n", csv_field(c.plan.name),
                 r.error ? csv_field(r.error->message) : "");
  for (const DeviceResult& d : r.devices) {
    fmt::format_to(out, "device,{},compute_ps,{}\n", d.device, d.compute_ps);
    fmt::format_to(out, "device,{},stall_transfer_ps,{}\n", d.device, d.stall_transfer_ps);
    fmt::format_to(out, "device,{},stall_memory_ps,{}\n", d.device, d.stall_memory_ps);
    fmt::format_to(out, "device,{},end_ps,{}\n", d.device, d.end);
    fmt::format_to(out, "device,{},bytes_in,{}\n", d.device, d.bytes_in);
    fmt::format_to(out, "device,{},bytes_out,{}\n", d.device, d.bytes_out);
    if (d.host_ops > 0) {
      fmt::format_to(out, "device,{},host_compute_ps,{}\n", d.device, d.host_compute_ps);
      fmt::format_to(out, "device,{},host_ops,{}\n", d.device, d.host_ops);
    }
  }
  for (const TierResult& t : r.tiers) {
    const std::string n = csv_field(t.name);
    fmt::format_to(out, "tier,{},capacity,{}\n", n, t.capacity);
    fmt::format_to(out, "tier,{},peak,{}\n", n, t.peak);
    fmt::format_to(out, "tier,{},peak_time_ps,{}\n", n, t.peak_time);
    fmt::format_to(out, "tier,{},average,{:.0f}\n", n, t.average);
    for (size_t k = 0; k < t.peak_by_kind.size(); ++k) {
      if (t.peak_by_kind[k] > 0) {
        fmt::format_to(out, "tier,{},peak_{},{}\n", n, kind_name(k), t.peak_by_kind[k]);
      }
    }
  }
  for (const LinkResult& l : r.links) {
    const std::string n = csv_field(l.name);
    fmt::format_to(out, "resource,{},bytes,{:.0f}\n", n, l.bytes);
    fmt::format_to(out, "resource,{},busy_ps,{}\n", n, l.busy_ps);
    fmt::format_to(out, "resource,{},mean_flows,{}\n", n, l.mean_concurrency);
    fmt::format_to(out, "resource,{},peak_rate,{}\n", n, l.peak_rate);
    fmt::format_to(out, "resource,{},transfers,{}\n", n, l.transfers);
    fmt::format_to(out, "resource,{},queued_ps,{}\n", n, l.queue_ps);
  }
  return o;
}

std::string transfers_csv(const SimResult& r, const ReportContext& c) {
  std::string o =
      "program,step,kind,tensor,name,event,bytes,from,to,issue_ps,start_ps,active_ps,end_ps,"
      "exposed_ps\n";
  auto out = std::back_inserter(o);
  for (const TransferRecord& x : r.transfers) {
    const std::string name = csv_field(c.workload.tensors[x.tensor].name);
    fmt::format_to(out, "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", x.program, x.step,
                   kStepKindNames[size_t(x.kind)], x.tensor, name, x.event, x.bytes,
                   c.topology.tiers[x.from].id, c.topology.tiers[x.to].id, x.issue, x.start,
                   x.active, x.end, x.exposed);
  }
  return o;
}

}  // namespace tierflow::sim
