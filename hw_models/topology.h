// The memory hierarchy a plan runs on: devices, memory tiers, switches and links, and
// the routes between tiers. Loaded from YAML (hw_models/loader.h), read-only after.
//
// Glossary
//   tier       a kind of memory (hbm, ddr, lpddr, cxl, pool, ssd) with capacity, port
//              bandwidths and latency; `per` says how many instances exist.
//   scope      device | socket | host | supernode: one instance per device, per CPU
//              socket, per host, or one shared by the whole supernode.
//   switch     a graph vertex that only forwards (root complex, NVSwitch, UB fabric).
//   link       an edge between two tiers or switches, with a bandwidth per direction;
//              [t, t] for a per-device tier t is a direct device-to-peer link.
//   attach     a tier whose memory port sits directly on a switch (no separate link).
//   route      the ordered link hops a transfer between two tiers crosses.
//   peer route a route from a per-device tier to the same tier of another device.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kinds.h"
#include "core/schema.h"
#include "core/units.h"

namespace tierflow::hw {

/// Limits of a topology (docs/cli.md, "Limits"): a device class's count, hosts and
/// supernodes (after `--set` and `serve --nodes`: CloudMatrix384 x 1,024 is 393,216),
/// sockets per host, a link direction's copy engines and a route's staging buffers.
inline constexpr int kMaxDevices = 1 << 20;
inline constexpr int kMaxSocketsPerHost = 64;
inline constexpr int kMaxCopyEngines = 1024;

/// kGddr: a graphics card's own memory (GDDR6, GDDR6X, GDDR7), a device tier like kHbm.
enum class TierKind { kHbm, kDdr, kLpddr, kCxl, kPool, kSsd, kGddr };
inline constexpr std::array<std::string_view, 7> kTierKindNames = {
    "hbm", "ddr", "lpddr", "cxl", "pool", "ssd", "gddr"};

/// kSupernode: one per supernode (system.supernodes of them; `serve --nodes` copies make
/// more). kCluster: one for the whole system, and one for all the copies of it that `serve
/// --nodes` makes (a scale-out network joining them).
enum class Scope { kDevice, kSocket, kHost, kSupernode, kCluster };
inline constexpr std::array<std::string_view, 5> kScopeNames = {"device", "socket", "host",
                                                                "supernode", "cluster"};

/// kMemcpy: copies by CPU threads between two regions of one memory (the CPU replay
/// backend's calibrated topology).
enum class LinkKind { kPcie, kHccs, kUb, kNvlink, kC2c, kCxl, kNvme, kXgmi, kRdma, kMemcpy };
inline constexpr std::array<std::string_view, 10> kLinkKindNames = {
    "pcie", "hccs", "ub", "nvlink", "c2c", "cxl", "nvme", "xgmi", "rdma", "memcpy"};

enum class Duplex { kFull, kHalf };
inline constexpr std::array<std::string_view, 2> kDuplexNames = {"full", "half"};

/// The CPU of each socket, as a compute engine for the ops a plan places on the host
/// (host compute steps, core/plan.h): FlexGen's attention next to a host-resident KV cache.
/// Absent (no peak rate at all) in a topology that does not describe it: such a plan is
/// refused there.
struct HostCpu {
  std::string description;
  std::string source;
  /// The tier the CPU's ops read and write: a `per: socket`, `per: host` or `per:
  /// supernode` tier (the plan's host tier).
  std::string tier;
  /// Per socket, all its cores together; 0 = not supported.
  std::array<FlopRate, kDtypeNames.size()> peak{};
  double compute_efficiency = 1.0;  ///< fraction of peak its ops reach
  double memory_efficiency = 1.0;   ///< fraction of the tier's read bandwidth its ops reach
  Duration launch_overhead;         ///< fixed cost per op (thread-pool dispatch)
  schema::Origins origins;

