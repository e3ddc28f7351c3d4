#include "sim/recorder.h"

#include <fmt/format.h>

#include <numeric>
#include <tuple>

#include "core/diagnostics.h"

namespace tierflow::sim {

namespace {

inline constexpr uint32_t kNone = UINT32_MAX;

}  // namespace

Recorder::Recorder(Timeline* tl, SimSeries* series, const hw::Fabric& fabric, const Workload& w,
                   const Plan& plan)
    : tl_(tl), sink_(series), fabric_(fabric), w_(w), plan_(plan) {
  if (sink_ != nullptr) sink_link_.assign(fabric.resources().size(), kNone);
  if (tl_ == nullptr) return;
  const size_t n = plan.programs.size();
  device_pid_.resize(n);
  compute_.resize(n);
  device_lanes_.resize(n);
  copy_tracks_.resize(n);
  arrows_.resize(n);
  for (size_t p = 0; p < n; ++p) {
    const int dev = static_cast<int>(plan.programs[p].device);
    // A device the topology lacks is reported by the simulator's checks, which run after
    // this: name it without a class rather than look one up.
    std::string name = fmt::format("device {}", dev);
    if (dev >= 0 && dev < fabric.devices()) {
      const hw::Device& d = fabric.topology().devices[fabric.device_class(dev)];
      name = fmt::format("device {} ({}[{}])", dev, d.id, fabric.device_index(dev));
    }
    device_pid_[p] = tl_->process(name, dev);
    compute_[p] = tl_->track(device_pid_[p], "compute", 0);
  }
  links_pid_ = tl_->process("links", fabric.devices());
  memory_pid_ = tl_->process("memory", fabric.devices() + 1);
  link_lanes_.resize(fabric.resources().size());
  link_tracks_.resize(fabric.resources().size());
  // Counter names are built once: counters are sampled on the hot path.
  for (const hw::ResourceInfo& r : fabric.resources()) {
    rate_series_.push_back(tl_->series(links_pid_, fmt::format("{} GB/s", r.name)));
  }
}

void Recorder::begin(const std::vector<size_t>& tier_map) {
  const uint32_t slots = fabric_.tier_slots();
  kinds_mask_.assign(slots, 0);
  held_.assign(slots, {});
  sunk_.assign(slots, {});
  const auto bit = [](size_t kind) { return uint32_t{1} << kind; };
  const auto tensor_bit = [&](uint32_t t) {
    return t < w_.tensors.size() ? bit(size_t(w_.tensors[t].kind)) : 0;
  };
  const size_t device_tier = tier_map[plan_.device_tier];
  for (const Program& prog : plan_.programs) {
    const int dev = static_cast<int>(prog.device);
    const uint32_t dev_slot = fabric_.tier_slot(device_tier, dev);
    for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
      if (w_.tensors[t].origin != kExternal) continue;
      const uint32_t home = plan_.home[t];
      kinds_mask_[home == plan_.device_tier ? dev_slot : fabric_.tier_slot(tier_map[home], dev)] |=
          tensor_bit(t);
    }
    // A host step's outputs and workspace, and a host prefetch's copy, are on the host tier.
    const uint32_t host_slot = plan_.host_tier < tier_map.size()
                                   ? fabric_.tier_slot(tier_map[plan_.host_tier], dev)
                                   : dev_slot;
    for (const Step& s : prog.steps) {
      const uint32_t slot = s.host ? host_slot : dev_slot;
      switch (s.kind) {
        case StepKind::kCompute: {
          if (s.target >= w_.ops.size()) break;
          const Op& op = w_.ops[s.target];
          for (uint32_t t : op.outputs) kinds_mask_[slot] |= tensor_bit(t);
          if (op.workspace > 0) kinds_mask_[slot] |= bit(kWorkspaceKind);
          break;
        }
        case StepKind::kPrefetch:
          kinds_mask_[slot] |= tensor_bit(s.target);
          break;
        case StepKind::kStore:
          if (s.tier < tier_map.size()) {
            kinds_mask_[fabric_.tier_slot(tier_map[s.tier], dev)] |= tensor_bit(s.target);
          }
          break;
        case StepKind::kDetach:
          break;
      }
    }
  }
  std::vector<std::string_view> keys;
  if (tl_ != nullptr) {
    level_series_.assign(slots, 0);
    kind_series_.assign(slots, 0);
  }
  if (sink_ != nullptr) sink_tier_.assign(slots, kNone);
  for (uint32_t s = 0; s < slots; ++s) {
    if (kinds_mask_[s] == 0) continue;  // the plan never touches this instance
    const std::string name = fabric_.slot_name(s);
    if (tl_ != nullptr) {
      keys.clear();
      for (size_t k = 0; k < kKindSlots; ++k) {
        if ((kinds_mask_[s] & bit(k)) != 0) keys.push_back(kKindSlotNames[k]);
      }
      level_series_[s] = tl_->series(memory_pid_, fmt::format("{} bytes", name));
      kind_series_[s] = tl_->series(memory_pid_, fmt::format("{} bytes by kind", name), keys);
    }
    if (sink_ != nullptr) {
      sink_tier_[s] = static_cast<uint32_t>(sink_->tiers.size());
      TierSeries& ts = sink_->tiers.emplace_back();
      ts.name = name;
      std::tie(ts.tier, ts.instance) = fabric_.slot_tier(s);
      ts.capacity = fabric_.topology().usable(ts.tier);
      ts.kinds = kinds_mask_[s];
    }
  }
}

