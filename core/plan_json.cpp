#include "core/plan_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <unordered_map>

#include "core/json_reader.h"
#include "core/json_writer.h"
#include "core/sha256.h"
#include "core/workload_json.h"

namespace tierflow {
namespace {

const std::vector<std::string> kTopKeys = {
    "format", "name",     "meta",   "workload", "topology", "tiers",    "device_tier",
    "home",   "programs", "budget", "pipeline", "routing",  "host_tier"};
/// The plan/2 fields that plan/1 kept in meta (read from there, then dropped from it).
const std::vector<std::string> kTypedMeta = {"budget", "pipeline", "routing"};
const std::vector<std::string> kRefKeys = {"file", "sha256", "inline"};
const std::vector<std::string> kProgramKeys = {"device", "steps"};
const std::vector<std::string> kStepKeys = {"compute", "prefetch", "store", "detach", "from",
                                            "to",      "event",    "wait",  "demand", "on"};

class PlanReader {
 public:
  PlanReader(std::string_view text, const std::string& name, std::string base_dir)
      : r_(text, name), base_(std::move(base_dir)) {}

  LoadedPlan read(bool verify) {
    LoadedPlan out;
    Plan& p = out.plan;
    const size_t top = r_.offset();
    r_.begin_object("the plan");
    std::string key;
    std::vector<std::string> home_names;
    std::string device_tier;
    bool seen[13] = {};
    size_t key_at[13] = {};
    size_t device_tier_at = 0;
    std::string host_tier;
    size_t host_tier_at = 0;
    size_t meta_at = 0;
    size_t routing_at = 0;
    bool v1 = false;
    while (r_.next_key(key)) {
      const size_t k = index(key, kTopKeys);
      if (k == kTopKeys.size()) {
        r_.fail_at(r_.key_offset(), "unknown key '{}' in the plan{}", key,
                   did_you_mean(key, kTopKeys));
      }
      if (seen[k]) r_.fail_at(r_.key_offset(), "duplicate key '{}' in the plan", key);
      seen[k] = true;
      key_at[k] = r_.key_offset();
      switch (k) {
        case 0: {
          const size_t v = r_.offset();
          const std::string f = r_.read_string("format");
          v1 = f == kPlanFormatV1;
          v3_ = f == kPlanFormatV3;
          if (f != kPlanFormat && !v1 && !v3_) {
            r_.fail_at(v, "unsupported format '{}': this tierflow reads '{}', '{}' and '{}'", f,
                       kPlanFormatV3, kPlanFormat, kPlanFormatV1);
          }
          break;
        }
        case 1:
          p.name = r_.read_string("name");
          break;
        case 2:
          meta_at = r_.offset();
          read_meta(r_, p.meta);
          break;
        case 3:
          out.workload = read_workload_ref(p.workload_ref);
          break;
        case 4:
          read_ref(p.topology_ref, "topology", nullptr);
          break;
        case 5: {
          r_.begin_array("tiers");
          while (r_.next_item()) {
            const size_t v = r_.offset();
            std::string t = r_.read_string("a tier id");
            for (const auto& x : p.tiers) {
              if (x == t) r_.fail_at(v, "tier '{}' is listed twice", t);
            }
            p.tiers.push_back(std::move(t));
          }
          break;
        }
        case 6:
          device_tier_at = r_.offset();
          device_tier = r_.read_string("device_tier");
          break;
        case 7: {
          home_at_ = r_.offset();
          r_.begin_array("home");
          while (r_.next_item()) {
            home_offsets_.push_back(r_.offset());
            home_names.push_back(r_.read_string("a home tier"));
          }
          break;
        }
        case 8:
          read_programs(p);
          break;
        case 9: {
          const size_t at = r_.offset();
          p.budget = r_.read_uint("budget", UINT64_MAX);
          // Absent is the tier's usable capacity; 0 would read as that too, unnoticed.
          if (p.budget == 0) {
            r_.fail_at(at,
                       "budget: expected more than 0 bytes (leave it out for the device "
                       "tier's usable capacity)");
          }
          break;
        }
        case 10:
          p.pipeline = r_.read_string("pipeline");
          break;
        case 11:
          routing_at = r_.offset();
          p.routing = r_.read_string("routing");
          break;
        case 12:
          host_tier_at = r_.offset();
          host_tier = r_.read_string("host_tier");
          break;
      }
    }
    r_.expect_end();
    if (seen[12] && !v3_) {
      r_.fail_at(key_at[12], "'host_tier' is a field of '{}' plans (they compute on the host)",
                 kPlanFormatV3);
    }
    if (v3_ && !seen[12]) {
      r_.fail_at(top,
                 "a '{}' plan names its 'host_tier' (the tier its host steps compute "
                 "next to)",
                 kPlanFormatV3);
    }
    for (size_t k = 9; k < 12; ++k) {
      if (seen[k] && v1) {
        r_.fail_at(key_at[k], "'{}' is a field of '{}'; a '{}' plan keeps it in meta", kTopKeys[k],
                   kPlanFormat, kPlanFormatV1);
      }
    }
    for (const std::string& field : kTypedMeta) {
      const auto it = p.meta.find(field);
      if (it == p.meta.end()) continue;
      if (!v1) {
        r_.fail_at(meta_at, "meta '{}': in '{}' it is a field of the plan, not of meta", field,
                   kPlanFormat);
      }
      from_meta(p, field, it->second, meta_at, routing_at);
      p.meta.erase(it);
    }
    if (!p.routing.empty() &&
        std::find(kPlanRoutings.begin(), kPlanRoutings.end(), p.routing) == kPlanRoutings.end()) {
      r_.fail_at(routing_at, "routing '{}': expected one of {}", p.routing,
                 fmt::join(kPlanRoutings, ", "));
    }
    for (size_t k : {0U, 1U, 3U, 5U, 6U, 7U, 8U}) {
      if (!seen[k]) r_.fail_at(top, "the plan is missing required key '{}'", kTopKeys[k]);
    }
    p.device_tier = tier_index(p, device_tier, device_tier_at);
    if (seen[12]) p.host_tier = tier_index(p, host_tier, host_tier_at);
    for (size_t i = 0; i < home_names.size(); ++i) {
      p.home.push_back(tier_index(p, home_names[i], home_offsets_[i]));
    }
    for (const PendingTier& t : pending_tiers_) {
      p.programs[t.program].steps[t.step].tier = tier_index(p, t.name, t.at);
    }
    if (verify) {
      if (auto issue = verify_plan(p, out.workload)) report(*issue);
      if (auto issue = find_wait_cycle(p)) report(*issue);
    }
    return out;
  }

