// What-if answers as text (what `tierflow whatif` prints, whatif_text.cpp) and as JSON
// (`tierflow.whatif/1`): the document `tierflow whatif --json` prints and the Python
// API's whatif() returns (docs/cli.md, docs/python.md).
//
//   {"format": "tierflow.whatif/1", "question", "question_text", "topology", "sets",
//    "workload", "answers": [{"found", "answer", "answer_number", "resolution", "binding",
//    "note", "fastest_ps", "limit_ps", "plan": {study row}, "decode_note", "probes",
//    "upgrades", "vary": {axis path: value}}, ...]}
//
// `answer_number` is absent for upgrade, `fastest_ps`/`limit_ps` present for min-memory
// only, `upgrades` for upgrade only, `vary` only with --vary axes; `plan` is the study row
// (row.h) of the trial that achieves the answer, keys in column order.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "hw_models/topology.h"
#include "tools/study/scenario.h"
#include "tools/study/whatif.h"

namespace tierflow::study {

/// The question in words: "least device memory within 1% of the fastest possible".
std::string question_text(const WhatIfOptions& o);

/// One answer (an item of `answers`, without `vary`).
nlohmann::ordered_json answer_json(const Answer& a);

/// The whole document for the answers of a --vary grid over `base` on `topo` (its name is
/// recorded): `values[i]` are the values the `axes` took at answers[i] (empty lists and no
/// axes for a single question).
nlohmann::ordered_json whatif_json(const WhatIfOptions& o, const Scenario& base,
                                   const hw::Topology& topo, const std::vector<Axis>& axes,
                                   const std::vector<std::vector<std::string>>& values,
                                   const std::vector<Answer>& answers);

/// The answers as `tierflow whatif` prints them: the question, workload, topology, policy
/// and routing; then the answer, its plan, binding constraint and probes (one question) or
/// a table with a row per --vary point (`values` as for whatif_json).
std::string whatif_text(const WhatIfOptions& o, const Scenario& base, const hw::Topology& topo,
                        const std::vector<Axis>& axes,
                        const std::vector<std::vector<std::string>>& values,
                        const std::vector<Answer>& answers);

}  // namespace tierflow::study