void Recorder::held(uint32_t slot, uint32_t what, uint64_t bytes, bool add) {
  uint64_t& level = held_[slot][kind_of(what)];
  TF_ASSERT(add || level >= bytes, "slot {} releases more bytes of a kind than it holds", slot);
  level = add ? level + bytes : level - bytes;
}

TrackId Recorder::copy_track(int program, uint32_t lane) {
  auto& tracks = copy_tracks_[size_t(program)];
  while (tracks.size() <= lane) {
    tracks.push_back(tl_->track(device_pid_[size_t(program)],
                                fmt::format("transfers {}", tracks.size()),
                                1 + static_cast<int>(tracks.size())));
  }
  return tracks[lane];
}

TrackId Recorder::link_track(uint32_t resource, uint32_t lane) {
  auto& tracks = link_tracks_[resource];
  while (tracks.size() <= lane) {
    tracks.push_back(tl_->track(
        links_pid_, fmt::format("{} #{}", fabric_.resources()[resource].name, tracks.size()),
        static_cast<int>(resource * 64 + tracks.size())));
  }
  return tracks[lane];
}

void Recorder::compute(int program, Time start, Time end, uint32_t op, uint32_t step) {
  if (sink_ != nullptr) sink_->compute.push_back({uint32_t(program), step, op, start, end});
  if (tl_ == nullptr) return;
  const TrackId track = compute_[size_t(program)];
  tl_->slice(track, start, end, w_.ops[op].name, "compute", op_args(op, step));
  for (const Arrow& a : arrows_[size_t(program)]) {
    tl_->flow(a.id, a.from, a.from_ps, track, start, "prefetch");
  }
  arrows_[size_t(program)].clear();
}

void Recorder::host_compute(int program, Time start, Time end, uint32_t op, uint32_t step) {
  if (tl_ == nullptr) return;
  if (host_.empty()) host_.assign(plan_.programs.size(), 0);
  TrackId& track = host_[size_t(program)];
  if (track == 0) track = tl_->track(device_pid_[size_t(program)], "host CPU", 0);
  tl_->slice(track, start, end, w_.ops[op].name, "host compute", op_args(op, step));
}

void Recorder::stall(int program, uint32_t step, Time start, Time end, bool memory,
                     std::string_view why) {
  if (sink_ != nullptr) sink_->stalls.push_back({uint32_t(program), step, start, end, memory});
  if (tl_ == nullptr) return;
  const Arg args[] = {{"cause", why}};
  tl_->slice(compute_[size_t(program)], start, end, memory ? "wait: memory" : "wait: transfer",
             "stall", args);
}

void Recorder::waited(int program, uint32_t step, uint32_t transfer, Time start, Time end) {
  if (sink_ != nullptr && end > start) {
    sink_->waits.push_back({uint32_t(program), step, transfer, start, end});
  }
}

uint32_t Recorder::transfer_start(int program, const hw::FabricPath& path) {
  uint32_t h;
  if (free_open_.empty()) {
    h = static_cast<uint32_t>(open_.size());
    open_.emplace_back();
  } else {
    h = free_open_.back();
    free_open_.pop_back();
  }
  // Filled in place: a reused handle keeps its vectors' memory.
  Open& o = open_[h];
  o.program = program;
  o.device_lane = device_lanes_[size_t(program)].acquire();
  o.links.assign(path.links.begin(), path.links.end());
  o.lanes.clear();
  for (uint32_t r : path.links) o.lanes.push_back(link_lanes_[r].acquire());
  return h;
}