 private:
  static size_t index(const std::string& key, const std::vector<std::string>& keys) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return i;
    }
    return keys.size();
  }

  /// A plan/1 meta value (JSON text) into its plan/2 field.
  void from_meta(Plan& p, const std::string& key, const std::string& json, size_t meta_at,
                 size_t& routing_at) {
    JsonReader v(json, "meta");
    try {
      if (key == "budget") {
        p.budget = v.read_uint("budget", UINT64_MAX);
      } else {
        (key == "pipeline" ? p.pipeline : p.routing) = v.read_string(key);
        if (key == "routing") routing_at = meta_at;
      }
    } catch (const InputError&) {
      r_.fail_at(meta_at, "meta '{}': expected {}, not {}", key,
                 key == "budget" ? "a byte count" : "a string", json);
    }
  }

  uint32_t tier_index(const Plan& p, const std::string& name, size_t at) {
    for (size_t i = 0; i < p.tiers.size(); ++i) {
      if (p.tiers[i] == name) return static_cast<uint32_t>(i);
    }
    r_.fail_at(at, "'{}' is not one of the plan's tiers ({}){}", name, fmt::join(p.tiers, ", "),
               did_you_mean(name, p.tiers));
  }

  // {"file": F, "sha256": H} or {"inline": {...}} (workload only).
  void read_ref(Reference& ref, std::string_view what, Workload* inline_target) {
    const size_t obj = r_.offset();
    r_.begin_object(what);
    std::string key;
    bool has_inline = false;
    bool seen[3] = {};
    const std::vector<std::string> keys =
        inline_target != nullptr ? kRefKeys : std::vector<std::string>{"file", "sha256", "set"};
    while (r_.next_key(key)) {
      const size_t k = index(key, keys);
      if (k < keys.size()) {
        if (seen[k]) r_.fail_at(r_.key_offset(), "duplicate key '{}' in {}", key, what);
        seen[k] = true;
      }
      if (k == 0) {
        file_at_ = r_.offset();
        ref.file = r_.read_string("file");
      } else if (k == 1) {
        const size_t v = r_.offset();
        ref.sha256 = r_.read_string("sha256");
        if (ref.sha256.size() != 64 ||
            ref.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
          r_.fail_at(v, "sha256: expected 64 lower-case hex digits");
        }
      } else if (k == 2 && inline_target != nullptr) {
        *inline_target = read_workload_from(r_);
        has_inline = true;
      } else if (k == 2) {
        r_.begin_array("set");
        while (r_.next_item()) {
          const size_t v = r_.offset();
          ref.sets.push_back(r_.read_string("set"));
          if (ref.sets.back().find('=') == std::string::npos) {
            r_.fail_at(v, "set: '{}' is not PATH=VALUE", ref.sets.back());
          }
        }
      } else {
        r_.fail_at(r_.key_offset(), "unknown key '{}' in {}{}", key, what, did_you_mean(key, keys));
      }
    }
    if (has_inline && !ref.file.empty()) {
      r_.fail_at(obj, "{}: give either 'inline' or 'file', not both", what);
    }
    if (!has_inline && ref.file.empty()) {
      r_.fail_at(obj, "{}: missing 'file'{}", what, inline_target ? " or 'inline'" : "");
    }
    ref_at_ = obj;
  }

