// The column sets of study and serving rows pinned by golden files: one column a line, its
// name and type. TIERFLOW_UPDATE_GOLDEN=1 rewrites the file instead of comparing; a change
// there is a change of a sweep database's schema.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/study/row.h"

namespace tierflow::study {

inline void check_golden_columns(const std::vector<Column>& columns, const std::string& path) {
  std::string names;
  for (const Column& c : columns) {
    names += c.name + " " + std::string(kCellTypeNames[static_cast<size_t>(c.type)]) + "\n";
  }
  if (std::getenv("TIERFLOW_UPDATE_GOLDEN") != nullptr) std::ofstream(path) << names;
  std::ifstream in(path);
  std::stringstream want;
  want << in.rdbuf();
  CHECK(names == want.str());
}

}  // namespace tierflow::study
