// page: the device tier as a cache of the offload tiers (planner/paging.h). One pager with
// three injected strategies: the eviction order (`evict=lru|furthest`), the clock
// (`clock=ops|time`) and the prefetch (`prefetch=miss|ahead|link`, `ahead=K` ops with
// `ahead`), plus `headroom=X` (that fraction of the budget left free for `schedule` to
// prefetch into), `keep=X` (the most used external tensors kept homed on the device up to
// that fraction of the budget, never paged) and `warm=true` (the tensors read first start
// homed on the device, no cold fetches). When everything fits, nothing moves. Gives up
// before an op once the context's fetch limit is reached.
//
// Two presets keep their names in pipelines, plans and --stats:
//   reactive{evict,headroom,keep,warm,ahead}  = page{clock=ops,...}: a runtime that fetches
//       on a miss and evicts the least recently used (or the furthest next use); `ahead=K`
//       with evict=furthest is prefetch=ahead (ignored with lru, as it always was).
//   belady{warm}  = page{evict=furthest,clock=time,prefetch=link,warm=true}: Belady's
//       eviction with aggressive prefetching, in estimated time.
#include <memory>
#include <string>
#include <string_view>

#include "planner/offload.h"
#include "planner/paging.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class Page final : public Pass {
 public:
  /// `name`: how the pipeline spells it (`page` or a preset's name).
  Page(std::string_view name, PageOptions o) : name_(name), o_(o) {}
  [[nodiscard]] std::string_view name() const override { return name_; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    if (begin_fitting(s).fits()) return PassResult::kUnchanged;
    // In estimated time a store takes the egress link: among equal next uses, a victim with
    // a copy elsewhere leaves first.
    const std::unique_ptr<EvictionOrder> order =
        o_.evict == EvictKind::kLeastRecent ? least_recently_used()
                                            : furthest_next_use(o_.clock == ClockKind::kTime);
    const std::unique_ptr<Clock> clock =
        o_.clock == ClockKind::kOps ? ops_clock(o_) : time_clock(o_);
    return Pager(s, ctx, name_, o_, *order).run(*clock);
  }

 private:
  std::string_view name_;
  PageOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_page(PassOptions& o) {
  PageOptions p;
  p.evict = o.choice("evict", {"lru", "furthest"}) == "furthest" ? EvictKind::kFurthest
                                                                 : EvictKind::kLeastRecent;
  p.clock = o.choice("clock", {"ops", "time"}) == "time" ? ClockKind::kTime : ClockKind::kOps;
  const std::string prefetch = o.choice("prefetch", {"miss", "ahead", "link"});
  p.prefetch = prefetch == "ahead"  ? PrefetchKind::kAhead
               : prefetch == "link" ? PrefetchKind::kLink
                                    : PrefetchKind::kMiss;
  p.ahead = o.count("ahead", 0);
  p.headroom = o.share("headroom", 0.0);
  p.keep = o.share("keep", 0.0);
  p.warm = o.flag("warm", false);
  if (p.prefetch == PrefetchKind::kLink && p.clock == ClockKind::kOps) {
    o.reject("prefetch", "'link' needs clock=time (counting ops, there is no link)");
  }
  if (p.evict == EvictKind::kLeastRecent &&
      (p.clock == ClockKind::kTime || p.prefetch != PrefetchKind::kMiss)) {
    // A fetch before the miss evicts only tensors used later than the one it fetches: the
    // eviction order has to be by next use for those to be the first victims.
    o.reject("evict", "'lru' only fetches on a miss counting ops (clock=ops, prefetch=miss)");
  }
  if (p.prefetch == PrefetchKind::kAhead && p.ahead == 0) {
    o.reject("prefetch", "'ahead' needs ahead=K, the ops to look ahead (K above 0)");
  }
  if (p.prefetch != PrefetchKind::kAhead && p.ahead > 0) {
    o.reject("ahead", "only prefetch=ahead looks ahead");
  }
  return std::make_unique<Page>("page", p);
}

std::unique_ptr<Pass> make_reactive(PassOptions& o) {
  PageOptions p;
  p.evict = o.choice("evict", {"lru", "furthest"}) == "furthest" ? EvictKind::kFurthest
                                                                 : EvictKind::kLeastRecent;
  p.headroom = o.share("headroom", 0.0);
  p.keep = o.share("keep", 0.0);
  p.warm = o.flag("warm", false);
  const uint32_t ahead = o.count("ahead", 0);
  if (p.evict == EvictKind::kFurthest && ahead > 0) {
    p.prefetch = PrefetchKind::kAhead;
    p.ahead = ahead;
  }
  return std::make_unique<Page>("reactive", p);
}

std::unique_ptr<Pass> make_belady(PassOptions& o) {
  PageOptions p;
  p.evict = EvictKind::kFurthest;
  p.clock = ClockKind::kTime;
  p.prefetch = PrefetchKind::kLink;
  p.warm = o.flag("warm", true);
  return std::make_unique<Page>("belady", p);
}

}  // namespace tierflow::planner