  Workload read_workload_ref(Reference& ref) {
    Workload w;
    read_ref(ref, "workload", &w);
    if (ref.file.empty()) return w;
    const std::string path = (std::filesystem::path(base_) / ref.file).string();
    std::string text;
    try {
      text = read_text_file(path);
    } catch (const InputError& e) {
      // The plan names the file: point at that name.
      r_.fail_at(file_at_, "workload '{}': {}", path, e.message());
    }
    if (!ref.sha256.empty() && sha256_hex(text) != ref.sha256) {
      r_.fail_at(ref_at_,
                 "workload '{}' has changed since the plan was made (SHA-256 differs): "
                 "plan it again",
                 path);
    }
    return read_workload_text(text, path);
  }

  void read_programs(Plan& p) {
    const size_t at = r_.offset();
    r_.begin_array("programs");
    while (r_.next_item()) {
      Program prog;
      step_at_.emplace_back();
      const size_t obj = r_.offset();
      r_.begin_object("a program");
      std::string key;
      bool has_steps = false;
      bool has_device = false;
      while (r_.next_key(key)) {
        const size_t k = index(key, kProgramKeys);
        if ((k == 0 && has_device) || (k == 1 && has_steps)) {
          r_.fail_at(r_.key_offset(), "duplicate key '{}' in a program", key);
        }
        if (k == 0) {
          has_device = true;
          const size_t v = r_.offset();
          prog.device = static_cast<uint32_t>(r_.read_uint("device", UINT32_MAX - 1));
          // One lookup per program: plans of 100,000 devices read in linear time.
          const auto [it, fresh] = program_of_device_.emplace(prog.device, p.programs.size());
          if (!fresh) {
            r_.fail_at(v, "device {} already has a program (program {})", prog.device, it->second);
          }
        } else if (k == 1) {
          has_steps = true;
          r_.begin_array("steps");
          while (r_.next_item()) {
            step_at_.back().push_back(r_.offset());
            prog.steps.push_back(read_step());
          }
        } else {
          r_.fail_at(r_.key_offset(), "unknown key '{}' in a program{}", key,
                     did_you_mean(key, kProgramKeys));
        }
      }
      if (!has_steps) r_.fail_at(obj, "a program needs 'steps'");
      program_at_.push_back(obj);
      p.programs.push_back(std::move(prog));
    }
    // No program runs nothing: a makespan of 0 would be an answer to no question.
    if (p.programs.empty()) r_.fail_at(at, "a plan needs at least one program");
  }

