#include "planner/host_steps.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "core/checked.h"
#include "core/diagnostics.h"
#include "hw_models/cost.h"

namespace tierflow::planner {
namespace {

/// What the move does with each tensor (see the glossary in host_steps.h).
enum class Role : uint8_t { kKeep, kHostOnly, kStaged, kSent, kSynced, kReturned };

struct Analysis {
  std::vector<bool> moved;  ///< per op
  std::vector<Role> role;   ///< per tensor
  std::vector<bool> staged;  ///< per tensor: external, read by moved ops, homed off the host tier
  /// Per tier (as analyse() numbers them): a host-side tier, not the host tier, with a route
  /// to the host tier: a host prefetch can bring what it holds.
  std::vector<bool> fetchable;
  uint64_t moved_ops = 0;
  uint64_t kept = 0;
  std::string why_kept;  ///< why the first op of a chosen kind stays on the device
};

bool wanted(const Op& op, const std::vector<OpKind>& kinds) {
  return std::ranges::find(kinds, op.kind) != kinds.end();
}

/// Why op `o` cannot move, or empty (glossary: movable).
std::string why_not_movable(const Workload& w, uint32_t o, const std::vector<uint32_t>& home,
                            uint32_t host, const std::string& host_name,
                            const std::vector<bool>& updated, const std::vector<bool>& fetchable) {
  const Op& op = w.ops[o];
  if (!op.updates.empty()) return "updates a tensor in place";
  if (op.collective_bytes > 0) return "is a collective";
  for (uint32_t t : op.inputs) {
    if (w.tensors[t].origin != kExternal) continue;
    if (updated[t])
      return fmt::format("reads '{}', which an op updates in place", w.tensors[t].name);
    if (home[t] != host && !(home[t] < fetchable.size() && fetchable[home[t]])) {
      return fmt::format(
          "reads '{}', which is not homed on '{}' nor on a tier the host fetches "
          "from",
          w.tensors[t].name, host_name);
    }
  }
  for (uint32_t t : op.outputs) {
    if (updated[t])
      return fmt::format("makes '{}', which an op updates in place", w.tensors[t].name);
  }
  return "";
}

/// The movable ops of `kinds` and each tensor's role, on `w` with homes `home` (tiers as
/// `fetchable` numbers them; a home past them is unknown) and the host tier `host`.
Analysis analyse(const Workload& w, const std::vector<uint32_t>& home, uint32_t host,
                 const std::string& host_name, const std::vector<OpKind>& kinds,
                 std::vector<bool> fetchable) {
  const size_t nt = w.tensors.size();
  std::vector<std::vector<uint32_t>> users(nt);  // ops reading or updating each tensor
  std::vector<bool> updated(nt);
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    for (uint32_t t : w.ops[o].inputs) users[t].push_back(o);
    for (uint32_t t : w.ops[o].updates) {
      users[t].push_back(o);
      updated[t] = true;
    }
  }
  Analysis a;
  a.moved.assign(w.ops.size(), false);
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    if (!wanted(w.ops[o], kinds)) continue;
    const std::string why = why_not_movable(w, o, home, host, host_name, updated, fetchable);
    a.moved[o] = why.empty();
    (a.moved[o] ? a.moved_ops : a.kept) += 1;
    if (!why.empty() && a.why_kept.empty()) {
      a.why_kept = fmt::format("op '{}' {}", w.ops[o].name, why);
    }
  }
  a.role.assign(nt, Role::kKeep);
  a.staged.assign(nt, false);
  a.fetchable = std::move(fetchable);
  for (uint32_t t = 0; t < nt; ++t) {
    const auto& u = users[t];
    const bool host_read = std::ranges::any_of(u, [&](uint32_t o) { return a.moved[o]; });
    const bool host_only =
        !u.empty() && std::ranges::all_of(u, [&](uint32_t o) { return a.moved[o]; });
    const uint32_t origin = w.tensors[t].origin;
    if (origin != kExternal && a.moved[origin]) {
      a.role[t] = Role::kReturned;
    } else if (origin == kExternal) {
      // Read where it lives, or fetched next to the CPU from there; the device keeps its own
      // copies for its own readers.
      a.staged[t] = host_read && home[t] != host;
      if (host_only) a.role[t] = a.staged[t] ? Role::kStaged : Role::kHostOnly;
    } else if (host_only && !updated[t]) {
      a.role[t] = Role::kSent;
    } else if (host_read) {
      a.role[t] = Role::kSynced;
    }
  }
  return a;
}

