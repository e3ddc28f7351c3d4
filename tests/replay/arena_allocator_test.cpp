// The replay arena's allocator: best fit, coalescing, and exact bytes-in-use peaks.
#include "tools/replay/arena_allocator.h"

#include <doctest/doctest.h>

using tierflow::replay::ArenaAllocator;

TEST_CASE("best fit takes the smallest free range; frees coalesce both ways") {
  // Arena of 256 bytes, blocks of 64, 32, 64, 96 (footprints: multiples of 16).
  //   [a 0..64)[b 64..96)[c 96..160)[d 160..256)
  ArenaAllocator a(256);
  const auto x = a.allocate(64, 64);
  const auto b = a.allocate(32, 32);
  const auto c = a.allocate(64, 64);
  const auto d = a.allocate(96, 96);
  REQUIRE(x);
  REQUIRE(b);
  REQUIRE(c);
  REQUIRE(d);
  CHECK(*d == 160);
  CHECK_FALSE(a.allocate(1, 1));  // full
  CHECK(a.in_use() == 256);
  // Free b (32 at 64) and d (96 at 160): a 32-byte request takes b's hole, not d's.
  a.free(*b, 32, 32);
  a.free(*d, 96, 96);
  CHECK(a.free_ranges() == 2);
  CHECK(*a.allocate(20, 20) == 64);
  a.free(64, 20, 20);
  // Freeing c joins [64, 96), [96, 160) and [160, 256) into one range.
  a.free(*c, 64, 64);
  CHECK(a.free_ranges() == 1);
  CHECK(a.largest_free() == 192);
  CHECK(*a.allocate(192, 192) == 64);
  CHECK(a.peak() == 256);
  CHECK(a.logical_peak() == 256);
}

TEST_CASE("in-use bytes count the sizes asked for, not the aligned footprints") {
  ArenaAllocator a(1024);
  const auto x = a.allocate(10, 1000);  // 10 arena bytes standing for 1000 plan bytes
  const auto y = a.allocate(7, 700);
  REQUIRE(x);
  REQUIRE(y);
  CHECK(*y == 16);  // aligned after x's 16-byte footprint
  CHECK(a.in_use() == 17);
  CHECK(a.logical_in_use() == 1700);
  a.free(*x, 10, 1000);
  CHECK(a.in_use() == 7);
  CHECK(a.peak() == 17);
  CHECK(a.logical_peak() == 1700);
  // A zero-byte block takes no range.
  CHECK(*a.allocate(0, 0) == 0);
  CHECK(a.free_bytes() == 1024 - 16);
  CHECK(a.high_water() == 32);
}
