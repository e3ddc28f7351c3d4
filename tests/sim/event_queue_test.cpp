// EventQueue: (time, sequence) order, lazy cancellation, next_time, and a seeded stress.
#include "sim/kernel/event_queue.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <optional>
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

TEST_CASE("matches a reference (time, seq) heap when events are scheduled after a look-ahead") {
  // The simulator asks next_time() after every event and may then schedule events between
  // now and that time (a re-solve at the end of an instant): those must still come out
  // first. Equal times are frequent here (times drawn from a few values) and one event in
  // four is cancelled.
  std::mt19937_64 rng(2024);
  EventQueue q;
  struct Ref {
    Time time;
    uint64_t seq;
    bool operator>(const Ref& o) const { return time > o.time || (time == o.time && seq > o.seq); }
  };
  std::vector<Ref> ref;  // min-heap via std::greater
  std::vector<bool> cancelled;
  auto add = [&](Time at) {
    const uint64_t id = q.schedule(at, 0, static_cast<uint32_t>(cancelled.size()));
    cancelled.push_back(false);
    ref.push_back({at, id});
    std::push_heap(ref.begin(), ref.end(), std::greater<>());
    if (rng() % 4 == 0) {
      q.cancel(id);
      cancelled[id] = true;
    }
  };
  auto ref_next = [&]() -> std::optional<Ref> {
    while (!ref.empty() && cancelled[ref.front().seq]) {
      std::pop_heap(ref.begin(), ref.end(), std::greater<>());
      ref.pop_back();
    }
    if (ref.empty()) return std::nullopt;
    return ref.front();
  };
  for (int i = 0; i < 3000; ++i) add(static_cast<Time>(rng() % 64) * 1000);
  Event e;
  size_t popped = 0;
  for (;;) {
    const auto expect = ref_next();
    const auto next = q.next_time();
    REQUIRE(next.has_value() == expect.has_value());
    if (!expect) break;
    CHECK(*next == expect->time);
    // Schedule a few events between now and the look-ahead time, some at now.
    if (popped < 20000 && rng() % 3 == 0) {
      const Time gap = *next - q.now();
      for (int k = 0; k < 3; ++k) {
        add(q.now() + (gap > 0 ? static_cast<Time>(rng() % static_cast<uint64_t>(gap)) : 0));
      }
    }
    const auto want = ref_next();
    REQUIRE(q.pop(e));
    CHECK(e.time == want->time);
    CHECK(e.seq == want->seq);
    std::pop_heap(ref.begin(), ref.end(), std::greater<>());
    ref.pop_back();
    ++popped;
    if (popped < 20000 && rng() % 2 == 0) {
      add(q.now() + static_cast<Time>(rng() % 8) * 500);
    }
  }
  CHECK_FALSE(q.pop(e));
  CHECK(q.size() == 0);
}
