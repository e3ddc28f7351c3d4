#include "tools/export/plot_series.h"

#include <algorithm>
#include <numeric>

#include "core/diagnostics.h"

namespace tierflow::exporter {

size_t Buckets::index(Time t) const {
  if (t <= t0 || count == 0) return 0;
  return std::min(count - 1, static_cast<size_t>((t - t0) / width));
}

Buckets make_buckets(Time t0, Time t1, size_t max_count) {
  TF_ASSERT(max_count > 0, "a plot needs at least one bucket");
  Buckets b;
  b.t0 = t0;
  const Time span = std::max<Time>(t1 - t0, 1);
  const auto n = static_cast<Time>(max_count);
  b.width = std::max<Time>(1, (span + n - 1) / n);
  b.count = static_cast<size_t>((span + b.width - 1) / b.width);
  return b;
}

KindStack stack_kinds(const sim::TierSeries& s, const Buckets& b) {
  KindStack out;
  out.bytes.resize(b.count);
  std::array<uint64_t, sim::kKindSlots> now{};  // the levels after the changes so far
  const auto total = [](const std::array<uint64_t, sim::kKindSlots>& a) {
    return std::accumulate(a.begin(), a.end(), uint64_t{0});
  };
  size_t i = 0;
  const auto& ch = s.changes;
  for (size_t k = 0; k < b.count; ++k) {
    const Time end = b.start(k + 1);
    // The level held at the bucket's start is a candidate, then each instant inside it
    // (all changes of one instant applied together).
    std::array<uint64_t, sim::kKindSlots> best = now;
    uint64_t best_total = total(now);
    while (i < ch.size() && (ch[i].time < end || k + 1 == b.count)) {
      const Time t = ch[i].time;
      while (i < ch.size() && ch[i].time == t) {
        now[ch[i].kind] = ch[i].bytes;
        ++i;
      }
      const uint64_t x = total(now);
      if (x > best_total) {
        best_total = x;
        best = now;
      }
    }
    out.bytes[k] = best;
    out.peak = std::max(out.peak, best_total);
    for (size_t kind = 0; kind < sim::kKindSlots; ++kind) {
      if (best[kind] > 0) out.kinds |= uint32_t{1} << kind;
    }
  }
  return out;
}

std::vector<double> bucket_peaks(const std::vector<sim::RateChange>& changes, const Buckets& b) {
  std::vector<double> out(b.count);
  double now = 0;
  size_t i = 0;
  for (size_t k = 0; k < b.count; ++k) {
    const Time end = b.start(k + 1);
    double best = now;
    while (i < changes.size() && (changes[i].time < end || k + 1 == b.count)) {
      now = changes[i].bytes_per_s;
      best = std::max(best, now);
      ++i;
    }
    out[k] = best;
  }
  return out;
}

std::vector<Time> coverage(std::vector<Span> spans, const Buckets& b) {
  std::vector<Time> out(b.count);
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) {
    return x.start != y.start ? x.start < y.start : x.end < y.end;
  });
  const Time lo = b.t0;
  const Time hi = b.start(b.count);
  Time covered_to = lo;  // the union so far ends here
  for (const Span& s : spans) {
    Time start = std::max({s.start, covered_to, lo});
    const Time end = std::min(s.end, hi);
    if (end <= start) continue;
    covered_to = end;
    for (size_t k = b.index(start); start < end; ++k) {
      const Time cut = std::min(end, b.start(k + 1));
      out[k] += cut - start;
      start = cut;
    }
  }
  return out;
}

std::vector<std::vector<double>> cumulative(const std::vector<std::vector<double>>& layers) {
  std::vector<std::vector<double>> out = layers;
  for (size_t k = 1; k < out.size(); ++k) {
    TF_ASSERT(out[k].size() == out[k - 1].size(), "stacked layers differ in length");
    for (size_t i = 0; i < out[k].size(); ++i) out[k][i] += out[k - 1][i];
  }
  return out;
}

}  // namespace tierflow::exporter
