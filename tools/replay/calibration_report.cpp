#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_tree.h"
#include "core/units.h"
#include "tools/replay/calibration.h"

namespace tierflow::replay {
namespace {

std::string gb_s(double bytes_per_s) {
  return fmt::format("{:.2f} GB/s", bytes_per_s / 1e9);
}
std::string seconds(double s) {
  return to_string_approx(Duration{static_cast<int64_t>(s * double(kPsPerS))});
}

}  // namespace

std::string calibration_table(const Calibration& c, const std::string& file) {
  std::string out = fmt::format("calibrate {}: {} ({})\n", c.backend, c.device_name, c.date);
  for (const auto& [k, v] : c.software) out += fmt::format("  {:<12} {}\n", k, v);
  for (const CopyDirection& d : c.directions) {
    out += fmt::format("\n{} -> {}: latency {}, bandwidth {} (largest fit error {:.1f}%)\n", d.from,
                       d.to, seconds(d.fit.latency), gb_s(d.fit.bandwidth), 100 * d.fit.error);
    out += fmt::format("  {:>10}  {:>10}  {:>10}  {:>10}  {:>7}\n", "bytes", "measured", "fit",
                       "rate", "spread");
    for (const SizeSample& s : d.sweep) {
      const double fit = d.fit.latency + static_cast<double>(s.bytes) / d.fit.bandwidth;
      out += fmt::format("  {:>10}  {:>10}  {:>10}  {:>10}  {:>6.1f}%\n",
                         to_string_approx(Bytes{s.bytes}), seconds(s.seconds), seconds(fit),
                         gb_s(static_cast<double>(s.bytes) / s.seconds), 100 * s.spread);
    }
    out += "  copies at once:";
    for (size_t k = 0; k < d.concurrent.size(); ++k) {
      out += fmt::format(" {}: {}", k + 1, gb_s(d.concurrent[k]));
    }
    out += fmt::format("  -> {} engine{}\n", d.engines, d.engines == 1 ? "" : "s");
    if (d.contended >= 0) {
      out += fmt::format("  a {} copy while a large one runs the other way: +{}\n",
                         to_string_approx(Bytes{d.sweep.empty() ? 0 : d.sweep.front().bytes}),
                         seconds(d.contended));
    }
  }
  out += fmt::format("\nboth directions at once: {:.2f}x one direction ({} duplex)\n",
                     c.duplex_ratio, c.full_duplex ? "full" : "half");
  out += "compute:";
  for (const auto& [dtype, f] : c.compute.flops) {
    out += fmt::format(" {} {:.4g} TFLOP/s,", dtype, f / 1e12);
  }
  out += fmt::format(" memory {}, {} per step\n", gb_s(c.compute.memory_bandwidth),
                     seconds(c.compute.launch_overhead));
  out += fmt::format("\nwrote {}\n", file);
  return out;
}

std::string calibration_json(const Calibration& c, const std::string& file) {
  nlohmann::ordered_json j;
  j["format"] = "tierflow.calibration/1";
  j["backend"] = c.backend;
  j["device"] = c.device_name;
  j["date"] = c.date;
  j["topology"] = file;
  nlohmann::ordered_json sw = nlohmann::ordered_json::object();
  for (const auto& [k, v] : c.software) sw[k] = v;
  j["software"] = sw;
  j["device_capacity_bytes"] = c.device_capacity;
  j["host_capacity_bytes"] = c.host_capacity;
  nlohmann::ordered_json dirs = nlohmann::ordered_json::array();
  for (const CopyDirection& d : c.directions) {
    nlohmann::ordered_json x;
    x["from"] = d.from;
    x["to"] = d.to;
    x["latency_s"] = d.fit.latency;
    x["bandwidth_bytes_per_s"] = d.fit.bandwidth;
    x["fit_error"] = d.fit.error;
    nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
    for (const SizeSample& s : d.sweep) {
      sweep.push_back({{"bytes", s.bytes}, {"seconds", s.seconds}, {"spread", s.spread}});
    }
    x["sweep"] = sweep;
    x["concurrent_bytes_per_s"] = d.concurrent;
    x["engines"] = d.engines;
    if (d.contended >= 0) x["contended_s"] = d.contended;
    dirs.push_back(x);
  }
  j["directions"] = dirs;
  j["duplex_ratio"] = c.duplex_ratio;
  j["full_duplex"] = c.full_duplex;
  nlohmann::ordered_json flops = nlohmann::ordered_json::object();
  for (const auto& [dtype, f] : c.compute.flops) flops[dtype] = f;
  j["compute"] = {{"flops_per_s", flops},
                  {"memory_bandwidth_bytes_per_s", c.compute.memory_bandwidth},
                  {"launch_overhead_s", c.compute.launch_overhead}};
  return json_text(j);
}

}  // namespace tierflow::replay
