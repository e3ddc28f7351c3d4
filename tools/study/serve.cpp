#include "tools/study/serve.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "core/diagnostics.h"
#include "core/kinds.h"
#include "core/units.h"
#include "hw_models/loader.h"
#include "sim/timeline.h"
#include "tools/study/row.h"
#include "traces/arch.h"

namespace tierflow::study {
namespace {

using serve::Time;

// The counts a serving run takes, each from 1 to these.
constexpr int64_t kMaxTp = 4096;
constexpr int64_t kMaxReplicas = int64_t{1} << 20;
constexpr int64_t kMaxNodes = 1024;
constexpr int64_t kMaxTokenBudget = int64_t{1} << 24;
constexpr int64_t kMaxSeqs = int64_t{1} << 20;

bool meets(const serve::RequestRecord& r, const Slo& slo) {
  if (r.finish < 0) return false;
  const Time ttft = r.first_token - r.arrival;
  if (slo.ttft > 0 && ttft > slo.ttft) return false;
  if (slo.tpot > 0 && r.output_tokens > 1 &&
      (r.finish - r.first_token) / (r.output_tokens - 1) > slo.tpot) {
    return false;
  }
  return slo.e2e == 0 || r.finish - r.arrival <= slo.e2e;
}

ServeSummary summarize(const serve::ServeResult& result, const Slo& slo) {
  ServeSummary s;
  bool first = true;
  for (const serve::RequestRecord& r : result.requests) {
    s.rejected += r.rejected ? 1U : 0U;
    if (!r.counted) continue;
    // A rejected request is counted (it arrived in the measured window) and never served:
    // it finishes nothing and misses every SLO, so goodput's share falls with it.
    ++s.counted;
    // The measured span starts at the first counted arrival, served or not.
    if (first || r.arrival < s.first_arrival) s.first_arrival = r.arrival;
    first = false;
    if (r.rejected) continue;
    s.preemptions += r.preemptions;
    if (r.finish < 0) continue;
    ++s.finished;
    s.last_finish = std::max(s.last_finish, r.finish);
    s.queue.sorted.push_back(to_seconds(r.scheduled - r.arrival));
    s.ttft.sorted.push_back(to_seconds(r.first_token - r.arrival));
    if (r.output_tokens > 1) {
      s.tpot.sorted.push_back(to_seconds(r.finish - r.first_token) /
                              static_cast<double>(r.output_tokens - 1));
    }
    s.e2e.sorted.push_back(to_seconds(r.finish - r.arrival));
    if (r.handed_over >= 0) {
      s.handoff.sorted.push_back(to_seconds(r.handed_over - r.first_token));
      s.handoff_wait.sorted.push_back(to_seconds(r.handoff_admitted - r.first_token));
    }
    s.input_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    s.good += meets(r, slo) ? 1U : 0U;
  }
  for (ServeLatency* m : {&s.queue, &s.ttft, &s.tpot, &s.e2e, &s.handoff, &s.handoff_wait}) {
    std::sort(m->sorted.begin(), m->sorted.end());
    double sum = 0;
    for (const double v : m->sorted) sum += v;
    m->mean = m->sorted.empty() ? std::nan("") : sum / static_cast<double>(m->sorted.size());
  }
  return s;
}

/// Runs `f`; an error of the engine, which names the setting at fault by its field
/// ("kv_tiers"), names the CLI's flag or Python's argument, as every other error of a run.
template <class F>
void naming_settings(SettingNames names, const F& f) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string& at = e.pos().file;
    const auto& fields = serve_field_names();
    if (std::find(fields.begin(), fields.end(), at) == fields.end()) throw;
    if (dynamic_cast<const serve::DoesNotFit*>(&e) != nullptr) {
      throw serve::DoesNotFit(SourcePos{serve_flag(at, names)}, e.message());
    }
    throw InputError(SourcePos{serve_flag(at, names)}, e.message());
  }
}

std::string ms(double s) {
  return std::isnan(s) ? "-" : fmt::format("{:.2f}ms", s * 1e3);
}

std::string slo_text(const Slo& slo) {
  std::vector<std::string> parts;
  if (slo.ttft > 0) parts.push_back("ttft <= " + to_string_approx(Duration{slo.ttft}));
  if (slo.tpot > 0) parts.push_back("tpot <= " + to_string_approx(Duration{slo.tpot}));
  if (slo.e2e > 0) parts.push_back("e2e <= " + to_string_approx(Duration{slo.e2e}));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

double ServeLatency::percentile(double p) const {
  if (sorted.empty()) return std::nan("");
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double ServeSummary::span_s() const {
  return to_seconds(std::max<serve::Time>(1, last_finish - first_arrival));
}

std::vector<serve::KvTier> parse_kv_tiers(const std::string& text, std::string_view source) {
  std::vector<serve::KvTier> out;
  if (text.empty()) return out;
  const auto refuse = [&](const std::string& why) {
    return InputError::at(SourcePos{std::string(source)}, "'{}': {}", text, why);
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    serve::KvTier k;
    size_t p = 0;
    bool first = true;
    // Each of a tier's settings once: `ddr:back:through` would keep the last unnoticed.
    std::array<std::string, 4> given;  // capacity, policy, write mode, admission
    const auto once = [&](size_t what, const std::string& part) {
      static constexpr std::array<std::string_view, 4> kWhat = {"capacities", "policies",
                                                                "write modes", "admissions"};
      if (!given[what].empty()) {
        // A word that is none of them is said so below, not called a second capacity.
        const bool capacity = part.ends_with('%') || parse_bytes(part).ok();
        if (what == 0 && !capacity) return;
        throw refuse(fmt::format("tier '{}' has two {}, '{}' and '{}'", k.tier, kWhat[what],
                                 given[what], part));
      }
      given[what] = part;
    };
    while (p <= item.size()) {
      const size_t colon = std::min(item.find(':', p), item.size());
      const std::string part = item.substr(p, colon - p);
      p = colon + 1;
      const std::optional<size_t> policy = index_of(serve::kEvictionNames, part);
      const std::optional<size_t> write = index_of(serve::kWriteNames, part);
      const std::optional<size_t> admission = index_of(serve::kAdmissionNames, part);
      if (!first) once(policy ? 1 : write ? 2 : admission ? 3 : 0, part);
      if (first) {
        if (part.empty()) throw refuse("a KV tier needs a tier id, e.g. ddr:512GiB");
        k.tier = part;
        first = false;
      } else if (policy) {
        k.eviction = static_cast<serve::EvictionKind>(*policy);
      } else if (write) {
        k.write = static_cast<serve::WriteKind>(*write);
      } else if (admission) {
        k.admission = static_cast<serve::AdmissionKind>(*admission);
      } else if (!part.empty() && part.back() == '%') {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(part.substr(0, part.size() - 1), &used);
          if (used != part.size() - 1) v = -1;
        } catch (const std::exception&) {
          v = -1;
        }
        if (!(v > 0 && v <= 100))
          throw refuse(fmt::format("'{}' is not a percentage in (0, 100]", part));
        k.fraction = v / 100;
      } else {
        const auto b = parse_bytes(part);
        if (!b.ok() || b.value.value == 0) {
          throw refuse(fmt::format(
              "'{}' is neither a capacity (512GiB, 25%), a policy ({}), a write "
              "mode ({}) nor an admission ({})",
              part, fmt::join(serve::kEvictionNames, ", "), fmt::join(serve::kWriteNames, ", "),
              fmt::join(serve::kAdmissionNames, ", ")));
        }
        k.bytes = b.value.value;
      }
      if (colon == item.size()) break;
    }
    for (const serve::KvTier& o : out) {
      if (o.tier == k.tier) throw refuse(fmt::format("tier '{}' is named twice", k.tier));
    }
    out.push_back(std::move(k));
    if (comma == text.size()) break;
  }
  return out;
}

Slo parse_slo(const std::string& text, std::string_view source) {
  Slo slo;
  if (text.empty()) return slo;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const auto d =
        eq == std::string::npos ? ParseResult<Duration>{} : parse_duration(item.substr(eq + 1));
    if (eq == std::string::npos || !d.ok()) {
      throw InputError::at(SourcePos{std::string(source)},
                           "'{}': expected KEY=DURATION items (ttft=2s,tpot=100ms,e2e=30s)", item);
    }
    if (d.value.ps <= 0) {
      throw InputError::at(SourcePos{std::string(source)}, "'{}': a bound must be above 0", item);
    }
    int64_t* bound = key == "ttft"   ? &slo.ttft
                     : key == "tpot" ? &slo.tpot
                     : key == "e2e"  ? &slo.e2e
                                     : nullptr;
    if (bound != nullptr && *bound != 0) {
      throw InputError::at(SourcePos{std::string(source)}, "'{}': {} is bounded twice", item, key);
    }
    if (bound != nullptr) {
      *bound = d.value.ps;
    } else {
      throw InputError::at(SourcePos{std::string(source)}, "unknown SLO '{}'{}", key,
                           did_you_mean(key, std::vector<std::string>{"ttft", "tpot", "e2e"}));
    }
    if (comma == text.size()) break;
  }
  return slo;
}

