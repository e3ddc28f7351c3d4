// FlowNetwork: max-min fair rates by progressive filling, completion times, and
// re-solving only the connected component. Every case states its system (resources
// with capacities, flows with the resources they cross) and the expected rates.
#include "sim/models/flows.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using namespace tierflow::sim;

namespace {

constexpr double kGBps = 1e9;  // 1 GB/s = 1 byte per ns
constexpr Time kNs = 1000;     // ps

bool contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

TEST_CASE("one flow alone takes the whole resource") {
  // System: R (1 GB/s); flow A over {R}, 1000 B, started at 0.
  // Rates:  A = 1 GB/s.  Completion: 1000 B / 1 B/ns = 1000 ns.
  FlowNetwork net;
  const uint32_t r = net.add_resource(1 * kGBps);
  const std::vector<uint32_t> path = {r};
  const uint32_t a = net.start(path, 1000, 0);
  CHECK(net.dirty());
  net.solve(0);
  CHECK_FALSE(net.dirty());
  CHECK(net.rate(a) == doctest::Approx(1 * kGBps));
  CHECK(net.completion(a) == 1000 * kNs);
  CHECK(net.load(r) == doctest::Approx(1 * kGBps));
  CHECK(net.active(r) == 1);
  CHECK(net.changed_flows() == std::vector<uint32_t>{a});
}

TEST_CASE("two flows on one resource get half each") {
  // System: R (1 GB/s); A over {R} 100 B, B over {R} 300 B, both started at 0.
  // Rates:  A = B = 0.5 GB/s (R's share 1/2).  Completion: A 200 ns, B 600 ns.
  FlowNetwork net;
  const uint32_t r = net.add_resource(1 * kGBps);
  const std::vector<uint32_t> path = {r};
  const uint32_t a = net.start(path, 100, 0);
  const uint32_t b = net.start(path, 300, 0);
  net.solve(0);
  CHECK(net.rate(a) == doctest::Approx(0.5 * kGBps));
  CHECK(net.rate(b) == doctest::Approx(0.5 * kGBps));
  CHECK(net.load(r) == doctest::Approx(1 * kGBps));
  CHECK(net.completion(a) == 200 * kNs);
  CHECK(net.completion(b) == 600 * kNs);
}

TEST_CASE("classic max-min: a flow bottlenecked elsewhere leaves the rest to its neighbour") {
  // System:
  //   R0 10 GB/s: A, B        A crosses R0 and R1
  //   R1  4 GB/s: A, C        B crosses R0 only
  //   R2 10 GB/s: C, D        C crosses R1 and R2; D crosses R2 only
  // Progressive filling:
  //   fair shares  R0 10/2 = 5, R1 4/2 = 2, R2 10/2 = 5  -> R1 saturates first: A = C = 2
  //   then         R0 (10-2)/1 = 8 for B, R2 (10-2)/1 = 8 for D
  // Rates: A = 2, B = 8, C = 2, D = 8 GB/s; every resource is full.
  FlowNetwork net;
  const uint32_t r0 = net.add_resource(10 * kGBps);
  const uint32_t r1 = net.add_resource(4 * kGBps);
  const uint32_t r2 = net.add_resource(10 * kGBps);
  const std::vector<uint32_t> pa = {r0, r1}, pb = {r0}, pc = {r1, r2}, pd = {r2};
  const uint32_t a = net.start(pa, 1000, 0);
  const uint32_t b = net.start(pb, 1000, 0);
  const uint32_t c = net.start(pc, 1000, 0);
  const uint32_t d = net.start(pd, 1000, 0);
  net.solve(0);
  CHECK(net.rate(a) == doctest::Approx(2 * kGBps));
  CHECK(net.rate(b) == doctest::Approx(8 * kGBps));
  CHECK(net.rate(c) == doctest::Approx(2 * kGBps));
  CHECK(net.rate(d) == doctest::Approx(8 * kGBps));
  CHECK(net.load(r0) == doctest::Approx(10 * kGBps));
  CHECK(net.load(r1) == doctest::Approx(4 * kGBps));
  CHECK(net.load(r2) == doctest::Approx(10 * kGBps));
  // 1000 B at 2 B/ns = 500 ns; at 8 B/ns = 125 ns.
  CHECK(net.completion(a) == 500 * kNs);
  CHECK(net.completion(b) == 125 * kNs);
}

TEST_CASE("when a flow finishes, the survivors speed up and their completion moves earlier") {
  // System: R (1 GB/s); A over {R} 100 B, B over {R} 300 B, both started at 0.
  //   0            200 ns                      400 ns
  //   |= A 0.5, B 0.5 =|======== B 1 ========|
  // Until 200 ns: A = B = 0.5 GB/s, B would end at 600 ns.
  // A finishes at 200 ns having moved 100 B; B has moved 100 B, 200 B left.
  // After the re-solve at 200 ns: B = 1 GB/s, completion 200 + 200 = 400 ns.
  FlowNetwork net;
  const uint32_t r = net.add_resource(1 * kGBps);
  const std::vector<uint32_t> path = {r};
  const uint32_t a = net.start(path, 100, 0);
  const uint32_t b = net.start(path, 300, 0);
  net.solve(0);
  REQUIRE(net.completion(a) == 200 * kNs);
  CHECK(net.completion(b) == 600 * kNs);
  net.finish(a, 200 * kNs);
  CHECK(net.active(r) == 1);
  net.solve(200 * kNs);
  CHECK(net.rate(b) == doctest::Approx(1 * kGBps));
  CHECK(net.completion(b) == 400 * kNs);
  CHECK(net.changed_flows() == std::vector<uint32_t>{b});
  net.finish(b, 400 * kNs);
  // Statistics: busy 0..400 ns; two flows for 200 ns and one for 200 ns -> 600 flow-ns.
  const ResourceStats st = net.stats(r, 400 * kNs);
  CHECK(st.busy_ps == 400 * kNs);
  CHECK(st.flow_ps == doctest::Approx(600.0 * kNs));
  CHECK(st.bytes == doctest::Approx(400));
  CHECK(st.peak_rate == doctest::Approx(1 * kGBps));
}

TEST_CASE("only the connected component is re-solved") {
  // System: R0 (1 GB/s) carries A; R1 (2 GB/s) carries B; nothing links them.
  // At 0: A = 1 GB/s, B = 2 GB/s.
  // At 100 ns C joins R0: A = C = 0.5 GB/s. B's component {R1} is untouched: B keeps
  // 2 GB/s and is not in changed_flows(); R1 is not among the re-solved resources.
  FlowNetwork net;
  const uint32_t r0 = net.add_resource(1 * kGBps);
  const uint32_t r1 = net.add_resource(2 * kGBps);
  const std::vector<uint32_t> p0 = {r0}, p1 = {r1};
  const uint32_t a = net.start(p0, 1000, 0);
  const uint32_t b = net.start(p1, 1000, 0);
  net.solve(0);
  CHECK(net.rate(a) == doctest::Approx(1 * kGBps));
  CHECK(net.rate(b) == doctest::Approx(2 * kGBps));

  const uint32_t c = net.start(p0, 1000, 100 * kNs);
  net.solve(100 * kNs);
  CHECK(net.rate(a) == doctest::Approx(0.5 * kGBps));
  CHECK(net.rate(c) == doctest::Approx(0.5 * kGBps));
  CHECK(net.rate(b) == doctest::Approx(2 * kGBps));
  CHECK(contains(net.changed_flows(), a));
  CHECK(contains(net.changed_flows(), c));
  CHECK_FALSE(contains(net.changed_flows(), b));
  CHECK(contains(net.changed_resources(), r0));
  CHECK_FALSE(contains(net.changed_resources(), r1));
  // A moved 100 B by 100 ns, 900 B left at 0.5 B/ns -> 100 + 1800 = 1900 ns.
  CHECK(net.completion(a) == 1900 * kNs);
  // B: 1000 B at 2 B/ns from 0 -> 500 ns, unchanged.
  CHECK(net.completion(b) == 500 * kNs);
}

TEST_CASE("completion is exact when the bytes divide evenly: no rounding noise") {
  // System: R (1 GB/s); A over {R}, 64 B, started at 0.
  // Rates:  A = 1 GB/s.  Completion: 64 B / 1 B/ns = 64 ns = 64000 ps exactly; rounding
  // up to a whole picosecond (ARCHITECTURE §3) must not turn floating-point noise in
  // 64 / 1e9 * 1e12 = 64000.00000000001 into 64001 ps.
  FlowNetwork net;
  const uint32_t r = net.add_resource(1 * kGBps);
  const std::vector<uint32_t> path = {r};
  const uint32_t a = net.start(path, 64, 0);
  net.solve(0);
  CHECK(net.completion(a) == 64 * kNs);
  // System: R (1 GB/s) shared by B and C, 64 B each: 0.5 GB/s each -> 128 ns.
  FlowNetwork net2;
  const uint32_t r2 = net2.add_resource(1 * kGBps);
  const std::vector<uint32_t> path2 = {r2};
  const uint32_t b = net2.start(path2, 64, 0);
  const uint32_t c = net2.start(path2, 64, 0);
  net2.solve(0);
  CHECK(net2.completion(b) == 128 * kNs);
  CHECK(net2.completion(c) == 128 * kNs);
}

TEST_CASE("a route of five hops and a lone flow on a route of two") {
  // System: R0, R1, R3, R4 (4 GB/s each), R2 (2 GB/s).
  //   A crosses R0 R1 R2 R3 R4; B crosses R2; C crosses R4.
  // Progressive filling:
  //   fair shares  R0 4, R1 4, R2 2/2 = 1, R3 4, R4 4/2 = 2  -> R2 saturates: A = B = 1
  //   then         R4 (4-1)/1 = 3 for C
  // Rates: A = 1, B = 1, C = 3 GB/s; loads R0 R1 R3 1, R2 2, R4 4 GB/s.
  FlowNetwork net;
  std::vector<uint32_t> r;
  for (int i = 0; i < 5; ++i) r.push_back(net.add_resource((i == 2 ? 2 : 4) * kGBps));
  const uint32_t a = net.start(r, 1000, 0);
  const uint32_t b = net.start(std::vector<uint32_t>{r[2]}, 1000, 0);
  const uint32_t c = net.start(std::vector<uint32_t>{r[4]}, 1000, 0);
  net.solve(0);
  CHECK(net.rate(a) == 1 * kGBps);
  CHECK(net.rate(b) == 1 * kGBps);
  CHECK(net.rate(c) == 3 * kGBps);
  CHECK(net.load(r[2]) == 2 * kGBps);
  CHECK(net.load(r[4]) == 4 * kGBps);
  // At 100 ns A and B finish and D starts over {R0, R2}: D = 2 GB/s (R2 saturates), and C,
  // alone on R4 now, 4 GB/s.
  net.finish(a, 100 * kNs);
  net.finish(b, 100 * kNs);
  const uint32_t d = net.start(std::vector<uint32_t>{r[0], r[2]}, 1000, 100 * kNs);
  net.solve(100 * kNs);
  CHECK(net.rate(d) == 2 * kGBps);
  CHECK(net.rate(c) == 4 * kGBps);
  // At 200 ns E starts over {R1, R3}, a component of its own: one flow takes the least
  // capacity on its route, 4 GB/s. D and C are not re-solved.
  const uint32_t e = net.start(std::vector<uint32_t>{r[1], r[3]}, 1000, 200 * kNs);
  net.solve(200 * kNs);
  CHECK(net.rate(e) == 4 * kGBps);
  CHECK(net.changed_flows() == std::vector<uint32_t>{e});
  CHECK(net.stats(r[4], 200 * kNs).peak_rate == 4 * kGBps);
}
