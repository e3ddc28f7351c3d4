// Plot-ready data from a simulation's time series (sim/series.h): each series cut into
// the pixel columns of a plot, so that a plan of a million steps draws as a thousand
// points, the same ones on every run.
//
// Glossary
//   window  the time a plot shows, [t0, t1) in picoseconds.
//   bucket  one pixel column: the window cut into equal whole-picosecond widths (the last
//           may be cut short by t1). Every time in the window falls in exactly one bucket.
//   peak    per bucket, the highest value a step function takes anywhere inside it; the
//           value held at the bucket's start counts. Drawing peaks keeps every spike
//           visible however long the plan: a bucket never looks lower than it was.
//   stack   kinds drawn on top of one another: per bucket, the bytes of each kind at the
//           first instant the total peaks, so the top edge is the peak of the total and
//           the layers below it are a composition that really occurred.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "sim/series.h"

namespace tierflow::exporter {

using sim::Time;

struct Buckets {
  Time t0 = 0;
  Time width = 1;  ///< picoseconds per bucket, >= 1
  size_t count = 0;

  /// The bucket of time `t` (clamped to the window).
  [[nodiscard]] size_t index(Time t) const;
  /// Where bucket `b` starts; start(count) is the end of the last one.
  [[nodiscard]] Time start(size_t b) const { return t0 + static_cast<Time>(b) * width; }
};

/// At most `max_count` buckets covering [t0, t1) (one at least, even for an empty window).
Buckets make_buckets(Time t0, Time t1, size_t max_count);

/// Bytes of every kind slot, per bucket, for a stacked plot (see "stack" above).
struct KindStack {
  std::vector<std::array<uint64_t, sim::kKindSlots>> bytes;  ///< per bucket
  uint32_t kinds = 0;                                        ///< kinds ever above zero
  uint64_t peak = 0;                                         ///< the highest total
};
KindStack stack_kinds(const sim::TierSeries& s, const Buckets& b);

/// The peak of a step function per bucket; the value before its first change is 0.
std::vector<double> bucket_peaks(const std::vector<sim::RateChange>& changes, const Buckets& b);

/// An interval of time [start, end).
struct Span {
  Time start = 0;
  Time end = 0;
};
/// Per bucket, the time covered by at least one of `spans` (which may overlap and come in
/// any order).
std::vector<Time> coverage(std::vector<Span> spans, const Buckets& b);

/// Running sums over layers: out[k][i] = layers[0][i] + ... + layers[k][i]. Every layer has
/// the same length.
std::vector<std::vector<double>> cumulative(const std::vector<std::vector<double>>& layers);

}  // namespace tierflow::exporter
