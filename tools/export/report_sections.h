// The sections of one run on the report page (tools/export/html_report.h): activity per
// device, memory per tier instance, rate per link direction, exposed waits. Each returns
// HTML; every name in it is escaped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/export/html_report.h"
#include "tools/export/plot_series.h"
#include "tools/export/svg_plot.h"

namespace tierflow::exporter {

inline constexpr uint32_t kNoTransfer = UINT32_MAX;

/// Sizes and times as the page prints them: "74.5GiB", "8.395ms" (core/units.h).
std::string bytes_text(uint64_t b);
std::string time_text(Time ps);

/// What the plots of one run share: the time window and its buckets.
struct RunView {
  std::string id;  ///< prefix of the run's HTML ids ("run1")
  Time end = 1;    ///< the window is [0, end)
  Buckets buckets;
  Unit time;  ///< unit of the time axes
  std::string time_title;
  size_t device_tier = SIZE_MAX;  ///< topology tier of the plan's device tier
  uint64_t budget = 0;            ///< device bytes per program the plan was made for; 0: none
};
RunView make_view(const ReportRun& r, const ReportOptions& o, std::string id);

/// One exposed wait (see html_report.h).
struct Wait {
  uint32_t program = 0;
  uint32_t step = 0;  ///< the compute step that waited
  Time start = 0, end = 0;
  uint32_t transfer = kNoTransfer;  ///< index into SimResult::transfers; none: memory
};
/// Every exposed wait, longest first (ties: earlier first, then program, then step).
std::vector<Wait> exposed_waits(const ReportRun& r);

/// The colour of kind slot `kind` (sim/series.h), the same in every plot.
std::string_view kind_color(size_t kind);
/// A legend of the kind slots in `kinds` (bit per slot).
std::string kind_legend(uint32_t kinds);

std::string activity_section(const ReportRun& r, const RunView& v, const std::vector<Wait>& waits,
                             const ReportOptions& o);
std::string memory_section(const ReportRun& r, const RunView& v, const ReportOptions& o);
std::string links_section(const ReportRun& r, const RunView& v, const ReportOptions& o);
std::string waits_section(const ReportRun& r, const RunView& v, const std::vector<Wait>& waits,
                          const ReportOptions& o);

}  // namespace tierflow::exporter
