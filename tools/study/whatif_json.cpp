// What-if answers as the tierflow.whatif/1 document (whatif_json.h).
#include "tools/study/whatif_json.h"

#include <fmt/format.h>

#include <string_view>
#include <variant>

#include "core/diagnostics.h"
#include "tools/study/row.h"

namespace tierflow::study {

std::string question_text(const WhatIfOptions& o) {
  switch (o.question) {
    case Question::kMinMemory:
      return fmt::format("least device memory within {:g}% of the fastest possible",
                         100 * o.max_overhead);
    case Question::kMaxBatch:
    case Question::kMaxContext: {
      std::string target;
      if (o.min_throughput > 0)
        target += fmt::format(" with at least {:g} tokens/s", o.min_throughput);
      if (o.max_tpot_ms > 0)
        target += fmt::format("{} TPOT at most {:g} ms", target.empty() ? " with" : " and",
                              o.max_tpot_ms);
      if (target.empty()) target = " that fits without offload";
      return fmt::format("largest {}{}", o.question == Question::kMaxBatch ? "batch" : "context",
                         target);
    }
    case Question::kUpgrade:
      return "which upgrade of a link or tier shortens the latency most (+25%, 2x)";
  }
  return "";
}

nlohmann::ordered_json answer_json(const Answer& a) {
  nlohmann::ordered_json j;
  j["found"] = a.found;
  j["answer"] = a.value;
  if (a.question != Question::kUpgrade) j["answer_number"] = a.number;
  j["resolution"] = a.resolution;
  j["binding"] = a.binding;
  j["note"] = a.note;
  if (a.question == Question::kMinMemory) {
    j["fastest_ps"] = a.fastest_ps;
    j["limit_ps"] = a.limit_ps;
  }
  if (a.trial) {
    const Row row = row_of(*a.trial);
    nlohmann::ordered_json r;
    for (size_t i = 0; i < row.cells.size(); ++i) {
      const Cell& c = row.cells[i];
      const std::string& name = columns()[i].name;
      if (std::holds_alternative<std::monostate>(c))
        r[name] = nullptr;
      else if (const auto* s = std::get_if<std::string>(&c))
        r[name] = *s;
      else if (const auto* b = std::get_if<bool>(&c))
        r[name] = *b;
      else if (const auto* n = std::get_if<int64_t>(&c))
        r[name] = *n;
      else
        r[name] = std::get<double>(c);
    }
    j["plan"] = r;
    if (a.trial->request) j["decode_note"] = a.trial->request->decode_note;
  }
  nlohmann::ordered_json probes = nlohmann::ordered_json::array();
  for (const Probe& p : a.probes) {
    probes.push_back({{"value", p.value},
                      {"pass", p.pass},
                      {"latency_ps", p.latency_ps},
                      {"tpot_ms", p.tpot_ms},
                      {"throughput_tokens_per_s", p.throughput},
                      {"device_peak", p.device_peak},
                      {"why", p.why}});
  }
  j["probes"] = probes;
  if (a.question == Question::kUpgrade) {
    nlohmann::ordered_json ups = nlohmann::ordered_json::array();
    for (const Upgrade& u : a.upgrades) {
      ups.push_back({{"upgrade", u.what},
                     {"set_2x", u.set},
                     {"latency_ps_125", u.latency_ps[0]},
                     {"latency_ps_2x", u.latency_ps[1]},
                     {"gain_125", u.gain[0]},
                     {"gain_2x", u.gain[1]}});
    }
    j["upgrades"] = ups;
  }
  return j;
}

nlohmann::ordered_json whatif_json(const WhatIfOptions& o, const Scenario& base,
                                   const hw::Topology& topo, const std::vector<Axis>& axes,
                                   const std::vector<std::vector<std::string>>& values,
                                   const std::vector<Answer>& answers) {
  TF_ASSERT(values.size() == answers.size(), "{} grid points for {} answers", values.size(),
            answers.size());
  nlohmann::ordered_json j;
  j["format"] = "tierflow.whatif/1";
  j["question"] = kQuestionNames[static_cast<size_t>(o.question)];
  j["question_text"] = question_text(o);
  j["topology"] = topo.name;
  j["sets"] = base.sets;
  j["workload"] = describe_workload(base, searched_field(o.question, base));
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < answers.size(); ++i) {
    nlohmann::ordered_json x = answer_json(answers[i]);
    if (!axes.empty()) {
      TF_ASSERT(values[i].size() == axes.size(), "point {} has {} values for {} axes", i,
                values[i].size(), axes.size());
      nlohmann::ordered_json at;
      for (size_t k = 0; k < axes.size(); ++k) at[axes[k].path] = values[i][k];
      x["vary"] = at;
    }
    list.push_back(x);
  }
  j["answers"] = list;
  return j;
}

}  // namespace tierflow::study
