// JSON, study cells and tables as Python objects (convert.h).
#include "tools/python/convert.h"

#include <fmt/format.h>

#include <variant>

#include "core/diagnostics.h"

namespace py = pybind11;

namespace tierflow::python {

int64_t to_count(const py::handle& value, const char* name, int64_t most) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    throw py::type_error(
        fmt::format("{}: expected an int, not {}", name, Py_TYPE(value.ptr())->tp_name));
  }
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || n < 0 || n > most) {
    throw InputError::at(SourcePos{name}, "expected a whole number from 0 to {}, got {}", most,
                         py::str(value).cast<std::string>());
  }
  return n;
}

py::object to_python(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded:
      return py::none();
    case nlohmann::ordered_json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return py::int_(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return py::float_(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      py::list out;
      for (const auto& x : j) out.append(to_python(x));
      return out;
    }
    case nlohmann::ordered_json::value_t::object: {
      py::dict out;
      for (const auto& [k, v] : j.items()) out[py::str(k)] = to_python(v);
      return out;
    }
    case nlohmann::ordered_json::value_t::binary:
      break;
  }
  throw std::runtime_error("a binary JSON value has no Python form");
}

py::object to_python(const study::Cell& c) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return py::none();
        } else if constexpr (std::is_same_v<T, bool>) {
          return py::bool_(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return py::int_(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return py::float_(v);
        } else {
          return py::str(v);
        }
      },
      c);
}

py::tuple table_to_python(const std::vector<std::string>& names,
                          const std::vector<std::string>& types,
                          const std::vector<std::vector<study::Cell>>& rows) {
  py::list out_rows;
  for (const auto& r : rows) {
    py::list cells;
    for (const study::Cell& c : r) cells.append(to_python(c));
    out_rows.append(std::move(cells));
  }
  return py::make_tuple(py::cast(names), py::cast(types), std::move(out_rows));
}

}  // namespace tierflow::python