/// Rewrites one program (see the glossary); `dropped` holds the events of the plan's cache
/// steps that go, `next` the next free event id.
class ProgramRewrite {
 public:
  ProgramRewrite(const Workload& w, const Analysis& a, uint32_t host,
                 const std::vector<uint32_t>& home, const std::unordered_set<uint32_t>& dropped,
                 uint32_t& next)
      : w_(w), a_(a), host_(host), home_(home), dropped_(dropped), next_(next) {}

  std::vector<Step> run(const std::vector<Step>& steps) {
    const size_t nt = w_.tensors.size();
    sync_.assign(nt, kNoEvent);
    dirty_.assign(nt, false);
    alias_.clear();
    fetch_.assign(nt, kNoEvent);
    host_made_.assign(w_.ops.size(), kNoEvent);
    readers_.assign(nt, {});
    last_host_.assign(nt, kNever);
    last_device_.assign(nt, kNever);
    latest_.assign(nt, kNoEvent);
    staged_at_.assign(nt, kNoEvent);
    restage_.assign(nt, false);
    home_store_.assign(nt, kNoEvent);
    store_tier_.assign(nt, kNoTier);
    host_ops_.clear();
    // Per synced tensor homed off the host tier: the steps that read it on the host and
    // those that change it on the device, in program order; and whether the plan's own cache
    // steps use the host tier for it (then its copy there is left alone).
    changes_.assign(nt, {});
    host_reads_at_.assign(nt, {});
    plan_on_host_.assign(nt, false);
    const auto off_host_synced = [&](uint32_t t) {
      return a_.role[t] == Role::kSynced && home_[t] != host_;
    };
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      if (s.kind != StepKind::kCompute) {
        if (s.tier == host_ && s.kind != StepKind::kDetach) plan_on_host_[s.target] = true;
        continue;
      }
      const Op& op = w_.ops[s.target];
      if (a_.moved[s.target]) host_ops_.push_back(s.target);
      for (uint32_t t : inputs_of(op)) {
        (a_.moved[s.target] ? last_host_ : last_device_)[t] = i;
        if (a_.moved[s.target] && off_host_synced(t)) host_reads_at_[t].push_back(i);
      }
      if (a_.moved[s.target]) continue;
      for (const auto* list : {&op.outputs, &op.updates}) {
        for (uint32_t t : *list) {
          if (off_host_synced(t)) changes_[t].push_back(i);
        }
      }
    }
    next_host_ = 0;
    out_.reserve(steps.size() + steps.size() / 4);
    // The first host step's staged inputs are fetched from the start, beside the device's
    // first ops.
    if (!host_ops_.empty()) stage(host_ops_.front());
    for (size_t i = 0; i < steps.size(); ++i) step(steps[i], i);
    return std::move(out_);
  }

 private:
  static constexpr size_t kNever = SIZE_MAX;  ///< no step of this program

  static std::vector<uint32_t> inputs_of(const Op& op) {
    std::vector<uint32_t> all = op.inputs;
    for (uint32_t t : op.updates) {
      if (std::ranges::find(all, t) == all.end()) all.push_back(t);
    }
    return all;
  }
  static void add_wait(Step& s, uint32_t e) {
    if (e != kNoEvent && std::ranges::find(s.wait, e) == s.wait.end()) s.wait.push_back(e);
  }

  void step(Step s, size_t i) {
    std::erase_if(s.wait, [&](uint32_t e) { return dropped_.contains(e); });
    for (uint32_t& e : s.wait) {
      if (const auto it = alias_.find(e); it != alias_.end()) e = it->second;
    }
    if (s.kind != StepKind::kCompute) {
      const Role r = a_.role[s.target];
      if (r != Role::kKeep && r != Role::kSynced) return;  // the move's own steps replace them
      if (r == Role::kSynced && s.kind == StepKind::kStore && s.tier == host_ &&
          !dirty_[s.target] && sync_[s.target] != kNoEvent) {
        // The host already holds this value (the sync store): this store would copy it again.
        alias_.emplace(s.event, sync_[s.target]);
        return;
      }
      if (r == Role::kSynced) {
        // After the sync store in flight (or the host's fetch of it); a store to the host
        // waits for the host's readers.
        add_wait(s, sync_[s.target]);
        if (s.kind != StepKind::kDetach) add_wait(s, staged_at_[s.target]);
        if (s.kind == StepKind::kStore && s.tier == host_) {
          for (uint32_t e : readers_[s.target]) add_wait(s, e);
        }
        // A store to a tier the host fetches from: once the device no longer changes it,
        // later host steps can fetch it from there.
        if (s.kind == StepKind::kStore && s.tier != host_ && s.tier < a_.fetchable.size() &&
            a_.fetchable[s.tier]) {
          home_store_[s.target] = s.event;
          store_tier_[s.target] = s.tier;
        }
      }
      emit(std::move(s));
      return;
    }
    const Op& op = w_.ops[s.target];
    if (a_.moved[s.target]) return host_step(std::move(s), op, i);
    for (uint32_t t : inputs_of(op)) {
      if (a_.role[t] == Role::kReturned) add_wait(s, fetch_[t]);
      // No update while the sync store of the previous value is in flight.
      if (a_.role[t] == Role::kSynced && std::ranges::find(op.updates, t) != op.updates.end()) {
        add_wait(s, sync_[t]);
      }
    }
    for (uint32_t t : op.outputs) dirty_[t] = true;
    for (uint32_t t : op.updates) dirty_[t] = true;
    out_.push_back(std::move(s));
    // What this op made or updated that the host reads later goes there now.
    std::vector<uint32_t> changed = op.outputs;
    changed.insert(changed.end(), op.updates.begin(), op.updates.end());
    for (uint32_t t : changed) {
      const Role r = a_.role[t];
      if ((r != Role::kSent && r != Role::kSynced) || last_host_[t] == kNever ||
          last_host_[t] < i) {
        continue;
      }
      Step store{StepKind::kStore, t, host_, next_++, {}};
      for (uint32_t e : readers_[t]) add_wait(store, e);  // they read the value it replaces
      readers_[t].clear();
      sync_[t] = store.event;
      dirty_[t] = false;
      emit(std::move(store));
      if (r == Role::kSent) out_.push_back(Step{StepKind::kDetach, t, 0, kNoEvent, {sync_[t]}});
    }
    std::vector<uint32_t> last;  // returned tensors this op reads last: detached after it
    for (uint32_t t : inputs_of(op)) {
      if (a_.role[t] == Role::kReturned && last_device_[t] == i) last.push_back(t);
    }
    for (uint32_t t : last) {
      out_.push_back(Step{StepKind::kDetach, t, 0, kNoEvent, {}});
      if (last_host_[t] == kNever || last_host_[t] < i) free_on_host(t, {});  // dead now
    }
  }

  /// Frees the host tier's copy of `t` (its home copy included, once dead), after the
  /// latest transfer of it.
  void free_on_host(uint32_t t, std::vector<uint32_t> wait) {
    Step free{StepKind::kDetach, t, 0, kNoEvent, std::move(wait)};
    add_wait(free, latest_[t]);
    free.host = true;
    out_.push_back(std::move(free));
  }
  /// Appends a step, noting the transfer of its tensor it starts.
  void emit(Step s) {
    if (s.kind == StepKind::kPrefetch || s.kind == StepKind::kStore) latest_[s.target] = s.event;
    out_.push_back(std::move(s));
  }

  /// Host prefetches of op `o`'s staged inputs the host tier does not hold yet (and of the
  /// synced ones it let go, from where they were stored home).
  void stage(uint32_t o) {
    for (uint32_t t : w_.ops[o].inputs) {
      if ((!a_.staged[t] && !restage_[t]) || staged_at_[t] != kNoEvent) continue;
      staged_at_[t] = next_++;
      Step fetch{
          StepKind::kPrefetch, t, restage_[t] ? store_tier_[t] : home_[t], staged_at_[t], {}};
      add_wait(fetch, restage_[t] ? home_store_[t] : kNoEvent);
      add_wait(fetch, latest_[t]);  // after the plan's own transfer of it, if one runs
      fetch.host = true;
      emit(std::move(fetch));
    }
  }

  /// Whether the host tier's copy of synced tensor `t` may go after host step `i`, which
  /// reads it: the device changes it before the host reads it again (a sync store brings
  /// the new value), or it is final and stored home (the host fetches it from there again,
  /// restaged). Never when the plan's own steps use the host tier for it.
  bool let_go(uint32_t t, size_t i) {
    if (a_.role[t] != Role::kSynced || home_[t] == host_ || plan_on_host_[t]) return false;
    const auto after = [i](const std::vector<size_t>& at) {
      const auto it = std::ranges::upper_bound(at, i);
      return it == at.end() ? kNever : *it;
    };
    const size_t change = after(changes_[t]);
    const size_t read = after(host_reads_at_[t]);
    if (read == kNever || change < read) return true;
    if (change == kNever && home_store_[t] != kNoEvent) {
      restage_[t] = true;
      return true;
    }
    return false;
  }

  /// After host step `made` of op `o`: its staged inputs the next host step does not read
  /// are freed once it ends; that next step's are fetched now, while it runs.
  void unstage(uint32_t o, uint32_t made, size_t i) {
    const uint32_t next = next_host_ < host_ops_.size() ? host_ops_[next_host_] : UINT32_MAX;
    const auto read_next = [&](uint32_t t) {
      return next != UINT32_MAX &&
             std::ranges::find(w_.ops[next].inputs, t) != w_.ops[next].inputs.end();
    };
    for (uint32_t t : w_.ops[o].inputs) {
      const Role r = a_.role[t];
      if (a_.staged[t] || staged_at_[t] != kNoEvent) {
        if (staged_at_[t] == kNoEvent || read_next(t)) continue;
        free_on_host(t, {made});
        staged_at_[t] = kNoEvent;
      } else if (r == Role::kSynced) {
        if (!read_next(t) && let_go(t, i)) free_on_host(t, {made});
      } else if ((r == Role::kSent || r == Role::kReturned) && last_host_[t] == i &&
                 (last_device_[t] == kNever || last_device_[t] < i)) {
        free_on_host(t, {made});  // its last reader: the copy on the host is dead
      }
    }
    if (next != UINT32_MAX) stage(next);
  }

  void host_step(Step s, const Op& op, size_t i) {
    s.host = true;
    s.event = host_made_[s.target] = next_++;
    ++next_host_;
    stage(s.target);  // what was not fetched ahead
    for (uint32_t t : op.inputs) {
      if (staged_at_[t] != kNoEvent) add_wait(s, staged_at_[t]);
      const Role r = a_.role[t];
      if (r == Role::kSent || r == Role::kSynced) {
        add_wait(s, sync_[t]);
        readers_[t].push_back(s.event);
      }
      if (r == Role::kReturned) add_wait(s, host_made_[w_.tensors[t].origin]);
    }
    const uint32_t made = s.event;
    const uint32_t o = s.target;
    out_.push_back(std::move(s));
    for (uint32_t t : op.outputs) {
      if (last_device_[t] == kNever) continue;  // only the host reads it, or nothing
      fetch_[t] = next_++;
      emit(Step{StepKind::kPrefetch, t, host_, fetch_[t], {made}});
    }
    unstage(o, made, i);
  }

  const Workload& w_;
  const Analysis& a_;
  uint32_t host_;
  const std::vector<uint32_t>& home_;  ///< the plan's homes (plan tiers)
  const std::unordered_set<uint32_t>& dropped_;
  uint32_t& next_;
  std::vector<Step> out_;
  std::vector<uint32_t> sync_;  ///< per tensor: the event of its last sync store
  std::vector<bool> dirty_;     ///< per tensor: changed on the device since that store
  /// The plan's stores to the host of a value a sync store sent already (dropped): their
  /// events stand for the sync store's.
  std::unordered_map<uint32_t, uint32_t> alias_;
  std::vector<uint32_t> fetch_;                 ///< per returned tensor: its prefetch's event
  std::vector<uint32_t> host_made_;             ///< per moved op: its host step's event
  std::vector<std::vector<uint32_t>> readers_;  ///< per tensor: host steps reading its sync
  std::vector<size_t> last_host_;               ///< per tensor: the last host step reading it
  std::vector<size_t> last_device_;             ///< per tensor: the last device step reading it
  /// Per staged tensor: the event of the host prefetch that holds it on the host tier now.
  std::vector<uint32_t> staged_at_;
  std::vector<bool> restage_;         ///< per synced tensor: fetched from home from now on
  std::vector<uint32_t> home_store_;  ///< per synced tensor: its latest store to store_tier_
  std::vector<uint32_t> store_tier_;  ///< per synced tensor: a tier the host fetches from
  std::vector<uint32_t> latest_;      ///< per tensor: the event of its latest transfer
  std::vector<std::vector<size_t>> changes_;        ///< see run()
  std::vector<std::vector<size_t>> host_reads_at_;  ///< see run()
  std::vector<bool> plan_on_host_;                  ///< see run()
  std::vector<uint32_t> host_ops_;                  ///< the moved ops, in program order
  size_t next_host_ = 0;                            ///< index in host_ops_ of the next host step
};

