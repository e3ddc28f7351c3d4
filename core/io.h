// Output files that never lose user data: written to a temporary file beside the
// destination, flushed, then renamed over it.
#pragma once

#include <string>
#include <string_view>

namespace tierflow {

/// Writes `content` to `path` atomically. "-" means standard output. Throws InputError
/// (position: the path) when the directory is not writable.
void write_file_atomic(const std::string& path, std::string_view content);

}  // namespace tierflow
