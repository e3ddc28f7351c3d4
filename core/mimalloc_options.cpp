// Compiled into the executables that allocate with mimalloc (tierflow_link_allocator in
// CMakeLists.txt), never into the libraries: a search or a sweep frees and allocates its
// large arrays again within milliseconds, so freed memory is kept for a second before it
// is returned to the kernel (mimalloc's default, 25 ms, had it faulted in again page by
// page: about 0.4 s of system time in the sweep benchmark). The environment's
// MIMALLOC_DECOMMIT_DELAY still overrides it.
//
// It also defines operator new and delete on mimalloc: mimalloc's own operator new aborts
// the process when memory runs out (it finds no new-handler from C), where C++ throws
// std::bad_alloc, which the CLI reports as an error naming the cause (tools/cli/main.cpp).
#include <cstddef>
#include <mimalloc.h>
#include <new>

namespace {

const bool kDecommitDelaySet = [] {
  mi_option_set_default(mi_option_decommit_delay, 1000);
  return true;
}();

}  // namespace

namespace {

void* allocate(std::size_t n) {
  void* p = mi_new_nothrow(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* allocate_aligned(std::size_t n, std::align_val_t a) {
  void* p = mi_new_aligned_nothrow(n, static_cast<std::size_t>(a));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) {
  return allocate(n);
}
void* operator new[](std::size_t n) {
  return allocate(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate_aligned(n, a);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return mi_new_nothrow(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return mi_new_nothrow(n);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return mi_new_aligned_nothrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return mi_new_aligned_nothrow(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  mi_free(p);
}
void operator delete[](void* p) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  mi_free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  mi_free(p);
}
