#include "core/workload_layout.h"

#include <algorithm>
#include <cstring>

#include "core/kinds.h"

namespace tierflow {
namespace {

constexpr size_t kNpos = std::string_view::npos;
/// A line longer than this is not of the layout (and a search never scans far).
constexpr size_t kMaxLine = size_t{1} << 20;
/// How far back from the end of the text the last op line may lie.
constexpr size_t kTailBytes = size_t{64} << 10;

enum class LineKind { kTensor, kOp, kOther };

std::string_view trimmed(std::string_view line) {
  const size_t first = line.find_first_not_of(" \t");
  if (first == kNpos) return {};
  const size_t last = line.find_last_not_of(" \t\r");
  return line.substr(first, last + 1 - first);
}

/// Start of the line after the one holding `at`: text.size() at the end, kNpos when no
/// line break comes within kMaxLine.
size_t next_line(std::string_view text, size_t at) {
  if (at >= text.size()) return text.size();
  const size_t nl = text.substr(at, kMaxLine).find('\n');
  if (nl == kNpos) return at + kMaxLine >= text.size() ? text.size() : kNpos;
  return at + nl + 1;
}

/// The line starting at `start`, without its line break.
std::string_view line_at(std::string_view text, size_t start) {
  if (start >= text.size()) return {};
  const std::string_view rest = text.substr(start, kMaxLine);
  return rest.substr(0, rest.find('\n'));
}

constexpr std::string_view kIdPrefix = "{\"id\": ";

LineKind kind_of(std::string_view line) {
  const std::string_view t = trimmed(line);
  if (!t.starts_with(kIdPrefix)) return LineKind::kOther;
  if (t.find("\"flops\": ") != kNpos) return LineKind::kOp;
  if (t.find("\"origin\": ") != kNpos) return LineKind::kTensor;
  return LineKind::kOther;
}

/// The id a layout line starts with; 0 when it has none.
size_t leading_id(std::string_view line) {
  const std::string_view t = trimmed(line);
  size_t id = 0;
  for (size_t k = kIdPrefix.size(); k < t.size() && k < kIdPrefix.size() + 10; ++k) {
    if (t[k] < '0' || t[k] > '9') break;
    id = id * 10 + static_cast<size_t>(t[k] - '0');
  }
  return id;
}

}  // namespace

WorkloadLayout guess_workload_layout(std::string_view text, size_t tensors_at) {
  WorkloadLayout out;
  // The '[' must end its line, and a tensor line must follow.
  if (tensors_at >= text.size() || text[tensors_at] != '[') return out;
  if (!trimmed(line_at(text, tensors_at + 1)).empty()) return out;
  size_t lo = tensors_at;  // the line after lo is a tensor line
  size_t next = next_line(text, lo);
  if (next == kNpos || kind_of(line_at(text, next)) != LineKind::kTensor) return out;
  // Tensor lines, then lines that are not: find the last tensor line.
  size_t hi = text.size();  // the line after hi is not
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    next = next_line(text, mid);
    if (next == kNpos) return out;
    if (kind_of(line_at(text, next)) == LineKind::kTensor) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const size_t last = next_line(text, lo);
  const size_t close = next_line(text, last);
  if (close == kNpos || trimmed(line_at(text, close)) != "],") return out;
  const size_t open = next_line(text, close);
  if (open == kNpos) return out;
  const std::string_view ops_line = line_at(text, open);
  if (trimmed(ops_line) != "\"ops\": [") return out;
  out.ops_at = open + ops_line.find('[');
  out.tensors = leading_id(line_at(text, last)) + 1;
  // The last op line, scanning back from the end of the text.
  const size_t floor = std::max(out.ops_at, text.size() - std::min(text.size(), kTailBytes));
  size_t end = text.size();
  while (end > floor) {
    const size_t nl = text.rfind('\n', end - 1);
    const size_t start = nl == kNpos || nl < floor ? floor : nl + 1;
    const std::string_view line = text.substr(start, end - start);
    if (kind_of(line) == LineKind::kOp) {
      out.ops = leading_id(line) + 1;
      break;
    }
    if (start == floor) break;
    end = start - 1;
  }
  return out;
}

namespace {

/// A position in the text for the line readers: each step matches what write_workload
/// writes and reports whether it did.
class Cursor {
 public:
  Cursor(std::string_view text, size_t at)
      : p_(text.data() + at), end_(text.data() + text.size()) {}

  [[nodiscard]] const char* at() const { return p_; }

  /// The literal `s`.
  bool lit(std::string_view s) {
    if (static_cast<size_t>(end_ - p_) < s.size() || std::memcmp(p_, s.data(), s.size()) != 0) {
      return false;
    }
    p_ += s.size();
    return true;
  }

  /// A whole number in [0, max] as JsonReader's integer fast path reads it: 1 to 19
  /// digits, no leading zero. What follows is always a literal that is not part of a number.
  bool uint(uint64_t max, uint64_t& v) {
    const char* q = p_;
    const char* stop = end_ - q > 19 ? q + 19 : end_;
    uint64_t acc = 0;
    while (q < stop && *q >= '0' && *q <= '9') {
      acc = acc * 10 + static_cast<uint64_t>(*q - '0');
      ++q;
    }
    if (q == p_ || (*p_ == '0' && q - p_ > 1) || acc > max) return false;
    if (q < end_ && *q >= '0' && *q <= '9') return false;  // a 20th digit
    v = acc;
    p_ = q;
    return true;
  }

