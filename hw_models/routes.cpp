#include "hw_models/routes.h"

#include <algorithm>

// GCC 12 reports a false -Wmaybe-uninitialized inside Boost.Graph's edge iterator
// (a boost::optional member) once it is inlined here at -O2.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <boost/graph/filtered_graph.hpp>

#include <functional>
#include <limits>
#include <set>

#include "core/diagnostics.h"
#include "core/units.h"

namespace tierflow::hw {
namespace {

constexpr double kUnlimited = std::numeric_limits<double>::infinity();
constexpr int64_t kNoPath = std::numeric_limits<int64_t>::max();

struct EdgeProp {
  double bw = kUnlimited;  ///< achievable bandwidth of this direction; unlimited for attach
  int64_t lat = 0;         ///< setup paid crossing this edge and entering its target
  int link = -1;           ///< link index, -1 for an attach edge
  bool forward = true;
};

using Graph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property, EdgeProp>;
using Edge = Graph::edge_descriptor;

struct Search {
  std::vector<int64_t> dist;
  std::vector<Edge> pred;
};

/// Routes over the vertex numbering: tier i -> i, switch j -> tiers.size() + j.
class Router {
 public:
  explicit Router(const Topology& t)
      : t_(t), ntiers_(t.tiers.size()), n_(ntiers_ + t.switches.size()) {
    build(fwd_, /*reverse=*/false);
    build(rev_, /*reverse=*/true);
    // Candidate bottlenecks, widest first; the first level at which a path exists is the
    // widest path's bottleneck.
    for (const auto& l : t.links) {
      levels_.push_back(l.effective(true).bytes_per_s);
      levels_.push_back(l.effective(false).bytes_per_s);
    }
    for (const auto& x : t.tiers) {
      levels_.push_back(std::min(x.read_bandwidth.bytes_per_s, x.write_bandwidth.bytes_per_s));
    }
    std::sort(levels_.begin(), levels_.end(), std::greater<>());
    levels_.erase(std::unique(levels_.begin(), levels_.end()), levels_.end());
  }

  /// Widest, then lowest-latency, path from tier `from` to another tier `to`.
  std::optional<Route> widest(size_t from, size_t to) const {
    const double cap = end_cap(from, to);
    for (double level : capped_levels(cap)) {
      Search s = search(fwd_, from, from, to, level);
      if (s.dist[to] == kNoPath) continue;
      Route r{from, to, {}, {}, {}, {}, {}, {}, false};
      for (size_t v = to; v != from; v = boost::source(s.pred[v], fwd_)) {
        r.steps.push_back(step_into(v, fwd_[s.pred[v]]));
      }
      std::reverse(r.steps.begin(), r.steps.end());
      finish_route(t_, r);
      return r;
    }
    return std::nullopt;
  }

  /// The best path leaving per-device tier `tier` and reaching the same tier of a peer:
  /// a direct [t, t] link, or out to a switch and back from it. With `wider_than`, only a
  /// path turning at a switch of a wider scope than that.
  std::optional<Route> peer(size_t tier, std::optional<Scope> wider_than = std::nullopt) const {
    const double cap = end_cap(tier, tier);
    for (double level : capped_levels(cap)) {
      std::optional<Route> best;
      for (size_t li = 0; li < t_.links.size() && !wider_than; ++li) {
        const Link& l = t_.links[li];
        if (l.endpoints[0] != t_.tiers[tier].id || l.endpoints[1] != l.endpoints[0]) continue;
        if (l.effective(true).bytes_per_s < level) continue;
        Route r{tier, tier, {Step{Vertex{false, tier}, static_cast<int>(li), true}}, {}, {}, {}, {},
                {},   false};
        finish_route(t_, r);
        if (!best || r.setup < best->setup) best = std::move(r);
      }
      if (best) return best;
      Search out = search(fwd_, tier, tier, n_, level);
      Search back = search(rev_, tier, tier, n_, level);
      size_t turn = n_;
      int64_t best_lat = kNoPath;
      for (size_t sw = ntiers_; sw < n_; ++sw) {
        if (out.dist[sw] == kNoPath || back.dist[sw] == kNoPath) continue;
        if (wider_than && t_.switches[sw - ntiers_].per <= *wider_than) continue;
        if (out.dist[sw] + back.dist[sw] < best_lat) {
          best_lat = out.dist[sw] + back.dist[sw];
          turn = sw;
        }
      }
      if (turn == n_) continue;
      Route r{tier, tier, {}, {}, {}, {}, {}, {}, false};
      for (size_t v = turn; v != tier; v = boost::source(out.pred[v], fwd_)) {
        r.steps.push_back(step_into(v, fwd_[out.pred[v]]));
      }
      std::reverse(r.steps.begin(), r.steps.end());
      // The return half was searched on the reversed graph: an edge u->v there is the
      // original v->u, so following predecessors walks forward from the switch.
      for (size_t v = turn; v != tier;) {
        const Edge e = back.pred[v];
        const size_t u = boost::source(e, rev_);
        r.steps.push_back(step_into(u, rev_[e]));
        v = u;
      }
      finish_route(t_, r);
      return r;
    }
    return std::nullopt;
  }