/// Rewrites the programs of `p` (see the glossary); `host` is the plan tier of the host.
void rewrite(Plan& p, const Workload& w, const Analysis& a, uint32_t host) {
  std::unordered_set<uint32_t> dropped;
  uint32_t next = 0;
  for (const Program& prog : p.programs) {
    for (const Step& s : prog.steps) {
      if (s.event == kNoEvent) continue;
      next = std::max(next, s.event + 1);
      const bool gone = s.kind != StepKind::kCompute && a.role[s.target] != Role::kKeep &&
                        a.role[s.target] != Role::kSynced;
      if (gone) dropped.insert(s.event);
    }
  }
  for (Program& prog : p.programs) {
    prog.steps = ProgramRewrite(w, a, host, p.home, dropped, next).run(prog.steps);
  }
  for (uint32_t t = 0; t < w.tensors.size(); ++t) {
    const Role r = a.role[t];
    if (r == Role::kHostOnly || r == Role::kSent || r == Role::kReturned) p.home[t] = host;
  }
}

}  // namespace

std::vector<OpKind> parse_host_ops(std::string_view text, std::string_view source) {
  std::vector<OpKind> kinds;
  if (text.empty()) return kinds;
  // Every piece between commas names a kind: "attention," has an empty one.
  for (size_t from = 0; from <= text.size();) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const std::string_view word = text.substr(from, comma - from);
    from = comma + 1;
    const auto it = std::ranges::find(kOpKindNames, word);
    if (it == kOpKindNames.end()) {
      throw InputError::at(SourcePos{std::string(source)}, "'{}' is not an op kind (one of: {}){}",
                           word, fmt::join(kOpKindNames, ", "),
                           did_you_mean(word, std::span<const std::string_view>(kOpKindNames)));
    }
    const auto kind = static_cast<OpKind>(it - kOpKindNames.begin());
    if (std::ranges::find(kinds, kind) == kinds.end()) kinds.push_back(kind);
  }
  return kinds;
}

