// EventQueue: (time, sequence) order, lazy cancellation, next_time, and a seeded stress.
#include "sim/kernel/event_queue.h"

#include <doctest/doctest.h>

#include <random>
#include <vector>

using namespace tierflow::sim;

TEST_CASE("events come out by time, equal times in scheduling order") {
  // Scheduled:  (5, tag 0)  (3, tag 1)  (5, tag 2)  (3, tag 3)
  // Popped:     (3, tag 1)  (3, tag 3)  (5, tag 0)  (5, tag 2)
  EventQueue q;
  CHECK(q.schedule(5, 0, 10) == 0);
  CHECK(q.schedule(3, 1, 11) == 1);
  CHECK(q.schedule(5, 2, 12) == 2);
  CHECK(q.schedule(3, 3, 13) == 3);
  CHECK(q.scheduled() == 4);
  std::vector<uint32_t> tags, data;
  std::vector<Time> times;
  Event e;
  while (q.pop(e)) {
    tags.push_back(e.tag);
    data.push_back(e.data);
    times.push_back(e.time);
    CHECK(q.now() == e.time);
  }
  CHECK(tags == std::vector<uint32_t>{1, 3, 0, 2});
  CHECK(data == std::vector<uint32_t>{11, 13, 10, 12});
  CHECK(times == std::vector<Time>{3, 3, 5, 5});
  CHECK(q.size() == 0);
}

TEST_CASE("a cancelled event is skipped") {
  EventQueue q;
  const uint64_t a = q.schedule(1, 0, 0);
  const uint64_t b = q.schedule(2, 1, 0);
  const uint64_t c = q.schedule(3, 2, 0);
  (void)a;
  (void)c;
  q.cancel(b);
  CHECK(q.size() == 3);  // lazy: still in the heap
  Event e;
  REQUIRE(q.pop(e));
  CHECK(e.tag == 0);
  REQUIRE(q.pop(e));
  CHECK(e.tag == 2);  // tag 1 (time 2) never surfaces
  CHECK(e.time == 3);
  CHECK_FALSE(q.pop(e));
}

TEST_CASE("next_time looks past cancelled events without advancing now") {
  EventQueue q;
  CHECK_FALSE(q.next_time().has_value());
  const uint64_t first = q.schedule(10, 0, 0);
  q.schedule(20, 1, 0);
  CHECK(q.next_time() == Time{10});
  q.cancel(first);
  CHECK(q.next_time() == Time{20});
  CHECK(q.now() == 0);
  Event e;
  REQUIRE(q.pop(e));
  CHECK(e.tag == 1);
  CHECK(q.now() == 20);
  CHECK_FALSE(q.next_time().has_value());
  // Scheduling at now is allowed; it comes out next.
  q.schedule(20, 2, 0);
  CHECK(q.next_time() == Time{20});
}

TEST_CASE("many seeded random events come out sorted by (time, seq), cancelled ones never") {
  std::mt19937_64 rng(12345);
  EventQueue q;
  std::vector<bool> cancelled;
  size_t live = 0;
  // Schedule 2000 events, cancel about one in five, and keep scheduling (never before
  // now) while popping, as a model would.
  auto add = [&](Time at) {
    const uint64_t id = q.schedule(at, 0, 0);
    cancelled.push_back(false);
    ++live;
    if (rng() % 5 == 0) {
      q.cancel(id);
      cancelled[id] = true;
      --live;
    }
  };
  for (int i = 0; i < 2000; ++i) add(static_cast<Time>(rng() % 1000));
  Event e;
  Time last_time = -1;
  uint64_t last_seq = 0;
  size_t popped = 0;
  int extra = 0;
  while (q.pop(e)) {
    CHECK_FALSE(cancelled[e.seq]);
    const bool ordered = e.time > last_time || (e.time == last_time && e.seq > last_seq);
    CHECK(ordered);
    last_time = e.time;
    last_seq = e.seq;
    ++popped;
    if (extra < 500) {
      ++extra;
      add(q.now() + static_cast<Time>(rng() % 50));
    }
  }
  CHECK(popped == live);
  CHECK(q.size() == 0);
}
