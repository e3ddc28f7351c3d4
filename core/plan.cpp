#include "core/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace tierflow {
namespace {

struct EventInfo {
  int program = -1;  ///< -1: no step completes the event
  int step = -1;
  StepKind kind = StepKind::kCompute;
  uint32_t tensor = 0;
  uint32_t tier = 0;  ///< a transfer's destination: the device tier or the host tier (a host
                      ///< prefetch), or the store's tier
};

/// Per tensor, op or event: a yes or no (a byte each: read and written on every step).
using Flags = std::vector<uint8_t>;

class PlanChecker {
 public:
  PlanChecker(const Plan& p, const Workload& w) : p_(p), w_(w) {}

  std::optional<PlanIssue> run() {
    if (auto issue = check_global()) return issue;
    for (size_t i = 0; i < p_.programs.size(); ++i) {
      if (auto issue = check_program(static_cast<int>(i))) return issue;
    }
    return std::nullopt;
  }

  PlanCheck run_all() {
    PlanCheck out;
    out.global = check_global();
    if (out.global) return out;
    for (size_t i = 0; i < p_.programs.size(); ++i) {
      out.programs.push_back(check_program(static_cast<int>(i)));
    }
    return out;
  }

 private:
  std::optional<PlanIssue> check_global() {
    if (p_.tiers.empty() || p_.tiers.size() > 64) {
      return PlanIssue{-1, -1, -1, "a plan names between 1 and 64 tiers"};
    }
    if (p_.device_tier >= p_.tiers.size()) {
      return PlanIssue{-1, -1, -1, "device_tier is not one of the plan's tiers"};
    }
    if (p_.home.size() != w_.tensors.size()) {
      return PlanIssue{-1, -1, -1,
                       fmt::format("home lists {} tensors, the workload has {}", p_.home.size(),
                                   w_.tensors.size())};
    }
    for (size_t t = 0; t < p_.home.size(); ++t) {
      if (p_.home[t] >= p_.tiers.size()) {
        return PlanIssue{-1, -1, static_cast<int>(t), "home tier is not one of the plan's tiers"};
      }
    }
    if (p_.host_tier != kNoTier) {
      if (p_.host_tier >= p_.tiers.size()) {
        return PlanIssue{-1, -1, -1, "host_tier is not one of the plan's tiers"};
      }
      if (p_.host_tier == p_.device_tier) {
        return PlanIssue{-1, -1, -1,
                         fmt::format("host_tier '{}' is the device tier: host steps compute "
                                     "next to a tier of the host",
                                     p_.tiers[p_.host_tier])};
      }
    }
    return collect_events();
  }

  PlanIssue at(int prog, int step, std::string msg, int tensor = -1) const {
    return PlanIssue{prog, step, tensor, std::move(msg)};
  }

  std::string tensor_name(uint32_t t) const {
    return fmt::format("tensor {} '{}'", t, w_.tensors[t].name);
  }

  /// Index of event e in events_, or kNoEvent when no step completes it.
  uint32_t slot(uint32_t e) const {
    if (flat_) return e < events_.size() && events_[e].program >= 0 ? e : kNoEvent;
    const auto it = slot_of_.find(e);
    return it == slot_of_.end() ? kNoEvent : it->second;
  }
  /// The step that completes event e, or null.
  const EventInfo* event(uint32_t e) const {
    const uint32_t i = slot(e);
    return i == kNoEvent ? nullptr : &events_[i];
  }