std::string serve_flag(std::string field, SettingNames names) {
  if (names == SettingNames::kFields) return field;
  if (names == SettingNames::kWhatif) {
    // The fields whatif sets from its own flags; the question and target have theirs.
    static constexpr std::array<std::string_view, 12> kOwn = {
        "hw",           "set",      "device",    "model", "hf_config", "tp",
        "weight_dtype", "kv_dtype", "act_dtype", "trace", "arrivals",  "target"};
    if (field == "find") return "--question";
    if (std::find(kOwn.begin(), kOwn.end(), field) == kOwn.end()) return "--serve " + field;
  }
  return option_name(field, true);
}

std::shared_ptr<const traces::RequestTrace> ServeTraceCache::get(const ServeSettings& s,
                                                                 const std::string& name) {
  const std::string key = fmt::format("{}\n{}\n{}\n{}", s.trace, s.arrivals, s.trace_options.first,
                                      s.trace_options.block_tokens);
  {
    const std::lock_guard lock(m_);
    if (const auto it = traces_.find(key); it != traces_.end()) return it->second;
  }
  traces::TraceOptions read = s.trace_options;
  read.rate_scale = 1.0;
  auto trace = std::make_shared<const traces::RequestTrace>(
      s.trace.empty() ? traces::generate_requests(s.arrivals, read, name)
                      : traces::read_request_trace(s.trace, read));
  const std::lock_guard lock(m_);
  return traces_.try_emplace(key, std::move(trace)).first->second;
}

namespace {

/// A note when `--kv-tiers` lists a level whose blocks reach the device more slowly than a
/// later level's (on the route to the device's tier, no more bandwidth and no less setup,
/// and not the same): levels are nearest first, so demotions fill the slower one first.
/// Empty otherwise, and where a tier or route is missing (the engine's checks name that).
std::string kv_order_note(const ServeSetup& x) {
  const hw::Topology& t = x.topology;
  const auto dev =
      x.engine.device.empty() ? std::optional<size_t>(0) : t.device_index(x.engine.device);
  if (!dev || *dev >= t.devices.size()) return {};
  const auto local = t.tier_index(t.devices[*dev].local_tier);
  if (!local) return {};
  const auto route_of = [&](const serve::KvTier& k) -> const hw::Route* {
    const auto tier = t.tier_index(k.tier);
    return tier ? t.route(*tier, *local) : nullptr;
  };
  const std::vector<serve::KvTier>& kv = x.engine.kv_tiers;
  for (size_t i = 0; i < kv.size(); ++i) {
    const hw::Route* near = route_of(kv[i]);
    for (size_t j = i + 1; j < kv.size() && near != nullptr; ++j) {
      const hw::Route* far = route_of(kv[j]);
      if (far == nullptr || far->bandwidth < near->bandwidth || far->setup > near->setup ||
          (far->bandwidth == near->bandwidth && far->setup == near->setup)) {
        continue;
      }
      return fmt::format(
          "{}: '{}' comes before '{}', whose blocks reach the device faster ({} after {}, "
          "against {} after {}): levels are nearest first, so demotions fill '{}' first; list "
          "'{}' first unless that is meant",
          serve_flag("kv_tiers", x.names), kv[i].tier, kv[j].tier, to_string(far->bandwidth),
          to_string_approx(far->setup), to_string(near->bandwidth), to_string_approx(near->setup),
          kv[i].tier, kv[j].tier);
    }
  }
  return {};
}

/// A note when requests span more positions (prompt and output) than the model declares, as
/// context_warning() says of a step: the engine serves them all the same.
std::string context_note(const ServeSetup& x) {
  const int64_t limit = x.arch.max_context;
  if (limit <= 0) return {};
  size_t over = 0;
  int64_t longest = 0;
  for (const traces::Request& r : x.trace->requests) {
    const int64_t n = int64_t{r.prompt_tokens} + int64_t{r.output_tokens};
    over += n > limit ? 1 : 0;
    longest = std::max(longest, n);
  }
  if (over == 0) return {};
  return fmt::format(
      "{} of the {} requests span more positions (prompt and output) than {}, the longest {}; "
      "results past it assume the model runs that far",
      over, x.trace->requests.size(), max_context_text(x.arch), longest);
}

/// The notes of the settings themselves, in the order serve_notes() tells them.
std::vector<std::string> settings_notes(const ServeSetup& x) {
  std::vector<std::string> notes;
  for (std::string n : {context_note(x), kv_order_note(x)}) {
    if (!n.empty()) notes.push_back(std::move(n));
  }
  const Naming naming = x.names == SettingNames::kFields ? Naming::kFields : Naming::kFlags;
  if (std::string w = weights_warning(x.arch, x.gen.weight_dtype, naming); !w.empty()) {
    notes.push_back(std::move(w));
  }
  return notes;
}

}  // namespace