TrackId Recorder::transfer_end(uint32_t handle, const TransferRecord& x) {
  Open& o = open_[handle];
  const Tensor& t = w_.tensors[x.tensor];
  std::string& name = name_;
  name = x.kind == StepKind::kPrefetch ? "prefetch " : "store ";
  name += t.name;
  const Arg args[] = {{"tensor", uint64_t{x.tensor}},
                      {"bytes", x.bytes},
                      {"from", fabric_.topology().tiers[x.from].id},
                      {"to", fabric_.topology().tiers[x.to].id},
                      {"step", uint64_t{x.step}},
                      {"event", uint64_t{x.event}},
                      {"queued_us", static_cast<double>(x.start - x.issue) * 1e-6},
                      {"setup_us", static_cast<double>(x.active - x.start) * 1e-6}};
  const std::string_view cat = x.kind == StepKind::kPrefetch ? "prefetch" : "store";
  const TrackId dev = copy_track(o.program, o.device_lane);
  tl_->slice(dev, x.start, x.end, name, cat, args);
  device_lanes_[size_t(o.program)].release(o.device_lane);
  // The link lanes draw the same transfer again under the same name; its arguments are
  // on the device lane only (they would be the same, and they are most of the bytes).
  for (size_t i = 0; i < o.links.size(); ++i) {
    tl_->slice(link_track(o.links[i], o.lanes[i]), x.start, x.end, name, cat);
    link_lanes_[o.links[i]].release(o.lanes[i]);
  }
  free_open_.push_back(handle);
  return dev;
}

void Recorder::arrow(TrackId from, Time from_ps, uint64_t id, int program) {
  if (tl_ == nullptr) return;
  arrows_[size_t(program)].push_back(Arrow{from, from_ps, id});
}

void Recorder::tier_level(uint32_t slot, Time t, uint64_t bytes) {
  if (slot >= kinds_mask_.size() || kinds_mask_[slot] == 0) return;
  const std::array<uint64_t, kKindSlots>& held = held_[slot];
  TF_ASSERT(std::accumulate(held.begin(), held.end(), uint64_t{0}) == bytes,
            "'{}' holds {} bytes, its kinds add up to another number", fabric_.slot_name(slot),
            bytes);
  const uint32_t mask = kinds_mask_[slot];
  if (tl_ != nullptr) {
    tl_->counter(level_series_[slot], t, static_cast<double>(bytes));
    values_.clear();
    for (size_t k = 0; k < kKindSlots; ++k) {
      if ((mask >> k & 1) != 0) values_.push_back(static_cast<double>(held[k]));
    }
    tl_->counter(kind_series_[slot], t, values_);
  }
  if (sink_ != nullptr) {
    std::array<uint64_t, kKindSlots>& sunk = sunk_[slot];
    TierSeries& ts = sink_->tiers[sink_tier_[slot]];
    for (size_t k = 0; k < kKindSlots; ++k) {
      if (held[k] == sunk[k]) continue;
      sunk[k] = held[k];
      ts.changes.push_back({t, held[k], uint32_t(k)});
    }
  }
}

void Recorder::link_rate(uint32_t resource, Time t, double bytes_per_s) {
  const hw::ResourceInfo& r = fabric_.resources()[resource];
  if (r.kind != ResourceKind::kLink) return;
  if (tl_ != nullptr) tl_->counter(rate_series_[resource], t, bytes_per_s * 1e-9);
  if (sink_ == nullptr) return;
  uint32_t& index = sink_link_[resource];
  if (index == kNone) {
    index = static_cast<uint32_t>(sink_->links.size());
    LinkSeries& ls = sink_->links.emplace_back();
    ls.name = r.name;
    ls.resource = resource;
    ls.link = r.index;
    ls.instance = r.instance;
    ls.forward = r.forward;
  }
  std::vector<RateChange>& changes = sink_->links[index].changes;
  if (changes.empty() ? bytes_per_s != 0 : changes.back().bytes_per_s != bytes_per_s) {
    changes.push_back({t, bytes_per_s});
  }
}

void Recorder::error(int program, Time t, std::string_view message) {
  if (tl_ == nullptr) return;
  const Arg args[] = {{"message", message}};
  tl_->instant(compute_[size_t(program)], t, "error", args);
}

void Recorder::finish(const hw::FlowNetwork& net) {
  if (sink_ == nullptr) return;
  for (LinkSeries& ls : sink_->links) ls.capacity = net.capacity(ls.resource);
}

}  // namespace tierflow::sim