 private:
  double end_cap(size_t from, size_t to) const {
    return std::min(t_.tiers[from].read_bandwidth.bytes_per_s,
                    t_.tiers[to].write_bandwidth.bytes_per_s);
  }

  // Levels above the end ports' cap give the same final bandwidth, so search at the cap.
  std::vector<double> capped_levels(double cap) const {
    std::vector<double> out{cap};
    for (double l : levels_) {
      if (l < cap) out.push_back(l);
    }
    return out;
  }

  Step step_into(size_t v, const EdgeProp& p) const {
    return Step{to_vertex(v), p.link, p.forward};
  }

  Vertex to_vertex(size_t v) const {
    return v >= ntiers_ ? Vertex{true, v - ntiers_} : Vertex{false, v};
  }

  size_t number(const std::string& id) const {
    if (auto i = t_.tier_index(id)) return *i;
    auto s = t_.switch_index(id);
    TF_ASSERT(s.has_value(), "validated endpoint '{}' is unknown", id);
    return ntiers_ + *s;
  }

  int64_t enter_cost(size_t v) const {
    if (v >= ntiers_) return t_.switches[v - ntiers_].latency.ps;
    const Tier& x = t_.tiers[v];
    return x.write_latency.ps + x.latency.ps;  // a staging tier is written, then read again
  }

  void build(Graph& g, bool reverse) const {
    g = Graph(n_);
    auto add = [&](size_t a, size_t b, EdgeProp p) {
      p.lat += enter_cost(b);
      if (reverse) {
        boost::add_edge(b, a, p, g);
      } else {
        boost::add_edge(a, b, p, g);
      }
    };
    for (size_t i = 0; i < t_.links.size(); ++i) {
      const Link& l = t_.links[i];
      if (l.endpoints[0] == l.endpoints[1]) continue;  // direct peer links: see peer()
      const size_t a = number(l.endpoints[0]);
      const size_t b = number(l.endpoints[1]);
      const int64_t lat = l.latency.ps;  // DMA setup is per transfer, not per crossing
      const int li = static_cast<int>(i);
      add(a, b, EdgeProp{l.effective(true).bytes_per_s, lat, li, true});
      add(b, a, EdgeProp{l.effective(false).bytes_per_s, lat, li, false});
    }
    for (size_t i = 0; i < ntiers_; ++i) {
      if (t_.tiers[i].attach.empty()) continue;
      const size_t s = number(t_.tiers[i].attach);
      add(i, s, EdgeProp{});
      add(s, i, EdgeProp{});
    }
  }

  /// Dijkstra on latency over edges with bandwidth >= level. Tiers other than the two
  /// ends may be crossed only if their ports reach `level` (they stage the data).
  Search search(const Graph& g, size_t src, size_t end_a, size_t end_b, double level) const {
    std::function<bool(Edge)> edge_ok = [&g, level](Edge e) { return g[e].bw >= level; };
    std::function<bool(size_t)> vertex_ok = [this, end_a, end_b, level](size_t v) {
      if (v >= ntiers_ || v == end_a || v == end_b) return true;
      const Tier& x = t_.tiers[v];
      return std::min(x.read_bandwidth.bytes_per_s, x.write_bandwidth.bytes_per_s) >= level;
    };
    boost::filtered_graph<Graph, std::function<bool(Edge)>, std::function<bool(size_t)>> fg(
        g, edge_ok, vertex_ok);
    Search s{std::vector<int64_t>(n_, kNoPath), std::vector<Edge>(n_)};
    auto idx = boost::get(boost::vertex_index, g);
    auto dist = boost::make_iterator_property_map(s.dist.begin(), idx);
    auto pred = boost::make_iterator_property_map(s.pred.begin(), idx);
    boost::dijkstra_shortest_paths(
        fg, src,
        boost::weight_map(boost::get(&EdgeProp::lat, g))
            .distance_map(dist)
            .visitor(boost::make_dijkstra_visitor(
                boost::record_edge_predecessors(pred, boost::on_edge_relaxed()))));
    return s;
  }

