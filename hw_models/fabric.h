// The topology turned into the resources copies share: one instance of every tier, link
// direction and copy engine group that a supernode has, and the resources each transfer
// crosses. Written once for the simulator (sim/, which makes each resource a flow) and the
// replayer (tools/replay, whose paced copies share the same resources).
//
// Glossary
//   instance     one physical copy of a tier, link or switch: a `per: device` tier has one
//                per device, a `per: socket` tier one per CPU socket, and so on.
//   port         a tier instance's read side or write side; each is a resource.
//   resource     something with a capacity in bytes/s that copies share: a tier port, one
//                direction of a link instance, or both directions of a half-duplex one;
//                a full-duplex link whose directions slow each other (duplex_efficiency
//                below 1) has a third: both directions together; a staged route has one
//                per device: its bounce buffers, at the route's chained rate.
//   engine group the copy engines of one link instance in one direction: at most
//                `copy_engines` transfers cross it at once, the rest queue in FIFO order.
//   path         what a transfer between two tiers for one device crosses: the source read
//                port, each link direction, each staging tier's ports, the destination
//                write port; its engine groups; and its route.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "hw_models/topology.h"

namespace tierflow::hw {

enum class ResourceKind { kTierRead, kTierWrite, kLink };

struct ResourceInfo {
  ResourceKind kind = ResourceKind::kLink;
  size_t index = 0;  ///< tier or link index in the topology
  int instance = 0;
  bool forward = true;  ///< link direction a->b (both, for a half-duplex link)
  std::string name;     ///< "pcie[3] hbm->rc", "ddr[0] read"
  double capacity = 0;  ///< bytes/s: the port's bandwidth or the link direction's achievable
};

struct EngineGroup {
  int capacity = 1;
  size_t link = 0;
  int instance = 0;
  bool forward = true;
  uint32_t resource = 0;  ///< the link-direction resource
  std::string name;       ///< "pcie[0] rc->hbm"
};

struct FabricPath {
  std::vector<uint32_t> resources;  ///< resources, in route order
  std::vector<uint32_t> engines;    ///< engine groups, in route order
  std::vector<uint32_t> links;      ///< link-direction resources only (timeline lanes)
  const Route* route = nullptr;     ///< bandwidth alone, setup latency
};

class Fabric {
 public:
  /// A resource for every tier port and link direction instance, an engine group for every
  /// link direction instance.
  explicit Fabric(const Topology& t);

  /// Global device number -> (device class, index within the class).
  [[nodiscard]] size_t device_class(int device) const { return dev_class_[size_t(device)]; }
  [[nodiscard]] int device_index(int device) const { return dev_index_[size_t(device)]; }
  [[nodiscard]] int devices() const { return static_cast<int>(dev_class_.size()); }

  /// Instance of tier `tier` that device `device` uses.
  [[nodiscard]] int tier_instance(size_t tier, int device) const;
  /// Memory ledger slot of that instance (tiers and their instances numbered densely).
  [[nodiscard]] uint32_t tier_slot(size_t tier, int device) const {
    return tier_base_[tier] + static_cast<uint32_t>(tier_instance(tier, device));
  }
  [[nodiscard]] uint32_t tier_slots() const { return tier_base_.back(); }
  /// Tier index and instance of a slot.
  [[nodiscard]] std::pair<size_t, int> slot_tier(uint32_t slot) const;
  [[nodiscard]] std::string slot_name(uint32_t slot) const;

  /// The path of a transfer from tier `from` to tier `to` for `device`; nullptr when the
  /// topology has no route between them.
  /// Paths are found on first use (not thread-safe).
  const FabricPath* path(size_t from, size_t to, int device) const;
  /// The path of a copy from per-device tier `tier` of device `src` to the same tier of
  /// device `dst` over the tier's peer route: the hops out to the route's turning point
  /// (the vertex of widest scope it reaches, first of equals: the switch it goes out to
  /// and back from, or the peer tier of a direct link) are `src`'s instances, the hops
  /// after it `dst`'s. Where the turning point is not one instance for both (devices of
  /// two hosts whose switch is per host), the first of the tier's wider peer routes
  /// (Topology::wider_peers) that joins them, unless `wider` is false (collectives, which
  /// are timed over the peer route alone). nullptr when the topology has no peer route
  /// for the tier, when src == dst, or when no route joins them.
  const FabricPath* peer_path(size_t tier, int src, int dst, bool wider = true) const;

  [[nodiscard]] const std::vector<ResourceInfo>& resources() const { return info_; }
  [[nodiscard]] const std::vector<EngineGroup>& engines() const { return engines_; }
  [[nodiscard]] const Topology& topology() const { return t_; }

 private:
  uint32_t port(size_t tier, int instance, bool write) const {
    return port_base_[tier] + static_cast<uint32_t>(instance) * 2 + (write ? 1 : 0);
  }
  /// Flow resources per link instance: 1 for a half-duplex link (both directions), 2 for a
  /// full-duplex one (a direction each), 3 when its directions also share a capacity
  /// (duplex_efficiency below 1: the third, after the two directions).
  static uint32_t link_stride(const Link& l) {
    if (l.duplex == Duplex::kHalf) return 1;
    return l.duplex_efficiency < 1.0 ? 3 : 2;
  }

  const Topology& t_;
  std::vector<size_t> dev_class_;
  std::vector<int> dev_index_;
  std::vector<uint32_t> tier_base_;  ///< ledger slot of instance 0; back() = total
  std::vector<uint32_t> port_base_;  ///< flow resource of instance 0's read port
  std::vector<uint32_t> link_base_;  ///< flow resource of instance 0's forward direction;
                                     ///< link_stride() per instance
  std::vector<uint32_t> engine_base_;
  static constexpr uint32_t kNoStaging = UINT32_MAX;
  /// Per route (Topology::routes index): the resource of device 0's staging buffers, one
  /// per device after it; kNoStaging for a route that is not staged.
  std::vector<uint32_t> staged_base_;
  std::vector<ResourceInfo> info_;
  std::vector<EngineGroup> engines_;
  mutable std::deque<FabricPath> paths_;     ///< stable addresses
  mutable std::vector<int32_t> path_index_;  ///< [device][from * tiers + to] -> paths_, -1 unknown, -2 none
  mutable std::map<std::tuple<size_t, int, int, bool>, int32_t>
      peer_index_;  ///< (tier, src, dst, wider) -> paths_, -2 none
  /// Whether peer route `r` joins the two devices: its turning point is one instance for
  /// both.
  bool joins(const Route& r, int src, int dst) const;
  /// The resources and engine groups of one hop of a route, the link's instance `inst`.
  void add_hop(FabricPath& p, const Hop& h, int inst) const;
};

/// "id" when a tier, link or device class has one instance, else "id[instance]".
std::string instance_name(const std::string& id, int count, int instance);

}  // namespace tierflow::hw