namespace {

/// The least power of two TP up to the class's devices (over the setup's pipeline stages)
/// at which the model (its draft, any prefill replicas) leaves room for KV: its setup's
/// figures, the TP left in x.gen.tp. None when no TP does: the first DoesNotFit, in `first`.
/// `probing` (stages or nodes the user did not give): every refusal passes the TP over.
std::optional<serve::ServeResult> least_tp(ServeSetup& x, std::optional<serve::DoesNotFit>& first,
                                           bool probing = false) {
  // A TP of its own choosing stays within a scale-up domain (stages go across them, as
  // vLLM's recipe for several nodes does); a TP given may span several.
  x.engine.tp_across_domains = false;
  struct Restore {
    serve::ServeOptions& o;
    ~Restore() { o.tp_across_domains = true; }
  } restore{x.engine};
  const int stages = std::max(1, x.engine.pp);
  for (int tp = 1; tp <= std::max(1, class_devices(x) / stages); tp *= 2) {
    x.gen.tp = tp;
    try {
      return serve::check_setup(*x.trace, x.arch, x.gen, x.topology, x.engine);
    } catch (const serve::DoesNotFit& e) {
      // A prefill TP given that leaves no room does not depend on this TP: the user's.
      if (e.pos().file == "prefill_tp" && x.engine.prefill_tp != 0) {
        naming_settings(x.names, [&] { throw; });
      }
      if (!first) first = e;
    } catch (const InputError& e) {
      // A TP the model cannot take is passed over; any other error is the user's to fix
      // (at TP 1, or at the first TP with room: it names that TP where it depends on it).
      if (probing) continue;
      if (tp == 1) naming_settings(x.names, [&] { throw; });
      // A TP the devices or the model cannot take refuses every power of two above it too
      // (its heads, its group of the class's first devices): none wider is tried.
      if (e.pos().file == "tp") break;
      if (e.pos().file != "prefill_tp") {
        naming_settings(x.names, [&] {
          throw InputError(e.pos(),
                           fmt::format("{} (TP {}: {} not given, the least that leaves "
                                       "{} room for KV)",
                                       e.message(), tp, serve_flag("tp", x.names), x.arch.name));
        });
      }
    }
  }
  return std::nullopt;
}

/// The least pipeline stages (from 2) at which a power-of-two TP leaves room: the stages in
/// x.engine.pp, the TP in x.gen.tp and the setup's figures; none when no stages do.
std::optional<serve::ServeResult> least_stages(ServeSetup& x) {
  for (int pp = 2; pp <= std::min(class_devices(x), x.arch.layers); ++pp) {
    x.engine.pp = pp;
    std::optional<serve::DoesNotFit> ignored;
    if (auto fit = least_tp(x, ignored, /*probing=*/true)) return fit;
  }
  return std::nullopt;
}

/// `tp` not given: the least power of two up to the class's devices at which the model (its
/// draft, any prefill replicas) leaves room for KV, told in a note when above 1. When none
/// does and `pp` is not given either, the least pipeline stages at which one does (a model
/// no node holds, served across nodes), told in a note. When none does, TP 1's error: it
/// says what would make room, and, where stages are modelled, how many nodes (`copies`
/// makes the topology of n) would serve it in stages (up to four times as many).
void choose_tp(ServeSetup& x, bool choose_pp, const std::function<hw::Topology(int)>& copies) {
  std::optional<serve::DoesNotFit> first;
  if (const auto fit = least_tp(x, first)) {
    if (x.gen.tp > 1) {
      x.notes.push_back(fmt::format(
          "{} not given: TP {}, the least that leaves {} room for KV ({} blocks of {} tokens a "
          "replica); {} sets it",
          serve_flag("tp", x.names), x.gen.tp, x.arch.name, fit->device_pool_blocks,
          fit->block_tokens, serve_flag("tp", x.names)));
    }
    return;
  }
  // Pipeline stages only where the engine models them (no speculative decoding), and where
  // the weights are what leaves no room: each stage holds the whole iteration's workspace.
  const bool stages = choose_pp && x.engine.spec.tokens == 0 && first && first->pos().file == "tp";
  if (stages) {
    if (const auto fit = least_stages(x)) {
      x.notes.push_back(
          fmt::format("{} and {} not given: no TP leaves {} room for KV on one host's devices; {} "
                      "pipeline stages of TP {} are the least that do ({} blocks of {} tokens a "
                      "replica); {} and {} set them",
                      serve_flag("tp", x.names), serve_flag("pp", x.names), x.arch.name,
                      x.engine.pp, x.gen.tp, fit->device_pool_blocks, fit->block_tokens,
                      serve_flag("tp", x.names), serve_flag("pp", x.names)));
      return;
    }
  }
  // More nodes, in stages: the least that serve it.
  std::string more;
  if (stages) {
    hw::Topology own = std::move(x.topology);
    const int own_nodes = x.nodes;
    for (int n = own_nodes + 1; n <= std::min<int64_t>(int64_t{own_nodes} * 4, kMaxNodes); ++n) {
      try {
        x.topology = copies(n);
      } catch (const InputError&) {
        break;  // the copies are refused (too many devices): no more will do
      }
      x.nodes = n;
      if (const auto fit = least_stages(x)) {
        // As the user writes it: `--nodes 2`, `nodes=2`, whatif's `--serve nodes=2`.
        more = fmt::format(
            "; or {} nodes ({}{}{}) serve it in {} pipeline stages of TP {} ({} "
            "blocks of {} tokens a replica)",
            n, serve_flag("nodes", x.names), x.names == SettingNames::kServeFlags ? " " : "=", n,
            x.engine.pp, x.gen.tp, fit->device_pool_blocks, fit->block_tokens);
        break;
      }
    }
    x.topology = std::move(own);
    x.nodes = own_nodes;
  }
  x.gen.tp = 1;
  x.engine.pp = 1;
  naming_settings(x.names, [&] { throw serve::DoesNotFit(first->pos(), first->message() + more); });
}

/// `replicas` not given: as many replicas of the setup's TP as the class's devices (of every
/// node) hold beside the prefill replicas; at least one (a setup with no room for it is
/// refused as a run of one would be). The summary's first line says how many.
void fill_replicas(ServeSetup& x) {
  // Each replica, prefill or decode, of the setup's pipeline stages.
  const int64_t stages = std::max(1, x.engine.pp);
  const int64_t tp = int64_t{std::max(1, x.gen.tp)} * stages;
  const int64_t prefill_tp = x.engine.prefill_tp != 0 ? x.engine.prefill_tp * stages : tp;
  const int64_t prefill = int64_t{x.engine.prefill_replicas} * prefill_tp;
  x.engine.replicas = static_cast<int>(std::max<int64_t>(1, (class_devices(x) - prefill) / tp));
}

}  // namespace