  const Topology& t_;
  size_t ntiers_;
  size_t n_;
  Graph fwd_;
  Graph rev_;
  std::vector<double> levels_;
};

std::string vertex_id(const Topology& t, Vertex v) {
  return v.is_switch ? t.switches[v.index].id : t.tiers[v.index].id;
}

/// Follows a pinned list of links from `from`, with free moves between a tier and the
/// switch it attaches to.
Route walk_pin(const Topology& t, const RoutePin& pin, size_t from, size_t to) {
  auto vertex_of = [&](const std::string& id) {
    if (auto i = t.tier_index(id)) return Vertex{false, *i};
    return Vertex{true, *t.switch_index(id)};
  };
  auto attach_of = [&](Vertex v) -> std::optional<Vertex> {
    if (!v.is_switch && !t.tiers[v.index].attach.empty()) return vertex_of(t.tiers[v.index].attach);
    return std::nullopt;
  };
  Route r{from, to, {}, {}, {}, {}, {}, {}, true};
  Vertex v{false, from};
  std::vector<std::pair<size_t, bool>> crossed;  ///< by via item: the link and its way
  for (size_t i = 0; i < pin.via.size(); ++i) {
    const SourcePos pos = pin.origins.item_pos("via", i);
    const auto li = t.link_index(pin.via[i]);
    if (!li) {
      std::vector<std::string> ids;
      for (const auto& l : t.links) ids.push_back(l.id);
      throw InputError::at(pos, "route {} -> {}: '{}' is not a link{}", pin.from, pin.to,
                           pin.via[i], did_you_mean(pin.via[i], ids));
    }
    const Link& l = t.links[*li];
    const Vertex a = vertex_of(l.endpoints[0]);
    const Vertex b = vertex_of(l.endpoints[1]);
    // Steps onto `end` from the current vertex, through an attach move if needed.
    auto reach = [&](Vertex end) {
      if (end == v) return true;
      if (attach_of(v) == end || attach_of(end) == v) {
        r.steps.push_back(Step{end, -1, true});
        v = end;
        return true;
      }
      return false;
    };
    bool forward = true;
    if (reach(a)) {
      forward = true;
    } else if (reach(b)) {
      forward = false;
    } else {
      throw InputError::at(pos,
                           "route {} -> {}: link '{}' ({} - {}) does not continue the route "
                           "at '{}'",
                           pin.from, pin.to, l.id, l.endpoints[0], l.endpoints[1], vertex_id(t, v));
    }
    // The same link the same way twice goes round a loop: its setup and its share of the
    // link counted twice for nothing (a peer route may cross a link back: out to a switch
    // and back).
    for (size_t j = 0; j < i; ++j) {
      if (crossed[j] != std::pair{*li, forward}) continue;
      throw InputError::at(pos,
                           "route {} -> {}: link '{}' is crossed from '{}' to '{}' again (as "
                           "item {} of via): a route goes round no loop",
                           pin.from, pin.to, l.id, forward ? l.endpoints[0] : l.endpoints[1],
                           forward ? l.endpoints[1] : l.endpoints[0], j + 1);
    }
    crossed.emplace_back(*li, forward);
    v = forward ? b : a;
    r.steps.push_back(Step{v, static_cast<int>(*li), forward});
  }
  const Vertex dst{false, to};
  if (v != dst && attach_of(dst) == v) {
    r.steps.push_back(Step{dst, -1, true});
    v = dst;
  }
  if (v != dst) {
    throw InputError::at(pin.origins.pos_of("via"),
                         "route {} -> {}: the links end at '{}', not at '{}'", pin.from, pin.to,
                         vertex_id(t, v), pin.to);
  }
  finish_route(t, r);
  return r;
}

}  // namespace

void finish_route(const Topology& t, Route& r) {
  r.hops.clear();
  r.switches.clear();
  r.staging_tiers.clear();
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const Step& s = r.steps[i];
    if (s.link >= 0) r.hops.push_back(Hop{static_cast<size_t>(s.link), s.forward});
    if (s.to.is_switch) {
      r.switches.push_back(s.to.index);
    } else if (i + 1 < r.steps.size()) {
      r.staging_tiers.push_back(s.to.index);
    }
  }
  const Tier& src = t.tiers[r.from];
  const Tier& dst = t.tiers[r.to];
  double bw = std::min(src.read_bandwidth.bytes_per_s, dst.write_bandwidth.bytes_per_s);
  int64_t setup = src.latency.ps + dst.write_latency.ps;
  // One transfer is one DMA: it is programmed once, by the slowest-to-set-up engine.
  int64_t dma = 0;
  for (const Hop& h : r.hops) {
    const Link& l = t.links[h.link];
    bw = std::min(bw, l.effective(h.forward).bytes_per_s);
    setup += l.latency.ps;
    dma = std::max(dma, l.dma_setup.ps);
  }
  setup += dma;
  for (size_t s : r.switches) setup += t.switches[s].latency.ps;
  for (size_t x : r.staging_tiers) {
    const Tier& st = t.tiers[x];
    bw = std::min({bw, st.read_bandwidth.bytes_per_s, st.write_bandwidth.bytes_per_s});
    setup += st.write_latency.ps + st.latency.ps;
  }
  if (r.buffers > 0 && !r.staging_tiers.empty()) {
    // A staged copy: each chunk crosses the legs between staging tiers one after the
    // other, so one buffer moves bytes / sum(1 / leg); `buffers` chunks in flight move
    // that many times more, up to the bottleneck.
    double leg = src.read_bandwidth.bytes_per_s;
    double per_byte = 0;
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const Step& s = r.steps[i];
      if (s.link >= 0) {
        leg = std::min(leg, t.links[size_t(s.link)].effective(s.forward).bytes_per_s);
      }
      if (!s.to.is_switch && i + 1 < r.steps.size()) {
        const Tier& st = t.tiers[s.to.index];
        per_byte += 1.0 / std::min(leg, st.write_bandwidth.bytes_per_s);
        leg = st.read_bandwidth.bytes_per_s;
      }
    }
    per_byte += 1.0 / std::min(leg, dst.write_bandwidth.bytes_per_s);
    bw = std::min(bw, double(r.buffers) / per_byte);
  }
  r.bandwidth = Bandwidth{bw};
  r.setup = Duration{setup};
}