  /// Whether the topology describes a host CPU (some peak rate is given).
  [[nodiscard]] bool present() const;
  /// The dtypes with a peak rate, as Device::peak_dtypes().
  [[nodiscard]] std::string peak_dtypes() const;
};

/// How the devices of a supernode are grouped into hosts and CPU sockets.
struct System {
  int hosts = 1;
  int sockets_per_host = 1;
  /// Supernodes (racks, pods) the hosts make up, each with its own `per: supernode`
  /// switches, links and tiers; `hosts` divides evenly among them.
  int supernodes = 1;
  std::string source;
  HostCpu cpu;
  schema::Origins origins;
};

/// A class of identical compute devices.
struct Device {
  std::string id;
  std::string description;
  std::string source;
  int count = 0;
  std::string local_tier;
  std::array<FlopRate, kDtypeNames.size()> peak{};        ///< 0 = not supported
  std::array<double, kOpKindNames.size()> compute_eff{};  ///< 0 = use default_compute_eff
  std::array<double, kOpKindNames.size()> memory_eff{};   ///< 0 = use default_memory_eff
  /// Per weight dtype: fraction of the compute rate reached by ops that dequantize weights
  /// of that dtype on the fly (weight-only quantization); 0 = 1 (the dequantization hides
  /// behind the matrix math).
  std::array<double, kDtypeNames.size()> dequant_eff{};
  double default_compute_eff = 1.0;
  double default_memory_eff = 1.0;
  Duration launch_overhead;
  /// A runtime that issues a program's steps from one host thread, in program order,
  /// without waiting for the device (PyTorch eager): the host time it spends on each
  /// compute step, prefetch or store, and detach. A step reaches the device no earlier than
  /// the host has issued every step before it, and a compute step lasts at least its
  /// dispatch. 0 = a runtime whose host keeps ahead of the device.
  Duration dispatch_compute;
  Duration dispatch_copy;
  Duration dispatch_detach;
  /// Bytes of each device's local tier that programs cannot use: the runtime's context,
  /// libraries' workspaces, communication buffers.
  Bytes reserved;
  schema::Origins origins;

  /// Fraction of peak reached by ops of `kind`.
  [[nodiscard]] double compute_efficiency(OpKind kind) const;
  /// Fraction of local-tier bandwidth reached by ops of `kind`.
  [[nodiscard]] double memory_efficiency(OpKind kind) const;
  /// Fraction of the compute rate kept by ops dequantizing `weights` on the fly.
  [[nodiscard]] double dequant_efficiency(Dtype weights) const;
  /// The dtypes with a peak rate, comma-separated ("fp32, bf16, fp16, fp8"), for messages.
  [[nodiscard]] std::string peak_dtypes() const;
};

struct Tier {
  std::string id;
  std::string description;
  std::string source;
  TierKind kind = TierKind::kHbm;
  Scope per = Scope::kDevice;
  Bytes capacity;  ///< per instance
  Bandwidth read_bandwidth;
  Bandwidth write_bandwidth;
  Duration latency;        ///< read access latency
  Duration write_latency;  ///< defaults to latency when not given
  std::string attach;      ///< switch id, or empty
  schema::Origins origins;
};

struct Switch {
  std::string id;
  std::string description;
  std::string source;
  std::string kind;
  Scope per = Scope::kSupernode;
  Duration latency;
  schema::Origins origins;
};

struct Link {
  std::string id;
  std::string description;
  std::string source;
  LinkKind kind = LinkKind::kPcie;
  std::vector<std::string> endpoints;  ///< exactly two: [a, b]
  Scope per = Scope::kDevice;
  Bandwidth bandwidth;              ///< peak a->b (and b->a unless bandwidth_reverse)
  Bandwidth bandwidth_reverse;      ///< peak b->a; 0 = same as bandwidth
  double efficiency = 1.0;          ///< achievable fraction a->b
  double efficiency_reverse = 0.0;  ///< 0 = same as efficiency
  Duration latency;
  Duplex duplex = Duplex::kFull;
  /// Full duplex: the fraction of both directions' achievable bandwidth the link reaches
  /// while both carry traffic (1: the directions are independent).
  double duplex_efficiency = 1.0;
  int copy_engines = 1;  ///< concurrent transfers per direction
  Duration dma_setup;    ///< paid once per transfer crossing this link
  /// Setup a transfer a->b (b->a) pays on top of dma_setup when it starts while the link
  /// carries a transfer the other way: measured, e.g. a GPU's device-to-host copy waits
  /// behind a host-to-device stream. Each direction its own; 0 = none.
  Duration contended_setup;
  Duration contended_setup_reverse;
  schema::Origins origins;

