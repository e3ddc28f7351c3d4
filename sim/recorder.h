// What the simulator draws on a timeline, in its own terms: compute slices, stalls,
// transfers on per-device and per-link lanes, tier levels (in total and by tensor kind) and
// link rates as counters, and arrows from each prefetch to the step that waited for it.
// The same samples fill a SimSeries (sim/series.h) when one is given. Tracks are created
// when first used; tier counters exist only for the tier instances the plan touches. With
// neither a Timeline nor a SimSeries it records nothing.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/fabric.h"
#include "hw_models/flows.h"
#include "sim/models/ledger.h"
#include "sim/series.h"
#include "sim/simulator.h"
#include "sim/timeline.h"

namespace tierflow::sim {

class Recorder {
 public:
  Recorder(Timeline* tl, SimSeries* series, const hw::Fabric& fabric, const Workload& w,
           const Plan& plan);
  /// Whether anything is recorded: the simulator calls the methods below only then.
  [[nodiscard]] bool on() const { return tl_ != nullptr || sink_ != nullptr; }
  /// Whether a timeline is drawn: transfers, lanes and arrows are drawn only then.
  [[nodiscard]] bool drawing() const { return tl_ != nullptr; }

  /// Once the plan's tiers are resolved (`tier_map`: plan tier -> topology tier, devices
  /// checked): the tier instances the plan touches and the kinds each may hold, read from
  /// its homes and steps, and their counters.
  void begin(const std::vector<size_t>& tier_map);
  /// `bytes` of `what` (a tensor id, or op | kWorkspaceBit) enter slot `slot` (or leave it,
  /// with `add` false). Levels are sampled by tier_level().
  void held(uint32_t slot, uint32_t what, uint64_t bytes, bool add);

  void compute(int program, Time start, Time end, uint32_t op, uint32_t step);
  /// A host step (core/plan.h) of `program` ran op `op` in [start, end]: drawn on its
  /// device's "host CPU" track (made when first used).
  void host_compute(int program, Time start, Time end, uint32_t op, uint32_t step);
  /// Compute step `step` of `program` could not start in [start, end].
  void stall(int program, uint32_t step, Time start, Time end, bool memory, std::string_view why);
  /// Compute step `step` of `program` waited in [start, end] for transfer `transfer`.
  void waited(int program, uint32_t step, uint32_t transfer, Time start, Time end);
  /// Takes lanes for a transfer that starts now; returns a handle for transfer_end().
  uint32_t transfer_start(int program, const hw::FabricPath& path);
  /// Draws the finished transfer and frees its lanes; returns the device lane's track.
  TrackId transfer_end(uint32_t handle, const TransferRecord& x);
  /// An arrow from a prefetch drawn on `from` starting at `from_ps` to the compute step of
  /// `program` starting now; drawn when that step's slice is.
  void arrow(TrackId from, Time from_ps, uint64_t id, int program);
  /// A sample of slot `slot`, whose ledger level is `bytes`; ignored for a slot the plan
  /// does not touch.
  void tier_level(uint32_t slot, Time t, uint64_t bytes);
  void link_rate(uint32_t resource, Time t, double bytes_per_s);
  void error(int program, Time t, std::string_view message);
  /// At the end of the run: the link capacities of the series.
  void finish(const hw::FlowNetwork& net);

 private:
  struct Open {
    int program = 0;
    uint32_t device_lane = 0;
    std::vector<uint32_t> links;  ///< link resources
    std::vector<uint32_t> lanes;  ///< lane on each
    TrackId device_track = 0;
  };
  TrackId compute_track(int program);
  /// A compute slice's arguments: op, step, kind, FLOPs, bytes and layer.
  [[nodiscard]] std::array<Arg, 6> op_args(uint32_t op, uint32_t step) const {
    const Op& o = w_.ops[op];
    return {{{"op", uint64_t{op}},
             {"step", uint64_t{step}},
             {"kind", name_of(o.kind)},
             {"flops", o.flops},
             {"bytes", o.bytes},
             {"layer", int64_t{o.layer}}}};
  }
  TrackId copy_track(int program, uint32_t lane);
  TrackId link_track(uint32_t resource, uint32_t lane);

  [[nodiscard]] size_t kind_of(uint32_t what) const {
    return (what & kWorkspaceBit) != 0 ? kWorkspaceKind : size_t(w_.tensors[what].kind);
  }

  Timeline* tl_;
  SimSeries* sink_;
  const hw::Fabric& fabric_;
  const Workload& w_;
  const Plan& plan_;
  uint32_t links_pid_ = 0;
  uint32_t memory_pid_ = 0;
  std::vector<uint32_t> device_pid_;
  std::vector<TrackId> compute_;
  std::vector<TrackId> host_;  ///< per program: its host CPU track, 0 until first used
  std::vector<Lanes> device_lanes_;
  std::vector<std::vector<TrackId>> copy_tracks_;
  std::vector<Lanes> link_lanes_;
  std::vector<std::vector<TrackId>> link_tracks_;
  std::vector<uint32_t> kinds_mask_;  ///< per tier slot: kind slots it may hold; 0 = untouched
  std::vector<std::array<uint64_t, kKindSlots>> held_;  ///< per tier slot: bytes per kind now
  std::vector<std::array<uint64_t, kKindSlots>> sunk_;  ///< per tier slot: last in sink_
  std::vector<uint32_t> sink_tier_;                     ///< per tier slot: index in sink_->tiers
  std::vector<uint32_t> sink_link_;                     ///< per resource: index in sink_->links
  std::vector<SeriesId> level_series_;  ///< counter series per tier slot (total bytes)
  std::vector<SeriesId> kind_series_;   ///< counter series per tier slot (bytes by kind)
  std::vector<double> values_;          ///< scratch of tier_level
  std::vector<SeriesId> rate_series_;   ///< counter series per link resource
  std::vector<Open> open_;
  std::vector<uint32_t> free_open_;
  struct Arrow {
    TrackId from;
    Time from_ps;
    uint64_t id;
  };
  std::vector<std::vector<Arrow>> arrows_;  ///< per program, for the running compute step
  std::string name_;                        ///< scratch of transfer_end
};

}  // namespace tierflow::sim