ServeSetup prepare_serve(const ServeSettings& s, ServeTraceCache* traces) {
  const auto name = [&s](std::string field) { return serve_flag(std::move(field), s.names); };
  const auto choice = [&](std::string_view field, const std::string& value,
                          std::span<const std::string_view> names) {
    const auto it = std::find(names.begin(), names.end(), value);
    if (it == names.end()) {
      throw InputError::at(SourcePos{name(std::string(field))}, "expected one of {}, got '{}'{}",
                           fmt::join(names, ", "), value, did_you_mean(value, names));
    }
    return static_cast<size_t>(it - names.begin());
  };
  const auto dtype = [&](std::string_view field, const std::string& value) {
    const auto i = index_of(kDtypeNames, value);
    if (!i) {
      throw InputError::at(
          SourcePos{name(std::string(field))}, "unknown dtype '{}'{}", value,
          did_you_mean(value, std::vector<std::string>(kDtypeNames.begin(), kDtypeNames.end())));
    }
    return static_cast<Dtype>(*i);
  };
  const auto whole = [&](std::string_view field, int64_t value, int64_t most) {
    if (value < 1 || value > most) {
      throw InputError::at(SourcePos{name(std::string(field))},
                           "expected a whole number from 1 to {}, got {}", most, value);
    }
  };
  if (s.model.gen.tp != 0) whole("tp", s.model.gen.tp, kMaxTp);
  if (s.engine.pp != 0) whole("pp", s.engine.pp, kMaxTp);
  whole("nodes", s.nodes, kMaxNodes);
  if (s.engine.replicas != 0) whole("replicas", s.engine.replicas, kMaxReplicas);
  if (s.engine.prefill_replicas != 0)
    whole("prefill_replicas", s.engine.prefill_replicas, kMaxReplicas);
  if (!s.decode_router.empty() && s.engine.prefill_replicas == 0) {
    throw InputError::at(SourcePos{name("decode_router")},
                         "how a decode replica is chosen needs {} (without prefill replicas it "
                         "would be ignored)",
                         name("prefill_replicas"));
  }
  if (s.engine.prefill_tp != 0) {
    whole("prefill_tp", s.engine.prefill_tp, kMaxTp);
    // Without prefill replicas it would be ignored.
    if (s.engine.prefill_replicas == 0) {
      throw InputError::at(SourcePos{name("prefill_tp")},
                           "the prefill replicas' tensor parallelism needs {} (without prefill "
                           "replicas it would be ignored)",
                           name("prefill_replicas"));
    }
  }
  whole("token_budget", s.engine.token_budget, kMaxTokenBudget);
  whole("max_seqs", s.engine.max_seqs, kMaxSeqs);
  whole("block_tokens", s.trace_options.block_tokens, traces::kMaxBlockTokens);
  if (const double r = s.trace_options.rate_scale; !(r > 0) || !std::isfinite(r)) {
    throw InputError::at(SourcePos{name("rate_scale")}, "expected a finite number above 0, got {}",
                         r);
  }
  if (s.cache_only) {
    // A replay of the cache alone has no time, batches or preemption: a setting of those
    // would be ignored, so it is refused.
    for (const auto& [field, given] : {std::pair{"timeline", !s.timeline.empty()},
                                       {"slo", !s.slo.empty()},
                                       {"warmup", !s.warmup.empty()},
                                       {"preemption", s.preemption != "recompute"},
                                       {"swap_space", !s.swap_space.empty()},
                                       {"swap_tier", !s.swap_tier.empty()},
                                       {"load", s.load != "layered"},
                                       {"spec_tokens", s.engine.spec.tokens != 0},
                                       {"decode_router", !s.decode_router.empty()}}) {
      if (given) {
        throw InputError::at(SourcePos{name(field)},
                             "has no effect with {}, which replays the cache alone (no time, "
                             "batches or preemption): leave one of them out",
                             name("cache_only"));
      }
    }
    if (s.router != "round-robin") {
      throw InputError::at(SourcePos{name("router")},
                           "'{}' routes by what each replica holds and runs when a request "
                           "arrives, which {} does not have (it replays the cache alone, without "
                           "time, sending requests to the replicas in turn): leave one of them out",
                           s.router, name("cache_only"));
    }
  }
  ServeSetup x;
  x.slo = parse_slo(s.slo, name("slo"));
  serve::ServeOptions& engine = x.engine;
  engine = s.engine;
  engine.load = static_cast<serve::LoadMode>(choice("load", s.load, serve::kLoadModeNames));
  engine.router = static_cast<serve::RouterKind>(choice("router", s.router, serve::kRouterNames));
  if (!s.decode_router.empty()) {
    static_assert(serve::kRouterNames.back() == "kv-aware",
                  "decode replicas take all but the last");
    if (s.decode_router == "kv-aware") {
      throw InputError::at(SourcePos{name("decode_router")},
                           "kv-aware weighs the prompt tokens a replica would compute, and a "
                           "decode replica computes none: least-loaded, round-robin or prefix");
    }
    engine.decode_router = static_cast<serve::RouterKind>(
        choice("decode_router", s.decode_router,
               std::span(serve::kRouterNames).first(serve::kRouterNames.size() - 1)));
  }
  engine.device_eviction = static_cast<serve::EvictionKind>(
      choice("device_policy", s.device_policy, serve::kEvictionNames));
  engine.preemption = static_cast<serve::PreemptionKind>(
      choice("preemption", s.preemption, serve::kPreemptionNames));
  engine.swap_tier = s.swap_tier;
  if (!s.swap_space.empty()) {
    const auto b = parse_bytes(s.swap_space);
    if (!b.ok() || b.value.value == 0) {
      throw InputError::at(SourcePos{name("swap_space")},
                           "expected a size above 0 such as 4GiB, got '{}'", s.swap_space);
    }
    engine.swap_bytes = b.value.value;
  }
  if (engine.preemption != serve::PreemptionKind::kSwap &&
      (!s.swap_space.empty() || !s.swap_tier.empty())) {
    throw InputError::at(SourcePos{name(s.swap_space.empty() ? "swap_tier" : "swap_space")},
                         "a swap space is only used by swap preemption");
  }
  WorkloadSource model = s.model;
  model.sets_flag = name("model_set");
  model.model_flag = name("model");
  model.gen.weight_dtype = dtype("weight_dtype", s.weight_dtype);
  model.gen.kv_dtype = dtype("kv_dtype", s.kv_dtype);
  model.gen.act_dtype = dtype("act_dtype", s.act_dtype);
  if (s.engine.spec.tokens == 0 && s.engine.spec.accept != 0) {
    throw InputError::at(SourcePos{name("spec_accept")},
                         "an acceptance probability needs {} (the draft tokens per step)",
                         name("spec_tokens"));
  }
  if (!s.spec_draft.empty()) {
    if (s.engine.spec.tokens == 0) {
      throw InputError::at(SourcePos{name("spec_draft")},
                           "a draft model needs {} (the draft tokens per step)",
                           name("spec_tokens"));
    }
    WorkloadSource draft;
    draft.model = s.spec_draft;
    draft.model_flag = name("spec_draft");
    engine.spec.draft = std::make_shared<const traces::Arch>(load_model(draft));
  }
  engine.kv_tiers = parse_kv_tiers(s.kv_tiers, name("kv_tiers"));
  if (!s.warmup.empty()) {
    const auto d = parse_duration(s.warmup);
    // parse_duration refuses negative durations too.
    if (!d.ok()) throw InputError::at(SourcePos{name("warmup")}, "{}", d.error);
    engine.warmup = d.value.ps;
  }
  if (!s.model.hf_config.empty() && !s.model.model.empty()) {
    throw InputError::at(SourcePos{name("hf_config")}, "give {} or {}, not both", name("model"),
                         name("hf_config"));
  }
  if (!s.trace.empty() && !s.arrivals.empty()) {
    throw InputError::at(SourcePos{name("trace")}, "give {} or {}, not both", name("trace"),
                         name("arrivals"));
  }
  if (s.trace.empty() && s.arrivals.empty()) {
    throw InputError::at(SourcePos{name("trace")},
                         "give a request trace ({} FILE: Mooncake JSON Lines or Azure CSV) or a "
                         "generator ({} SPEC, e.g. "
                         "poisson,rate=2/s,n=500,prompt=lognormal:2000:0.6,output=uniform:50:400)",
                         name("trace"), name("arrivals"));
  }
  // Read at rate scale 1, so that each run scales the arrivals as reading at its scale
  // would; the settings' scale is checked against the trace as reading checks it.
  x.trace_name = s.trace.empty() ? name("arrivals") : s.trace;
  ServeTraceCache own;  // one setup alone: read here, held by the setup
  x.trace = (traces != nullptr ? *traces : own).get(s, x.trace_name);
  traces::check_rate_scale(*x.trace, s.trace_options.rate_scale, x.trace_name);
  x.rate_scale = s.trace_options.rate_scale;
  // A warm-up past every arrival leaves nothing to measure: every figure would be empty.
  const double last_ps = static_cast<double>(x.trace->requests.back().arrival_ps) / x.rate_scale;
  if (engine.warmup > 0 && static_cast<double>(engine.warmup) > last_ps) {
    throw InputError::at(SourcePos{name("warmup")},
                         "{} is after every arrival (the last at {}): no request would be "
                         "measured",
                         s.warmup, to_string_approx(Duration{static_cast<int64_t>(last_ps)}));
  }
  x.arch = load_model(model);
  x.gen = model.gen;
  x.topology = load_serve_topology(s, s.sets, &x.topology_name);
  x.nodes = s.nodes;
  x.cache_only = s.cache_only;
  x.timeline = s.timeline;
  x.names = s.names;
  x.notes = settings_notes(x);
  const bool fill = engine.replicas == 0;
  if (fill) engine.replicas = 1;  // the TP chosen as for one replica
  const bool choose_pp = engine.pp == 0;
  if (choose_pp) engine.pp = 1;
  if (x.gen.tp == 0) {
    choose_tp(x, choose_pp, [&s](int n) {
      ServeSettings more = s;
      more.nodes = n;
      return load_serve_topology(more, s.sets);
    });
  }
  if (fill) fill_replicas(x);
  return x;
}

std::string nodes_name(int nodes, const std::string& name) {
  return nodes > 1 ? fmt::format("{} x {}", nodes, name) : name;
}

