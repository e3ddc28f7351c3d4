#include "tools/study/hw_show.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/table.h"
#include "hw_models/cost.h"
#include "hw_models/routes.h"

namespace tierflow::study {

using namespace tierflow::hw;  // NOLINT: this file presents hw_models types throughout

namespace {

using json = nlohmann::ordered_json;
using Align = Table::Align;
constexpr Align kL = Align::kLeft;
constexpr Align kR = Align::kRight;

constexpr Bytes kProbe{1ull << 30};  // 1 GiB: the transfer size quoted for each route

std::string scope_name(Scope s) {
  return std::string(kScopeNames[static_cast<size_t>(s)]);
}

std::string peaks_text(const std::array<FlopRate, kDtypeNames.size()>& peak) {
  std::string out;
  for (size_t i = 0; i < peak.size(); ++i) {
    if (peak[i].flop_per_s <= 0.0) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}", kDtypeNames[i], to_string(peak[i]));
  }
  return out;
}

void add_wider_peers(const Topology& t, size_t tier, std::vector<const Route*>& out) {
  for (const Route& r : t.wider_peer_routes(tier)) out.push_back(&r);
}

/// Route pairs worth listing: local tier <-> every other tier, and peer routes (the wider
/// ones after each); or all.
std::vector<const Route*> listed_routes(const Topology& t, bool all) {
  std::vector<const Route*> out;
  if (all) {
    for (size_t a = 0; a < t.tiers.size(); ++a) {
      for (size_t b = 0; b < t.tiers.size(); ++b) {
        if (const Route* r = t.route(a, b)) out.push_back(r);
        if (a == b) add_wider_peers(t, a, out);
      }
    }
    return out;
  }
  std::vector<size_t> locals;
  for (const auto& d : t.devices) {
    const size_t l = *t.tier_index(d.local_tier);
    if (std::find(locals.begin(), locals.end(), l) == locals.end()) locals.push_back(l);
  }
  for (size_t l : locals) {
    for (size_t j = 0; j < t.tiers.size(); ++j) {
      if (j == l) continue;
      if (const Route* r = t.route(l, j)) out.push_back(r);
      if (const Route* r = t.route(j, l)) out.push_back(r);
    }
    if (const Route* r = t.route(l, l)) out.push_back(r);
    add_wider_peers(t, l, out);
  }
  return out;
}

/// Whether `r` is one of the wider peer routes (Topology::wider_peers).
bool is_wider_peer(const Topology& t, const Route* r) {
  return r->from == r->to && r != t.route(r->from, r->to);
}

double bf16_or_best(const Device& d, std::string& which) {
  const size_t bf16 = static_cast<size_t>(Dtype::kBf16);
  if (d.peak[bf16].flop_per_s > 0.0) {
    which = "bf16";
    return d.peak[bf16].flop_per_s;
  }
  for (size_t i = 0; i < d.peak.size(); ++i) {
    if (d.peak[i].flop_per_s > 0.0) {
      which = std::string(kDtypeNames[i]);
      return d.peak[i].flop_per_s;
    }
  }
  return 0.0;
}

}  // namespace