std::string host_ops_text(const std::vector<OpKind>& kinds) {
  std::vector<std::string_view> names;
  for (OpKind k : kinds) names.push_back(name_of(k));
  return fmt::format("{}", fmt::join(names, ","));
}

void require_host_cpu(const hw::Topology& t, std::string_view source) {
  if (t.system.cpu.present()) return;
  throw InputError::at(SourcePos{std::string(source)},
                       "'{}' describes no host CPU (system.cpu): nothing can run on the host "
                       "there",
                       t.name);
}

HostPlan move_to_host(const Plan& plan, const Workload& w, const hw::Topology& t,
                      const std::vector<OpKind>& kinds, std::string_view source) {
  require_host_cpu(t, source);
  const hw::HostCpu& cpu = t.system.cpu;
  HostPlan out{plan};
  Plan& p = out.plan;
  const auto at = std::ranges::find(p.tiers, cpu.tier);
  const bool listed = at != p.tiers.end();
  const auto host = static_cast<uint32_t>(std::distance(p.tiers.begin(), at));
  const size_t cpu_tier = *t.tier_index(cpu.tier);  // the loader checked it names a tier
  std::vector<bool> fetchable(p.tiers.size());
  for (uint32_t h = 0; h < p.tiers.size(); ++h) {
    const auto from = t.tier_index(p.tiers[h]);
    fetchable[h] = h != p.device_tier && h != host && from && t.route(*from, cpu_tier) != nullptr;
  }
  const Analysis a = analyse(w, p.home, host, cpu.tier, kinds, std::move(fetchable));
  out.moved = a.moved_ops;
  out.moved_ops = a.moved;
  out.kept = a.kept;
  out.why_kept = a.why_kept;
  if (a.moved_ops == 0) return out;
  // Each staged tensor crosses at least once; the copies from one home share its route.
  std::vector<uint64_t> staged_bytes(p.tiers.size());
  for (uint32_t x = 0; x < w.tensors.size(); ++x) {
    if (a.staged[x])
      staged_bytes[p.home[x]] = saturating_add(staged_bytes[p.home[x]], w.tensors[x].bytes);
  }
  for (uint32_t h = 0; h < staged_bytes.size(); ++h) {
    if (staged_bytes[h] == 0) continue;
    const hw::Route* route = t.route(*t.tier_index(p.tiers[h]), cpu_tier);
    out.staged_ps = saturating_add_ps(out.staged_ps,
                                      hw::transfer_time_alone(*route, Bytes{staged_bytes[h]}).ps);
  }
  if (!listed) p.tiers.push_back(cpu.tier);
  p.host_tier = host;
  rewrite(p, w, a, host);
  if (auto issue = verify_plan(p, w)) {
    throw std::logic_error(
        fmt::format("moving ops to the host broke a plan rule: program {} "
                    "step {}: {}",
                    issue->program, issue->step, issue->message));
  }
  return out;
}