  std::optional<PlanIssue> collect_events() {
    // Event ids index events_ when they are dense enough (planner output numbers them
    // from 0); else a hash map gives each its index.
    size_t count = 0;
    uint32_t top = 0;
    for (const Program& prog : p_.programs) {
      for (const Step& s : prog.steps) {
        if (s.event == kNoEvent) continue;
        ++count;
        top = std::max(top, s.event);
      }
    }
    flat_ = count > 0 && top / 4 <= count;
    if (flat_) events_.resize(size_t{top} + 1);
    for (size_t pi = 0; pi < p_.programs.size(); ++pi) {
      const auto& steps = p_.programs[pi].steps;
      for (size_t si = 0; si < steps.size(); ++si) {
        const Step& s = steps[si];
        const int prog = static_cast<int>(pi);
        const int step = static_cast<int>(si);
        const bool transfer = s.kind == StepKind::kPrefetch || s.kind == StepKind::kStore;
        if (s.kind == StepKind::kCompute) {
          if (s.target >= w_.ops.size()) {
            return at(prog, step,
                      fmt::format("op {} does not exist (the workload has {} ops)", s.target,
                                  w_.ops.size()));
          }
          if (s.host && p_.host_tier == kNoTier) {
            return at(prog, step, "a host step needs the plan's 'host_tier'");
          }
          if (s.host && s.event == kNoEvent) {
            return at(prog, step, "a host step needs an 'event' that later steps can wait on");
          }
        } else if (s.host && s.kind == StepKind::kStore) {
          return at(prog, step, "a store moves data off the device: it does not run on the host");
        } else if (s.host && p_.host_tier == kNoTier) {
          return at(prog, step,
                    fmt::format("a host {} needs the plan's 'host_tier'",
                                kStepKindNames[static_cast<size_t>(s.kind)]));
        } else if (s.target >= w_.tensors.size()) {
          return at(prog, step,
                    fmt::format("tensor {} does not exist (the workload has {} tensors)", s.target,
                                w_.tensors.size()));
        }
        if (transfer && s.event == kNoEvent) {
          return at(prog, step,
                    fmt::format("a {} needs an 'event' that later steps can wait on",
                                kStepKindNames[static_cast<size_t>(s.kind)]));
        }
        if (!transfer && !is_host_step(s) && s.event != kNoEvent) {
          return at(prog, step,
                    fmt::format("a {} step{} completes no event",
                                kStepKindNames[static_cast<size_t>(s.kind)],
                                s.kind == StepKind::kCompute ? " on the device" : ""));
        }
        if (transfer && s.host && s.tier < p_.tiers.size() && s.tier == p_.host_tier) {
          return at(prog, step,
                    fmt::format("a host prefetch copies into the host tier '{}' from another "
                                "tier, not from itself",
                                p_.tiers[p_.host_tier]));
        }
        if (transfer && s.tier >= p_.tiers.size()) {
          return at(prog, step, "the tier is not one of the plan's tiers");
        }
        if (transfer && s.tier == p_.device_tier) {
          return at(
              prog, step,
              fmt::format("a {} moves data between the device tier '{}' and "
                          "another tier, not to itself",
                          kStepKindNames[static_cast<size_t>(s.kind)], p_.tiers[p_.device_tier]));
        }
        if (s.event != kNoEvent) {
          if (const EventInfo* other = event(s.event)) {
            return at(prog, step,
                      fmt::format("event {} is already completed by program {} step {}", s.event,
                                  other->program, other->step));
          }
          const uint32_t dest = s.host                          ? p_.host_tier
                                : s.kind == StepKind::kPrefetch ? p_.device_tier
                                                                : s.tier;
          const EventInfo info{prog, step, s.kind, s.target, dest};
          if (flat_) {
            events_[s.event] = info;
          } else {
            slot_of_.emplace(s.event, static_cast<uint32_t>(events_.size()));
            events_.push_back(info);
          }
        }
      }
    }
    return std::nullopt;
  }