std::string show_text(const Topology& t, const ShowOptions& options) {
  std::string out = fmt::format("topology {} ({})\n", t.name, t.file);
  if (!t.description.empty()) out += fmt::format("  {}\n", t.description);
  const std::string supernodes =
      t.system.supernodes == 1 ? std::string()
                               : fmt::format("{} supernodes of {} host{}, ", t.system.supernodes,
                                             t.system.hosts / t.system.supernodes,
                                             t.system.hosts == t.system.supernodes ? "" : "s");
  out += fmt::format("  {}{} host{} x {} socket{} = {} sockets; {} devices\n\n", supernodes,
                     t.system.hosts, t.system.hosts == 1 ? "" : "s", t.system.sockets_per_host,
                     t.system.sockets_per_host == 1 ? "" : "s", t.sockets(), t.total_devices());

  out += "devices\n";
  Table dev({"id", "count", "per host", "local", "reserved", "peak (dense)", "launch"},
            {kL, kR, kR, kL, kR, kL, kR});
  for (const auto& d : t.devices) {
    dev.add_row({d.id, std::to_string(d.count), std::to_string(d.count / t.system.hosts),
                 d.local_tier, to_string(d.reserved), peaks_text(d.peak),
                 to_string(d.launch_overhead)});
  }
  out += dev.render() + "\n";
  if (const HostCpu& cpu = t.system.cpu; cpu.present()) {
    // The CPU of each socket, for the ops plans run on the host (core/plan.h host steps).
    out += "host CPU (per socket)\n";
    Table c({"tier", "peak (dense)", "compute eff", "memory eff", "launch"}, {kL, kL, kR, kR, kR});
    c.add_row({cpu.tier, peaks_text(cpu.peak), fmt::format("{}", cpu.compute_efficiency),
               fmt::format("{}", cpu.memory_efficiency), to_string(cpu.launch_overhead)});
    out += c.render() + "\n";
  }

  out += "tiers\n";
  Table tiers({"id", "kind", "per", "inst", "capacity", "usable", "total", "read", "write",
               "latency", "write lat", "attach"},
              {kL, kL, kL, kR, kR, kR, kR, kR, kR, kR, kR, kL});
  for (size_t i = 0; i < t.tiers.size(); ++i) {
    const Tier& x = t.tiers[i];
    const int n = t.instances(x.per);
    // Usable: what plans get of one instance, after the devices' reserve; approximate,
    // since a capacity in decimal units less a binary reserve rarely prints exactly.
    tiers.add_row({x.id, std::string(kTierKindNames[static_cast<size_t>(x.kind)]),
                   scope_name(x.per), std::to_string(n), to_string(x.capacity),
                   t.usable(i) == x.capacity.value ? to_string(x.capacity)
                                                   : to_string_approx(Bytes{t.usable(i)}),
                   to_string(Bytes{x.capacity.value * static_cast<uint64_t>(n)}),
                   to_string(x.read_bandwidth), to_string(x.write_bandwidth), to_string(x.latency),
                   to_string(x.write_latency), x.attach.empty() ? "-" : x.attach});
  }
  out += tiers.render() + "\n";

  if (!t.switches.empty()) {
    out += "switches\n";
    Table sw({"id", "kind", "per", "inst", "latency"}, {kL, kL, kL, kR, kR});
    for (const auto& s : t.switches) {
      sw.add_row({s.id, s.kind, scope_name(s.per), std::to_string(t.instances(s.per)),
                  to_string(s.latency)});
    }
    out += sw.render() + "\n";
  }

  if (!t.links.empty()) {
    out += "links (bandwidth per direction: peak x efficiency = achievable)\n";
    Table links({"id", "kind", "a - b", "per", "inst", "a->b", "b->a", "latency", "duplex",
                 "engines", "dma setup"},
                {kL, kL, kL, kL, kR, kL, kL, kR, kL, kR, kR});
    for (const auto& l : t.links) {
      auto dir = [&](bool fwd) {
        const double eff = l.effective(fwd).bytes_per_s / l.peak(fwd).bytes_per_s;
        return fmt::format("{} x {:.2f} = {}", to_string(l.peak(fwd)), eff,
                           to_string(l.effective(fwd)));
      };
      links.add_row({l.id, std::string(kLinkKindNames[static_cast<size_t>(l.kind)]),
                     l.endpoints[0] + " - " + l.endpoints[1], scope_name(l.per),
                     std::to_string(t.instances(l.per)), dir(true), dir(false),
                     to_string(l.latency), std::string(kDuplexNames[static_cast<size_t>(l.duplex)]),
                     std::to_string(l.copy_engines), to_string(l.dma_setup)});
    }
    out += links.render() + "\n";
    for (const auto& l : t.links) {
      if (l.contended_setup.ps == 0 && l.contended_setup_reverse.ps == 0) continue;
      out += fmt::format(
          "  {}: a transfer starting while the other direction carries one pays setup +{} a->b, "
          "+{} b->a\n",
          l.id, to_string(l.contended_setup), to_string(l.contended_setup_reverse));
    }
  }

  out += options.all_routes
             ? "routes (every pair of tiers; 'peer' = same tier on another device)\n"
             : "routes (to and from each device's local tier; 'peer' = same tier on another "
               "device)\n";
  Table routes({"from", "to", "bandwidth", "setup", "1GiB alone", "path"},
               {kL, kL, kR, kR, kR, kL});
  for (const Route* r : listed_routes(t, options.all_routes)) {
    const std::string to = r->from != r->to      ? t.tiers[r->to].id
                           : is_wider_peer(t, r) ? t.tiers[r->to].id + " (peer, wider)"
                                                 : t.tiers[r->to].id + " (peer)";
    routes.add_row({t.tiers[r->from].id, to, to_string(r->bandwidth), to_string(r->setup),
                    to_string_approx(transfer_time_alone(*r, kProbe)),
                    describe_route(t, *r) + (r->pinned ? "  [pinned]" : "") +
                        (r->buffers > 0 ? fmt::format("  [staged: {} x {}]", r->buffers,
                                                      to_string(r->buffer))
                                        : std::string())});
  }
  out += routes.render() + "\n";

  out += "totals\n";
  const int ndev = t.total_devices();
  // The whole system's: one supernode's, or all of them.
  const std::string whole = t.system.supernodes == 1
                                ? std::string("per supernode")
                                : fmt::format("all {} supernodes", t.system.supernodes);
  Table totals({"", "per device", whole}, {kL, kR, kR});
  for (const auto& x : t.tiers) {
    const uint64_t total = x.capacity.value * static_cast<uint64_t>(t.instances(x.per));
    // A shared tier's per-device figure is its fair share; exact when it divides evenly.
    const uint64_t share = total / static_cast<uint64_t>(ndev);
    const std::string share_text = total % static_cast<uint64_t>(ndev) == 0
                                       ? to_string(Bytes{share})
                                       : "~" + to_string_approx(Bytes{share});
    const std::string per_dev =
        x.per == Scope::kDevice ? to_string(x.capacity) : share_text + " (share)";
    totals.add_row({fmt::format("{} capacity", x.id), per_dev, to_string(Bytes{total})});
  }
  for (const auto& d : t.devices) {
    std::string which;
    const double peak = bf16_or_best(d, which);
    totals.add_row({fmt::format("{} {} peak", d.id, which), to_string(FlopRate{peak}),
                    to_string(FlopRate{peak * d.count})});
  }
  out += totals.render();
  return out;
}

