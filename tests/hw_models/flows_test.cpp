// FlowNetwork: max-min fair rates by progressive filling, completion times, and
// re-solving only the connected component. Every case states its system (resources
// with capacities, flows with the resources they cross) and the expected rates.
#include "hw_models/flows.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "tests/support/max_min.h"

using namespace tierflow;
using namespace tierflow::hw;

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

TEST_CASE("equal shares: the lower resource index saturates first, the other at the same share") {
  // System: R0 (2 GB/s) carries A and B; R1 (2 GB/s) carries B and C.
  // Progressive filling: shares R0 2/2 = 1, R1 2/2 = 1, a tie: R0 saturates first,
  //   A = B = 1; then R1 has 2 - 1 = 1 left for C alone: C = 1.
  // Rates: A = B = C = 1 GB/s; both resources full, peak 2 GB/s each.
  FlowNetwork net;
  const uint32_t r0 = net.add_resource(2 * kGBps);
  const uint32_t r1 = net.add_resource(2 * kGBps);
  const uint32_t a = net.start(std::vector<uint32_t>{r0}, 1000, 0);
  const uint32_t b = net.start(std::vector<uint32_t>{r0, r1}, 1000, 0);
  const uint32_t c = net.start(std::vector<uint32_t>{r1}, 1000, 0);
  net.solve(0);
  CHECK(net.rate(a) == 1 * kGBps);
  CHECK(net.rate(b) == 1 * kGBps);
  CHECK(net.rate(c) == 1 * kGBps);
  CHECK(net.stats(r0, 0).peak_rate == 2 * kGBps);
  CHECK(net.stats(r1, 0).peak_rate == 2 * kGBps);
}

TEST_CASE("shares closer than the keys resolve saturate in index order, within 1e-13 of exact") {
  // System: 128 resources (the keys keep the share's bits but the lowest 7, which hold
  // the index: shares closer than 2^-45 of their value count as equal). R0 has
  // 2 GB/s x (1 + 2^-50) and carries A and B; R1 has 2 GB/s and carries B and C.
  // Exact filling: R1's share (1 GB/s) is the smaller: B = C = 1; R0 then has
  //   1 x (1 + 2^-49) left for A.
  // Here the shares tie and R0 (the lower index) saturates first: A = B = 1 x (1 + 2^-50);
  //   R1 has 2 - B left for C = 1 x (1 - 2^-50). Every rate is within 2^-49 of the exact
  //   one and both resources are exactly full.
  const double eps = std::ldexp(1.0, -50);
  FlowNetwork net;
  const uint32_t r0 = net.add_resource(2 * kGBps * (1 + eps));
  const uint32_t r1 = net.add_resource(2 * kGBps);
  for (int i = 2; i < 128; ++i) net.add_resource(1 * kGBps);
  const uint32_t a = net.start(std::vector<uint32_t>{r0}, 1000, 0);
  const uint32_t b = net.start(std::vector<uint32_t>{r0, r1}, 1000, 0);
  const uint32_t c = net.start(std::vector<uint32_t>{r1}, 1000, 0);
  net.solve(0);
  CHECK(net.rate(a) == net.rate(b));
  CHECK(net.rate(b) == 1 * kGBps * (1 + eps));
  CHECK(net.rate(c) == 2 * kGBps - net.rate(b));
  CHECK(std::abs(net.rate(a) - 1 * kGBps * (1 + 2 * eps)) <= 1e-13 * kGBps);
  CHECK(std::abs(net.rate(b) - 1 * kGBps) <= 1e-13 * kGBps);
  CHECK(std::abs(net.rate(c) - 1 * kGBps) <= 1e-13 * kGBps);
  CHECK(net.load(r0) == net.capacity(r0));
  CHECK(net.load(r1) == net.capacity(r1));
}

TEST_CASE("a route that crosses a resource twice takes its share there twice") {
  // System: R (3 GB/s); A crosses R twice, B once: three crossings.
  // Progressive filling: R's share 3/3 = 1 per crossing: A = B = 1 GB/s, and R carries
  //   A twice: load 1 + 1 + 1 = 3 GB/s.
  // Then B finishes: A alone crosses R twice and gets 3/2 = 1.5 GB/s (a component of one
  //   flow), load 3 GB/s.
  FlowNetwork net;
  const uint32_t r = net.add_resource(3 * kGBps);
  const uint32_t a = net.start(std::vector<uint32_t>{r, r}, 1000, 0);
  const uint32_t b = net.start(std::vector<uint32_t>{r}, 1000, 0);
  net.solve(0);
  CHECK(net.rate(a) == 1 * kGBps);
  CHECK(net.rate(b) == 1 * kGBps);
  CHECK(net.load(r) == 3 * kGBps);
  CHECK(net.active(r) == 3);
  net.finish(b, 10 * kNs);
  net.solve(10 * kNs);
  CHECK(net.rate(a) == 1.5 * kGBps);
  CHECK(net.load(r) == 3 * kGBps);
  CHECK(net.changed_flows() == std::vector<uint32_t>{a});
  CHECK(net.stats(r, 10 * kNs).peak_rate == 3 * kGBps);
}

