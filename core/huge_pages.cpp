#include "core/huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <new>
#include <sys/mman.h>
#include <utility>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tierflow {

void reuse_freed_memory() {
#if defined(__GLIBC__)
  // glibc's largest mmap threshold (half its 64 MiB heap size on 64-bit systems); fixing it
  // also stops the threshold from moving with what was freed.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Free memory at the top of the heap is returned to the kernel only past this much.
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

void advise_huge_pages(const void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t last = (begin + bytes) & ~(kHugePageBytes - 1);
  if (first >= last) return;
  // Advice only: a kernel without transparent huge pages answers EINVAL, which changes
  // nothing.
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

ZeroedPages::ZeroedPages(size_t bytes) {
  if (bytes == 0) return;
  if (bytes < kHugePageBytes) {
    // Too small for a huge page: the allocator's zeroed memory, without a system call.
    data_ = std::calloc(bytes, 1);
    if (data_ == nullptr) throw std::bad_alloc();
    size_ = bytes;
    return;
  }
  const size_t size = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  // Over-allocate by one huge page, then give back what lies outside the aligned range.
  const size_t mapped = size + kHugePageBytes;
  void* m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (aligned > begin) ::munmap(m, aligned - begin);
  const uintptr_t tail = aligned + size;
  if (begin + mapped > tail) ::munmap(reinterpret_cast<void*>(tail), begin + mapped - tail);
  data_ = reinterpret_cast<void*>(aligned);
  size_ = size;
  advise_huge_pages(data_, size_);
}

void ZeroedPages::release() {
  if (data_ == nullptr) return;
  if (size_ < kHugePageBytes) {
    std::free(data_);
  } else {
    ::munmap(data_, size_);
  }
  data_ = nullptr;
  size_ = 0;
}

ZeroedPages::~ZeroedPages() {
  release();
}

ZeroedPages::ZeroedPages(ZeroedPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ZeroedPages& ZeroedPages::operator=(ZeroedPages&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace tierflow
