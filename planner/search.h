// The tierflow policy's search over its portfolio of pipelines (ARCHITECTURE §8); one
// pipeline runs through run_pipeline() (planner/outcome.h).
//
// Glossary
//   portfolio  the pipelines the tierflow policy tries, in order: between plans that score
//              the same, the earlier pipeline's is kept.
//   prefix     a pipeline's leading passes that only analyse, reorder and place (reorder,
//              place, liveness). Pipelines with the same prefix run it once and go on from
//              copies of its state; prefixes that end in the same state count as one, and a
//              pipeline whose prefix state and remaining passes repeat an earlier one's
//              makes the same plan, so it is not run again.
//   selection  the passes between the prefix and the last run of insert, schedule and
//              verify (which never change what is fetched): what the plan will copy is
//              known once they end.
//   gate       decides before scoring whether a plan could win, in this order: not when
//              its copies alone (bytes fetched over the ingress bound, or the compute)
//              take at least the best makespan so far; not when it repeats a plan already
//              scored. The copies rule applies as soon as the selection ends, so such a
//              pipeline is not materialized, and inside a selection pass that honours
//              PassContext::limits (SearchLimits), which stops once it has planned that much.
//   probe      on one thread, the entry PlanRequest::hint names, run and scored before the
//              others: an entry before it is ruled out when its copies alone take longer
//              than the probe's makespan (it could not be the best), one after it when they
//              take at least as long (the probe, earlier, would win the tie). The probe is
//              merged at its turn like any entry, so the plan chosen is the same with or
//              without it. With its makespan known, every later score is a simulation
//              that stops once the plan surely ends after it (the time so far plus the
//              device prefetches not yet begun over the ingress bound: SimOptions::
//              stop_after): that plan cannot win either.
//   start      the state a prefix ends in, with its bounds: from PlanRequest::start_memo
//              when plans of the same workload and topology share them (a sweep's points),
//              else the search's own (planner/outcome.h, StartMemo).
//   variant    an entry that varies an earlier one's selection by leaving more of the
//              budget free (PortfolioEntry::variant_of). Variants run after every other
//              entry is merged, each unless the entry it varies is ruled out by its copies
//              alone against the best plan found (leaving more room usually fetches more: a
//              rule of thumb, not a bound; planner/planner.h), and
//              are merged as if in portfolio order: the earlier of equal plans is kept. The
//              rule depends on the final best only, so it is the same with any probe or none;
//              a variant is never the probe.
//   trial      one portfolio pipeline's run: its state, context and outcome, kept while it
//              may still be the best, so that the search refines the best from where its
//              pipeline stopped instead of running it again.
//
//   entries:  [0][1][2][3] | [4][5][6][7][8][9] | [10][11] ...
//             merged: the     | taken by the threads, | not started
//             gate uses their | up to 2 x threads + 2 |
//             best so far     | beyond the merged ones|
//
// Pipelines run on up to PlanRequest::threads threads and, when the evaluator is
// thread-safe, plans the gate lets through are scored on the thread that made them. The
// gate and the choice of the best are applied in portfolio order as if one thread ran
// everything, so the result does not depend on the number of threads: a thread only
// skips work the gate will surely skip (the best only gets better), and a trial that a
// plan scored but not merged yet would likely rule out waits, selected, for its turn.
//
// Cut: on a workload of PlanRequest::search_cut_ops ops or more (kSearchCutOps), where the
// whole portfolio would take minutes and gigabytes, only the entries marked `large` run;
// the others are listed as not run, and a note says why. The cut depends on the workload
// alone, so the plan is the same on every machine and every run. A cut search frees the
// plan of each trial it scored ahead of its turn (EmittedPlan::shed) and emits the best's
// again.
#pragma once

#include <span>
#include <string_view>

#include "planner/planner.h"

namespace tierflow::planner {

/// The tierflow policy at `budget`: every pipeline of `portfolio`, the plans the gate lets
/// through scored with req.evaluator (required), the best kept and refined. Its `portfolio`
/// lists what was tried and why plans were not scored.
PlanOutcome search_portfolio(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                             std::span<const PortfolioEntry> portfolio, uint64_t budget);

}  // namespace tierflow::planner