TEST_CASE("a component of one resource without flows is re-solved to nothing") {
  // System: R (1 GB/s) carries A until A finishes at 100 ns.
  // The solve after that lists R as re-solved and no flow as changed; R's peak stays 1.
  FlowNetwork net;
  const uint32_t r = net.add_resource(1 * kGBps);
  const uint32_t a = net.start(std::vector<uint32_t>{r}, 100, 0);
  net.solve(0);
  net.finish(a, 100 * kNs);
  CHECK(net.dirty());
  net.solve(100 * kNs);
  CHECK_FALSE(net.dirty());
  CHECK(net.changed_flows().empty());
  CHECK(net.changed_resources() == std::vector<uint32_t>{r});
  CHECK(net.load(r) == 0);
  const ResourceStats st = net.stats(r, 200 * kNs);
  CHECK(st.peak_rate == 1 * kGBps);
  CHECK(st.busy_ps == 100 * kNs);
}

TEST_CASE("peak rates of resources that saturate, run dry elsewhere, or never surface") {
  // System: R0 (1 GB/s) carries A and B; R1 (10 GB/s) carries A and C; R2 (8 GB/s) carries
  //   B only; R3 (4 GB/s) carries C only.
  // Progressive filling: shares R0 1/2 = 0.5, R1 10/2 = 5, R2 8, R3 4 -> R0 saturates:
  //   A = B = 0.5 (R2 now carries only frozen flows: it runs dry at a load of 0.5); then
  //   R1 (10 - 0.5)/1 = 9.5, R3 4 -> R3 saturates: C = 4. R1 never saturates: load 4.5.
  // Peaks: R0 1, R1 4.5, R2 0.5, R3 4 GB/s.
  FlowNetwork net;
  const uint32_t r0 = net.add_resource(1 * kGBps);
  const uint32_t r1 = net.add_resource(10 * kGBps);
  const uint32_t r2 = net.add_resource(8 * kGBps);
  const uint32_t r3 = net.add_resource(4 * kGBps);
  const uint32_t a = net.start(std::vector<uint32_t>{r0, r1}, 1000, 0);
  const uint32_t b = net.start(std::vector<uint32_t>{r0, r2}, 1000, 0);
  const uint32_t c = net.start(std::vector<uint32_t>{r1, r3}, 1000, 0);
  net.solve(0);
  CHECK(net.rate(a) == 0.5 * kGBps);
  CHECK(net.rate(b) == 0.5 * kGBps);
  CHECK(net.rate(c) == 4 * kGBps);
  CHECK(net.stats(r0, 0).peak_rate == 1 * kGBps);
  CHECK(net.stats(r1, 0).peak_rate == 4.5 * kGBps);
  CHECK(net.stats(r2, 0).peak_rate == 0.5 * kGBps);
  CHECK(net.stats(r3, 0).peak_rate == 4 * kGBps);
  // At 1 ns C finishes: R1 now carries A only, which R0 still limits to 0.5. Peaks keep the
  // highest loads: R1 stays at 4.5, R3 at 4.
  net.finish(c, 1 * kNs);
  net.solve(1 * kNs);
  CHECK(net.rate(a) == 0.5 * kGBps);
  CHECK(net.load(r1) == 0.5 * kGBps);
  CHECK(net.stats(r1, 1 * kNs).peak_rate == 4.5 * kGBps);
  CHECK(net.stats(r3, 1 * kNs).peak_rate == 4 * kGBps);
}

