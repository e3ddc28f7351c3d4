// A Row is a trial flattened: every input and every metric under a stable column name
// with its unit in the name (`makespan_s`, `tpot_ms`, `device_peak_gib`). The column set
// does not depend on the topology or the workload: per-tier peaks are per tier kind
// (`peak_hbm_gib`, ...) and link traffic per link kind (`pcie_gib`, ...), so rows of
// any study stack into one table. compare prints rows; sweep stores them; the Python API
// returns them as a data frame.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tools/study/study.h"

namespace tierflow::study {

/// An empty cell (a metric that does not apply, e.g. TPOT of a training step) is null.
using Cell = std::variant<std::monostate, int64_t, double, std::string, bool>;

/// What a column holds (its SQLite type in sweep databases: INTEGER, REAL, TEXT, BOOLEAN).
enum class CellType { kInteger, kReal, kText, kBool };
inline constexpr std::array<std::string_view, 4> kCellTypeNames = {"INTEGER", "REAL", "TEXT",
                                                                   "BOOLEAN"};

struct Column {
  std::string name;
  std::string_view description;
  CellType type = CellType::kReal;
};

/// The columns, in order. Stable: a golden test pins them.
const std::vector<Column>& columns();

struct Row {
  std::vector<Cell> cells;  ///< one per column
  [[nodiscard]] const Cell& at(std::string_view column) const;
};

Row row_of(const Trial& t);

/// The header line and one line per row; RFC 4180 quoting; doubles in shortest form.
std::string rows_csv(const std::vector<Row>& rows);
/// One JSON object per line (JSON Lines), keys in column order.
std::string rows_jsonl(const std::vector<Row>& rows);
/// A cell as text: "" for null, shortest round-trip form for doubles.
std::string cell_text(const Cell& c);

/// Any table of cells as CSV (a header of `names`, then one line per row) or JSON Lines
/// (keys in column order; a non-finite double is null): rows_csv and rows_jsonl for
/// study rows, table_csv and table_jsonl (result_db.h) for sweep results.
std::string csv_of(const std::vector<std::string>& names, const std::vector<std::vector<Cell>>& rows);
std::string jsonl_of(const std::vector<std::string>& names, const std::vector<std::vector<Cell>>& rows);

}  // namespace tierflow::study