hw::Topology load_serve_topology(const ServeSettings& s, const std::vector<std::string>& sets,
                                 std::string* own_name) {
  const std::string file =
      s.hw.empty() ? default_topology() : find_topology(s.hw, serve_flag("hw", s.names));
  hw::Topology one =
      hw::load_topology(file, hw::LoadOptions{sets, false, serve_flag("set", s.names)});
  if (own_name != nullptr) *own_name = one.name;
  if (s.nodes <= 1) return one;
  // Copies: the hosts, supernodes and device counts multiplied through overrides after the
  // others, so that the file's checks hold of the whole. Each copy is a supernode of its
  // own (its `per: supernode` switches, links and tiers its own); one per cluster is one for
  // all of them (a scale-out network).
  const std::string flag = serve_flag("nodes", s.names);
  std::vector<std::string> scaled = sets;
  scaled.push_back(fmt::format("system.hosts={}", int64_t{one.system.hosts} * s.nodes));
  scaled.push_back(fmt::format("system.supernodes={}", int64_t{one.system.supernodes} * s.nodes));
  for (const hw::Device& d : one.devices) {
    scaled.push_back(fmt::format("devices.{}.count={}", d.id, int64_t{d.count} * s.nodes));
  }
  try {
    hw::Topology copies =
        hw::load_topology(file, hw::LoadOptions{scaled, false, serve_flag("set", s.names)});
    // What the engine's messages call it: the devices they count are the copies'.
    copies.name = nodes_name(s.nodes, one.name);
    return copies;
  } catch (const InputError& e) {
    throw InputError::at(SourcePos{flag}, "{} copies of '{}': {}", s.nodes, one.name, e.message());
  }
}

int class_devices(const ServeSetup& setup) {
  for (const hw::Device& d : setup.topology.devices) {
    if (setup.engine.device.empty() || d.id == setup.engine.device) return d.count;
  }
  return 0;
}

void check_serve(const ServeSetup& setup) {
  naming_settings(setup.names, [&] {
    serve::check_setup(*setup.trace, setup.arch, setup.gen, setup.topology, setup.engine);
  });
}

std::vector<std::string> serve_notes(const ServeSetup& setup) {
  std::vector<std::string> notes = setup.trace->notes;
  notes.insert(notes.end(), setup.notes.begin(), setup.notes.end());
  return notes;
}

ServeStudy run_serve(const ServeSetup& setup) {
  ServeStudy x;
  x.slo = setup.slo;
  x.trace = *setup.trace;
  traces::scale_arrivals(x.trace, setup.rate_scale, setup.trace_name);
  x.model = setup.arch.name;
  x.topology = setup.topology_name;
  x.nodes = setup.nodes;
  // The timeline file is opened first: a path that cannot be written fails before the run.
  std::unique_ptr<sim::Timeline> tl;
  if (!setup.timeline.empty() && !setup.cache_only) {
    tl = setup.outputs ? std::make_unique<sim::Timeline>(*setup.outputs->open(setup.timeline))
                       : std::make_unique<sim::Timeline>(setup.timeline);
  }
  serve::ServeOptions engine = setup.engine;
  engine.timeline = tl.get();
  naming_settings(setup.names, [&] {
    x.result = setup.cache_only
                   ? serve::cache_only(x.trace, setup.arch, setup.gen, setup.topology, engine)
                   : serve::serve(x.trace, setup.arch, setup.gen, setup.topology, engine);
  });
  if (tl) tl->finish();
  x.device = engine.device.empty() ? setup.topology.devices.front().id : engine.device;
  x.class_devices = class_devices(setup);
  x.summary = summarize(x.result, x.slo);
  return x;
}

ServeStudy run_serve(const ServeSettings& s) {
  return run_serve(prepare_serve(s));
}

std::string preemption_text(const serve::ServeResult& r) {
  if (!r.swap_tier.empty()) {
    return fmt::format(
        "preemption by swap to '{}' ({} blocks of swap space per replica): {} swapped out ({} "
        "blocks out, {} back in, the rest still cached), {} recomputed for want of swap space; "
        "{} tokens computed again",
        r.swap_tier, r.swap_blocks, r.swap_outs, r.swapped_blocks, r.swapped_in_blocks,
        r.swap_fallbacks, r.recomputed_tokens);
  }
  if (r.preemptions == 0) return {};
  return fmt::format("preemption by recompute: {} tokens computed again", r.recomputed_tokens);
}

std::string replicas_text(const serve::ServeResult& r) {
  const auto n = [](int k, std::string_view what) {
    return fmt::format("{} {}replica{}", k, what, k == 1 ? "" : "s");
  };
  if (r.prefill_replicas == 0) {
    return fmt::format("{} x TP {}{}", n(r.replicas, ""), r.tp,
                       r.pp > 1 ? fmt::format(" x PP {}", r.pp) : "");
  }
  const std::string pp = r.pp > 1 ? fmt::format(" x PP {}", r.pp) : "";
  return fmt::format("{} x TP {}{} and {} x TP {}{}", n(r.prefill_replicas, "prefill "),
                     r.prefill_tp, pp, n(r.replicas, "decode "), r.tp, pp);
}

std::string router_text(const serve::ServeResult& r) {
  // Where it has a choice to make.
  const int routed = r.prefill_replicas > 0 ? r.prefill_replicas : r.replicas;
  if (routed < 2) return {};
  return fmt::format(", routed {}", serve::kRouterNames[static_cast<size_t>(r.router)]);
}

/// Tokens a drafting step yields on average with k drafts each accepted with probability a
/// until the first rejection: the accepted ones and one more.
double spec_expected(int k, double a) {
  return a >= 1 ? k + 1.0 : (1 - std::pow(a, k + 1)) / (1 - a);
}

/// TP groups over several scale-up domains: how their all-reduces go.
std::string tp_domains_text(const serve::ServeResult& r) {
  std::vector<std::string> groups;
  const auto group = [&](std::string_view whose, int tp, int domains, double bandwidth) {
    if (domains < 2) return;
    groups.push_back(
        fmt::format("{} TP {} group spans {} scale-up domains of {} devices, {} out "
                    "of each",
                    whose, tp, domains, tp / domains, to_string(Bandwidth{bandwidth})));
  };
  if (r.prefill_replicas > 0) {
    group("a prefill replica's", r.prefill_tp, r.prefill_tp_domains,
          r.prefill_collective_bandwidth);
  }
  group(r.prefill_replicas > 0 ? "a decode replica's" : "each", r.tp, r.tp_domains,
        r.collective_bandwidth);
  if (groups.empty()) return {};
  return fmt::format(
      "tensor parallelism across scale-up domains: {} (all its devices' paths together); its "
      "all-reduces run as rings through each domain's devices and over the scale-out network "
      "between domains",
      fmt::join(groups, "; "));
}

std::string spec_setup_text(const serve::ServeResult& r) {
  if (r.spec_tokens == 0) return {};
  return fmt::format(
      "speculative decoding: up to {} draft tokens a step from {}, each accepted with "
      "probability {:g} until the first rejection ({:.3g} tokens a step expected)",
      r.spec_tokens,
      r.spec_draft.empty()
          ? std::string("n-gram lookup (no model)")
          : fmt::format("the draft {} (its weights {} and KV {} a token per device are in the "
                        "figures above)",
                        r.spec_draft, to_string_approx(Bytes{r.draft_weight_bytes}),
                        to_string_approx(Bytes{r.draft_kv_bytes_per_token})),
      r.spec_accept, spec_expected(r.spec_tokens, r.spec_accept));
}

std::string spec_run_text(const serve::ServeResult& r) {
  if (r.spec_tokens == 0) return {};
  return fmt::format(
      "speculative decoding: {} decode steps drafted {} tokens, {} accepted ({:.1f}%); {:.3g} "
      "tokens a drafting step (fewer drafts near an output's end)",
      r.spec_steps, r.spec_drafted, r.spec_accepted,
      r.spec_drafted == 0
          ? 0.0
          : 100.0 * static_cast<double>(r.spec_accepted) / static_cast<double>(r.spec_drafted),
      r.spec_steps == 0 ? 0.0 : r.spec_tokens_per_step());
}

