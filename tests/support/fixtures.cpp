#include "tests/support/fixtures.h"

#include "hw_models/loader.h"

namespace tierflow::testing {

hw::Topology unit_hw(std::vector<std::string> sets) {
  return hw::load_topology(std::string(TIERFLOW_SOURCE_DIR) + "/tests/fixtures/unit_hw.yaml",
                           hw::LoadOptions{std::move(sets), false});
}

}  // namespace tierflow::testing
