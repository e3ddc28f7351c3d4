// The HTML page of a serving run (`tierflow serve --report`): the summary as cards and
// facts, the distributions of TTFT and TPOT (CDFs), the prompt tokens each cache level
// served, each level's blocks over time against its capacity, each replica's running and
// waiting sequences over time, and the fabric's resources. Self-contained (inline SVG, no
// network), the style of `tierflow report`; the same run gives the same page.
#pragma once

#include <string>

#include "tools/study/serve.h"

namespace tierflow::exporter {

/// The page; `x.result.series` (ServeOptions::record_series) draws the plots over time.
std::string serve_report_html(const study::ServeStudy& x);

}  // namespace tierflow::exporter
