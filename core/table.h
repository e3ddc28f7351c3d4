// Plain-text tables for terminal reports: aligned columns, a header rule, no colours.
#pragma once

#include <string>
#include <vector>

namespace tierflow {

class Table {
 public:
  enum class Align { kLeft, kRight };

  /// Columns are named; `align` defaults to left for every column.
  explicit Table(std::vector<std::string> headers, std::vector<Align> align = {});

  void add_row(std::vector<std::string> cells);
  [[nodiscard]] bool empty() const { return rows_.empty(); }

  /// Renders with `indent` spaces before each line and two spaces between columns;
  /// trailing spaces are trimmed. Column widths count UTF-8 code points.
  [[nodiscard]] std::string render(int indent = 2) const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

/// Number of UTF-8 code points in `s` (display width for the text we print).
size_t display_width(const std::string& s);

/// A CSV field, quoted when it holds a comma, quote or newline (RFC 4180).
std::string csv_field(std::string_view s);

}  // namespace tierflow
