#include "tools/study/target.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/diagnostics.h"
#include "core/units.h"
#include "planner/planner.h"

namespace tierflow::study {

uint64_t parse_budget(const std::string& text, std::string_view flag) {
  const auto r = parse_bytes(text);
  if (!r.ok()) throw InputError::at(SourcePos{std::string(flag)}, "{}", r.error);
  return r.value.value;
}

double parse_fraction(const std::string& text, std::string_view source) {
  std::string t = text;
  double scale = 1;
  if (!t.empty() && t.back() == '%') {
    t.pop_back();
    scale = 0.01;
  }
  try {
    size_t used = 0;
    const double x = std::stod(t, &used);
    if (used == t.size() && x >= 0) return x * scale;
  } catch (const std::exception&) {
  }
  throw InputError::at(SourcePos{std::string(source)}, "'{}' is not a fraction or a percentage",
                       text);
}

planner::Target make_target(const hw::Topology& topo, const std::string& device, uint32_t devices,
                            std::string_view source) {
  planner::Target t;
  if (!device.empty()) {
    const auto d = topo.device_index(device);
    if (!d) {
      std::vector<std::string> ids;
      for (const auto& dv : topo.devices) ids.push_back(dv.id);
      throw InputError::at(SourcePos{std::string(source)}, "no device '{}' in the topology{}",
                           device, did_you_mean(device, ids));
    }
    t.device_class = *d;
  }
  const hw::Device& dev = topo.devices[t.device_class];
  t.device_tier = *topo.tier_index(dev.local_tier);
  if (devices > static_cast<uint32_t>(std::max(1, dev.count))) {
    throw InputError::at(SourcePos{"--devices"},
                         "{} programs, but the topology has {} '{}' device{} (raise it with "
                         "--set devices.{}.count=N)",
                         devices, dev.count, dev.id, dev.count == 1 ? "" : "s", dev.id);
  }
  t.devices = devices == 0 ? static_cast<uint32_t>(std::max(1, dev.count)) : devices;
  return t;
}

std::vector<std::pair<TensorKind, uint32_t>> parse_pins(const std::vector<std::string>& pins,
                                                        const hw::Topology& topo) {
  std::vector<std::pair<TensorKind, uint32_t>> out;
  for (const std::string& p : pins) {
    const auto eq = p.find('=');
    const SourcePos at{"--pin"};
    if (eq == std::string::npos) throw InputError::at(at, "'{}' is not KIND=TIER", p);
    const std::string kind = p.substr(0, eq), tier = p.substr(eq + 1);
    const auto* k = std::find(kTensorKindNames.begin(), kTensorKindNames.end(), kind);
    if (k == kTensorKindNames.end()) {
      throw InputError::at(at, "unknown tensor kind '{}'{}", kind,
                           did_you_mean(kind, std::span<const std::string_view>(kTensorKindNames)));
    }
    const auto ti = topo.tier_index(tier);
    if (!ti) {
      std::vector<std::string> ids;
      for (const auto& tr : topo.tiers) ids.push_back(tr.id);
      throw InputError::at(at, "no tier '{}' in the topology{}", tier, did_you_mean(tier, ids));
    }
    out.emplace_back(static_cast<TensorKind>(k - kTensorKindNames.begin()),
                     static_cast<uint32_t>(*ti));
  }
  return out;
}

void check_policy(const std::string& name, std::string_view source) {
  if (planner::find_policy(name) != nullptr) return;
  throw InputError::at(SourcePos{std::string(source)}, "unknown policy '{}'{}", name,
                       planner::unknown_policy_hint(name));
}

}  // namespace tierflow::study