json show_json(const Topology& t) {
  json j;
  j["tierflow"] = "hw/1";
  j["name"] = t.name;
  j["file"] = t.file;
  j["description"] = t.description;
  j["system"] = {{"hosts", t.system.hosts},
                 {"sockets_per_host", t.system.sockets_per_host},
                 {"supernodes", t.system.supernodes},
                 {"devices", t.total_devices()}};
  if (const HostCpu& cpu = t.system.cpu; cpu.present()) {
    json peak = json::object();
    for (size_t i = 0; i < cpu.peak.size(); ++i) {
      if (cpu.peak[i].flop_per_s > 0.0) peak[std::string(kDtypeNames[i])] = cpu.peak[i].flop_per_s;
    }
    j["system"]["cpu"] = {{"description", cpu.description},
                          {"tier", cpu.tier},
                          {"peak_flop_per_s", peak},
                          {"compute_efficiency", cpu.compute_efficiency},
                          {"memory_efficiency", cpu.memory_efficiency},
                          {"launch_overhead_ps", cpu.launch_overhead.ps}};
  }
  for (const auto& d : t.devices) {
    json peak = json::object();
    for (size_t i = 0; i < d.peak.size(); ++i) {
      if (d.peak[i].flop_per_s > 0.0) peak[std::string(kDtypeNames[i])] = d.peak[i].flop_per_s;
    }
    json ce = json::object();
    json me = json::object();
    for (size_t i = 0; i < kOpKindNames.size(); ++i) {
      ce[std::string(kOpKindNames[i])] = d.compute_efficiency(static_cast<OpKind>(i));
      me[std::string(kOpKindNames[i])] = d.memory_efficiency(static_cast<OpKind>(i));
    }
    j["devices"].push_back({{"id", d.id},
                            {"description", d.description},
                            {"count", d.count},
                            {"local_tier", d.local_tier},
                            {"peak_flop_per_s", peak},
                            {"compute_efficiency", ce},
                            {"memory_efficiency", me},
                            {"launch_overhead_ps", d.launch_overhead.ps},
                            {"reserved_bytes", d.reserved.value}});
  }
  for (size_t i = 0; i < t.tiers.size(); ++i) {
    const Tier& x = t.tiers[i];
    j["tiers"].push_back(
        {{"id", x.id},
         {"kind", kTierKindNames[static_cast<size_t>(x.kind)]},
         {"per", scope_name(x.per)},
         {"instances", t.instances(x.per)},
         {"capacity_bytes", x.capacity.value},
         {"usable_bytes", t.usable(i)},
         {"total_bytes", x.capacity.value * static_cast<uint64_t>(t.instances(x.per))},
         {"read_bytes_per_s", x.read_bandwidth.bytes_per_s},
         {"write_bytes_per_s", x.write_bandwidth.bytes_per_s},
         {"latency_ps", x.latency.ps},
         {"write_latency_ps", x.write_latency.ps},
         {"attach", x.attach}});
  }
  j["switches"] = json::array();
  for (const auto& s : t.switches) {
    j["switches"].push_back({{"id", s.id},
                             {"kind", s.kind},
                             {"per", scope_name(s.per)},
                             {"instances", t.instances(s.per)},
                             {"latency_ps", s.latency.ps}});
  }
  j["links"] = json::array();
  for (const auto& l : t.links) {
    j["links"].push_back(
        {{"id", l.id},
         {"kind", kLinkKindNames[static_cast<size_t>(l.kind)]},
         {"endpoints", l.endpoints},
         {"per", scope_name(l.per)},
         {"instances", t.instances(l.per)},
         {"peak_bytes_per_s", {l.peak(true).bytes_per_s, l.peak(false).bytes_per_s}},
         {"effective_bytes_per_s", {l.effective(true).bytes_per_s, l.effective(false).bytes_per_s}},
         {"latency_ps", l.latency.ps},
         {"duplex", kDuplexNames[static_cast<size_t>(l.duplex)]},
         {"copy_engines", l.copy_engines},
         {"dma_setup_ps", l.dma_setup.ps},
         {"contended_setup_ps", {l.contended_setup.ps, l.contended_setup_reverse.ps}}});
  }
  j["routes"] = json::array();
  for (const Route* r : listed_routes(t, /*all=*/true)) {
    const size_t a = r->from, b = r->to;
    json hops = json::array();
    for (const Hop& h : r->hops) {
      hops.push_back({{"link", t.links[h.link].id}, {"direction", h.forward ? "a->b" : "b->a"}});
    }
    json staging = json::array();
    for (size_t s : r->staging_tiers) staging.push_back(t.tiers[s].id);
    json sw = json::array();
    for (size_t s : r->switches) sw.push_back(t.switches[s].id);
    j["routes"].push_back({{"from", t.tiers[a].id},
                           {"to", t.tiers[b].id},
                           {"peer", a == b},
                           {"wider", is_wider_peer(t, r)},
                           {"hops", hops},
                           {"switches", sw},
                           {"staging_tiers", staging},
                           {"bytes_per_s", r->bandwidth.bytes_per_s},
                           {"setup_ps", r->setup.ps},
                           {"gib_alone_ps", transfer_time_alone(*r, kProbe).ps},
                           {"pinned", r->pinned},
                           {"staged_buffers", r->buffers},
                           {"staged_buffer_bytes", r->buffer.value},
                           {"path", describe_route(t, *r)}});
  }
  json totals;
  const int ndev = t.total_devices();
  for (const auto& x : t.tiers) {
    const uint64_t total = x.capacity.value * static_cast<uint64_t>(t.instances(x.per));
    totals["capacity_bytes"][x.id] = {
        {"per_device",
         x.per == Scope::kDevice ? x.capacity.value : total / static_cast<uint64_t>(ndev)},
        {"per_supernode", total}};
  }
  for (const auto& d : t.devices) {
    json p = json::object();
    for (size_t i = 0; i < d.peak.size(); ++i) {
      if (d.peak[i].flop_per_s <= 0.0) continue;
      p[std::string(kDtypeNames[i])] = {{"per_device", d.peak[i].flop_per_s},
                                        {"per_supernode", d.peak[i].flop_per_s * d.count}};
    }
    totals["peak_flop_per_s"][d.id] = p;
  }
  j["totals"] = totals;
  return j;
}

}  // namespace tierflow::study
