// `tierflow hw describe`: the topology schema, generated from the declared parameters.
#pragma once

#include <string>

namespace tierflow::cli {

/// Every object type and field, as aligned text for a terminal.
std::string describe_text();
/// The same as the Markdown of docs/hardware.md (a test keeps the two identical).
std::string describe_markdown();

}  // namespace tierflow::cli
