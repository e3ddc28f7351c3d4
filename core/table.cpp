#include "core/table.h"

#include <algorithm>

#include "core/diagnostics.h"

namespace tierflow {

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0U) != 0x80U ? 1 : 0;
  return n;
}

Table::Table(std::vector<std::string> headers, std::vector<Align> align)
    : headers_(std::move(headers)), align_(std::move(align)) {
  align_.resize(headers_.size(), Align::kLeft);
}

void Table::add_row(std::vector<std::string> cells) {
  TF_ASSERT(cells.size() == headers_.size(), "row has {} cells, table has {} columns", cells.size(),
            headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render(int indent) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = display_width(headers_[c]);
    for (const auto& r : rows_) width[c] = std::max(width[c], display_width(r[c]));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l(static_cast<size_t>(indent), ' ');
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = width[c] - display_width(cells[c]);
      if (align_[c] == Align::kRight) l.append(pad, ' ');
      l += cells[c];
      if (align_[c] == Align::kLeft && c + 1 < cells.size()) l.append(pad, ' ');
      if (c + 1 < cells.size()) l += "  ";
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l;
    out += '\n';
  };
  line(headers_);
  std::vector<std::string> rule;
  rule.reserve(width.size());
  for (size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& r : rows_) line(r);
  return out;
}

std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + "\"";
}

}  // namespace tierflow
