// reorder: compute order changed within dependency freedom to lower the resident peak.
//
// Dependencies per tensor, in the workload's order: a read after the write it sees, a
// write after every earlier access (reads may swap among themselves). A list schedule
// picks, among ready ops, the one that adds the fewest bytes (outputs and workspace
// allocated minus tensors whose last use it is), ties by original position. The new order
// is kept only if the resident peak drops (`keep=no-higher`: also when it stays the same,
// which lets ops that free memory, such as per-layer optimizer updates, run as soon as
// they can, where offloading can overlap them with compute); every later analysis is
// recomputed. `mode=hoist` instead moves every op that allocates nothing (optimizer
// updates) to right after the last op it depends on.
#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "core/diagnostics.h"
#include "planner/bounds.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class Reorder : public Pass {
 public:
  Reorder(bool equal, bool hoist) : equal_(equal), hoist_(hoist) {}
  [[nodiscard]] std::string_view name() const override { return "reorder"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    const uint32_t n = s.positions();
    if (n < 3) return PassResult::kUnchanged;
    s.ensure_liveness();
    // Keeps what `place` chose; pins that offload are applied again by `place`.
    std::vector<uint32_t> tiers(s.tensors.size());
    for (size_t t = 0; t < tiers.size(); ++t) tiers[t] = s.tensors[t].tier;
    auto restore = [&] {
      reset_resident(s);
      for (size_t t = 0; t < tiers.size(); ++t) s.tensors[t].tier = tiers[t];
    };
    restore();
    // What reorder makes of an order depends on the workload and the order alone (the
    // resident profile counts bytes, not time): the plans of a workload, on every
    // topology, share it through their traffic memo.
    const int options = (hoist_ ? 2 : 0) | (equal_ ? 1 : 0);
    const std::shared_ptr<const Reordering> r =
        s.traffic_memo
            ? s.traffic_memo->reordering(s.w, s.order, options, [&] { return decide(s, restore); })
            : std::make_shared<const Reordering>(decide(s, restore));
    if (r->changed && s.order != r->order) {
      // Made for another plan of the workload: this state takes the order it chose.
      s.order = r->order;
      s.invalidate();
      s.ensure_costs();
      restore();
    }
    for (const auto& [stat, value] : r->stats) ctx.report.stat(name(), stat, value);
    ctx.report.notes.insert(ctx.report.notes.end(), r->notes.begin(), r->notes.end());
    return r->changed ? PassResult::kChanged : PassResult::kUnchanged;
  }

 private:
  /// Reorders `s` (restored as `restore` does) and says what it did.
  template <class Restore>
  Reordering decide(PlanState& s, Restore& restore) {
    const uint32_t n = s.positions();
    Reordering out;
    const uint64_t before = peak(s);

    // Dependency edges between positions of the current order.
    std::vector<std::vector<uint32_t>> succ(n);
    std::vector<uint32_t> preds(n, 0);
    auto edge = [&](uint32_t a, uint32_t b) {
      if (a == b) return;
      succ[a].push_back(b);
      ++preds[b];
    };
    std::vector<uint32_t> last_write(s.w.tensors.size(), kNone);
    std::vector<std::vector<uint32_t>> reads_since(s.w.tensors.size());
    for (uint32_t i = 0; i < n; ++i) {
      const Op& op = s.w.ops[s.order[i]];
      for (uint32_t t : op.inputs) {
        if (last_write[t] != kNone) edge(last_write[t], i);
        reads_since[t].push_back(i);
      }
      auto write = [&](uint32_t t) {
        if (last_write[t] != kNone) edge(last_write[t], i);
        for (uint32_t r : reads_since[t]) edge(r, i);
        reads_since[t].clear();
        last_write[t] = i;
      };
      for (uint32_t t : op.updates) write(t);
      for (uint32_t t : op.outputs) write(t);
    }

    if (hoist_) return hoist(s, succ, restore, before);

    // Remaining uses per tensor, to know which op frees what.
    std::vector<uint32_t> remaining(s.w.tensors.size(), 0);
    for (uint32_t t = 0; t < remaining.size(); ++t) {
      remaining[t] = static_cast<uint32_t>(s.liveness->uses[t].size());
    }
    auto gain = [&](uint32_t i) {
      const Op& op = s.w.ops[s.order[i]];
      int64_t d = static_cast<int64_t>(op.workspace);
      for (uint32_t t : op.outputs) d += static_cast<int64_t>(s.w.tensors[t].bytes);
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) {
          const bool produced = s.liveness->born[t] != kNone;
          if (produced && remaining[t] == 1 && !s.liveness->persists[t]) {
            d -= static_cast<int64_t>(s.w.tensors[t].bytes);
          }
        }
      }
      return d;
    };
    using Entry = std::pair<int64_t, uint32_t>;  // (bytes added, position)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
    for (uint32_t i = 0; i < n; ++i) {
      if (preds[i] == 0) ready.emplace(gain(i), i);
    }
    std::vector<uint32_t> order;
    order.reserve(n);
    while (!ready.empty()) {
      auto [g, i] = ready.top();
      ready.pop();
      if (g != gain(i)) {  // a use elsewhere changed what it frees
        ready.emplace(gain(i), i);
        continue;
      }
      order.push_back(s.order[i]);
      const Op& op = s.w.ops[s.order[i]];
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) --remaining[t];
      }
      for (uint32_t j : succ[i]) {
        if (--preds[j] == 0) ready.emplace(gain(j), j);
      }
    }
    if (order.size() != n || order == s.order) return out;

    const std::vector<uint32_t> old = s.order;
    s.order = order;
    s.invalidate();
    s.ensure_costs();
    restore();
    const uint64_t after = peak(s);
    if (after > before || (after == before && !equal_)) {
      s.order = old;
      s.invalidate();
      s.ensure_costs();
      restore();
      out.stats.emplace_back("kept the order (no lower peak)", 1);
      return out;
    }
    out.stats.emplace_back("resident peak bytes before", static_cast<double>(before));
    out.stats.emplace_back("resident peak bytes after", static_cast<double>(after));
    out.notes.push_back(
        fmt::format("reorder: compute order changed, resident peak {} -> {} bytes", before, after));
    out.changed = true;
    out.order = s.order;
    return out;
  }

  /// Moves every op that allocates nothing (no outputs, no workspace: optimizer updates)
  /// to right after the last op it depends on. That never raises the peak and frees
  /// what it reads as early as the dependencies allow.
  template <class Restore>
  Reordering hoist(PlanState& s, const std::vector<std::vector<uint32_t>>& succ, Restore& restore,
                   uint64_t before) {
    Reordering out;
    const uint32_t n = s.positions();
    std::vector<uint32_t> last_pred(n, kNone);
    for (uint32_t a = 0; a < n; ++a) {
      for (uint32_t b : succ[a]) {
        if (last_pred[b] == kNone || a > last_pred[b]) last_pred[b] = a;
      }
    }
    std::vector<std::vector<uint32_t>> after(n);  // hoisted ops to emit right after each op
    std::vector<bool> hoisted(n, false);
    for (uint32_t i = 0; i < n; ++i) {
      const Op& op = s.w.ops[s.order[i]];
      if (!op.outputs.empty() || op.workspace > 0 || last_pred[i] == kNone) continue;
      if (last_pred[i] + 1 == i) continue;  // already right after it
      hoisted[i] = true;
      after[last_pred[i]].push_back(i);
    }
    std::vector<uint32_t> order;
    order.reserve(n);
    std::vector<uint32_t> stack;
    for (uint32_t i = 0; i < n; ++i) {
      if (hoisted[i]) continue;
      stack.push_back(i);
      while (!stack.empty()) {
        const uint32_t x = stack.back();
        stack.pop_back();
        order.push_back(s.order[x]);
        for (auto it = after[x].rbegin(); it != after[x].rend(); ++it) stack.push_back(*it);
      }
    }
    if (order.size() != n || order == s.order) return out;
    s.order = std::move(order);
    s.invalidate();
    s.ensure_costs();
    restore();
    const uint64_t now = peak(s);
    TF_ASSERT(now <= before, "hoisting raised the peak from {} to {}", before, now);
    out.stats.emplace_back("ops hoisted",
                           static_cast<double>(std::count(hoisted.begin(), hoisted.end(), true)));
    out.notes.push_back(
        fmt::format("reorder: ops that allocate nothing run right after what they "
                    "depend on; resident peak {} -> {} bytes",
                    before, now));
    out.changed = true;
    out.order = s.order;
    return out;
  }

  bool equal_ = false;
  bool hoist_ = false;

  static uint64_t peak(const PlanState& s) {
    const auto p = memory_profile(s);
    return p.empty() ? 0 : *std::max_element(p.begin(), p.end());
  }
};

}  // namespace

std::unique_ptr<Pass> make_reorder(PassOptions& o) {
  const std::string keep = o.text("keep", "lower");
  if (keep != "lower" && keep != "no-higher") {
    throw InputError::at(SourcePos{"--pipeline"},
                         "option 'keep' of pass 'reorder': '{}' is not lower or no-higher", keep);
  }
  const std::string mode = o.text("mode", "greedy");
  if (mode != "greedy" && mode != "hoist") {
    throw InputError::at(SourcePos{"--pipeline"},
                         "option 'mode' of pass 'reorder': '{}' is not greedy or hoist", mode);
  }
  return std::make_unique<Reorder>(keep == "no-higher", mode == "hoist");
}

}  // namespace tierflow::planner