  std::optional<PlanIssue> check_program(int prog) {
    const auto& steps = p_.programs[static_cast<size_t>(prog)].steps;
    const size_t nt = w_.tensors.size();
    const uint64_t dev = uint64_t{1} << p_.device_tier;
    const uint64_t host = p_.host_tier == kNoTier ? 0 : uint64_t{1} << p_.host_tier;
    // produced: made by its op here, or external (there from the start).
    Flags resident(nt), produced(nt);
    std::vector<uint64_t> valid(nt);
    std::vector<uint32_t> inflight(nt, kNoEvent);
    /// Per tensor: the event of a host step that reads its host copy, until waited on.
    std::vector<uint32_t> host_reads(nt, kNoEvent);
    /// Per tensor: a copy is allocated on the host tier (its home, a store, a host prefetch
    /// or a host step made it; a host detach frees it).
    Flags host_held(nt);
    Flags computed(w_.ops.size());
    std::vector<int> last_use(nt, -1);
    Flags waited(events_.size());  // by slot: already waited on here
    for (size_t t = 0; t < nt; ++t) {
      if (w_.tensors[t].origin == kExternal) {
        valid[t] = uint64_t{1} << p_.home[t];
        resident[t] = p_.home[t] == p_.device_tier;
        produced[t] = true;
      }
      host_held[t] = host != 0 && p_.home[t] == p_.host_tier && w_.tensors[t].origin == kExternal;
    }
    on_host_.assign(w_.ops.size(), false);
    for (size_t si = 0; si < steps.size(); ++si) {
      if (steps[si].kind != StepKind::kCompute) continue;
      if (steps[si].host) on_host_[steps[si].target] = true;
      const Op& op = w_.ops[steps[si].target];
      for (uint32_t t : op.inputs) last_use[t] = static_cast<int>(si);
      for (uint32_t t : op.updates) last_use[t] = static_cast<int>(si);
    }

    for (size_t si = 0; si < steps.size(); ++si) {
      const Step& s = steps[si];
      const int step = static_cast<int>(si);
      // Waits complete before the step starts.
      for (uint32_t e : s.wait) {
        const uint32_t i = slot(e);
        if (i == kNoEvent)
          return at(prog, step, fmt::format("waits on event {}, which no step completes", e));
        const EventInfo& ev = events_[i];
        if (ev.program == prog && ev.step >= step) {
          return at(prog, step,
                    fmt::format("waits on event {}, which step {} completes later: the "
                                "program would wait forever",
                                e, ev.step));
        }
        if (ev.program != prog || waited[i]) continue;
        waited[i] = true;
        if (ev.kind == StepKind::kCompute) {
          // A host step ended: its outputs are current on the host tier, its inputs free.
          const Op& op = w_.ops[ev.tensor];
          for (uint32_t t : op.outputs) valid[t] |= host;
          for (uint32_t t : op.inputs) {
            if (host_reads[t] == e) host_reads[t] = kNoEvent;
          }
          continue;
        }
        if (inflight[ev.tensor] == e) inflight[ev.tensor] = kNoEvent;
        valid[ev.tensor] |= uint64_t{1} << ev.tier;
      }
      if (s.kind == StepKind::kCompute && s.host) {
        if (computed[s.target]) {
          return at(prog, step,
                    fmt::format("op {} '{}' is computed twice", s.target, w_.ops[s.target].name));
        }
        if (auto issue = check_host_step(prog, step, s, produced, valid, inflight, host_reads)) {
          return issue;
        }
        for (uint32_t t : w_.ops[s.target].outputs) host_held[t] = true;
        computed[s.target] = true;
        continue;
      }
      if (s.host) {
        if (auto issue = check_host_copy(prog, step, s, produced, valid, inflight, host_reads,
                                         host_held, last_use)) {
          return issue;
        }
        continue;
      }
      switch (s.kind) {
        case StepKind::kCompute: {
          const Op& op = w_.ops[s.target];
          if (computed[s.target]) {
            return at(prog, step, fmt::format("op {} '{}' is computed twice", s.target, op.name));
          }
          for (const auto* list : {&op.inputs, &op.updates}) {
            for (uint32_t t : *list) {
              if (!produced[t]) {
                return at(prog, step,
                          fmt::format("op '{}' reads {} before its producer op {} runs", op.name,
                                      tensor_name(t), w_.tensors[t].origin),
                          static_cast<int>(t));
              }
              if (!resident[t]) {
                return at(prog, step,
                          fmt::format("op '{}' reads {}, which is not resident on '{}': "
                                      "prefetch it first, or do not detach it earlier",
                                      op.name, tensor_name(t), p_.tiers[p_.device_tier]), static_cast<int>(t));
              }
              if (inflight[t] != kNoEvent && event(inflight[t])->kind == StepKind::kPrefetch) {
                return at(prog, step,
                          fmt::format("op '{}' may start before the prefetch of {} lands: "
                                      "wait on event {}",
                                      op.name, tensor_name(t), inflight[t]), static_cast<int>(t));
              }
            }
          }
          for (uint32_t t : op.updates) {
            if (inflight[t] != kNoEvent) {
              return at(prog, step,
                        fmt::format("op '{}' modifies {} while a transfer of it is in "
                                    "flight: wait on event {} first",
                                    op.name, tensor_name(t), inflight[t]), static_cast<int>(t));
            }
            valid[t] = dev;  // the device copy is now the only current one
          }
          for (uint32_t t : op.outputs) {
            resident[t] = true;
            produced[t] = true;
            valid[t] = dev;
          }
          computed[s.target] = true;
          break;
        }
        case StepKind::kPrefetch: {
          const uint32_t t = s.target;
          if (!produced[t]) {
            return at(prog, step,
                      fmt::format("prefetch of {} before its producer op {} runs", tensor_name(t),
                                  w_.tensors[t].origin), static_cast<int>(t));
          }
          if (resident[t]) {
            return at(prog, step,
                      fmt::format("{} is already resident on '{}'", tensor_name(t),
                                  p_.tiers[p_.device_tier]), static_cast<int>(t));
          }
          if ((valid[t] & (uint64_t{1} << s.tier)) == 0) {
            const Tensor& x = w_.tensors[t];
            if (x.origin != kExternal && on_host_[x.origin]) {
              return at(prog, step,
                        fmt::format("prefetch of {} before the host step of op {} that makes it "
                                    "has ended: wait on its event first",
                                    tensor_name(t), x.origin),
                        static_cast<int>(t));
            }
            return at(prog, step,
                      fmt::format("'{}' holds no valid copy of {} (home '{}'): store it "
                                  "there and wait for the store first",
                                  p_.tiers[s.tier], tensor_name(t), p_.tiers[p_.home[t]]), static_cast<int>(t));
          }
          if (inflight[t] != kNoEvent) {
            return at(prog, step,
                      fmt::format("{} already has a transfer in flight (event {})", tensor_name(t),
                                  inflight[t]), static_cast<int>(t));
          }
          resident[t] = true;
          inflight[t] = s.event;
          break;
        }
        case StepKind::kStore: {
          const uint32_t t = s.target;
          if (!produced[t]) {
            return at(prog, step,
                      fmt::format("store of {} before its producer op {} runs", tensor_name(t),
                                  w_.tensors[t].origin), static_cast<int>(t));
          }
          if (!resident[t]) {
            return at(prog, step,
                      fmt::format("store of {}, which is not resident on '{}'", tensor_name(t),
                                  p_.tiers[p_.device_tier]), static_cast<int>(t));
          }
          if (inflight[t] != kNoEvent) {
            return at(prog, step,
                      fmt::format("store of {} while a transfer of it is in flight: "
                                  "wait on event {} first",
                                  tensor_name(t), inflight[t]), static_cast<int>(t));
          }
          if (s.tier == p_.host_tier && host_reads[t] != kNoEvent) {
            return at(prog, step,
                      fmt::format("store of {} to '{}' while a host step reads it there: wait "
                                  "on event {} first",
                                  tensor_name(t), p_.tiers[s.tier], host_reads[t]),
                      static_cast<int>(t));
          }
          inflight[t] = s.event;
          if (s.tier == p_.host_tier) host_held[t] = true;
          break;
        }
        case StepKind::kDetach: {
          const uint32_t t = s.target;
          if (!resident[t]) {
            return at(prog, step,
                      fmt::format("detach of {}, which is not resident", tensor_name(t)), static_cast<int>(t));
          }
          if (inflight[t] != kNoEvent) {
            return at(prog, step,
                      fmt::format("detach of {} while a transfer uses it: wait on event {} "
                                  "first",
                                  tensor_name(t), inflight[t]), static_cast<int>(t));
          }
          if (last_use[t] > step && (valid[t] & ~dev) == 0) {
            const uint32_t user = steps[static_cast<size_t>(last_use[t])].target;
            return at(prog, step,
                      fmt::format("detach of {} loses data: no other tier holds a current copy and "
                                  "op {} '{}' (step {}) still uses it; store it and wait for the "
                                  "store first",
                                  tensor_name(t), user, w_.ops[user].name, last_use[t]),
                      static_cast<int>(t));
          }
          resident[t] = false;
          valid[t] &= ~dev;
          break;
        }
      }
    }
    for (size_t o = 0; o < w_.ops.size(); ++o) {
      if (!computed[o]) {
        return at(prog, -1, fmt::format("op {} '{}' is never computed", o, w_.ops[o].name));
      }
    }
    return std::nullopt;
  }