  Step read_step() {
    Step s;
    const size_t obj = r_.offset();
    r_.begin_object("a step");
    std::string key;
    int kinds = 0;
    std::string tier;
    size_t tier_at = 0;
    std::string_view tier_key;
    size_t tier_key_at = 0;
    bool seen[10] = {};
    size_t demand_at = 0;
    size_t on_at = 0;
    while (r_.next_key(key)) {
      const size_t k = index(key, kStepKeys);
      if (k < kStepKeys.size()) {
        if (seen[k]) r_.fail_at(r_.key_offset(), "duplicate key '{}' in a step", key);
        seen[k] = true;
      }
      if ((k == 4 || k == 5) && kinds == 1) {
        const bool fits =
            (k == 4 && s.kind == StepKind::kPrefetch) || (k == 5 && s.kind == StepKind::kStore);
        if (!fits) {
          r_.fail_at(r_.key_offset(), "a {} step takes no '{}'",
                     kStepKindNames[static_cast<size_t>(s.kind)], key);
        }
      }
      if ((k == 4 || k == 5) && !tier_key.empty()) {
        r_.fail_at(r_.key_offset(),
                   "a step has either 'from' (prefetch) or 'to' (store), not both");
      }
      if (k < 4) {
        ++kinds;
        s.kind = static_cast<StepKind>(k);
        s.target = static_cast<uint32_t>(r_.read_uint(key, UINT32_MAX - 1));
      } else if (k == 4 || k == 5) {
        tier_key = kStepKeys[k];
        tier_key_at = r_.key_offset();
        tier_at = r_.offset();
        tier = r_.read_string(key);
      } else if (k == 6) {
        s.event = static_cast<uint32_t>(r_.read_uint("event", UINT32_MAX - 1));
      } else if (k == 7) {
        r_.begin_array("wait");
        while (r_.next_item())
          s.wait.push_back(static_cast<uint32_t>(r_.read_uint("an event", UINT32_MAX - 1)));
      } else if (k == 8) {
        demand_at = r_.key_offset();
        s.demand = r_.read_bool("demand");
      } else if (k == 9) {
        on_at = r_.key_offset();
        const size_t v = r_.offset();
        const std::string on = r_.read_string("on");
        if (on != "host" && on != "device") {
          r_.fail_at(v, "on: '{}': expected 'device' (the default) or 'host'{}", on,
                     did_you_mean(on, std::vector<std::string>{"device", "host"}));
        }
        s.host = on == "host";
      } else {
        r_.fail_at(r_.key_offset(), "unknown key '{}' in a step{}", key,
                   did_you_mean(key, kStepKeys));
      }
    }
    if (kinds != 1) {
      r_.fail_at(obj, "a step is exactly one of compute, prefetch, store or detach");
    }
    const std::string_view need = s.kind == StepKind::kPrefetch ? "from"
                                  : s.kind == StepKind::kStore  ? "to"
                                                                : "";
    if (need != tier_key) {
      if (!tier_key.empty()) {
        r_.fail_at(tier_key_at, "a {} step takes no '{}'",
                   kStepKindNames[static_cast<size_t>(s.kind)], tier_key);
      }
      r_.fail_at(obj, "a {} step needs '{}'", kStepKindNames[static_cast<size_t>(s.kind)], need);
    }
    if (s.demand && s.kind != StepKind::kPrefetch) {
      r_.fail_at(demand_at, "only a prefetch step takes 'demand'");
    }
    if (s.host && s.kind == StepKind::kStore) {
      r_.fail_at(on_at,
                 "a store moves data off the device; 'on': 'host' is for compute, "
                 "prefetch (into the host tier) and detach (of the host tier's copy) steps");
    }
    if (seen[9] && !v3_) {
      r_.fail_at(on_at, "'on' is a field of '{}' plans (they compute on the host)", kPlanFormatV3);
    }
    if (!need.empty()) {
      // Resolved once `tiers` is known (it may come later in the file).
      pending_tiers_.push_back(
          PendingTier{tier, tier_at, step_at_.size() - 1, step_at_.back().size() - 1});
    }
    return s;
  }

  // Re-reads the faulty step (or home item) to point at it.
  [[noreturn]] void report(const PlanIssue& issue) {
    size_t at = 0;
    if (issue.program >= 0 && issue.step >= 0) {
      at = step_at_[static_cast<size_t>(issue.program)][static_cast<size_t>(issue.step)];
    } else if (issue.program >= 0) {
      at = program_at_[static_cast<size_t>(issue.program)];
    } else if (issue.tensor >= 0 && static_cast<size_t>(issue.tensor) < home_offsets_.size()) {
      at = home_offsets_[static_cast<size_t>(issue.tensor)];
    } else {
      at = home_at_;
    }
    if (issue.program >= 0 && issue.step >= 0) {
      r_.fail_at(at, "program {} step {}: {}", issue.program, issue.step, issue.message);
    }
    if (issue.program >= 0) r_.fail_at(at, "program {}: {}", issue.program, issue.message);
    r_.fail_at(at, "{}", issue.message);
  }

