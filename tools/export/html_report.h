// `tierflow report`: one self-contained HTML page about one or more simulated plans. It
// opens without a network (no scripts, fonts or images from elsewhere: CSS and SVG
// inline) and renders without JavaScript.
//
// Glossary
//   run          one plan, its workload and topology (the plan's overrides, then the
//                user's), simulated with time series (sim/series.h). A run that stops (a
//                tier over capacity, a broken rule) is still a run: the page shows what
//                happened up to the stop and the error above everything else.
//   exposed wait a compute step idle because of one transfer (its event had not landed)
//                or because its outputs and workspace did not fit (waiting for memory).
//   comparison   with two or more runs: makespan, device peak, bytes moved and stall of
//                each, as a table and bar charts, before each run's own sections.
//
// Sections of each run: summary (plan, workload, topology with overrides, policy,
// makespan, bounds and gap when the plan's meta carries them, stalls), activity per device
// (compute, copies, waits), memory per tier instance stacked by tensor kind with its
// capacity, rate per link direction with its capacity, and the exposed waits, longest
// first. Time series are cut into one bucket per pixel (tools/export/plot_series.h), so
// the page stays small however long the plan. The same runs give the same bytes.
#pragma once

#include <string>
#include <vector>

#include "core/plan_json.h"
#include "hw_models/topology.h"
#include "sim/series.h"
#include "sim/simulator.h"

namespace tierflow::exporter {

struct ReportRun {
  std::string file;  ///< the plan file, as given
  LoadedPlan plan;
  hw::Topology topology;
  std::vector<std::string> sets;  ///< every override applied: the plan's, then the user's
  sim::SimResult result;
  sim::SimSeries series;
  /// The plan as bound to the topology (hw/bind.h): its device tier (SIZE_MAX when the
  /// plan does not bind) and the budget each program may hold (0: none recorded).
  size_t device_tier = SIZE_MAX;
  uint64_t budget = 0;
};

/// Reads the plan at `path` (rules left to the simulator), loads its topology (`hw`, or the
/// file the plan references; the plan's overrides, then `sets`) and simulates it with
/// time series and every transfer. Throws InputError when a file or override is wrong.
ReportRun run_for_report(const std::string& path, const std::string& hw,
                         const std::vector<std::string>& sets, sim::OnFull on_full);
/// Binds the run's plan to its topology and simulates it (what run_for_report does once
/// the files are read).
void simulate_for_report(ReportRun& r, sim::OnFull on_full);

struct ReportOptions {
  double width = 1000;      ///< plot width in CSS pixels, also the number of time buckets
  size_t top_waits = 40;    ///< rows of the exposed-wait table
  size_t max_plots = 12;    ///< tier instances and link directions drawn, each
  size_t max_devices = 16;  ///< devices in the activity strips
};

/// The style every report page carries (system fonts, nothing fetched).
extern const std::string_view kReportCss;

/// The page. Meta keys read from a plan, when present: `policy`, `pipeline`, `budget`,
/// and the bounds `bounds_makespan_ps`, `bounds_residency`, `bounds_traffic_bytes`,
/// `bounds_compute_ps` (numbers).
std::string html_report(const std::vector<ReportRun>& runs, const ReportOptions& o = {});

/// Exit code of a report over `runs` (core ExitCode): 0 when every run finished, 1 when
/// one stopped on a tier over capacity, 2 when one broke a plan rule, deadlocked or did
/// not match its topology.
int report_exit_code(const std::vector<ReportRun>& runs);

}  // namespace tierflow::exporter