  /// A string with no escape and no control character.
  bool str(std::string_view& v) {
    if (p_ == end_ || *p_ != '"') return false;
    const char* q = p_ + 1;
    // Printable ASCII only; anything else goes to the general reader, which checks it.
    while (q < end_ && *q != '"' && *q != '\\' && static_cast<unsigned char>(*q) >= 0x20 &&
           static_cast<unsigned char>(*q) < 0x80) {
      ++q;
    }
    if (q == end_ || *q != '"') return false;
    v = std::string_view(p_ + 1, static_cast<size_t>(q - p_ - 1));
    p_ = q + 1;
    return true;
  }

  /// One of `names`, as a string.
  template <size_t N>
  bool name(const std::array<std::string_view, N>& names, size_t& index) {
    std::string_view v;
    if (!str(v)) return false;
    const auto i = index_of(names, v);
    if (!i) return false;
    index = *i;
    return true;
  }

  /// `[id, id, ...]` of tensor ids, into `ids` with one allocation.
  bool ids(std::vector<uint32_t>& ids, std::vector<uint32_t>& buffer) {
    if (!lit("[")) return false;
    buffer.clear();
    if (!lit("]")) {
      do {
        uint64_t t = 0;
        if (!uint(UINT32_MAX - 1, t)) return false;
        buffer.push_back(static_cast<uint32_t>(t));
      } while (lit(", "));
      if (!lit("]")) return false;
    }
    ids.assign(buffer.begin(), buffer.end());
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

constexpr size_t kFailed = std::string_view::npos;

size_t offset_of(std::string_view text, const Cursor& c) {
  return static_cast<size_t>(c.at() - text.data());
}

/// The head both object kinds share: id (must equal `id`), non-empty name, kind from
/// `kinds`, dtype.
template <class Kind, size_t N>
bool read_head(Cursor& c, size_t id, std::string& name, const std::array<std::string_view, N>& kinds,
               Kind& kind, Dtype& dtype) {
  uint64_t v = 0;
  size_t e = 0;
  std::string_view text;
  if (!c.lit("{\"id\": ") || !c.uint(UINT32_MAX, v) || v != id) return false;
  if (!c.lit(", \"name\": ") || !c.str(text) || text.empty()) return false;
  name = text;
  if (!c.lit(", \"kind\": ") || !c.name(kinds, e)) return false;
  kind = static_cast<Kind>(e);
  if (!c.lit(", \"dtype\": ") || !c.name(kDtypeNames, e)) return false;
  dtype = static_cast<Dtype>(e);
  return true;
}

}  // namespace

size_t read_tensor_line(std::string_view text, size_t at, size_t id, Tensor& t) {
  Cursor c(text, at);
  uint64_t v = 0;
  if (!read_head(c, id, t.name, kTensorKindNames, t.kind, t.dtype)) return kFailed;
  if (!c.lit(", \"bytes\": ") || !c.uint(UINT64_MAX, t.bytes)) return kFailed;
  if (!c.lit(", \"origin\": ")) return kFailed;
  if (c.lit("\"external\"")) {
    t.origin = kExternal;
  } else {
    if (!c.uint(UINT32_MAX - 1, v)) return kFailed;
    t.origin = static_cast<uint32_t>(v);
  }
  if (c.lit(", \"layer\": ")) {
    if (!c.uint(INT32_MAX, v)) return kFailed;
    t.layer = static_cast<int32_t>(v);
  }
  if (!c.lit("}")) return kFailed;
  return offset_of(text, c);
}

size_t read_op_line(std::string_view text, size_t at, size_t id, Op& op,
                    std::vector<uint32_t>& buffer) {
  Cursor c(text, at);
  uint64_t v = 0;
  if (!read_head(c, id, op.name, kOpKindNames, op.kind, op.dtype)) return kFailed;
  // A whole number converts as JsonReader::read_number converts it; anything else (a
  // fraction, an exponent) is left to the general reader.
  if (!c.lit(", \"flops\": ") || !c.uint(UINT64_MAX, v)) return kFailed;
  op.flops = static_cast<double>(v);
  if (!c.lit(", \"bytes\": ") || !c.uint(UINT64_MAX, op.bytes)) return kFailed;
  if (!c.lit(", \"inputs\": ") || !c.ids(op.inputs, buffer)) return kFailed;
  if (!c.lit(", \"outputs\": ") || !c.ids(op.outputs, buffer)) return kFailed;
  if (c.lit(", \"updates\": ") && !c.ids(op.updates, buffer)) return kFailed;
  if (c.lit(", \"workspace\": ") && !c.uint(kMaxTensorBytes, op.workspace)) return kFailed;
  if (c.lit(", \"layer\": ")) {
    if (!c.uint(INT32_MAX, v)) return kFailed;
    op.layer = static_cast<int32_t>(v);
  }
  if (c.lit(", \"collective_bytes\": ") && !c.uint(UINT64_MAX, op.collective_bytes)) {
    return kFailed;
  }
  if (!c.lit("}")) return kFailed;
  return offset_of(text, c);
}

}  // namespace tierflow
