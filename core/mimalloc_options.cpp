// Compiled into the executables that allocate with mimalloc (tierflow_link_allocator in
// CMakeLists.txt), never into the libraries: a search or a sweep frees and allocates its
// large arrays again within milliseconds, so freed memory is kept for a second before it
// is returned to the kernel (mimalloc's default, 25 ms, had it faulted in again page by
// page: about 0.4 s of system time in the sweep benchmark). The environment's
// MIMALLOC_DECOMMIT_DELAY still overrides it.
#include <mimalloc.h>

namespace {

const bool kDecommitDelaySet = [] {
  mi_option_set_default(mi_option_decommit_delay, 1000);
  return true;
}();

}  // namespace