std::optional<Workload> host_planned(const Workload& w, const hw::Topology& t, size_t device_tier,
                                     const std::vector<uint32_t>& pinned,
                                     const std::vector<OpKind>& kinds) {
  const auto cpu = t.tier_index(t.system.cpu.tier);
  if (!cpu || kinds.empty()) return std::nullopt;
  // Topology tiers as analyse() takes them; a tensor no pin places (kNone, past them) is
  // homed by the policy: it may be on the device.
  std::vector<bool> fetchable(t.tiers.size());
  for (size_t x = 0; x < fetchable.size(); ++x) {
    fetchable[x] = x != device_tier && x != *cpu && t.route(x, *cpu) != nullptr;
  }
  const Analysis a = analyse(w, pinned, static_cast<uint32_t>(*cpu), t.system.cpu.tier, kinds,
                             std::move(fetchable));
  if (a.moved_ops == 0) return std::nullopt;
  Workload out = w;
  for (uint32_t o = 0; o < out.ops.size(); ++o) {
    if (!a.moved[o]) continue;
    // What the host reads where it lives (or fetches from there): the cache.
    std::erase_if(out.ops[o].inputs, [&](uint32_t x) {
      return a.role[x] == Role::kHostOnly || a.role[x] == Role::kStaged;
    });
  }
  return out;
}