std::string handoff_text(const ServeStudy& x) {
  const serve::ServeResult& r = x.result;
  const double bytes = static_cast<double>(r.handoff_blocks) *
                       static_cast<double>(r.kv_bytes_per_token) * r.block_tokens * r.tp * r.pp;
  return fmt::format(
      "disaggregated: {} requests handed from prefill to decode replicas ({}), {} blocks "
      "copied ({}; blocks the decode replica held already are not); hand-over (first token "
      "to KV on the decode replica) p50 {}, p99 {}, of which waiting for room there p50 {}, "
      "p99 {}",
      r.handoffs, serve::kRouterNames[static_cast<size_t>(r.decode_router)], r.handoff_blocks,
      to_string_approx(Bytes{static_cast<uint64_t>(bytes)}), ms(x.summary.handoff.percentile(50)),
      ms(x.summary.handoff.percentile(99)), ms(x.summary.handoff_wait.percentile(50)),
      ms(x.summary.handoff_wait.percentile(99)));
}

namespace {

/// Each replica's work: its share of the run (to the last finish) with an iteration in
/// flight and computing, its tokens; past 16 replicas, the least, mean and most of each.
std::string replicas_table(const serve::ServeResult& r) {
  const std::vector<serve::ReplicaRecord>& reps = r.replica_records;
  if (reps.empty()) return {};
  const double span = static_cast<double>(std::max<Time>(1, r.makespan));
  std::string out = fmt::format("\n{:<15} {:>9}  {:>10}  {:>6}  {:>7}  {:>13}  {:>13}  {:>11}\n",
                                "replica", "requests", "iterations", "busy", "compute",
                                "prompt tokens", "output tokens", "preemptions");
  // A mean's counts keep a decimal.
  const auto row = [&](const std::string& name, const std::array<double, 7>& v, int decimals = 0) {
    out += fmt::format(
        "{:<15} {:>9.{}f}  {:>10.{}f}  {:>5.1f}%  {:>6.1f}%  {:>13.{}f}  {:>13.{}f}  "
        "{:>11.{}f}\n",
        name, v[0], decimals, v[1], decimals, 100.0 * v[2] / span, 100.0 * v[3] / span, v[4],
        decimals, v[5], decimals, v[6], decimals);
  };
  const auto values = [](const serve::ReplicaRecord& x) {
    return std::array<double, 7>{
        static_cast<double>(x.requests),      static_cast<double>(x.iterations),
        static_cast<double>(x.busy),          static_cast<double>(x.compute),
        static_cast<double>(x.prompt_tokens), static_cast<double>(x.output_tokens),
        static_cast<double>(x.preemptions)};
  };
  const auto name = [&](size_t i) {
    const std::string_view role = r.prefill_replicas == 0 ? ""
                                  : reps[i].prefill_only  ? "prefill "
                                                          : "decode ";
    return fmt::format("{}r{}", role, i);
  };
  if (reps.size() <= 16) {
    for (size_t i = 0; i < reps.size(); ++i) row(name(i), values(reps[i]));
    return out;
  }
  // Each role alone: a prefill replica's work is not a decode replica's.
  for (const bool prefill : {true, false}) {
    std::array<double, 7> least{}, sum{}, most{};
    size_t n = 0;
    for (const serve::ReplicaRecord& x : reps) {
      if (x.prefill_only != prefill) continue;
      const std::array<double, 7> v = values(x);
      for (size_t k = 0; k < v.size(); ++k) {
        least[k] = n == 0 ? v[k] : std::min(least[k], v[k]);
        most[k] = n == 0 ? v[k] : std::max(most[k], v[k]);
        sum[k] += v[k];
      }
      ++n;
    }
    if (n == 0) continue;
    for (double& v : sum) v /= static_cast<double>(n);
    const std::string role = r.prefill_replicas == 0 ? "" : prefill ? "prefill " : "decode ";
    row(fmt::format("{}least", role), least);
    row(fmt::format("{}mean", role), sum, 1);
    row(fmt::format("{}most", role), most);
  }
  return out;
}

}  // namespace

std::string serve_text(const ServeStudy& x) {
  const serve::ServeResult& r = x.result;
  // The devices it leaves idle are said: a run of one replica on a server of eight.
  const std::string device =
      r.devices() < x.class_devices
          ? fmt::format("{} of the {} {}", r.devices(), x.class_devices, x.device)
          : x.device;
  std::string out = fmt::format("serve {} on {}: {} ({}){}, {} ({} requests)\n", x.model,
                                nodes_name(x.nodes, x.topology), replicas_text(r), device,
                                router_text(r), x.trace.source, x.trace.requests.size());
  const uint64_t block_bytes = r.kv_bytes_per_token * r.block_tokens;
  out += fmt::format(
      "device memory per device{}: weights {}, workspace {}, KV pool {} blocks of "
      "{} tokens ({}, {} tokens per replica)\n",
      r.prefill_replicas > 0 ? " (decode)"
      : r.pp > 1             ? " (of the pipeline stage holding the most)"
                             : "",
      to_string_approx(Bytes{r.weight_bytes}), to_string_approx(Bytes{r.workspace_bytes}),
      r.device_pool_blocks, r.block_tokens,
      to_string_approx(Bytes{r.device_pool_blocks * block_bytes}),
      r.device_pool_blocks * r.block_tokens);
  if (r.prefill_replicas > 0) {
    const uint64_t prefill_block = r.prefill_kv_bytes_per_token * r.block_tokens;
    out += fmt::format(
        "device memory per device (prefill): weights {}, workspace {}, KV pool {} blocks ({}, "
        "{} tokens per replica)\n",
        to_string_approx(Bytes{r.prefill_weight_bytes}),
        to_string_approx(Bytes{r.prefill_workspace_bytes}), r.prefill_pool_blocks,
        to_string_approx(Bytes{r.prefill_pool_blocks * prefill_block}),
        r.prefill_pool_blocks * r.block_tokens);
  }
  if (const std::string t = tp_domains_text(r); !t.empty()) out += t + "\n";
  if (const std::string t = spec_setup_text(r); !t.empty()) out += t + "\n";
  out +=
      "\ncache level     capacity (blocks)  hit tokens  share of prompt  loads out  demotions in  "
      "evictions  peak blocks\n";
  const double prompt = static_cast<double>(std::max<uint64_t>(1, r.prompt_tokens));
  for (const serve::LevelRecord& l : r.levels) {
    out += fmt::format("{:<15} {:>17}  {:>10}  {:>14.1f}%  {:>9}  {:>12}  {:>9}  {:>11}\n", l.name,
                       l.capacity_blocks, l.hit_tokens,
                       100.0 * static_cast<double>(l.hit_tokens) / prompt,
                       l.stats.moves_out[size_t(serve::MoveKind::kLoad)],
                       l.stats.moves_in[size_t(serve::MoveKind::kDemotion)], l.stats.evictions,
                       l.stats.peak_occupancy);
  }
  out += fmt::format("prompt tokens {}, computed {} ({:.1f}% hit)\n", r.prompt_tokens,
                     r.computed_tokens,
                     100.0 * (1.0 - static_cast<double>(r.computed_tokens) / prompt));
  if (r.cache_only) return out;

  const ServeSummary& s = x.summary;
  out += fmt::format(
      "\nrequests {} counted, {} finished, {} rejected (KV larger than the device pool); "
      "{} preemptions; {} iterations; {} transfers\n",
      s.counted, s.finished, s.rejected, s.preemptions, r.iterations, r.transfers);
  if (const std::string p = preemption_text(r); !p.empty()) out += p + "\n";
  if (r.prefill_replicas > 0) out += handoff_text(x) + "\n";
  if (const std::string t = spec_run_text(r); !t.empty()) out += t + "\n";
  // Columns of 10, wider where a figure is (a queue of a minute is 60000.00ms).
  std::vector<std::array<std::string, 4>> cells;
  size_t width = 10;
  for (const ServeLatency* m : {&s.queue, &s.ttft, &s.tpot, &s.e2e}) {
    cells.push_back(
        {ms(m->percentile(50)), ms(m->percentile(90)), ms(m->percentile(99)), ms(m->mean)});
    for (const std::string& c : cells.back()) width = std::max(width, c.size());
  }
  out += fmt::format("\n{:<6} {:>{}} {:>{}} {:>{}} {:>{}}\n", "", "p50", width, "p90", width, "p99",
                     width, "mean", width);
  size_t row = 0;
  for (const ServeLatency* m : {&s.queue, &s.ttft, &s.tpot, &s.e2e}) {
    const auto& c = cells[row++];
    out += fmt::format("{:<6} {:>{}} {:>{}} {:>{}} {:>{}}\n", m->name, c[0], width, c[1], width,
                       c[2], width, c[3], width);
  }
  out += fmt::format(
      "\nthroughput: {:.1f} input tokens/s, {:.1f} output tokens/s ({:.1f} per device of {}), "
      "{:.3f} requests/s over {:.1f} s\n",
      static_cast<double>(s.input_tokens) / s.span_s(),
      static_cast<double>(s.output_tokens) / s.span_s(),
      static_cast<double>(s.output_tokens) / s.span_s() / static_cast<double>(r.devices()),
      r.devices(), static_cast<double>(s.finished) / s.span_s(), s.span_s());
  if (x.slo.ttft > 0 || x.slo.tpot > 0 || x.slo.e2e > 0) {
    out += fmt::format("goodput ({}): {} of {} requests ({:.1f}%), {:.3f} requests/s\n",
                       slo_text(x.slo), s.good, s.counted,
                       100.0 * static_cast<double>(s.good) / std::max<double>(1, double(s.counted)),
                       static_cast<double>(s.good) / s.span_s());
  }
  out += replicas_table(r);
  if (!r.resources.empty()) {
    out += "\nresource                       bytes    busy\n";
    for (const serve::ResourceRecord& res : r.resources) {
      out += fmt::format("{:<26} {:>10} {:>6.1f}%\n", res.name,
                         to_string_approx(Bytes{static_cast<uint64_t>(res.bytes)}),
                         100.0 * static_cast<double>(res.busy) /
                             static_cast<double>(std::max<Time>(1, r.makespan)));
    }
  }
  return out;
}

