// The simulator's state before the first event (setup: tiers, programs, events, home
// copies) and its results after the last (finish: per device, tier instance and link).
#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "core/checked.h"
#include "sim/engine.h"

namespace tierflow::sim::detail {

bool Simulator::setup() {
  if (o_.verified) {
    issues_.assign(plan_.programs.size(), std::nullopt);
  } else {
    PlanCheck check = verify_plan_programs(plan_, w_);
    if (check.global) {
      error_ = rule_error(*check.global);
      return false;
    }
    issues_ = std::move(check.programs);
  }
  std::vector<uint64_t> capacity(fabric_.tier_slots());
  for (uint32_t s = 0; s < capacity.size(); ++s) {
    capacity[s] = t_.usable(fabric_.slot_tier(s).first);
  }
  ledger_ = std::make_unique<MemoryLedger>(std::move(capacity));
  // A program's device holds the plan's budget, as the replayer's arena does (hw/bind.h:
  // never more than the tier's usable bytes).
  for (const hw::BoundProgram& bp : bound_.programs)
    ledger_->hold_to(bp.device_slot, bound_.budget);
  static_by_kind_.assign(fabric_.tier_slots(), std::vector<uint64_t>(kKindSlots));
  mem_waiters_.resize(fabric_.tier_slots());
  slot_changed_.assign(fabric_.tier_slots(), 0);
  engines_.resize(fabric_.engines().size());
  for (size_t g = 0; g < engines_.size(); ++g) engines_[g].free = fabric_.engines()[g].capacity;
  // The fabric makes each link instance's two engine groups one after the other.
  contended_.assign(engines_.size(), 0);
  reverse_engine_.assign(engines_.size(), 0);
  for (size_t g = 0; g < engines_.size(); ++g) {
    const hw::EngineGroup& e = fabric_.engines()[g];
    const size_t other = g ^ 1U;
    TF_ASSERT(other < engines_.size() && fabric_.engines()[other].link == e.link &&
                  fabric_.engines()[other].instance == e.instance &&
                  fabric_.engines()[other].forward != e.forward,
              "engine group {} has no reverse beside it", g);
    reverse_engine_[g] = static_cast<uint32_t>(other);
    contended_[g] = t_.links[e.link].contended(e.forward).ps;
  }
  op_time_.resize(t_.devices.size());
  host_op_time_.resize(t_.devices.size());

  progs_.resize(plan_.programs.size());
  if (o_.stop_after > 0) {
    TF_ASSERT(o_.ingress > 0, "a stop bound needs the device tier's ingress");
    if (!plan_.programs.empty()) {
      for (const Step& s : plan_.programs[0].steps) {
        if (s.kind == StepKind::kPrefetch && !s.host) unbegun_fetch_ += w_.tensors[s.target].bytes;
      }
    }
  }
  for (size_t p = 0; p < plan_.programs.size(); ++p) {
    const Program& prog = plan_.programs[p];
    ProgramState& st = progs_[p];
    st.prog = &prog;
    st.device = int(prog.device);
    st.res.device = st.device;
    size_t end = prog.steps.size();
    if (issues_[p] && issues_[p]->step >= 0) end = size_t(issues_[p]->step);
    stepper_.start(uint32_t(p), end);
    st.dev_slot = bound_.programs[p].device_slot;
    st.dev_rec.assign(w_.tensors.size(), kNoRecord);
    if (plan_.host_tier != kNoTier) st.host_rec.assign(w_.tensors.size(), kNoRecord);
    const hw::Device& d = t_.devices[fabric_.device_class(st.device)];
    if (d.dispatch_compute.ps > 0 || d.dispatch_copy.ps > 0 || d.dispatch_detach.ps > 0) {
      // One host thread issues the steps in program order and never waits for the device.
      st.host.resize(prog.steps.size());
      Time host = 0;
      for (size_t i = 0; i < prog.steps.size(); ++i) {
        const StepKind k = prog.steps[i].kind;
        if (k == StepKind::kCompute) {
          st.host[i] = host;  // its kernels reach the device as the host issues them
          host = saturating_add_ps(host, d.dispatch_compute.ps);
        } else {
          host = saturating_add_ps(host, k == StepKind::kDetach ? d.dispatch_detach.ps
                                                                : d.dispatch_copy.ps);
          st.host[i] = host;
        }
      }
    }
  }
  // Events: dense numbering in plan order.
  uint32_t max_id = 0;
  size_t event_count = 0;
  for (const Program& prog : plan_.programs) {
    for (const Step& s : prog.steps) {
      if (s.event != kNoEvent) {
        max_id = std::max(max_id, s.event);
        ++event_count;
      }
    }
  }
  events_.resize(event_count);
  // Each transfer completes an event (so do host steps): room for every one at once.
  transfers_.reserve(events_.size());
  records_.reserve(events_.size());
  const bool table = size_t{max_id} < 4 * events_.size() + 1024;
  if (table) event_table_.assign(size_t{max_id} + 1, kNone);
  uint32_t next = 0;
  for (const Program& prog : plan_.programs) {
    for (const Step& s : prog.steps) {
      if (s.event == kNoEvent) continue;
      if (!table) {
        event_map_.emplace(s.event, next);
      } else if (event_table_[s.event] == kNone) {
        event_table_[s.event] = next;
      }
      ++next;
    }
  }
  if (rec_.on()) rec_.begin(tier_map_);
  // Home copies present from time zero.
  const bool placed = for_each_home_copy(plan_, w_, [&](uint32_t p, uint32_t t, uint32_t home) {
    ProgramState& st = progs_[p];
    const Tensor& x = w_.tensors[t];
    if (home == plan_.device_tier) {
      if (!ledger_->fits(st.dev_slot, x.bytes)) {
        const SlotStats& room = ledger_->stats(st.dev_slot);
        fail(SimError::Kind::kCapacity, int(p), -1, int(t),
             run_errors::home_does_not_fit(room_name(st.dev_slot), w_, t, room.level, room.limit,
                                           largest_live(st.dev_slot)));
        return false;
      }
      st.dev_rec[t] = ledger_allocate(st.dev_slot, x.bytes, t, p, 0);
    } else {
      const uint32_t slot = fabric_.tier_slot(tier_map_[home], st.device);
      ledger_->add_static(slot, x.bytes);
      if (rec_.on()) rec_.held(slot, t, x.bytes, /*add=*/true);
      static_by_kind_[slot][size_t(x.kind)] += x.bytes;
    }
    stepper_.add_copy(p, t, home);
    return true;
  });
  if (!placed) return false;
  for (uint32_t s = 0; s < ledger_->slots(); ++s) {
    const SlotStats& x = ledger_->stats(s);
    if (x.level > x.capacity) {
      fail(SimError::Kind::kCapacity, -1, -1, -1,
           run_errors::home_over_capacity(fabric_.slot_name(s), x.level, x.capacity,
                                          largest_live(s)));
      return false;
    }
  }
  return true;
}

std::string Simulator::largest_live(uint32_t slot) const {
  std::vector<run_errors::LiveItem> live;
  for (const Allocation& a : ledger_->live_now(slot)) live.push_back({a.bytes, a.what, a.program});
  // Home copies in this instance.
  for_each_home_copy(plan_, w_, [&](uint32_t p, uint32_t t, uint32_t home) {
    if (home != plan_.device_tier && slot_of(p, home) == slot) {
      live.push_back({w_.tensors[t].bytes, t, p});
    }
    return true;
  });
  return run_errors::largest_live(std::move(live), w_, progs_.size() > 1);
}

void Simulator::finish(SimResult& r) {
  const Time end = q_.now();
  r.events = events_processed_;
  r.steps = stepper_.steps();
  r.solves = solves_;
  for (ProgramState& st : progs_) {
    r.makespan = std::max(r.makespan, st.res.end);
    r.devices.push_back(st.res);
  }
  // Tiers: every instance that held bytes.
  // Home copies by plan tier, largest first, at most live_top each: what a program can
  // list for the instance its home tier maps to (none when nothing is listed).
  std::vector<std::vector<uint32_t>> homed(plan_.tiers.size());
  if (o_.live_top > 0) {
    std::vector<uint32_t> by_size(w_.tensors.size());
    for (uint32_t t = 0; t < by_size.size(); ++t) by_size[t] = t;
    std::stable_sort(by_size.begin(), by_size.end(), [this](uint32_t a, uint32_t b) {
      return w_.tensors[a].bytes > w_.tensors[b].bytes;
    });
    for (uint32_t t : by_size) {
      const uint32_t h = plan_.home[t];
      if (w_.tensors[t].origin == kExternal && h != plan_.device_tier &&
          homed[h].size() < o_.live_top) {
        homed[h].push_back(t);
      }
    }
  }
  // Per program, the instance of each plan tier.
  std::vector<std::vector<uint32_t>> slot_of(progs_.size());
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    for (size_t h = 0; h < plan_.tiers.size(); ++h) {
      slot_of[p].push_back(fabric_.tier_slot(tier_map_[h], progs_[p].device));
    }
  }
  // Linear in programs and slots, in memory too: the records live at each peak in one
  // pass, each slot keeping its bytes by kind, its count and its largest few (the order
  // a stable sort of all of them by size gives: ties by program and tensor, then first
  // seen first); each program's home tiers listed under their slots.
  struct Ranked {
    LiveTensor t;
    uint64_t seen = 0;
  };
  const auto larger = [](const Ranked& a, const Ranked& b) {
    return std::tie(b.t.bytes, a.t.program, a.t.what, a.seen) <
           std::tie(a.t.bytes, b.t.program, b.t.what, b.seen);
  };
  const size_t keep = o_.live_top;
  // Keeps the largest `keep` of a slot's list, trimmed when it doubles.
  const auto add = [&](std::vector<Ranked>& top, const Ranked& x) {
    if (keep == 0) return;
    top.push_back(x);
    if (top.size() >= 2 * keep) {
      std::nth_element(top.begin(), top.begin() + static_cast<ptrdiff_t>(keep) - 1, top.end(), larger);
      top.resize(keep);
    }
  };
  const auto slots = static_cast<uint32_t>(ledger_->slots());
  std::vector<std::vector<Ranked>> top(slots);
  std::vector<size_t> live_count(slots, 0);
  std::vector<std::vector<uint64_t>> live_by_kind(slots);
  ledger_->for_each_live_at_peak([&](const Allocation& a) {
    const bool ws = (a.what & kWorkspaceBit) != 0;
    auto& kinds = live_by_kind[a.slot];
    if (kinds.empty()) kinds.assign(static_by_kind_[a.slot].size(), 0);
    kinds[ws ? kWorkspaceKind : size_t(w_.tensors[a.what].kind)] += a.bytes;
    add(top[a.slot], Ranked{LiveTensor{a.program, a.what, a.bytes, false}, live_count[a.slot]++});
  });
  std::vector<std::vector<std::pair<uint32_t, size_t>>> homes_of_slot(slots);
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    for (size_t h = 0; h < homed.size(); ++h) {
      if (!homed[h].empty() && slot_of[p][h] < homes_of_slot.size()) {
        homes_of_slot[slot_of[p][h]].emplace_back(p, h);
      }
    }
  }
  for (uint32_t s = 0; s < slots; ++s) {
    const SlotStats& x = ledger_->stats(s);
    if (x.peak == 0) continue;
    TierResult tr;
    tr.name = fabric_.slot_name(s);
    std::tie(tr.tier, tr.instance) = fabric_.slot_tier(s);
    tr.capacity = x.capacity;
    tr.peak = x.peak;
    tr.peak_time = x.peak_time;
    tr.average = ledger_->average(s, std::max(end, r.makespan));
    tr.final_level = x.level;
    tr.peak_by_kind = static_by_kind_[s];
    for (size_t k = 0; k < live_by_kind[s].size(); ++k) tr.peak_by_kind[k] += live_by_kind[s][k];
    tr.live_count = live_count[s];
    // Home copies: the largest few of each program whose instance this is (the largest
    // few of each of its plan tiers on this instance hold them; the list is cut below).
    uint64_t seen = live_count[s];
    for (const auto& [p, h] : homes_of_slot[s]) {
      for (uint32_t t : homed[h]) add(top[s], Ranked{LiveTensor{p, t, w_.tensors[t].bytes, true}, seen++});
    }
    std::sort(top[s].begin(), top[s].end(), larger);
    if (top[s].size() > keep) top[s].resize(keep);
    for (const Ranked& ranked : top[s]) tr.largest.push_back(ranked.t);
    r.tiers.push_back(std::move(tr));
  }
  // Resources that carried bytes.
  std::vector<uint64_t> count(fabric_.resources().size());
  std::vector<Time> queue(count.size()), max_queue(count.size());
  for (size_t x = 0; x < transfers_.size(); ++x) {
    const Time waited = records_[x].start - records_[x].issue;
    for (uint32_t res : transfers_[x].path->resources) {
      ++count[res];
      queue[res] += waited;
      max_queue[res] = std::max(max_queue[res], waited);
    }
  }
  for (uint32_t res = 0; res < fabric_.resources().size(); ++res) {
    const hw::ResourceStats st = net_.stats(res, end);
    if (st.bytes <= 0) continue;
    const hw::ResourceInfo& info = fabric_.resources()[res];
    LinkResult lr;
    lr.name = info.name;
    lr.kind = info.kind;
    lr.index = info.index;
    lr.instance = info.instance;
    lr.forward = info.forward;
    lr.capacity = net_.capacity(res);
    lr.bytes = st.bytes;
    lr.busy_ps = st.busy_ps;
    lr.mean_concurrency = st.busy_ps > 0 ? st.flow_ps / double(st.busy_ps) : 0;
    lr.peak_rate = st.peak_rate;
    lr.transfers = count[res];
    lr.queue_ps = queue[res];
    lr.max_queue_ps = max_queue[res];
    r.links.push_back(std::move(lr));
  }
  if (o_.keep_transfers) r.transfers = std::move(records_);
}

}  // namespace tierflow::sim::detail
