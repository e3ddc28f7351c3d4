// `tierflow trace info`: what a workload holds, in numbers people check against papers.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/workload.h"

namespace tierflow::traces {

/// The most largest tensors `top` may ask for (`trace info --top`, Workload.info).
inline constexpr int kMaxInfoTop = 1'000'000;

struct InfoOptions {
  int top = 10;  ///< how many of the largest tensors to list
};

std::string info_text(const Workload& w, const InfoOptions& o = {});
nlohmann::ordered_json info_json(const Workload& w, const InfoOptions& o = {});

}  // namespace tierflow::traces