namespace {

/// The resources connected to `from` through the routes of `live` flows, sorted.
std::vector<uint32_t> component_of(const std::vector<uint32_t>& from, size_t n_res,
                                   const std::vector<uint32_t>& live,
                                   const std::vector<std::vector<uint32_t>>& routes) {
  std::vector<std::vector<uint32_t>> flows_on(n_res);
  for (uint32_t f : live) {
    for (uint32_t r : routes[f]) flows_on[r].push_back(f);
  }
  std::vector<char> seen(n_res, 0);
  std::vector<uint32_t> todo = from;
  std::vector<uint32_t> out;
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    if (seen[r] != 0) continue;
    seen[r] = 1;
    out.push_back(r);
    for (uint32_t f : flows_on[r]) {
      for (uint32_t q : routes[f]) todo.push_back(q);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Random networks (seeds printed on failure) of `res_lo` to `res_hi` resources of 0.1 to
/// 100 GB/s (some equal, so shares tie) and routes of one to `hops` hops that may cross a
/// resource twice, with flows started and finished between solves. After every solve each
/// rate must match the plain progressive filling of tests/support/max_min.h to 1e-9 relative (the
/// two order their floating-point operations differently), changed_flows() must list
/// exactly the flows whose rate changed, changed_resources() exactly the component of the
/// resources that flows started or finished on, and each resource's peak rate must be
/// exactly the highest load() seen after a solve.
void check_random_networks(size_t res_lo, size_t res_hi, size_t hops, size_t first_flows) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const size_t n_res = res_lo + rng() % (res_hi - res_lo + 1);
    std::vector<double> capacity;
    FlowNetwork net;
    for (size_t r = 0; r < n_res; ++r) {
      const double cap = rng() % 3 == 0 ? 1 * kGBps : 1e8 * static_cast<double>(1 + rng() % 1000);
      capacity.push_back(cap);
      net.add_resource(cap);
    }
    std::vector<uint32_t> live;
    std::vector<std::vector<uint32_t>> routes;  // by flow id
    std::vector<double> peak(n_res, 0);
    Time now = 0;
    for (int step = 0; step < 25; ++step) {
      now += static_cast<Time>(1 + rng() % 1000) * kNs;
      std::vector<uint32_t> touched;
      for (size_t i = rng() % 3; i > 0 && !live.empty(); --i) {
        const size_t k = rng() % live.size();
        net.finish(live[k], now);
        touched.insert(touched.end(), routes[live[k]].begin(), routes[live[k]].end());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
      for (size_t i = step == 0 ? first_flows : rng() % 5; i > 0; --i) {
        std::vector<uint32_t> route;
        for (size_t h = 1 + rng() % hops; h > 0; --h) {
          route.push_back(static_cast<uint32_t>(rng() % n_res));
        }
        const uint32_t f = net.start(route, 1e9, now);
        if (routes.size() <= f) routes.resize(f + 1);
        routes[f] = route;
        live.push_back(f);
        touched.insert(touched.end(), route.begin(), route.end());
      }
      std::vector<double> before(routes.size(), 0);
      for (uint32_t f : live) before[f] = net.rate(f);
      CHECK(net.dirty() == !touched.empty());
      net.solve(now);
      std::vector<uint32_t> solved = net.changed_resources();
      std::sort(solved.begin(), solved.end());
      CHECK(solved == component_of(touched, n_res, live, routes));
      std::vector<std::vector<uint32_t>> live_routes;
      live_routes.reserve(live.size());
      for (uint32_t f : live) live_routes.push_back(routes[f]);
      const std::vector<double> expected = max_min_rates(capacity, live_routes);
      size_t changed = 0;
      for (size_t i = 0; i < live.size(); ++i) {
        const uint32_t f = live[i];
        CHECK(std::abs(net.rate(f) - expected[i]) <= 1e-9 * expected[i]);
        if (net.rate(f) != before[f]) {
          ++changed;
          CHECK(contains(net.changed_flows(), f));
        }
      }
      CHECK(net.changed_flows().size() == changed);
      for (size_t r = 0; r < n_res; ++r) {
        const auto q = static_cast<uint32_t>(r);
        peak[r] = std::max(peak[r], net.load(q));
        CHECK(net.stats(q, now).peak_rate == peak[r]);
      }
    }
  }
}

}  // namespace

TEST_CASE("seeded random networks: rates match plain progressive filling, peaks the loads") {
  check_random_networks(2, 40, 6, 30);
}

TEST_CASE("seeded sparse networks: components split and join as flows finish and start") {
  // Many resources and routes of one or two hops: flows start and finish in components
  // of a few resources, which a finish often splits.
  check_random_networks(20, 120, 2, 40);
}

TEST_CASE("a finish that splits a component leaves each part to be re-solved alone") {
  // System: R0 (1 GB/s) carries A and B; R1 (2 GB/s) carries B and C.
  // Progressive filling: shares R0 1/2 = 0.5, R1 2/2 = 1 -> R0 saturates: A = B = 0.5;
  //   then R1 (2 - 0.5)/1 = 1.5 -> C = 1.5.
  // B finishes at 10 ns: R0 and R1 are now apart; both were B's, so both are re-solved:
  //   A = 1, C = 2. A finishes at 20 ns: only R0 is re-solved; C keeps its rate.
  FlowNetwork net;
  const uint32_t r0 = net.add_resource(1 * kGBps);
  const uint32_t r1 = net.add_resource(2 * kGBps);
  const uint32_t a = net.start(std::vector<uint32_t>{r0}, 1000, 0);
  const uint32_t b = net.start(std::vector<uint32_t>{r0, r1}, 1000, 0);
  const uint32_t c = net.start(std::vector<uint32_t>{r1}, 100000, 0);
  net.solve(0);
  CHECK(net.rate(a) == 0.5 * kGBps);
  CHECK(net.rate(b) == 0.5 * kGBps);
  CHECK(net.rate(c) == 1.5 * kGBps);
  CHECK(net.changed_flows() == std::vector<uint32_t>{a, b, c});  // in the order they froze
  net.finish(b, 10 * kNs);
  net.solve(10 * kNs);
  CHECK(net.rate(a) == 1 * kGBps);
  CHECK(net.rate(c) == 2 * kGBps);
  std::vector<uint32_t> solved = net.changed_resources();
  std::sort(solved.begin(), solved.end());
  CHECK(solved == std::vector<uint32_t>{r0, r1});
  net.finish(a, 20 * kNs);
  net.solve(20 * kNs);
  CHECK(net.changed_resources() == std::vector<uint32_t>{r0});
  CHECK(net.changed_flows().empty());
  CHECK(net.rate(c) == 2 * kGBps);
  // A flow over both joins them again: D and C share R1, 1 GB/s each.
  const uint32_t d = net.start(std::vector<uint32_t>{r0, r1}, 1000, 30 * kNs);
  net.solve(30 * kNs);
  solved = net.changed_resources();
  std::sort(solved.begin(), solved.end());
  CHECK(solved == std::vector<uint32_t>{r0, r1});
  CHECK(net.rate(d) == 1 * kGBps);
  CHECK(net.rate(c) == 1 * kGBps);
}

TEST_CASE("flows on one route: the short way gives fill()'s rates, changes and peaks to the bit") {
  // Seeded random runs (seeds printed on failure) fed to two networks, one with the
  // shortcut off: a few routes of one to four hops over resources whose capacities often
  // tie or nearly tie (shares within the keys' resolution saturate in index order), flows
  // mostly on one route per component, sometimes on two (the shortcut declines those) or
  // crossing a resource twice (declined too). After every solve both must agree exactly.
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const size_t n_res = 2 + rng() % 9;
    FlowNetwork fast;
    FlowNetwork slow;
    slow.set_one_route_shortcut(false);
    for (size_t r = 0; r < n_res; ++r) {
      const uint64_t kind = rng() % 4;
      const double cap = kind == 0   ? 13.44 * kGBps
                         : kind == 1 ? 13.44 * kGBps * (1 + 1e-15 * static_cast<double>(rng() % 8))
                         : kind == 2 ? 1e8 * static_cast<double>(1 + rng() % 1000)
                                     : 3.35e12;
      fast.add_resource(cap);
      slow.add_resource(cap);
    }
    std::vector<std::vector<uint32_t>> shapes;
    for (size_t k = 1 + rng() % 3; k > 0; --k) {
      std::vector<uint32_t> route;
      for (size_t h = 1 + rng() % 4; h > 0; --h)
        route.push_back(static_cast<uint32_t>(rng() % n_res));
      shapes.push_back(route);
    }
    std::vector<uint32_t> live;
    Time now = 0;
    for (int step = 0; step < 40; ++step) {
      now += static_cast<Time>(1 + rng() % 1000) * kNs;
      for (size_t i = rng() % 3; i > 0 && !live.empty(); --i) {
        const size_t k = rng() % live.size();
        fast.finish(live[k], now);
        slow.finish(live[k], now);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
      // Mostly the first shape: components of one route.
      for (size_t i = rng() % 4; i > 0; --i) {
        const auto& route = shapes[rng() % 5 < 4 ? size_t{0} : rng() % shapes.size()];
        const double bytes = 1e6 * static_cast<double>(1 + rng() % 1000);
        const uint32_t f = fast.start(route, bytes, now);
        REQUIRE(slow.start(route, bytes, now) == f);
        live.push_back(f);
      }
      fast.solve(now);
      slow.solve(now);
      CHECK(fast.changed_flows() == slow.changed_flows());
      CHECK(fast.changed_resources() == slow.changed_resources());
      for (uint32_t f : live) {
        CHECK(std::bit_cast<uint64_t>(fast.rate(f)) == std::bit_cast<uint64_t>(slow.rate(f)));
        CHECK(fast.completion(f) == slow.completion(f));
      }
      for (size_t r = 0; r < n_res; ++r) {
        const auto q = static_cast<uint32_t>(r);
        CHECK(fast.stats(q, now).peak_rate == slow.stats(q, now).peak_rate);
        CHECK(fast.stats(q, now).bytes == slow.stats(q, now).bytes);
      }
    }
  }
}