void resolve_routes(Topology& t) {
  const size_t n = t.tiers.size();
  t.routes.assign(n * n, std::nullopt);
  const Router router(t);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j) {
        t.routes[i * n + j] = router.widest(i, j);
      } else if (t.tiers[i].per == Scope::kDevice && t.total_devices() > 1) {
        t.routes[i * n + j] = router.peer(i);
      }
    }
  }
  std::vector<std::string> ids;
  for (const auto& x : t.tiers) ids.push_back(x.id);
  std::set<std::pair<size_t, size_t>> pinned;
  std::vector<const RoutePin*> staged;
  for (const RoutePin& pin : t.pins) {
    const auto from = t.tier_index(pin.from);
    if (!from) {
      throw InputError::at(pin.origins.pos_of("from"), "route: '{}' is not a tier{}", pin.from,
                           did_you_mean(pin.from, ids));
    }
    const auto to = t.tier_index(pin.to);
    if (!to) {
      throw InputError::at(pin.origins.pos_of("to"), "route: '{}' is not a tier{}", pin.to,
                           did_you_mean(pin.to, ids));
    }
    if (*from == *to && t.tiers[*from].per != Scope::kDevice) {
      throw InputError::at(pin.origins.pos_of("to"),
                           "route {} -> {}: a route to the same tier is a peer route and needs a "
                           "'per: device' tier",
                           pin.from, pin.to);
    }
    if (!pinned.emplace(*from, *to).second) {
      throw InputError::at(pin.origins.pos, "route {} -> {} is pinned twice", pin.from, pin.to);
    }
    Route r = walk_pin(t, pin, *from, *to);
    if (pin.origins.find("buffers") && !pin.origins.find("buffer")) {
      throw InputError::at(pin.origins.pos_of("buffers"),
                           "route {} -> {}: `buffers` counts staging buffers; give their size "
                           "as `buffer`",
                           pin.from, pin.to);
    }
    if (pin.buffer.value > 0) {
      if (r.staging_tiers.empty()) {
        throw InputError::at(pin.origins.pos_of("buffer"),
                             "route {} -> {}: a staged copy needs a tier to stage through, and "
                             "this route passes through none",
                             pin.from, pin.to);
      }
      r.buffer = pin.buffer;
      r.buffers = pin.buffers;
      finish_route(t, r);
      staged.push_back(&pin);
    }
    t.routes[*from * n + *to] = std::move(r);
  }
  // Wider peer routes: where a peer route turns at a switch that not every pair of devices
  // shares (an NVSwitch per host), the widest route turning at a switch of wider scope
  // joins the pairs it does not (a scale-out network), and so on outwards.
  t.wider_peers.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    const Route* r = t.route(i, i);
    if (r == nullptr) continue;
    std::optional<Scope> scope = peer_turn_scope(t, *r);
    while (scope && *scope < Scope::kCluster) {
      std::optional<Route> wider = router.peer(i, scope);
      if (!wider) break;
      scope = peer_turn_scope(t, *wider);
      t.wider_peers[i].push_back(std::move(*wider));
    }
  }
  // The staging buffers stay out of their tiers' capacity (Topology::staging): they must
  // leave some of it.
  for (const RoutePin* pin : staged) {
    const Route& r = *t.routes[*t.tier_index(pin->from) * n + *t.tier_index(pin->to)];
    for (const size_t x : r.staging_tiers) {
      const uint64_t capacity = t.tiers[x].capacity.value;
      const uint64_t room = capacity > t.reserved(x) ? capacity - t.reserved(x) : 0;
      if (t.staging(x) < room) continue;
      throw InputError::at(pin->origins.pos_of("buffer"),
                           "route {} -> {}: the staging buffers in '{}' ({} on each instance, "
                           "every staged route's buffers for each device there) leave nothing of "
                           "its {} (capacity less reserve)",
                           pin->from, pin->to, t.tiers[x].id, to_string_approx(Bytes{t.staging(x)}),
                           to_string_approx(Bytes{room}));
    }
  }
}

