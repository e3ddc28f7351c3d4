#include "tools/study/target.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/diagnostics.h"
#include "core/units.h"
#include "hw_models/loader.h"
#include "planner/planner.h"

namespace tierflow::study {

uint64_t parse_budget(const std::string& text, std::string_view flag) {
  const auto r = parse_bytes(text);
  if (!r.ok()) throw InputError::at(SourcePos{std::string(flag)}, "{}", r.error);
  // 0 would mean "the whole device" to the planner: never what a user who wrote 0 meant.
  if (r.value.value == 0) {
    throw InputError::at(SourcePos{std::string(flag)}, "the budget must be more than 0 bytes");
  }
  return r.value.value;
}

double parse_overhead(const std::string& text, std::string_view source) {
  const double x = parse_fraction(text, source);
  if (!text.ends_with('%') && x > 1) {
    throw InputError::at(SourcePos{std::string(source)},
                         "'{}' is ambiguous: write a percentage ({}%) or a fraction at most 1 "
                         "(e.g. 0.1 for 10%)",
                         text, text);
  }
  return x;
}

double parse_milliseconds(const std::string& text, std::string_view source) {
  double ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec == std::errc() && end == text.data() + text.size()) return ms;  // ms already
  const ParseResult<Duration> r = parse_duration(text);
  if (!r.ok()) {
    throw InputError::at(SourcePos{std::string(source)}, "{} (or a number of milliseconds)",
                         r.error);
  }
  return static_cast<double>(r.value.ps) / static_cast<double>(kPsPerMs);
}

double parse_fraction(const std::string& text, std::string_view source) {
  std::string t = text;
  double scale = 1;
  if (!t.empty() && t.back() == '%') {
    t.pop_back();
    scale = 0.01;
  }
  double x = -1;
  size_t used = 0;
  try {
    x = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != t.size() || !std::isfinite(x) || x < 0) {
    throw InputError::at(SourcePos{std::string(source)}, "'{}' is not a fraction or a percentage",
                         text);
  }
  if (x * scale > kMaxFraction) {
    throw InputError::at(SourcePos{std::string(source)},
                         "'{}' is above the largest allowed, {:g} ({:g}%)", text, kMaxFraction,
                         100 * kMaxFraction);
  }
  return x * scale;
}

std::string capacity_for_budget(const hw::Topology& topo, size_t device_tier, uint64_t budget) {
  return fmt::format("tiers.{}.capacity={}", topo.tiers[device_tier].id,
                     to_string(Bytes{budget + topo.reserved(device_tier)}));
}

void check_budget(const hw::Topology& topo, const planner::Target& target, std::string_view source) {
  const uint64_t usable = topo.usable(target.device_tier);
  if (target.budget <= usable) return;
  // A budget is a share of the device: a bigger device is a what-if on the topology.
  const std::string& tier = topo.tiers[target.device_tier].id;
  // Named as `source` names the budget: --set for the CLI, set= for Python.
  throw InputError::at(SourcePos{std::string(source)},
                       "budget {} is above the {} that tier '{}' gives a program on '{}'; to plan "
                       "for a bigger device, raise its capacity ({})",
                       to_string(Bytes{target.budget}), to_string(Bytes{usable}), tier, topo.name,
                       hw::override_hint(source.starts_with("--") ? "--set" : "set",
                                         fmt::format("tiers.{}.capacity=...", tier)));
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
    // Named as `source` names the device: --devices for the CLI, devices for Python.
    throw InputError::at(SourcePos{std::string(source) + "s"},
                         "{} programs, but the topology has {} '{}' device{} (raise it with "
                         "{})",
                         devices, dev.count, dev.id, dev.count == 1 ? "" : "s",
                         hw::override_hint(source.starts_with("--") ? "--set" : "set",
                                           fmt::format("devices.{}.count=N", dev.id)));
  }
  t.devices = devices == 0 ? static_cast<uint32_t>(std::max(1, dev.count)) : devices;
  if (t.devices > kMaxPrograms) {
    throw InputError::at(SourcePos{std::string(source) + "s"},
                         "{} programs (one per '{}' device): at most {}, each running the same "
                         "program; plan fewer devices",
                         t.devices, dev.id, kMaxPrograms);
  }
  return t;
}