Workload device_share(const Workload& w, const std::vector<bool>& moved,
                      std::vector<uint32_t>& op_of) {
  Workload d;
  d.name = w.name;
  d.meta = w.meta;
  d.tensors = w.tensors;
  std::vector<uint32_t> index(w.ops.size(), UINT32_MAX);  // moved ops have none
  op_of.clear();
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    if (moved[o]) continue;
    index[o] = static_cast<uint32_t>(d.ops.size());
    op_of.push_back(o);
    d.ops.push_back(w.ops[o]);
  }
  for (Tensor& t : d.tensors) {
    if (t.origin != kExternal) t.origin = moved[t.origin] ? kExternal : index[t.origin];
  }
  return d;
}

Bounds host_plan_bounds(Bounds device, const std::vector<uint32_t>& op_of, const Workload& w,
                        const hw::Topology& t, size_t device_class, const std::vector<bool>& moved,
                        int64_t staged_ps) {
  if (device.residency_op < op_of.size()) device.residency_op = op_of[device.residency_op];
  int64_t host = 0;
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    if (!moved[o]) continue;
    host = saturating_add_ps(host, hw::host_op_time(t, device_class, w, o).value_or(Duration{}).ps);
  }
  device.compute_ps = std::max(device.compute_ps, host);
  device.makespan_ps = std::max({device.makespan_ps, device.compute_ps, staged_ps});
  return device;
}

}  // namespace tierflow::planner
