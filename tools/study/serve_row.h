// A serving run flattened into a row, as a study Row is for a plan (tools/study/row.h):
// the settings and the summary's measures under stable column names with their units
// (`ttft_p99_s`, `tpot_p50_ms`, `hit_ddr_share`), the same set whatever the topology or
// the trace, so the rows of a serving sweep stack into one table. Hits are per tier kind
// (`hit_hbm_share`, `hit_ddr_share`, ...), as a plan row's peaks are.
#pragma once

#include <string>
#include <vector>

#include "tools/study/row.h"
#include "tools/study/serve.h"

namespace tierflow::study {

/// The serving columns, in order. Stable: a golden test pins them.
const std::vector<Column>& serve_columns();

/// What a serving point came to.
struct ServeOutcome {
  ServeSettings settings;        ///< as the point set them
  const ServeSetup* setup = nullptr;  ///< prepared (null when preparing failed)
  const ServeStudy* run = nullptr;    ///< the run (null when it did not run)
  std::string status = "ok";     ///< ok, infeasible (the model does not fit) or failed
  std::string reason;            ///< why not ok
};

Row serve_row_of(const ServeOutcome& o);

}  // namespace tierflow::study