  struct PendingTier {
    std::string name;
    size_t at;
    size_t program;
    size_t step;
  };

  JsonReader r_;
  std::string base_;
  bool v3_ = false;  ///< tierflow.plan/3: host steps allowed
  size_t home_at_ = 0;
  size_t ref_at_ = 0;
  size_t file_at_ = 0;
  std::vector<size_t> home_offsets_;
  std::vector<size_t> program_at_;
  std::vector<std::vector<size_t>> step_at_;
  std::unordered_map<uint32_t, size_t> program_of_device_;  ///< device -> its program
  std::vector<PendingTier> pending_tiers_;
};

void write_ref(JsonWriter& w, const Reference& ref) {
  w.begin_object();
  w.key("file").string(ref.file);
  if (!ref.sha256.empty()) w.key("sha256").string(ref.sha256);
  if (!ref.sets.empty()) {
    w.key("set").begin_array();
    for (const std::string& s : ref.sets) w.string(s);
    w.end_array();
  }
  w.end_object();
}

}  // namespace

LoadedPlan read_plan_text(std::string_view text, const std::string& name,
                          const std::string& base_dir, bool verify) {
  return PlanReader(text, name, base_dir).read(verify);
}

LoadedPlan read_plan(const std::string& path, bool verify) {
  const std::string text = read_text_file(path);
  return read_plan_text(text, path, std::filesystem::path(path).parent_path().string(), verify);
}

std::string write_plan(const Plan& p, const Workload* inline_workload) {
  std::string out;
  JsonWriter w(out);
  w.begin_object(JsonLayout::kLines);
  const bool host = computes_on_host(p);
  w.key("format").string(host ? kPlanFormatV3 : kPlanFormat);
  w.key("name").string(p.name);
  w.key("meta");
  write_meta(w, p.meta);
  w.key("workload");
  if (inline_workload != nullptr) {
    w.begin_object().key("inline").raw(write_workload_embedded(*inline_workload, 2)).end_object();
  } else {
    write_ref(w, p.workload_ref);
  }
  w.key("topology");
  write_ref(w, p.topology_ref);
  if (p.budget > 0) w.key("budget").integer(p.budget);
  if (!p.pipeline.empty()) w.key("pipeline").string(p.pipeline);
  if (!p.routing.empty()) w.key("routing").string(p.routing);
  w.key("tiers").begin_array();
  for (const std::string& t : p.tiers) w.string(t);
  w.end_array();
  w.key("device_tier").string(p.tiers[p.device_tier]);
  if (host) {
    TF_ASSERT(p.host_tier < p.tiers.size(), "a plan with host steps names no host tier");
    w.key("host_tier").string(p.tiers[p.host_tier]);
  }
  w.key("home").begin_array(JsonLayout::kLines, /*per_line=*/16);
  for (const uint32_t h : p.home) w.string(p.tiers[h]);
  w.end_array();
  w.key("programs").begin_array(JsonLayout::kLines);
  for (const Program& prog : p.programs) {
    w.begin_object().key("device").integer(prog.device);
    w.key("steps").begin_array(JsonLayout::kLines);
    for (const Step& s : prog.steps) {
      w.begin_object().key(kStepKindNames[static_cast<size_t>(s.kind)]).integer(s.target);
      if (s.kind == StepKind::kPrefetch || s.kind == StepKind::kStore) {
        w.key(s.kind == StepKind::kPrefetch ? "from" : "to").string(p.tiers[s.tier]);
        if (s.host) w.key("on").string("host");
        w.key("event").integer(s.event);
        if (s.demand) w.key("demand").boolean(true);
      } else if (s.host) {
        w.key("on").string("host");
        if (s.kind == StepKind::kCompute) w.key("event").integer(s.event);
      }
      if (!s.wait.empty()) {
        w.key("wait").begin_array();
        for (const uint32_t e : s.wait) w.integer(e);
        w.end_array();
      }
      w.end_object();
    }
    w.end_array().end_object();
  }
  w.end_array();
  w.end_object();
  out += '\n';
  return out;
}

}  // namespace tierflow