size_t peer_turn(const Topology& t, const Route& r) {
  const auto scope_of = [&](const Step& s) {
    return s.to.is_switch ? t.switches[s.to.index].per : t.tiers[s.to.index].per;
  };
  size_t turn = 0;
  for (size_t i = 1; i < r.steps.size(); ++i) {
    if (scope_of(r.steps[i]) > scope_of(r.steps[turn])) turn = i;
  }
  return turn;
}

std::optional<Scope> peer_turn_scope(const Topology& t, const Route& r) {
  if (r.steps.empty()) return std::nullopt;
  const Step& at = r.steps[peer_turn(t, r)];
  if (at.to.is_switch) return t.switches[at.to.index].per;
  // A direct link: each device's own to every peer of its host (a board's mesh: a link
  // of a device does not leave its host) joins the devices of one host.
  if (at.link >= 0) {
    const Scope per = t.links[size_t(at.link)].per;
    return per == Scope::kDevice ? Scope::kHost : per;
  }
  return std::nullopt;
}

std::string peer_turn_id(const Topology& t, const Route& r) {
  const Step& s = r.steps[peer_turn(t, r)];
  // A direct link turns at the peer tier: the link names it.
  if (!s.to.is_switch && s.link >= 0) return t.links[size_t(s.link)].id;
  return vertex_id(t, s.to);
}

std::string describe_route(const Topology& t, const Route& r) {
  std::string out = t.tiers[r.from].id;
  for (const Step& s : r.steps) {
    if (s.link >= 0) {
      out +=
          fmt::format(" -[{}]-> {}", t.links[static_cast<size_t>(s.link)].id, vertex_id(t, s.to));
    } else {
      out += fmt::format(" -> {}", vertex_id(t, s.to));
    }
  }
  return out;
}

}  // namespace tierflow::hw