  /// The rules of a host prefetch and a host detach (plan.h: host copy).
  std::optional<PlanIssue> check_host_copy(int prog, int step, const Step& s, const Flags& produced,
                                           std::vector<uint64_t>& valid,
                                           std::vector<uint32_t>& inflight,
                                           const std::vector<uint32_t>& host_reads,
                                           Flags& host_held,
                                           const std::vector<int>& last_use) const {
    const uint32_t t = s.target;
    const std::string_view host = p_.tiers[p_.host_tier];
    const auto tensor = static_cast<int>(t);
    if (inflight[t] != kNoEvent) {
      return at(
          prog, step,
          fmt::format("host {} of {} while a transfer of it is in flight: wait on event {} "
                      "first",
                      kStepKindNames[static_cast<size_t>(s.kind)], tensor_name(t), inflight[t]),
          tensor);
    }
    if (s.kind == StepKind::kPrefetch) {
      if (!produced[t]) {
        return at(prog, step,
                  fmt::format("host prefetch of {} before its producer op {} runs", tensor_name(t),
                              w_.tensors[t].origin),
                  tensor);
      }
      if (host_held[t]) {
        return at(prog, step,
                  fmt::format("{} already has a copy on '{}': detach it there first",
                              tensor_name(t), host),
                  tensor);
      }
      if ((valid[t] & (uint64_t{1} << s.tier)) == 0) {
        return at(prog, step,
                  fmt::format("'{}' holds no valid copy of {} (home '{}')", p_.tiers[s.tier],
                              tensor_name(t), p_.tiers[p_.home[t]]),
                  tensor);
      }
      host_held[t] = true;
      inflight[t] = s.event;
      return std::nullopt;
    }
    // A host detach.
    if (!host_held[t]) {
      return at(prog, step,
                fmt::format("host detach of {}, which has no copy on '{}'", tensor_name(t), host),
                tensor);
    }
    // A home copy goes only when it is dead: made in the step, read, and read no more.
    const bool dead = w_.tensors[t].origin != kExternal && last_use[t] >= 0 && last_use[t] < step;
    if (p_.home[t] == p_.host_tier && !dead) {
      return at(prog, step,
                fmt::format("host detach of {}: '{}' is its home, whose copy stays{}",
                            tensor_name(t), host,
                            w_.tensors[t].origin == kExternal || last_use[t] < 0
                                ? ""
                                : fmt::format(" while step {} still reads it", last_use[t])),
                tensor);
    }
    if (host_reads[t] != kNoEvent) {
      return at(prog, step,
                fmt::format("host detach of {} while a host step reads it: wait on event {} "
                            "first",
                            tensor_name(t), host_reads[t]),
                tensor);
    }
    host_held[t] = false;
    valid[t] &= ~(uint64_t{1} << p_.host_tier);
    return std::nullopt;
  }

