// The simulator's report in three forms: an aligned table for people, JSON and CSV for
// programs. All three are deterministic: the same result gives the same bytes.
//
// JSON: {"format": "tierflow.report/1", "plan", "topology", "makespan_ps", "error",
//        "devices": [...], "tiers": [...], "resources": [...], "transfers": [...]}
//   times are integer picoseconds (keys end in _ps), sizes integer bytes, rates bytes/s.
// CSV:  one row per figure, `section,name,metric,value` (tidy form for sweeps and
//       spreadsheets); transfers_csv() writes one row per transfer.
#pragma once

#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "sim/simulator.h"

namespace tierflow::sim {

struct ReportContext {
  const Plan& plan;
  const Workload& workload;
  const hw::Topology& topology;
  std::string plan_file;
  /// The topology overrides the run applied: the plan's own (topology.set), then the
  /// command's --set. The table names them under its first line.
  std::vector<std::string> sets = {};
};

std::string report_table(const SimResult& r, const ReportContext& c);
std::string report_json(const SimResult& r, const ReportContext& c, bool with_transfers);
std::string report_csv(const SimResult& r, const ReportContext& c);
std::string transfers_csv(const SimResult& r, const ReportContext& c);

/// "plan rule", "capacity", "deadlock", "topology".
std::string_view error_kind_name(SimError::Kind k);

}  // namespace tierflow::sim
