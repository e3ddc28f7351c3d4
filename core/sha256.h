// SHA-256 (FIPS 180-4), used to tie a plan to the exact workload and topology bytes.
#pragma once

#include <string>
#include <string_view>

namespace tierflow {

/// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace tierflow
