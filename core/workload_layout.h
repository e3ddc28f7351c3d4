// write_workload's layout, which the reader takes shortcuts through: one tensor or op per
// line, `"ops": [` on a line of its own after the tensors, keys in documented order with
// one space after ':' and ','. Where its sections are (a guess that the reader confirms
// or ignores) and how to read one of its objects without the general JSON reader (a
// shortcut that gives up on anything else, for the general reader to read and report).
//
// Glossary
//   layout line  a line of that layout: a tensor (`{"id": ..., "origin": ...}`), an op
//                (`{"id": ..., "flops": ...}`), or anything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/workload.h"

namespace tierflow {

struct WorkloadLayout {
  size_t ops_at = std::string_view::npos;  ///< offset of the '[' that opens "ops"
  size_t tensors = 0;                      ///< id of the last tensor line + 1
  size_t ops = 0;                          ///< id of the last op line + 1; 0 = not seen
};

/// The layout after `tensors_at`, the offset of the '[' that opens "tensors": a binary
/// search over lines for the last tensor line, then the two lines that must follow it
/// (`],` and `"ops": [`), then the last op line near the end of `text`. Takes
/// microseconds; `ops_at` is npos when the text does not look like that layout.
WorkloadLayout guess_workload_layout(std::string_view text, size_t tensors_at);

/// Reads tensor `id` from the '{' at `at` when it is written exactly as write_workload
/// writes it and every value is valid: the offset after its '}'. Otherwise npos, and `t`
/// holds part of it; the general reader then reads it again, and reads it the same way
/// (this accepts nothing that it would read differently or reject).
size_t read_tensor_line(std::string_view text, size_t at, size_t id, Tensor& t);
/// The same for op `id`; `buffer` is scratch space for id lists.
size_t read_op_line(std::string_view text, size_t at, size_t id, Op& op,
                    std::vector<uint32_t>& buffer);

}  // namespace tierflow
