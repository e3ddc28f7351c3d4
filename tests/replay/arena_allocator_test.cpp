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

TEST_CASE("small blocks go to the top of the arena, so large ranges stay whole") {
  // 4,096 bytes: blocks of at most 16 bytes (1/256) are small. Large and small blocks
  // interleaved, then the large ones freed: all the free bytes but the small blocks' are
  // one range, where placing every block at the bottom would leave the small ones between.
  ArenaAllocator a(4096);
  const auto l1 = a.allocate(1024, 1024);
  const auto s1 = a.allocate(16, 16);
  const auto l2 = a.allocate(1024, 1024);
  const auto s2 = a.allocate(16, 16);
  REQUIRE(l1);
  REQUIRE(s1);
  REQUIRE(l2);
  REQUIRE(s2);
  CHECK(*l1 == 0);
  CHECK(*l2 == 1024);
  CHECK(*s1 == 4080);
  CHECK(*s2 == 4064);
  a.free(*l1, 1024, 1024);
  a.free(*l2, 1024, 1024);
  CHECK(a.largest_free() == 4064);
  CHECK(*a.allocate(3000, 3000) == 0);
  // High water: the most bytes outside the largest free range (2,080 with both large
  // blocks live; 3,008 + 32 now).
  CHECK(a.high_water() == 4096 - 1056);
  // A small block takes the smallest range that holds it, at its top.
  ArenaAllocator b(4096);
  const auto big = b.allocate(1024, 1024);
  const auto mid = b.allocate(32, 32);
  REQUIRE(big);
  REQUIRE(mid);
  CHECK(*mid == 1024);  // 32 bytes: large in this arena, at the bottom
  b.free(*big, 1024, 1024);
  CHECK(*b.allocate(16, 16) == 1008);  // the 1,024-byte hole below, at its top
}