  /// The rules of a host step (plan.h): its op reads current host copies, updates nothing
  /// in place, and makes outputs homed on the host tier.
  std::optional<PlanIssue> check_host_step(int prog, int step, const Step& s, Flags& produced,
                                           std::vector<uint64_t>& valid,
                                           const std::vector<uint32_t>& inflight,
                                           std::vector<uint32_t>& host_reads) const {
    const Op& op = w_.ops[s.target];
    const std::string_view tier = p_.tiers[p_.host_tier];
    if (!op.updates.empty()) {
      return at(prog, step,
                fmt::format("op '{}' updates {} in place: only ops that make new outputs run "
                            "on the host",
                            op.name, tensor_name(op.updates.front())),
                static_cast<int>(op.updates.front()));
    }
    if (op.collective_bytes > 0) {
      return at(prog, step, fmt::format("op '{}' is a collective: it runs on the device", op.name));
    }
    for (uint32_t t : op.inputs) {
      const Tensor& x = w_.tensors[t];
      if (x.origin != kExternal && !produced[t]) {
        return at(prog, step,
                  fmt::format("op '{}' reads {} before its producer op {} runs", op.name,
                              tensor_name(t), x.origin),
                  static_cast<int>(t));
      }
      if ((valid[t] & (uint64_t{1} << p_.host_tier)) == 0) {
        const EventInfo* moving = inflight[t] == kNoEvent ? nullptr : event(inflight[t]);
        const std::string fix =
            moving != nullptr && moving->tier == p_.host_tier
                ? fmt::format("wait on event {} (its {} there) first", inflight[t],
                              moving->kind == StepKind::kStore ? "store" : "host prefetch")
            : (valid[t] & (uint64_t{1} << p_.device_tier)) != 0
                ? "store it there and wait for the store first"
                : "fetch it there (a prefetch on the host) and wait for it first";
        return at(prog, step,
                  fmt::format("op '{}' runs on the host and reads {}, which has no current copy "
                              "on '{}': {}",
                              op.name, tensor_name(t), tier, fix),
                  static_cast<int>(t));
      }
      host_reads[t] = s.event;
    }
    for (uint32_t t : op.outputs) {
      if (p_.home[t] != p_.host_tier) {
        return at(prog, step,
                  fmt::format("op '{}' runs on the host and makes {}: its home must be '{}', "
                              "not '{}'",
                              op.name, tensor_name(t), tier, p_.tiers[p_.home[t]]),
                  static_cast<int>(t));
      }
      produced[t] = true;
      valid[t] = 0;  // current on the host tier once the step's event completes
    }
    return std::nullopt;
  }