std::vector<planner::Pin> parse_pins(const std::vector<std::string>& pins, const hw::Topology& topo,
                                     std::string_view source) {
  std::vector<planner::Pin> out;
  const SourcePos at{std::string(source)};
  for (const std::string& p : pins) {
    const auto eq = p.find('=');
    if (eq == std::string::npos) {
      throw InputError::at(at, "'{}' is not KIND=TIER[:FRACTION][,TIER:FRACTION...]", p);
    }
    const std::string kind = p.substr(0, eq);
    const auto* k = std::find(kTensorKindNames.begin(), kTensorKindNames.end(), kind);
    if (k == kTensorKindNames.end()) {
      throw InputError::at(at, "unknown tensor kind '{}'{}", kind,
                           did_you_mean(kind, std::span<const std::string_view>(kTensorKindNames)));
    }
    planner::Pin pin{static_cast<TensorKind>(k - kTensorKindNames.begin()), {}};
    // Shares are separated by ',' or '+' ('+' where ',' separates values, as in --vary).
    std::string_view rest = std::string_view(p).substr(eq + 1);
    double sum = 0;
    while (true) {
      const auto sep = rest.find_first_of(",+");
      const std::string share(rest.substr(0, sep));
      const auto colon = share.find(':');
      const std::string tier = share.substr(0, colon);
      const auto ti = topo.tier_index(tier);
      if (!ti) {
        std::vector<std::string> ids;
        for (const auto& tr : topo.tiers) ids.push_back(tr.id);
        throw InputError::at(at, "'{}': no tier '{}' in the topology{}", p, tier,
                             did_you_mean(tier, ids));
      }
      double fraction = 1.0;
      if (colon != std::string::npos) {
        fraction = parse_fraction(share.substr(colon + 1), source);
        if (!(fraction > 0 && fraction <= 1)) {
          throw InputError::at(at, "'{}': the fraction of '{}' must be in (0, 1] (or 0-100%)", p,
                               tier);
        }
      }
      for (const planner::PinShare& s : pin.shares) {
        if (s.tier == *ti) throw InputError::at(at, "'{}': tier '{}' appears twice", p, tier);
      }
      pin.shares.push_back({static_cast<uint32_t>(*ti), fraction});
      sum += fraction;
      if (sep == std::string_view::npos) break;
      rest = rest.substr(sep + 1);
    }
    // Every share of a split pin names its fraction: "hbm,ddr" says nothing of the split.
    if (pin.shares.size() > 1 &&
        static_cast<size_t>(std::count(p.begin(), p.end(), ':')) != pin.shares.size()) {
      throw InputError::at(at,
                           "'{}': give every tier of a split pin its fraction, e.g. "
                           "{}=hbm:0.2,ddr:0.8",
                           p, kind);
    }
    if (sum > 1 + 1e-9) {
      throw InputError::at(at, "'{}': the fractions add up to {:g}, more than 1", p, sum);
    }
    out.push_back(std::move(pin));
  }
  return out;
}

void check_policy(const std::string& name, std::string_view source) {
  if (planner::find_policy(name) != nullptr) return;
  throw InputError::at(SourcePos{std::string(source)}, "unknown policy '{}'{}", name,
                       planner::unknown_policy_hint(name));
}

void check_policies(const std::vector<std::string>& names, std::string_view source) {
  for (size_t i = 0; i < names.size(); ++i) {
    check_policy(names[i], source);
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) {
        throw InputError::at(SourcePos{std::string(source)}, "'{}' given twice: it would run twice",
                             names[i]);
      }
    }
  }
}

planner::PlanRequest plan_request(const hw::Topology& topo, const PlanSettings& s, bool cli) {
  const auto name = [cli](std::string_view field) { return option_name(field, cli); };
  planner::PlanRequest req;
  // A pipeline replaces the policy's passes: both given would drop the policy silently.
  if (!s.policy.empty() && !s.pipeline.empty()) {
    throw InputError::at(SourcePos{name("pipeline")},
                         "{} replaces the policy's passes: give {} or {}, not both",
                         name("pipeline"), name("policy"), name("pipeline"));
  }
  req.policy = s.policy.empty() ? std::string(planner::kDefaultPolicy) : s.policy;
  check_policy(req.policy, name("policy"));
  req.pipeline = s.pipeline;
  if (!s.pipeline.empty()) (void)planner::Pipeline::parse(s.pipeline, name("pipeline"));
  req.target = make_target(topo, s.device, s.devices, name("device"));
  if (!s.budget.empty() && !s.max_overhead.empty()) {
    throw InputError::at(SourcePos{name("max_overhead")}, "{} and {} exclude each other",
                         name("budget"), name("max_overhead"));
  }
  if (!s.budget.empty()) req.target.budget = parse_budget(s.budget, name("budget"));
  check_budget(topo, req.target, name("budget"));
  if (!s.max_overhead.empty()) req.max_overhead = parse_overhead(s.max_overhead, name("max_overhead"));
  req.pins = parse_pins(s.pins, topo, cli ? "--pin" : "pins");
  req.verify_each = s.verify_each;
  req.threads = s.threads;
  return req;
}

}  // namespace tierflow::study
