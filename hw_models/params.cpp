#include "hw_models/params.h"

#include <fmt/format.h>

namespace tierflow::hw {

using schema::declare;
using schema::declare_at;
using schema::declare_enum;
using schema::Schema;
using schema::Spec;
using schema::ValueType;

namespace {

constexpr std::string_view kSourceDesc =
    "citation key (from `sources`) for this object's numbers that carry none of their own";

template <class Obj>
void add_common(Schema<Obj>& s, std::string_view what) {
  s.fields.push_back(
      declare("id", &Obj::id,
              Spec{.type = ValueType::kName,
                   .required = true,
                   .desc = fmt::format("unique id of this {} (unique across devices, "
                                       "tiers, switches and links)",
                                       what)}));
  s.fields.push_back(declare("description", &Obj::description,
                             Spec{.type = ValueType::kString, .desc = "free text"}));
  s.fields.push_back(declare("source", &Obj::source,
                             Spec{.type = ValueType::kString, .desc = std::string(kSourceDesc)}));
}

/// Field `f` of the object in member `part` of `Outer`, as a field of `Outer`: how an object
/// nested in another (system.cpu) is declared. `f` carries its full key (`cpu.tier`), so
/// that its messages name the key as the user writes it.
template <class Outer, class Inner>
schema::Field<Outer> nested(Inner Outer::*part, schema::Field<Inner> f) {
  schema::Field<Outer> r;
  r.key = std::move(f.key);
  r.type = f.type;
  r.required = f.required;
  r.default_text = std::move(f.default_text);
  r.description = std::move(f.description);
  r.choices = std::move(f.choices);
  r.set = [part, set = std::move(f.set)](Outer& o, const schema::Input& in) { set(o.*part, in); };
  r.get = [part, get = std::move(f.get)](const Outer& o) { return get(o.*part); };
  return r;
}

/// The host CPU's fields, under `cpu.`; none is required, as a topology need not describe
/// the CPU (the loader checks that a described one is complete).
void add_host_cpu(Schema<System>& s) {
  auto add = [&s](schema::Field<HostCpu> f) {
    s.fields.push_back(nested(&System::cpu, std::move(f)));
  };
  add(declare("cpu.description", &HostCpu::description,
              Spec{.type = ValueType::kString, .desc = "free text"}));
  add(declare("cpu.source", &HostCpu::source,
              Spec{.type = ValueType::kString,
                   .desc = "citation key for the CPU's numbers that carry none of their own "
                           "(else the system's `source`)"}));
  add(declare("cpu.tier", &HostCpu::tier,
              Spec{.type = ValueType::kRef,
                   .desc = "the tier the CPU's ops read and write: a `per: socket`, `per: host` "
                           "or `per: supernode` tier; required with a peak rate"}));
  for (size_t i = 0; i < kDtypeNames.size(); ++i) {
    add(declare_at(fmt::format("cpu.peak.{}", kDtypeNames[i]), &HostCpu::peak, i,
                   Spec{.desc = fmt::format("peak {} rate of one socket, all its cores; absent = "
                                            "unsupported",
                                            kDtypeNames[i])}));
  }
  add(declare("cpu.compute_efficiency", &HostCpu::compute_efficiency,
              Spec{.def = "1", .desc = "fraction of the peak rate the CPU's ops reach"}));
  add(declare("cpu.memory_efficiency", &HostCpu::memory_efficiency,
              Spec{.def = "1",
                   .desc = "fraction of its tier's read bandwidth the CPU's ops reach (a "
                           "STREAM-like fraction)"}));
  add(declare("cpu.launch_overhead", &HostCpu::launch_overhead,
              Spec{.def = "0ns",
                   .desc = "fixed cost added to every op on the CPU (dispatch to its threads)"}));
}

}  // namespace

const Schema<System>& system_schema() {
  static const Schema<System> kSchema = [] {
    Schema<System> r{
        "system",
        "",
        "How devices are grouped into hosts and CPU sockets, and optionally the CPU of each "
        "socket as a compute engine (`cpu`) for the ops a plan places on the host, next to "
        "the CPU's tier (FlexGen's attention beside a host-resident KV cache). An op on the "
        "CPU takes `max(flops / (cpu.peak[dtype] / socket_share * cpu.compute_efficiency), "
        "bytes / (tier.read_bandwidth / tier_share * cpu.memory_efficiency)) + "
        "cpu.launch_overhead`, where socket_share is the number of devices of the plan's "
        "device class on one socket and tier_share the number on one instance of the CPU's "
        "tier (rounded up: the busiest instance). An op without FLOPs is timed by its bytes, "
        "and one that dequantizes weights on the fly like any other (its bytes are the "
        "quantized ones; the CPU has no `dequant_efficiency`). A topology without `cpu` (no "
        "peak rate) has no host CPU: plans that compute on the host are refused there.",
        {}};
    r.fields.push_back(declare("hosts", &System::hosts,
                               Spec{.def = "1",
                                    .desc = "hosts (nodes, trays) in the supernode; every device "
                                            "class's count must divide evenly among them",
                                    .max_int = kMaxDevices}));
    r.fields.push_back(declare("sockets_per_host", &System::sockets_per_host,
                               Spec{.def = "1",
                                    .desc = "CPU sockets per host; a host's devices are spread "
                                            "evenly over its sockets",
                                    .max_int = kMaxSocketsPerHost}));
    r.fields.push_back(declare(
        "supernodes", &System::supernodes,
        Spec{.def = "1",
             .desc = "supernodes (racks, pods) the hosts make up, each with its own `per: "
                     "supernode` switches, links and tiers; `hosts` must divide evenly among "
                     "them (`serve --nodes N` multiplies it)",
             .max_int = kMaxDevices}));
    r.fields.push_back(declare("source", &System::source,
                               Spec{.type = ValueType::kString, .desc = std::string(kSourceDesc)}));
    add_host_cpu(r);
    return r;
  }();
  return kSchema;
}

const Schema<Device>& device_schema() {
  static const Schema<Device> kSchema = [] {
    Schema<Device> r{"device",
                     "devices",
                     "A class of identical GPUs or NPUs; `count` of them make up the supernode.",
                     {}};
    add_common(r, "device class");
    r.fields.push_back(declare("count", &Device::count,
                               Spec{.required = true,
                                    .desc = "number of devices of this class in the supernode",
                                    .max_int = kMaxDevices}));
    r.fields.push_back(declare("local_tier", &Device::local_tier,
                               Spec{.type = ValueType::kRef,
                                    .required = true,
                                    .desc = "the `per: device` tier the device computes from"}));
    for (size_t i = 0; i < kDtypeNames.size(); ++i) {
      r.fields.push_back(declare_at(
          fmt::format("peak.{}", kDtypeNames[i]), &Device::peak, i,
          Spec{.desc = fmt::format("dense peak {} rate; absent = unsupported", kDtypeNames[i])}));
    }
    r.fields.push_back(declare("compute_efficiency.default", &Device::default_compute_eff,
                               Spec{.def = "1",
                                    .desc = "fraction of peak FLOP/s reached by ops of a kind "
                                            "without its own entry"}));
    for (size_t i = 0; i < kOpKindNames.size(); ++i) {
      r.fields.push_back(declare_at(
          fmt::format("compute_efficiency.{}", kOpKindNames[i]), &Device::compute_eff, i,
          Spec{.desc = fmt::format("fraction of peak FLOP/s reached by {} ops", kOpKindNames[i])}));
    }
    r.fields.push_back(declare("memory_efficiency.default", &Device::default_memory_eff,
                               Spec{.def = "1",
                                    .desc = "fraction of local-tier read bandwidth reached by ops "
                                            "of a kind without its own entry"}));
    for (size_t i = 0; i < kOpKindNames.size(); ++i) {
      r.fields.push_back(declare_at(
          fmt::format("memory_efficiency.{}", kOpKindNames[i]), &Device::memory_eff, i,
          Spec{.desc = fmt::format("fraction of local-tier read bandwidth reached by {} ops",
                                   kOpKindNames[i])}));
    }
    for (Dtype d : {Dtype::kFp8, Dtype::kInt8, Dtype::kFp4, Dtype::kInt4}) {
      const std::string_view name = name_of(d);
      r.fields.push_back(declare_at(
          fmt::format("dequant_efficiency.{}", name), &Device::dequant_eff, static_cast<size_t>(d),
          Spec{.desc = fmt::format("fraction of the compute rate (peak x compute_efficiency) "
                                   "that ops reach when they dequantize {} weights on the fly "
                                   "(weight-only quantization); absent = 1: the dequantization "
                                   "hides behind the matrix math",
                                   name)}));
    }
    r.fields.push_back(declare("launch_overhead", &Device::launch_overhead,
                               Spec{.def = "0ns", .desc = "fixed cost added to every op"}));
    r.fields.push_back(declare(
        "dispatch_compute", &Device::dispatch_compute,
        Spec{.def = "0ns",
             .desc = "host time a runtime that issues steps from one thread in program order, "
                     "without waiting for the device (PyTorch eager), spends on each compute "
                     "step: no step reaches the device before the host has issued the steps "
                     "before it, and an op lasts at least this long; 0 = the host keeps ahead"}));
    r.fields.push_back(declare("dispatch_copy", &Device::dispatch_copy,
                               Spec{.def = "0ns",
                                    .desc = "that runtime's host time per prefetch or store "
                                            "(allocation and copy call)"}));
    r.fields.push_back(declare("dispatch_detach", &Device::dispatch_detach,
                               Spec{.def = "0ns", .desc = "that runtime's host time per detach"}));
    r.fields.push_back(
        declare("reserved", &Device::reserved,
                Spec{.def = "0B",
                     .desc = "bytes of each device's local tier that plans cannot use (runtime "
                             "context, libraries' workspaces, communication buffers)",
                     .zero_bytes = true}));
    return r;
  }();
  return kSchema;
}

const Schema<Tier>& tier_schema() {
  static const Schema<Tier> kSchema = [] {
    Schema<Tier> r{"tier", "tiers", "A kind of memory; `per` says how many instances exist.", {}};
    add_common(r, "tier");
    r.fields.push_back(declare_enum("kind", &Tier::kind, kTierKindNames,
                                    Spec{.required = true,
                                         .desc = "memory technology (gddr: a graphics "
                                                 "card's GDDR6, GDDR6X or GDDR7)"}));
    r.fields.push_back(declare_enum("per", &Tier::per, kScopeNames,
                                    Spec{.required = true,
                                         .desc = "instance scope: one per device, per CPU socket, "
                                                 "per host, one for the supernode, or one for "
                                                 "the cluster (the supernode's, and shared by "
                                                 "the copies `serve --nodes` makes)"}));
    r.fields.push_back(declare("capacity", &Tier::capacity,
                               Spec{.required = true,
                                    .desc = "capacity of one instance (0B: none; not for a "
                                            "device's own tier)",
                                    .zero_bytes = true}));
    r.fields.push_back(declare("read_bandwidth", &Tier::read_bandwidth,
                               Spec{.required = true,
                                    .desc = "bandwidth of one instance's port when read (the "
                                            "roofline bandwidth of a local tier)"}));
    r.fields.push_back(
        declare("write_bandwidth", &Tier::write_bandwidth,
                Spec{.required = true, .desc = "bandwidth of one instance's port when written"}));
    r.fields.push_back(declare("latency", &Tier::latency,
                               Spec{.required = true, .desc = "access latency of a read"}));
    r.fields.push_back(declare("write_latency", &Tier::write_latency,
                               Spec{.desc = "access latency of a write; defaults to `latency`"}));
    r.fields.push_back(declare("attach", &Tier::attach,
                               Spec{.type = ValueType::kRef,
                                    .desc = "switch whose fabric this tier's port sits on directly "
                                            "(a host DRAM on its root complex)"}));
    return r;
  }();
  return kSchema;
}

const Schema<Switch>& switch_schema() {
  static const Schema<Switch> kSchema = [] {
    Schema<Switch> r{
        "switch",
        "switches",
        "A vertex that only forwards: root complex, PCIe switch, NVSwitch, UB fabric or "
        "scale-out network.",
        {}};
    add_common(r, "switch");
    r.fields.push_back(declare("kind", &Switch::kind,
                               Spec{.type = ValueType::kName,
                                    .required = true,
                                    .desc = "free word: root_complex, pcie_switch, nvswitch, "
                                            "ub_switch, cxl_switch, network, ..."}));
    r.fields.push_back(declare_enum(
        "per", &Switch::per, kScopeNames,
        Spec{.required = true,
             .desc = "instance scope (a scale-out network joining this supernode to others: "
                     "cluster)"}));
    r.fields.push_back(declare("latency", &Switch::latency,
                               Spec{.def = "0ns", .desc = "forwarding latency per crossing"}));
    return r;
  }();
  return kSchema;
}

const Schema<Link>& link_schema() {
  static const Schema<Link> kSchema = [] {
    Schema<Link> r{"link",
                   "links",
                   "An interconnect between two tiers or switches, with a bandwidth per direction.",
                   {}};
    add_common(r, "link");
    r.fields.push_back(declare_enum("kind", &Link::kind, kLinkKindNames,
                                    Spec{.required = true, .desc = "interconnect technology"}));
    r.fields.push_back(declare("endpoints", &Link::endpoints,
                               Spec{.type = ValueType::kRefPair,
                                    .required = true,
                                    .desc = "[a, b]: tier or switch ids; [t, t] for a per-device "
                                            "tier t is a direct link to the same tier of a peer",
                                    .min_refs = 2,
                                    .max_refs = 2}));
    r.fields.push_back(declare_enum("per", &Link::per, kScopeNames,
                                    Spec{.required = true, .desc = "instance scope"}));
    r.fields.push_back(
        declare("bandwidth", &Link::bandwidth,
                Spec{.required = true, .desc = "peak bandwidth per direction (a->b)"}));
    r.fields.push_back(
        declare("bandwidth_reverse", &Link::bandwidth_reverse,
                Spec{.desc = "peak bandwidth b->a when it differs from `bandwidth`"}));
    r.fields.push_back(declare("efficiency", &Link::efficiency,
                               Spec{.def = "1",
                                    .desc = "achievable fraction of peak, a->b (and b->a "
                                            "unless `efficiency_reverse`)"}));
    r.fields.push_back(declare("efficiency_reverse", &Link::efficiency_reverse,
                               Spec{.desc = "achievable fraction of peak b->a"}));
    r.fields.push_back(declare("latency", &Link::latency,
                               Spec{.required = true, .desc = "one-way latency of a crossing"}));
    r.fields.push_back(declare_enum("duplex", &Link::duplex, kDuplexNames,
                                    Spec{.def = "full",
                                         .desc = "full: each direction has `bandwidth`; half: both "
                                                 "directions share one capacity"}));
    r.fields.push_back(
        declare("duplex_efficiency", &Link::duplex_efficiency,
                Spec{.def = "1",
                     .desc = "full duplex only: the fraction of both directions' achievable "
                             "bandwidth the link moves while both carry traffic (PCIe's read "
                             "requests and write data share the wires; 1 = independent)"}));
    r.fields.push_back(declare("copy_engines", &Link::copy_engines,
                               Spec{.def = "1",
                                    .desc = "transfers that can run at once per direction; more "
                                            "wait in FIFO order",
                                    .max_int = kMaxCopyEngines}));
    r.fields.push_back(declare("dma_setup", &Link::dma_setup,
                               Spec{.def = "0ns",
                                    .desc = "cost of programming a transfer that crosses this "
                                            "link, paid once before its first byte (a route pays "
                                            "the largest of its links')"}));
    r.fields.push_back(declare(
        "contended_setup", &Link::contended_setup,
        Spec{.def = "0ns",
             .desc = "setup a transfer a->b pays besides `dma_setup` when it starts while the "
                     "link carries a transfer b->a (a GPU's device-to-host copy behind a "
                     "host-to-device stream; `tierflow calibrate` measures it)"}));
    r.fields.push_back(
        declare("contended_setup_reverse", &Link::contended_setup_reverse,
                Spec{.def = "0ns",
                     .desc = "the same for a transfer b->a while the link carries one a->b (each "
                             "direction its own)"}));
    return r;
  }();
  return kSchema;
}

const Schema<RoutePin>& route_schema() {
  static const Schema<RoutePin> kSchema = [] {
    Schema<RoutePin> r{"route",
                       "routes",
                       "A pinned route; without one, routes are the widest path (ties: lowest "
                       "latency).",
                       {}};
    r.fields.push_back(
        declare("from", &RoutePin::from,
                Spec{.type = ValueType::kRef, .required = true, .desc = "source tier"}));
    r.fields.push_back(declare("to", &RoutePin::to,
                               Spec{.type = ValueType::kRef,
                                    .required = true,
                                    .desc = "destination tier (the same tier for a peer route)"}));
    r.fields.push_back(declare("via", &RoutePin::via,
                               Spec{.type = ValueType::kRefList,
                                    .required = true,
                                    .desc = "link ids in the order a transfer crosses them",
                                    .min_refs = 1,
                                    .max_refs = 32}));
    r.fields.push_back(declare(
        "buffer", &RoutePin::buffer,
        Spec{.desc = "a staged copy (a bounce buffer, e.g. NVMe to GPU without GPUDirect "
                     "Storage): the size of each buffer in the tiers the route passes "
                     "through. Each chunk crosses the legs between them one after the other, "
                     "so the route moves `buffers` / (sum over legs of 1 / leg bandwidth), at "
                     "most its bottleneck; the buffers of every device are kept out of the "
                     "staging tier's usable capacity, and must leave some of it. Absent: one "
                     "stream end to end"}));
    r.fields.push_back(declare("buffers", &RoutePin::buffers,
                               Spec{.def = "1",
                                    .desc = "staging buffers per device on this route: chunks "
                                            "in flight at once",
                                    .max_int = kMaxCopyEngines}));
    return r;
  }();
  return kSchema;
}

const std::vector<schema::TopKey>& top_level_keys() {
  static const std::vector<schema::TopKey> kKeys = {
      {"tierflow", "format tag: `hw/1`"},
      {"name", "topology name (an id)"},
      {"description", "free text"},
      {"sources", "citation key -> citation text (document, URL, measurement)"},
      {"system", "host and socket grouping, and the host CPU"},
      {"devices", "list of device classes"},
      {"tiers", "list of memory tiers"},
      {"switches", "list of switches"},
      {"links", "list of links"},
      {"routes", "list of pinned routes"},
  };
  return kKeys;
}

}  // namespace tierflow::hw