  const Plan& p_;
  const Workload& w_;
  Flags on_host_;      ///< per op: a host step of the program being checked runs it
  bool flat_ = false;  ///< events_ is indexed by event id
  std::vector<EventInfo> events_;
  std::unordered_map<uint32_t, uint32_t> slot_of_;  ///< event id -> index (not flat_)
};

}  // namespace

bool computes_on_host(const Plan& p) {
  for (const Program& prog : p.programs) {
    for (const Step& s : prog.steps) {
      if (s.host) return true;
    }
  }
  return false;
}

std::optional<PlanIssue> verify_plan(const Plan& p, const Workload& w) {
  return PlanChecker(p, w).run();
}

std::optional<PlanIssue> find_wait_cycle(const Plan& p) {
  // Steps as nodes (numbered program by program); an edge from each step to the next of
  // its program, and from the step completing an event to each step waiting on it. Kahn's
  // order leaves exactly the steps a cycle blocks.
  std::vector<size_t> first(p.programs.size() + 1, 0);
  for (size_t g = 0; g < p.programs.size(); ++g)
    first[g + 1] = first[g] + p.programs[g].steps.size();
  const size_t n = first.back();
  std::unordered_map<uint32_t, size_t> producer;  // event -> step completing it
  for (size_t g = 0; g < p.programs.size(); ++g) {
    const auto& steps = p.programs[g].steps;
    for (size_t s = 0; s < steps.size(); ++s) {
      if (steps[s].event != kNoEvent) producer.emplace(steps[s].event, first[g] + s);
    }
  }
  std::vector<uint32_t> indegree(n, 0);
  std::vector<std::vector<size_t>> waiters(n);
  for (size_t g = 0; g < p.programs.size(); ++g) {
    const auto& steps = p.programs[g].steps;
    for (size_t s = 0; s < steps.size(); ++s) {
      const size_t node = first[g] + s;
      if (s > 0) ++indegree[node];
      for (const uint32_t e : steps[s].wait) {
        const auto it = producer.find(e);
        if (it == producer.end() || it->second == node) continue;
        waiters[it->second].push_back(node);
        ++indegree[node];
      }
    }
  }
  std::vector<size_t> ready;
  for (size_t g = 0; g < p.programs.size(); ++g) {
    if (first[g] < first[g + 1] && indegree[first[g]] == 0) ready.push_back(first[g]);
  }
  std::vector<bool> ran(n, false);
  while (!ready.empty()) {
    const size_t node = ready.back();
    ready.pop_back();
    ran[node] = true;
    const auto g =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), node) - first.begin() - 1);
    if (node + 1 < first[g + 1] && --indegree[node + 1] == 0) ready.push_back(node + 1);
    for (const size_t w : waiters[node]) {
      if (--indegree[w] == 0) ready.push_back(w);
    }
  }
  for (size_t g = 0; g < p.programs.size(); ++g) {
    const auto& steps = p.programs[g].steps;
    for (size_t s = 0; s < steps.size(); ++s) {
      if (ran[first[g] + s]) continue;
      // The first step that cannot run: its own waits hold it (its program order is free).
      for (const uint32_t e : steps[s].wait) {
        const auto it = producer.find(e);
        if (it == producer.end() || ran[it->second]) continue;
        const auto pg = static_cast<size_t>(
            std::upper_bound(first.begin(), first.end(), it->second) - first.begin() - 1);
        return PlanIssue{
            static_cast<int>(g), static_cast<int>(s), -1,
            fmt::format("waits on event {}, which program {} step {} completes, and that "
                        "step cannot run before this one does: the programs wait on "
                        "each other forever",
                        e, pg, it->second - first[pg])};
      }
      break;  // held by an earlier step of its program, which is reported in its turn
    }
  }
  return std::nullopt;
}

PlanCheck verify_plan_programs(const Plan& p, const Workload& w) {
  return PlanChecker(p, w).run_all();
}

}  // namespace tierflow
