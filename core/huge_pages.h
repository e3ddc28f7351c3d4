// Large tables that the reader fills once: memory straight from the kernel, asked to be
// backed by transparent huge pages, so that a table of tens of MB costs a handful of TLB
// entries and page faults instead of thousands.
//
// Glossary
//   huge page  a 2 MiB page (x86-64). Linux backs a region with them when transparent
//              huge pages are enabled for it (`madvise` mode: only regions that ask).
#pragma once

#include <cstddef>

namespace tierflow {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

/// Asks the kernel to back the whole huge pages inside [p, p + bytes) with huge pages.
/// A hint: a no-op where that is not supported, and nothing else changes.
void advise_huge_pages(const void* p, size_t bytes);

/// For a process that plans and simulates many times over (a sweep, a search, a what-if):
/// blocks up to 32 MiB come from the allocator's heap and freed memory stays there for the
/// next plan, instead of each large array being mapped from the kernel, faulted in page by
/// page and unmapped again (glibc's mmap and trim thresholds; a no-op elsewhere). Call
/// once, at the start of main, before other threads run. Where the executables allocate with
/// mimalloc, its own option keeps freed memory instead (core/mimalloc_options.cpp).
void reuse_freed_memory();

/// Zero-filled memory: from 2 MiB on, mapped from the kernel, aligned to and rounded up to
/// huge pages (zeroed on first touch); below, from the allocator. Empty when
/// default-constructed; throws std::bad_alloc when there is no memory.
class ZeroedPages {
 public:
  ZeroedPages() = default;
  explicit ZeroedPages(size_t bytes);
  ~ZeroedPages();
  ZeroedPages(ZeroedPages&& other) noexcept;
  ZeroedPages& operator=(ZeroedPages&& other) noexcept;
  ZeroedPages(const ZeroedPages&) = delete;
  ZeroedPages& operator=(const ZeroedPages&) = delete;

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] size_t size() const { return size_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tierflow