std::string serve_json(const ServeStudy& x) {
  const serve::ServeResult& r = x.result;
  nlohmann::ordered_json j;
  j["format"] = "tierflow.serve/1";
  j["model"] = x.model;
  j["topology"] = x.topology;
  j["nodes"] = x.nodes;
  j["device"] = x.device;
  j["class_devices"] = x.class_devices;  // the class's, of all the nodes (`devices`: the run's)
  j["trace"] = x.trace.source;
  j["requests"] = x.trace.requests.size();
  j["replicas"] = r.replicas;
  j["router"] = serve::kRouterNames[static_cast<size_t>(r.router)];
  j["prefill_replicas"] = r.prefill_replicas;
  if (r.prefill_replicas > 0) {
    j["prefill_tp"] = r.prefill_tp;
    j["prefill_tp_domains"] = r.prefill_tp_domains;
    if (r.prefill_tp_domains > 1) {
      j["prefill_collective_bytes_per_s"] = r.prefill_collective_bandwidth;
    }
    j["decode_router"] = serve::kRouterNames[static_cast<size_t>(r.decode_router)];
    j["prefill_weight_bytes"] = r.prefill_weight_bytes;
    j["prefill_workspace_bytes"] = r.prefill_workspace_bytes;
    j["prefill_pool_blocks"] = r.prefill_pool_blocks;
    j["prefill_kv_bytes_per_token"] = r.prefill_kv_bytes_per_token;
  }
  j["tp"] = r.tp;
  j["tp_domains"] = r.tp_domains;
  if (r.tp_domains > 1) j["collective_bytes_per_s"] = r.collective_bandwidth;
  j["pp"] = r.pp;
  if (r.spec_tokens > 0) {
    j["spec"] = {{"tokens", r.spec_tokens},
                 {"accept", r.spec_accept},
                 {"draft", r.spec_draft.empty() ? nlohmann::ordered_json()
                                                : nlohmann::ordered_json(r.spec_draft)},
                 {"draft_weight_bytes", r.draft_weight_bytes},
                 {"draft_kv_bytes_per_token", r.draft_kv_bytes_per_token},
                 {"expected_tokens_per_step", spec_expected(r.spec_tokens, r.spec_accept)},
                 {"steps", r.spec_steps},
                 {"drafted", r.spec_drafted},
                 {"accepted", r.spec_accepted}};
  }
  j["cache_only"] = r.cache_only;
  j["block_tokens"] = r.block_tokens;
  j["weight_bytes"] = r.weight_bytes;
  j["workspace_bytes"] = r.workspace_bytes;
  j["kv_bytes_per_token"] = r.kv_bytes_per_token;
  j["device_pool_blocks"] = r.device_pool_blocks;
  j["prompt_tokens"] = r.prompt_tokens;
  j["computed_tokens"] = r.computed_tokens;
  nlohmann::ordered_json levels = nlohmann::ordered_json::array();
  for (const serve::LevelRecord& l : r.levels) {
    nlohmann::ordered_json e;
    e["name"] = l.name;
    e["tier"] = l.tier;
    e["position"] = l.position;
    e["capacity_blocks"] = l.capacity_blocks;
    e["hit_tokens"] = l.hit_tokens;
    e["loads_out"] = l.stats.moves_out[size_t(serve::MoveKind::kLoad)];
    e["demotions_in"] = l.stats.moves_in[size_t(serve::MoveKind::kDemotion)];
    e["stores_in"] = l.stats.moves_in[size_t(serve::MoveKind::kStore)];
    e["evictions"] = l.stats.evictions;
    e["drops"] = l.stats.drops;
    e["peak_blocks"] = l.stats.peak_occupancy;
    levels.push_back(std::move(e));
  }
  j["levels"] = std::move(levels);
  if (!r.cache_only) {
    const ServeSummary& s = x.summary;
    j["counted"] = s.counted;
    j["finished"] = s.finished;
    j["rejected"] = s.rejected;
    j["preemptions"] = s.preemptions;
    j["preemption"] = r.swap_tier.empty() ? "recompute" : "swap";
    j["recomputed_tokens"] = r.recomputed_tokens;
    if (!r.swap_tier.empty()) {
      j["swap_tier"] = r.swap_tier;
      j["swap_blocks"] = r.swap_blocks;
      j["swap_outs"] = r.swap_outs;
      j["swapped_blocks"] = r.swapped_blocks;
      j["swapped_in_blocks"] = r.swapped_in_blocks;
      j["swap_fallbacks"] = r.swap_fallbacks;
    }
    if (r.prefill_replicas > 0) {
      j["handoffs"] = r.handoffs;
      j["handoff_blocks"] = r.handoff_blocks;
    }
    j["iterations"] = r.iterations;
    j["transfers"] = r.transfers;
    j["makespan_s"] = to_seconds(r.makespan);
    std::vector<const ServeLatency*> latencies = {&s.queue, &s.ttft, &s.tpot, &s.e2e};
    if (r.prefill_replicas > 0) latencies.insert(latencies.end(), {&s.handoff, &s.handoff_wait});
    for (const ServeLatency* m : latencies) {
      nlohmann::ordered_json e;
      const auto num = [](double v) {
        return std::isnan(v) ? nlohmann::ordered_json() : nlohmann::ordered_json(v);
      };
      e["p50_s"] = num(m->percentile(50));
      e["p90_s"] = num(m->percentile(90));
      e["p99_s"] = num(m->percentile(99));
      e["mean_s"] = num(m->mean);
      j[m->name] = std::move(e);
    }
    j["input_tokens_per_s"] = static_cast<double>(s.input_tokens) / s.span_s();
    j["output_tokens_per_s"] = static_cast<double>(s.output_tokens) / s.span_s();
    j["devices"] = r.devices();
    j["output_tokens_per_s_per_device"] =
        static_cast<double>(s.output_tokens) / s.span_s() / static_cast<double>(r.devices());
    j["requests_per_s"] = static_cast<double>(s.finished) / s.span_s();
    // A bound --slo does not set is null, not 0 (no request could meet a bound of 0).
    const auto bound = [](serve::Time t) {
      return t == 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(to_seconds(t));
    };
    j["goodput"] = {{"ttft_s", bound(x.slo.ttft)},
                    {"tpot_s", bound(x.slo.tpot)},
                    {"e2e_s", bound(x.slo.e2e)},
                    {"requests", s.good},
                    {"requests_per_s", static_cast<double>(s.good) / s.span_s()}};
    nlohmann::ordered_json res = nlohmann::ordered_json::array();
    for (const serve::ResourceRecord& e : r.resources) {
      res.push_back(
          {{"name", e.name}, {"link", e.link}, {"bytes", e.bytes}, {"busy_s", to_seconds(e.busy)}});
    }
    j["resources"] = std::move(res);
    nlohmann::ordered_json reps = nlohmann::ordered_json::array();
    for (const serve::ReplicaRecord& e : r.replica_records) {
      reps.push_back({{"role", r.prefill_replicas == 0 ? "colocated"
                               : e.prefill_only        ? "prefill"
                                                       : "decode"},
                      {"requests", e.requests},
                      {"iterations", e.iterations},
                      {"busy_s", to_seconds(e.busy)},
                      {"compute_s", to_seconds(e.compute)},
                      {"prompt_tokens", e.prompt_tokens},
                      {"output_tokens", e.output_tokens},
                      {"preemptions", e.preemptions}});
    }
    j["replica_work"] = std::move(reps);
  }
  return j.dump(2) + "\n";
}