  /// contended_setup of one direction (forward = a->b).
  [[nodiscard]] Duration contended(bool forward) const {
    return forward ? contended_setup : contended_setup_reverse;
  }
  /// Achievable bandwidth in one direction (forward = a->b).
  [[nodiscard]] Bandwidth effective(bool forward) const;
  /// Peak bandwidth in one direction.
  [[nodiscard]] Bandwidth peak(bool forward) const;
};

/// A user-pinned route.
struct RoutePin {
  std::string from;
  std::string to;
  std::vector<std::string> via;  ///< link ids in order
  /// A staged copy: chunks of `buffer` bytes through `buffers` bounce buffers in the tiers
  /// the route passes through (0: cut-through, one stream end to end).
  Bytes buffer;
  int buffers = 1;
  schema::Origins origins;
};

/// One link crossed in one direction.
struct Hop {
  size_t link = 0;      ///< index into Topology::links
  bool forward = true;  ///< a->b
};

/// A graph vertex: a tier or a switch.
struct Vertex {
  bool is_switch = false;
  size_t index = 0;  ///< into tiers or switches
  auto operator<=>(const Vertex&) const = default;
};

/// One step of a route: the vertex reached and the edge taken to reach it
/// (link = -1: the free move between a tier and the switch it attaches to).
struct Step {
  Vertex to;
  int link = -1;
  bool forward = true;
};

/// The path of a transfer between two tiers.
struct Route {
  size_t from = 0;                    ///< tier index
  size_t to = 0;                      ///< tier index; equal to `from` for a peer route
  std::vector<Step> steps;            ///< the walk from `from`; the last step reaches `to`
  std::vector<Hop> hops;              ///< derived: the links crossed, in order
  std::vector<size_t> switches;       ///< derived: switches passed, in order
  std::vector<size_t> staging_tiers;  ///< derived: tiers passed through (bounce buffers)
  Bandwidth bandwidth;  ///< bottleneck: source read, links, staging tiers, destination write;
                        ///< for a staged copy, at most `buffers` / sum over legs of 1 / leg
  Duration setup;       ///< paid before the first byte: latencies and DMA setup
  bool pinned = false;
  /// A staged copy (RoutePin::buffer): each chunk crosses the legs between staging tiers
  /// one after the other, `buffers` chunks in flight; 0 buffers: cut-through.
  Bytes buffer;
  int buffers = 0;
};

struct Topology {
  std::string name;
  std::string description;
  std::string file;
  std::map<std::string, std::string> sources;  ///< citation key -> text
  System system;
  std::vector<Device> devices;
  std::vector<Tier> tiers;
  std::vector<Switch> switches;
  std::vector<Link> links;
  std::vector<RoutePin> pins;
  /// routes[from * tiers.size() + to]; empty optional when there is no path.
  std::vector<std::optional<Route>> routes;
  /// wider_peers[tier]: peer routes of the tier that turn at switches of wider scope than
  /// its peer route's, each wider than the one before: a copy between devices the narrower
  /// ones do not join (two hosts' GPUs over the scale-out network) takes the first that
  /// does. Collectives use the peer route alone.
  std::vector<std::vector<Route>> wider_peers;

  [[nodiscard]] int total_devices() const;
  [[nodiscard]] int sockets() const { return system.hosts * system.sockets_per_host; }
  /// Number of instances of something with this scope.
  [[nodiscard]] int instances(Scope s) const;
  [[nodiscard]] const Route* route(size_t from, size_t to) const;
  /// wider_peers[tier], or none (a tier out of range, routes not resolved).
  [[nodiscard]] std::span<const Route> wider_peer_routes(size_t tier) const {
    if (tier >= wider_peers.size()) return {};
    return wider_peers[tier];
  }
  /// Instance of a `scope` resource used by device `index` of device class `device`:
  /// devices are spread evenly over hosts, then over the sockets of each host.
  [[nodiscard]] int instance_of(Scope scope, size_t device, int index) const;
  [[nodiscard]] std::optional<size_t> tier_index(std::string_view id) const;
  /// Bytes of one instance of tier `tier` that plans may use: its capacity less reserved().
  [[nodiscard]] uint64_t usable(size_t tier) const;
  /// Bytes of one instance of `tier` held by the bounce buffers of staged routes through
  /// it (each device's own): not usable by plans.
  [[nodiscard]] uint64_t staging(size_t tier) const;
  /// The largest `reserved` of the devices computing from tier `tier` (0 for other tiers).
  [[nodiscard]] uint64_t reserved(size_t tier) const;
  [[nodiscard]] std::optional<size_t> device_index(std::string_view id) const;
  [[nodiscard]] std::optional<size_t> link_index(std::string_view id) const;
  [[nodiscard]] std::optional<size_t> switch_index(std::string_view id) const;
};

}  // namespace tierflow::hw
