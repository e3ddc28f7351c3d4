// What the simulator draws on a timeline, in its own terms: compute slices, stalls,
// transfers on per-device and per-link lanes, tier levels and link rates as counters,
// and arrows from each prefetch to the step that waited for it. Tracks are created when
// first used; a null Timeline records nothing.
#pragma once

#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "sim/models/fabric.h"
#include "sim/simulator.h"
#include "sim/timeline.h"

namespace tierflow::sim {

class Recorder {
 public:
  Recorder(Timeline* tl, const Fabric& fabric, const Workload& w, const Plan& plan);
  [[nodiscard]] bool on() const { return tl_ != nullptr; }

  void compute(int program, Time start, Time end, uint32_t op, uint32_t step);
  void stall(int program, Time start, Time end, bool memory, std::string_view why);
  /// Takes lanes for a transfer that starts now; returns a handle for transfer_end().
  uint32_t transfer_start(int program, const Path& path);
  /// Draws the finished transfer and frees its lanes; returns the device lane's track.
  TrackId transfer_end(uint32_t handle, const TransferRecord& x);
  /// An arrow from a prefetch drawn on `from` starting at `from_ps` to the compute step of
  /// `program` starting now; drawn when that step's slice is.
  void arrow(TrackId from, Time from_ps, uint64_t id, int program);
  void tier_level(uint32_t slot, Time t, uint64_t bytes);
  void link_rate(uint32_t resource, Time t, double bytes_per_s);
  void error(int program, Time t, std::string_view message);

 private:
  struct Open {
    int program = 0;
    uint32_t device_lane = 0;
    std::vector<uint32_t> links;  ///< link resources
    std::vector<uint32_t> lanes;  ///< lane on each
    TrackId device_track = 0;
  };
  TrackId compute_track(int program);
  TrackId copy_track(int program, uint32_t lane);
  TrackId link_track(uint32_t resource, uint32_t lane);

  Timeline* tl_;
  const Fabric& fabric_;
  const Workload& w_;
  const Plan& plan_;
  uint32_t links_pid_ = 0;
  uint32_t memory_pid_ = 0;
  std::vector<uint32_t> device_pid_;
  std::vector<TrackId> compute_;
  std::vector<Lanes> device_lanes_;
  std::vector<std::vector<TrackId>> copy_tracks_;
  std::vector<Lanes> link_lanes_;
  std::vector<std::vector<TrackId>> link_tracks_;
  std::vector<SeriesId> level_series_;  ///< counter series per tier slot
  std::vector<SeriesId> rate_series_;   ///< counter series per link resource
  std::vector<Open> open_;
  std::vector<uint32_t> free_open_;
  struct Arrow {
    TrackId from;
    Time from_ps;
    uint64_t id;
  };
  std::vector<std::vector<Arrow>> arrows_;  ///< per program, for the running compute step
  std::string name_;  ///< scratch of transfer_end
};

}  // namespace tierflow::sim