double serve_latency(const ServeStudy& x, std::string_view which, double p) {
  const ServeSummary& s = x.summary;
  for (const ServeLatency* m : {&s.queue, &s.ttft, &s.tpot, &s.e2e, &s.handoff, &s.handoff_wait}) {
    if (m->name == which) return p == 0 ? m->mean : m->percentile(p);
  }
  TF_ASSERT(false, "no latency '{}'", which);
  return 0;
}

double serve_goodput_share(const ServeStudy& x) {
  const ServeSummary& s = x.summary;
  return s.counted == 0 ? 0.0 : static_cast<double>(s.good) / static_cast<double>(s.counted);
}

double serve_hit_ratio(const ServeStudy& x) {
  const serve::ServeResult& r = x.result;
  if (r.prompt_tokens == 0) return 0;
  return 1.0 - static_cast<double>(r.computed_tokens) / static_cast<double>(r.prompt_tokens);
}

std::string requests_jsonl(const ServeStudy& x) {
  const serve::ServeResult& r = x.result;
  std::vector<std::string> names = {"id",     "replica", "arrival_s",     "queue_s",      "ttft_s",
                                    "tpot_s", "e2e_s",   "prompt_tokens", "output_tokens"};
  size_t positions = 0;
  for (const serve::LevelRecord& l : r.levels) positions = std::max(positions, l.position + 1);
  std::vector<std::string> tiers(positions);
  for (const serve::LevelRecord& l : r.levels) tiers[l.position] = l.tier;
  for (const std::string& n : tiers) names.push_back("hit_" + n);
  for (const char* n : {"preemptions", "counted", "rejected"}) names.emplace_back(n);
  const bool pd = r.prefill_replicas > 0;
  if (pd) names.insert(names.begin() + 2, {"decode_replica", "handoff_s", "handoff_wait_s"});
  std::vector<std::vector<Cell>> rows;
  rows.reserve(r.requests.size());
  for (const serve::RequestRecord& q : r.requests) {
    const bool done = q.finish >= 0;
    const auto since = [&](Time t) { return done ? Cell{to_seconds(t - q.arrival)} : Cell{}; };
    // Cell by cell (a braced list of variants trips GCC 12's -O3 flow warnings).
    std::vector<Cell> row;
    row.reserve(names.size());
    row.emplace_back(static_cast<int64_t>(q.id));
    row.emplace_back(static_cast<int64_t>(q.replica));
    if (pd) {
      row.push_back(q.decode_replica < 0 ? Cell{} : Cell{static_cast<int64_t>(q.decode_replica)});
      row.push_back(q.handed_over < 0 ? Cell{} : Cell{to_seconds(q.handed_over - q.first_token)});
      row.push_back(q.handed_over < 0 ? Cell{}
                                      : Cell{to_seconds(q.handoff_admitted - q.first_token)});
    }
    row.emplace_back(to_seconds(q.arrival));
    row.push_back(since(q.scheduled));
    row.push_back(since(q.first_token));
    row.push_back(done && q.output_tokens > 1
                      ? Cell{to_seconds(q.finish - q.first_token) / (q.output_tokens - 1)}
                      : Cell{});
    row.push_back(since(q.finish));
    row.emplace_back(static_cast<int64_t>(q.prompt_tokens));
    row.emplace_back(static_cast<int64_t>(q.output_tokens));
    for (size_t i = 0; i < positions; ++i) {
      row.emplace_back(static_cast<int64_t>(i < q.hit_tokens.size() ? q.hit_tokens[i] : 0));
    }
    row.emplace_back(static_cast<int64_t>(q.preemptions));
    row.emplace_back(q.counted);
    row.emplace_back(q.rejected);
    rows.push_back(std::move(row));
  }
  return jsonl_of(names, rows);
}

std::string requests_file(const ServeStudy& x, std::string_view path) {
  return path.ends_with(".jsonl") ? requests_jsonl(x) : requests_csv(x);
}

std::string requests_csv(const ServeStudy& x) {
  const serve::ServeResult& r = x.result;
  const bool pd = r.prefill_replicas > 0;
  std::string out =
      fmt::format("id,replica,{}arrival_s,queue_s,ttft_s,tpot_s,e2e_s,prompt_tokens,output_tokens",
                  pd ? "decode_replica,handoff_s,handoff_wait_s," : "");
  size_t positions = 0;
  for (const serve::LevelRecord& l : r.levels) positions = std::max(positions, l.position + 1);
  std::vector<std::string> names(positions);
  for (const serve::LevelRecord& l : r.levels) names[l.position] = l.tier;
  for (const std::string& n : names) out += ",hit_" + n;
  out += ",preemptions,counted,rejected\n";
  const auto time = [](Time t) {
    return t < 0 ? std::string() : fmt::format("{:.9f}", to_seconds(t));
  };
  for (const serve::RequestRecord& q : r.requests) {
    const bool done = q.finish >= 0;
    out += fmt::format("{},{},", q.id, q.replica);
    if (pd) {
      out += fmt::format("{},{},{},", q.decode_replica < 0 ? "" : std::to_string(q.decode_replica),
                         q.handed_over < 0 ? "" : time(q.handed_over - q.first_token),
                         q.handed_over < 0 ? "" : time(q.handoff_admitted - q.first_token));
    }
    out += fmt::format(
        "{},{},{},{},{},{},{}", time(q.arrival), done ? time(q.scheduled - q.arrival) : "",
        done ? time(q.first_token - q.arrival) : "",
        done && q.output_tokens > 1
            ? fmt::format("{:.9f}", to_seconds(q.finish - q.first_token) / (q.output_tokens - 1))
            : "",
        done ? time(q.finish - q.arrival) : "", q.prompt_tokens, q.output_tokens);
    for (size_t i = 0; i < positions; ++i)
      out += fmt::format(",{}", i < q.hit_tokens.size() ? q.hit_tokens[i] : 0);
    out += fmt::format(",{},{},{}\n", q.preemptions, q.counted ? 1 : 0, q.rejected ? 1 : 0);
  }
  return out;
}

}  // namespace tierflow::study
