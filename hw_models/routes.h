// Route resolution between tiers (Boost.Graph).
//
// The graph has a vertex per tier and per switch, two directed edges per link (one per
// direction, with that direction's achievable bandwidth) and a free edge pair between a
// tier and the switch it attaches to. A route is the widest path (largest bottleneck
// bandwidth, counting the source read port, each link direction, every staging tier and
// the destination write port), ties broken by the lowest setup latency. A peer route of a
// per-device tier leaves the device and turns around at a switch, or takes a direct
// [t, t] link. Pinned routes replace the computed ones. Where a peer route turns at a switch
// not every pair of devices shares (an NVSwitch per host), wider peer routes turn at
// switches of wider scope (a scale-out network per cluster) and join the pairs it cannot.
//
// Setup of a route = source read latency + destination write latency + each link's and
// switch's latency + each staging tier's write and read latency + the largest DMA setup
// among its links (one transfer is programmed once). Ties on bandwidth are broken by the
// summed latencies.
#pragma once

#include "hw_models/topology.h"

namespace tierflow::hw {

/// Fills `t.routes` for every ordered pair of tiers (and every peer route); applies pins.
/// Throws InputError for a pin that does not form a path.
void resolve_routes(Topology& t);

/// Derives hops, switches and staging tiers from the steps, then the bottleneck
/// bandwidth and setup latency.
void finish_route(const Topology& t, Route& r);

/// The step of peer route `r` at which it turns back towards the peer: the first reaching
/// the widest scope (the switch it goes out to and back from, or the peer tier of a direct
/// link). Its instance must be one for both devices of a copy.
size_t peer_turn(const Topology& t, const Route& r);

/// The scope of that turning point: devices in different instances of it are not joined
/// by `r`. A direct link of each device to every peer joins the devices of one host (a
/// board's mesh): kHost. nullopt when `r` has no steps.
std::optional<Scope> peer_turn_scope(const Topology& t, const Route& r);

/// What peer route `r` turns at, by id: its switch, or the direct link it takes.
std::string peer_turn_id(const Topology& t, const Route& r);

/// "hbm -[gpu-pcie]-> rc -> ddr" style text of the walk, for reports.
std::string describe_route(const Topology& t, const Route& r);

}  // namespace tierflow::hw
