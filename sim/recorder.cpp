#include "sim/recorder.h"

#include <fmt/format.h>

namespace tierflow::sim {

Recorder::Recorder(Timeline* tl, const Fabric& fabric, const Workload& w, const Plan& plan)
    : tl_(tl), fabric_(fabric), w_(w), plan_(plan) {
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
  for (uint32_t s = 0; s < fabric.tier_slots(); ++s) {
    level_series_.push_back(tl_->series(memory_pid_, fmt::format("{} bytes", fabric.slot_name(s))));
  }
  for (const ResourceInfo& r : fabric.resources()) {
    rate_series_.push_back(tl_->series(links_pid_, fmt::format("{} GB/s", r.name)));
  }
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
  if (tl_ == nullptr) return;
  const Op& o = w_.ops[op];
  const Arg args[] = {{"op", uint64_t{op}}, {"step", uint64_t{step}}, {"kind", name_of(o.kind)},
                      {"flops", o.flops},   {"bytes", o.bytes},       {"layer", int64_t{o.layer}}};
  const TrackId track = compute_[size_t(program)];
  tl_->slice(track, start, end, o.name, "compute", args);
  for (const Arrow& a : arrows_[size_t(program)]) {
    tl_->flow(a.id, a.from, a.from_ps, track, start, "prefetch");
  }
  arrows_[size_t(program)].clear();
}

void Recorder::stall(int program, Time start, Time end, bool memory, std::string_view why) {
  if (tl_ == nullptr) return;
  const Arg args[] = {{"cause", why}};
  tl_->slice(compute_[size_t(program)], start, end, memory ? "wait: memory" : "wait: transfer",
             "stall", args);
}

uint32_t Recorder::transfer_start(int program, const Path& path) {
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
  if (tl_ == nullptr) return;
  tl_->counter(level_series_[slot], t, static_cast<double>(bytes));
}

void Recorder::link_rate(uint32_t resource, Time t, double bytes_per_s) {
  if (tl_ == nullptr) return;
  if (fabric_.resources()[resource].kind != ResourceKind::kLink) return;
  tl_->counter(rate_series_[resource], t, bytes_per_s * 1e-9);
}

void Recorder::error(int program, Time t, std::string_view message) {
  if (tl_ == nullptr) return;
  const Arg args[] = {{"message", message}};
  tl_->instant(compute_[size_t(program)], t, "error", args);
}

}  // namespace tierflow::sim
