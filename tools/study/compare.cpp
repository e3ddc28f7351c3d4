#include "tools/study/compare.h"

#include "tools/study/target.h"

namespace tierflow::study {

Comparison compare(Study& study, const Scenario& base, std::vector<std::string> policies,
                   std::string_view source,
                   const std::function<void(size_t, size_t, const std::string&)>& progress) {
  if (policies.empty()) {
    for (const planner::Policy& p : planner::policies()) policies.emplace_back(p.name);
  }
  for (const std::string& name : policies) check_policy(name, source);
  Comparison c;
  c.reference_ps = study.unlimited_latency(base);
  auto keep = [&](Trial t, std::string label, std::string stem, bool oracle) {
    c.trials.push_back(std::move(t));
    c.labels.push_back(std::move(label));
    c.stems.push_back(std::move(stem));
    c.oracle.push_back(oracle);
  };
  for (size_t i = 0; i < policies.size(); ++i) {
    const std::string& name = policies[i];
    if (progress) progress(i, policies.size(), name);
    Scenario s = base;
    s.policy = name;
    Trial t = study.run(s);
    if (!base.realistic() || !t.main().realized) {
      keep(std::move(t), name, name, false);
      continue;
    }
    keep(std::move(t), name + " realistic", name, false);
    s.realistic_routing = false;
    keep(study.run(s), name + " oracle", name + "-oracle", true);
  }
  for (size_t i = 0; i < c.trials.size(); ++i) {
    const Trial& t = c.trials[i];
    if (!t.ok || c.oracle[i]) continue;
    if (!c.best) {
      c.best = i;
      continue;
    }
    const Trial& b = c.trials[*c.best];
    if (t.latency_ps() < b.latency_ps() ||
        (t.latency_ps() == b.latency_ps() && t.main().device_peak < b.main().device_peak)) {
      c.best = i;
    }
  }
  return c;
}

}  // namespace tierflow::study
