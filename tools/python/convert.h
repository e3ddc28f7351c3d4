// Values crossing into Python: JSON documents (hw show, trace info, the simulator's report,
// what-if answers) as dicts and lists, study cells as int, float, str, bool or None, and
// tables as (column names, rows).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <string>
#include <vector>

#include "tools/study/row.h"

namespace tierflow::python {

/// Objects become dicts (key order kept), arrays lists, numbers int or float.
pybind11::object to_python(const nlohmann::ordered_json& j);

/// A whole number from 0 to `most` given as the argument `name`: anything but an int (bool
/// included) is a TypeError naming it, an int out of range an InputError at `name` (as
/// tierflow/__init__.py's _count(), for the methods bound without a Python wrapper).
int64_t to_count(const pybind11::handle& value, const char* name, int64_t most);

/// int, float, str, bool; null is None.
pybind11::object to_python(const study::Cell& c);

/// A table for tierflow/__init__.py to make a DataFrame of: (names, types, rows), the types
/// as kCellTypeNames ("INTEGER", "REAL", "TEXT", "BOOLEAN") or "" where only the cells say.
pybind11::tuple table_to_python(const std::vector<std::string>& names,
                                const std::vector<std::string>& types,
                                const std::vector<std::vector<study::Cell>>& rows);

}  // namespace tierflow::python
