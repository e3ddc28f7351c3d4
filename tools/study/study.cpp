#include "tools/study/study.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <unordered_set>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/json_reader.h"
#include "core/json_writer.h"
#include "core/sha256.h"
#include "core/units.h"
#include "core/workload_json.h"
#include "hw_models/bind.h"
#include "hw_models/loader.h"
#include "planner/bounds.h"
#include "planner/host_steps.h"
#include "planner/outcome.h"
#include "planner/pins.h"
#include "sim/timeline.h"
#include "tools/study/sim_evaluator.h"
#include "tools/study/target.h"
#include "traces/arch_loader.h"
#include "traces/hf_import.h"

namespace tierflow::study {

void check_tp_group(const hw::Topology& topo, const planner::Target& target, const Workload& w,
                    const std::string& path) {
  check_tp_group(topo, target, hw::workload_tp(w), &w, path);
}

void check_tp_group(const hw::Topology& topo, const planner::Target& target, int64_t tp,
                    const Workload* file, const std::string& source) {
  if (tp > 1) {
    const hw::Fabric fabric(topo);
    for (int d = 0; d < fabric.devices(); ++d) {
      if (fabric.device_class(d) != target.device_class ||
          fabric.device_index(d) >= static_cast<int>(target.devices)) {
        continue;
      }
      const auto why = hw::tp_group_problem(fabric, target.device_tier, d, tp);
      if (!why) continue;
      if (file != nullptr) {
        throw InputError::at(SourcePos{source},
                             "the workload is one shard of tensor parallelism {}: {}", tp, *why);
      }
      throw InputError::at(SourcePos{source}, "TP {}: {}", tp, *why);
    }
  } else if (file != nullptr) {
    if (auto why = hw::collective_problem(topo, target.device_tier, *file)) {
      throw InputError::at(SourcePos{source}, "{}", *why);
    }
  }
}
namespace {

// "No limit" for a device tier: 1 PiB per device, the largest tensor the format allows,
// and small enough that a supernode's instances still sum in 64 bits (CloudMatrix384:
// 384 of them).
constexpr uint64_t kUnlimited = kMaxTensorBytes;

std::string gen_key(const WorkloadSource& src, const traces::GenOptions& g) {
  return fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", src.model,
      src.hf_config, fmt::join(src.model_sets, ";"), static_cast<int>(g.phase), g.batch, g.seq,
      g.context, g.tokens, g.tp, static_cast<int>(g.weight_dtype), static_cast<int>(g.kv_dtype),
      static_cast<int>(g.act_dtype), g.compute_dtype ? static_cast<int>(*g.compute_dtype) : -1,
      g.quant_group, g.quant_zeros, g.kv_block, g.checkpoint, static_cast<int>(g.routing), g.seed,
      g.layers, g.routing_skew, g.routing_repeat, g.routing_trace, g.micro_batches);
}

/// The token of a generated decode op ("t12.L3.qkv" -> 12), or -1.
int64_t token_of(std::string_view name) {
  if (name.size() < 3 || name[0] != 't') return -1;
  int64_t t = 0;
  const auto [end, ec] = std::from_chars(name.data() + 1, name.data() + name.size(), t);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return -1;
  return t;
}

/// Per-token durations after the first (its warm start), and whether they are steady.
struct Steady {
  bool steady = false;
  double mean_ps = 0;
  double spread = 0;  ///< (max - min) / mean
};

Steady steady_of(const std::vector<int64_t>& ends) {
  Steady s;
  if (ends.size() < 3) return s;
  double lo = 1e300, hi = 0, sum = 0;
  for (size_t i = 1; i < ends.size(); ++i) {
    const auto d = static_cast<double>(ends[i] - ends[i - 1]);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    sum += d;
  }
  s.mean_ps = sum / static_cast<double>(ends.size() - 1);
  s.spread = s.mean_ps > 0 ? (hi - lo) / s.mean_ps : 1;
  s.steady = s.spread <= kSteadySpread;
  return s;
}

}  // namespace

std::string without_instance(const std::string& name) {
  const auto open = name.find('[');
  const auto close = name.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return name;
  return name.substr(0, open) + name.substr(close + 1);
}

std::string PhaseResult::why() const {
  if (!outcome.ok) return outcome.reason;
  if (sim && sim->error) return sim->error->message;
  return "";
}

Plan plan_for_file(const Trial& t, const PhaseResult& p, const std::string& path) {
  Plan plan = *p.outcome.plan;
  const std::string hw = t.scenario.hw.empty() ? default_topology() : t.scenario.hw;
  refer_inputs(plan, path, hw, sha256_hex(FileText(hw).view()), t.scenario.sets);
  record_outcome(plan, p.outcome);
  return plan;
}

void refer_inputs(Plan& plan, const std::string& path, const std::string& hw, std::string hw_sha256,
                  const std::vector<std::string>& sets, const std::string& workload,
                  std::string workload_sha256) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::absolute(path).parent_path();
  plan.topology_ref = {fs::relative(fs::absolute(hw), dir).string(), std::move(hw_sha256), sets};
  if (!workload.empty()) {
    plan.workload_ref = {
        fs::relative(fs::absolute(workload), dir).string(), std::move(workload_sha256), {}};
  }
}

void write_plan_timeline(AtomicOutput* out, const Plan& plan, const Workload& w,
                         const hw::Topology& topo) {
  if (out == nullptr) return;
  sim::Timeline tl(*out);
  sim::SimOptions so;
  so.timeline = &tl;
  so.live_top = 0;
  (void)sim::simulate(plan, w, topo, so);
  tl.finish();
}

void record_outcome(Plan& plan, const planner::PlanOutcome& o) {
  plan.pipeline = o.pipeline;
  // A realized plan's own budget is the larger: the planned share and the room for its
  // demand copies (Study::run_phase).
  plan.budget = std::max(plan.budget, o.budget);
  const planner::Bounds& b = o.bounds;
  if (b.makespan_ps > 0) plan.meta["bounds_makespan_ps"] = std::to_string(b.makespan_ps);
  if (b.compute_ps > 0) plan.meta["bounds_compute_ps"] = std::to_string(b.compute_ps);
  if (b.residency > 0) plan.meta["bounds_residency"] = std::to_string(b.residency);
  if (b.traffic_bytes > 0) plan.meta["bounds_traffic_bytes"] = std::to_string(b.traffic_bytes);
}

hw::Topology plan_topology(const Plan& plan, const std::string& plan_path, const std::string& hw,
                           const std::vector<std::string>& sets) {
  std::string file = hw.empty() ? hw : find_topology(hw, "--hw");
  if (file.empty()) {
    if (plan.topology_ref.file.empty()) {
      throw InputError(SourcePos{plan_path}, "the plan names no topology file: give one with --hw");
    }
    file = (std::filesystem::path(plan_path).parent_path() / plan.topology_ref.file).string();
  }
  std::vector<std::string> all = plan.topology_ref.sets;
  all.insert(all.end(), sets.begin(), sets.end());
  const std::string text = read_text_file(file);
  const std::string& recorded = plan.topology_ref.sha256;
  if (!recorded.empty() && sha256_hex(text) != recorded) {
    if (hw.empty()) {
      // The plan's own topology was edited: simulating on it would answer another question.
      throw InputError::at(SourcePos{plan_path},
                           "topology '{}' has changed since the plan was made (SHA-256 differs): "
                           "plan it again, or name it with --hw to run the plan on it as it is now",
                           file);
    }
    fmt::print(stderr,
               "warning: --hw {} is not the topology the plan was made on (SHA-256 differs from "
               "the plan's '{}'); running the plan on it as asked\n",
               file, plan.topology_ref.file);
  }
  return hw::load_topology_text(text, file, hw::LoadOptions{all, false});
}

std::string plan_binding_error(const LoadedPlan& lp, const std::string& plan_path) {
  if (lp.plan.topology_ref.file.empty()) return "";  // nothing named to check against
  const hw::Topology topo = plan_topology(lp.plan, plan_path, "", {});
  const hw::Binding b = hw::bind(lp.plan, lp.workload, topo);
  return b.error ? b.error->message : "";
}

int64_t Trial::latency_ps() const {
  if (request) return request->ttft_ps + request->decode_ps;
  return phases.empty() ? 0 : phases.front().makespan_ps;
}

uint64_t Trial::device_peak() const {
  uint64_t most = 0;
  for (const PhaseResult& p : phases) most = std::max(most, p.device_peak);
  return most;
}

uint64_t Trial::residency_bound() const {
  uint64_t most = 0;
  for (const PhaseResult& p : phases) most = std::max(most, p.outcome.bounds.residency);
  return most;
}

double Trial::phase_weight(size_t i) const {
  if (!request) return i == 0 ? 1.0 : 0.0;
  if (i == 0) return 1.0;
  if (i > 1 || phases.size() < 2) return 0.0;
  // The decode: from its first window to every step when extrapolated.
  const PhaseResult& decode = phases[1];
  return request->extrapolated && decode.makespan_ps > 0
             ? static_cast<double>(request->decode_ps) / static_cast<double>(decode.makespan_ps)
             : 1.0;
}

namespace {

/// The trial's total of `f` over its phases, each by its phase_weight().
template <class F>
double request_total(const Trial& t, F f) {
  double sum = 0;
  for (size_t i = 0; i < t.phases.size(); ++i) {
    if (const double w = t.phase_weight(i); w > 0) sum += w * f(t.phases[i]);
  }
  return sum;
}

}  // namespace

int64_t Trial::exposed_ps() const {
  return static_cast<int64_t>(
      request_total(*this, [](const PhaseResult& p) { return static_cast<double>(p.exposed_ps); }));
}

double Trial::moved_bytes() const {
  return request_total(*this, [](const PhaseResult& p) { return p.moved_bytes; });
}

std::shared_ptr<const hw::Topology> Study::topology(const Scenario& s) {
  const std::string hw = s.hw.empty() ? default_topology() : s.hw;
  const std::string key = fmt::format("{}\n{}", hw, fmt::join(s.sets, "\n"));
  {
    std::lock_guard lock(mu_);
    if (auto it = topologies_.find(key); it != topologies_.end()) return it->second;
  }
  auto t = std::make_shared<const hw::Topology>(
      hw::load_topology(hw, hw::LoadOptions{s.sets, false, s.name("set")}));
  std::lock_guard lock(mu_);
  return topologies_.emplace(key, std::move(t)).first->second;
}

std::shared_ptr<const traces::Arch> Study::model(const WorkloadSource& src) {
  const std::string key =
      fmt::format("{}\n{}\n{}\n{}\n{}", src.model, src.hf_config, src.hf_lenient, src.sets_flag,
                  fmt::join(src.model_sets, "\n"));
  {
    std::lock_guard lock(mu_);
    if (auto it = models_.find(key); it != models_.end()) return it->second;
  }
  auto a = std::make_shared<const traces::Arch>(load_model(src));
  std::lock_guard lock(mu_);
  return models_.emplace(key, std::move(a)).first->second;
}

std::shared_ptr<const Workload> Study::workload(const Scenario& s, const traces::GenOptions& g,
                                                bool without_experts) {
  const WorkloadSource& src = s.workload;
  const std::string key = (src.file.empty() ? gen_key(src, g) : "file:" + src.file) +
                          (without_experts ? "|without routed experts" : "");
  {
    std::lock_guard lock(mu_);
    if (auto it = workloads_.find(key); it != workloads_.end()) return it->second;
  }
  std::shared_ptr<const Workload> w;
  if (without_experts) {
    w = std::make_shared<const Workload>(planner::without_routed_experts(*workload(s, g)));
  } else if (!src.file.empty()) {
    check_lenient(src);
    w = std::make_shared<const Workload>(read_workload(src.file));
  } else {
    w = std::make_shared<const Workload>(traces::generate(*model(src), g));
  }
  std::lock_guard lock(mu_);
  const auto [it, added] = workloads_.emplace(key, std::move(w));
  if (added) {
    workload_order_.push_back(key);
    while (workload_limit_ != 0 && workload_order_.size() > workload_limit_) {
      workloads_.erase(workload_order_.front());
      workload_order_.pop_front();
    }
  }
  return it->second;
}

Study::Memo& Study::memo_of(const std::shared_ptr<const Workload>& w) {
  std::erase_if(memos_, [](const auto& m) { return m.second.alive.expired(); });
  Memo& m = memos_[w.get()];
  if (m.alive.lock() != w) m = Memo{w, nullptr, {}, {}};  // a new workload at a freed address
  return m;
}

std::shared_ptr<planner::TrafficMemo> Study::traffic_memo(
    const std::shared_ptr<const Workload>& w) {
  std::lock_guard lock(mu_);
  Memo& m = memo_of(w);
  if (!m.traffic) m.traffic = std::make_shared<planner::TrafficMemo>(*w);
  return m.traffic;
}

std::shared_ptr<planner::StartMemo> Study::start_memo(const std::shared_ptr<const Workload>& w,
                                                      const hw::Topology& topo) {
  std::lock_guard lock(mu_);
  std::shared_ptr<planner::StartMemo>& m = memo_of(w).starts[&topo];
  if (!m) m = std::make_shared<planner::StartMemo>();
  return m;
}

void Study::limit_workloads(size_t n) {
  std::lock_guard lock(mu_);
  workload_limit_ = n;
}

void summarize(PhaseResult& p, const hw::Topology& topo) {
  const sim::SimResult& r = *p.sim;
  p.makespan_ps = r.makespan;
  p.device_peak = device_peak(r);
  for (const sim::TierResult& t : r.tiers) {
    uint64_t& peak = p.tier_peak[topo.tiers[t.tier].id];
    peak = std::max(peak, t.peak);
    uint64_t& by_kind = p.peak_by_tier_kind[static_cast<size_t>(topo.tiers[t.tier].kind)];
    by_kind = std::max(by_kind, t.peak);
  }
  for (const sim::DeviceResult& d : r.devices) p.memory_stall_ps += d.stall_memory_ps;
  for (const sim::TransferRecord& t : r.transfers) {
    if (p.outcome.plan->programs[t.program].steps[t.step].demand) p.miss_exposed_ps += t.exposed;
    p.exposed_ps += t.exposed;
    p.moved_bytes += static_cast<double>(t.bytes);
  }
  const sim::LinkResult* busiest_port = nullptr;
  double busiest_fraction = -1;
  for (const sim::LinkResult& l : r.links) {
    const double busy =
        r.makespan > 0 ? static_cast<double>(l.busy_ps) / static_cast<double>(r.makespan) : 0;
    // Utilization, not busy time: every transfer crosses the device tier's write port, so
    // its busy time is the union of all of them whatever limits their rate.
    const double used = r.makespan > 0 && l.capacity > 0
                            ? l.bytes / (l.capacity * static_cast<double>(r.makespan) * 1e-12)
                            : 0;
    if (used > busiest_fraction) {
      busiest_fraction = used;
      busiest_port = &l;
    }
    if (l.kind != sim::ResourceKind::kLink) continue;
    p.link_bytes[without_instance(l.name)] += l.bytes;
    p.bytes_by_link_kind[static_cast<size_t>(topo.links[l.index].kind)] += l.bytes;
    if (l.bytes > p.busiest_link_bytes) {
      p.busiest_link = l.name;
      p.busiest_link_bytes = l.bytes;
      p.busiest_link_busy = busy;
    }
  }
  // Exposed transfers beyond 1% of the makespan: the busiest resource they cross limits
  // the plan; else compute does.
  if (busiest_port != nullptr && p.exposed_ps * 100 > p.makespan_ps) {
    p.binding = fmt::format("{} '{}' ({:.0f}% used)",
                            busiest_port->kind == sim::ResourceKind::kLink ? "link" : "tier port",
                            without_instance(busiest_port->name), 100 * busiest_fraction);
  } else {
    p.binding = "compute (transfers hidden)";
  }
}

namespace {

/// Where the routed experts an expert cache fetches live: the first of the planner's offload
/// tiers (planner::offload_tiers, fastest route in first) with room for them all beside what
/// `plan` (over `planned`) homes there, in the usable bytes of one instance as the simulator
/// counts them.
std::string expert_home(const hw::Topology& topo, const planner::Target& target, const Workload& w,
                        const Plan& plan, const Workload& planned, const std::string& source) {
  std::vector<uint64_t> homed(topo.tiers.size(), 0);
  std::unordered_set<std::string_view> known;
  for (uint32_t t = 0; t < planned.tensors.size(); ++t) {
    known.insert(planned.tensors[t].name);
    if (const auto i = topo.tier_index(plan.tiers[plan.home[t]]))
      homed[*i] += planned.tensors[t].bytes;
  }
  // The weights the plan does not know: every routed expert's, picked or not.
  uint64_t bytes = 0;
  for (const Tensor& t : w.tensors) {
    if (t.kind == TensorKind::kWeight && !known.contains(t.name)) bytes += t.bytes;
  }
  for (const uint32_t i : planner::offload_tiers(topo, target.device_tier)) {
    if (topo.usable(i) >= homed[i] && topo.usable(i) - homed[i] >= bytes) return topo.tiers[i].id;
  }
  throw InputError::at(SourcePos{source},
                       "no tier the device reaches has room for the routed experts ({}) beside "
                       "the plan's own",
                       to_string_approx(Bytes{bytes}));
}

}  // namespace

std::vector<OpKind> host_ops(const hw::Topology& topo, std::string_view text,
                             std::string_view source) {
  std::vector<OpKind> kinds = planner::parse_host_ops(text, source);
  if (!kinds.empty()) planner::require_host_cpu(topo, source);
  return kinds;
}

planner::PlanOutcome plan_for(const Workload& w, const hw::Topology& topo, planner::PlanRequest req,
                              const std::vector<OpKind>& kinds) {
  if (kinds.empty()) return planner::make_plan(w, topo, req);
  const std::optional<Workload> planned =
      planner::host_planned(w, topo, planner::resolved(topo, req.target).device_tier,
                            planner::pinned_tiers(w, req.pins), kinds);
  if (!planned) return planner::make_plan(w, topo, req);
  HostMoveEvaluator eval(*planned, w, topo, kinds);
  if (req.evaluator != nullptr) req.evaluator = &eval;
  req.traffic_memo.reset();  // it remembers `w`'s bounds and states
  req.start_memo.reset();
  return planner::make_plan(*planned, topo, req);
}

HostMove move_to_host(planner::PlanOutcome& out, const Workload& w, const hw::Topology& topo,
                      const planner::PlanRequest& req, const std::vector<OpKind>& kinds) {
  planner::HostPlan h = planner::move_to_host(*out.plan, w, topo, kinds, "--on-host");
  const HostMove m{h.moved, h.kept, h.why_kept};
  if (h.moved == 0) return m;
  // The device's share of the step, planned for the same budget and pins, bounds its side.
  std::vector<uint32_t> op_of;
  const Workload device = planner::device_share(w, h.moved_ops, op_of);
  planner::PlanRequest alone = req;
  alone.traffic_memo.reset();  // it remembers `w`'s bounds and states, not these
  alone.start_memo.reset();
  planner::PlanState s = planner::initial_state(device, topo, alone, out.budget);
  out.bounds = planner::host_plan_bounds(planner::lower_bounds(s), op_of, w, topo,
                                         planner::resolved(topo, req.target).device_class,
                                         h.moved_ops, h.staged_ps);
  h.plan.meta["on_host"] = fmt::format("\"{}\"", planner::host_ops_text(kinds));
  out.plan = std::move(h.plan);
  out.evaluation.reset();
  return m;
}

PhaseResult Study::run_phase(const Scenario& s, const hw::Topology& topo,
                             std::shared_ptr<const Workload> w, std::string phase,
                             std::shared_ptr<const Workload> planned) {
  PhaseResult p;
  p.phase = std::move(phase);
  p.workload = std::move(w);
  planner::PlanRequest req;
  req.policy = s.policy;
  req.target = make_target(topo, s.device, s.devices, s.name("device"));
  req.target.budget = s.budget;
  check_budget(topo, req.target, s.name("budget"));
  req.pins = parse_pins(s.pins, topo, s.name("pins"));
  req.threads = s.threads;
  const std::shared_ptr<const Workload>& searched = planned ? planned : p.workload;
  if (probe_) {
    std::lock_guard lock(mu_);
    const std::string& own = memo_of(searched).winner;
    req.hint = own.empty() ? last_winner_ : own;
  }
  const Workload& plan_w = *searched;
  req.traffic_memo = traffic_memo(searched);
  req.start_memo = start_memo(searched, topo);
  // What the runtime holds: a realized plan's budget is the whole budget, the plan's own
  // share and the room for its demand copies (or expert cache) together.
  uint64_t runtime_budget = 0;
  if (planned) {
    // Room for what a realized plan holds beyond the planned one: one demand copy, or the
    // expert cache.
    const uint64_t budget = planner::resolved(topo, req.target).budget;
    runtime_budget = budget;
    const uint64_t reserve =
        planner::routing_reserve(*p.workload, s.expert_cache, s.name("expert_cache"));
    if (reserve >= budget) {
      if (s.expert_cache.on()) {
        throw InputError::at(SourcePos{s.name("expert_cache")},
                             "a cache of {} leaves the plan no room: the budget is {}",
                             to_string_approx(Bytes{reserve}), to_string_approx(Bytes{budget}));
      }
      throw InputError::at(SourcePos{s.name("routing")},
                           "realistic routing needs room for an expert ({}) on top of the plan: "
                           "the budget is {}",
                           to_string_approx(Bytes{reserve}), to_string_approx(Bytes{budget}));
    }
    req.target.budget = budget - reserve;
  }
  // A plan run as planned is simulated as it was scored: the score's run is kept.
  SimEvaluator eval(plan_w, topo, /*keep_runs=*/!planned);
  req.evaluator = &eval;
  p.outcome =
      planned ? planner::make_plan(plan_w, topo, req) : plan_for(plan_w, topo, req, s.on_host);
  if (probe_) {
    for (const planner::PortfolioTrial& t : p.outcome.portfolio) {
      if (!t.best) continue;
      std::lock_guard lock(mu_);
      last_winner_ = t.pipeline;
      memo_of(searched).winner = t.pipeline;
    }
  }
  if (p.outcome.ok && planned) {
    const std::string home = s.expert_cache.on()
                                 ? expert_home(topo, req.target, *p.workload, *p.outcome.plan,
                                               plan_w, s.name("expert_cache"))
                                 : std::string();
    planner::RealizedPlan r =
        planner::realize_routing(*p.outcome.plan, plan_w, *p.workload, s.expert_cache, home);
    p.outcome.plan = std::move(r.plan);
    p.outcome.plan->budget = runtime_budget;
    p.routing = r.stats;
    p.realized = true;
  }
  // Scenario::on_host: the plan's ops moved to the host; the planner's score is then of
  // another plan.
  if (p.outcome.ok && !s.on_host.empty()) {
    p.host = move_to_host(p.outcome, *p.workload, topo, req, s.on_host);
  }
  const bool moved = p.host.moved > 0;
  if (!p.outcome.ok) {
    if (p.outcome.infeasible) {
      p.binding =
          fmt::format("tier '{}' capacity (budget {})", topo.tiers[req.target.device_tier].id,
                      to_string_approx(Bytes{p.outcome.budget}));
    }
    return p;
  }
  std::vector<sim::Time> op_end;
  std::shared_ptr<const SimRun> scored =
      p.outcome.evaluation ? SimEvaluator::take_run(*p.outcome.evaluation) : nullptr;
  if (scored != nullptr && !planned && !moved) {
    if (scored.use_count() == 1) {
      // No one else holds the run: its result moves (a copy is megabytes).
      auto& run = const_cast<SimRun&>(*scored);
      p.sim = std::move(run.result);
      op_end = std::move(run.op_end);
    } else {
      p.sim = scored->result;
      op_end = scored->op_end;
    }
    scored.reset();
  } else {
    sim::SimOptions so;
    so.live_top = 0;
    so.op_end = &op_end;
    // A realized plan runs as a runtime would: a copy that finds no room yet waits for the
    // release before it (at the same instant, when a wasted prefetch's detach waits on the
    // copy ahead of it), reported as memory stall, not an error.
    if (planned) so.on_full = sim::OnFull::kWait;
    p.sim = sim::simulate(*p.outcome.plan, *p.workload, topo, so);
  }
  if (p.sim->error) return p;
  summarize(p, topo);
  // Decode tokens ("t12.L3.qkv"): each ends with its last op.
  for (size_t i = 0; i < op_end.size(); ++i) {
    const int64_t t = token_of(p.workload->ops[i].name);
    if (t < 0 || op_end[i] < 0) continue;
    const auto k = static_cast<size_t>(t);
    if (k >= p.token_end_ps.size()) p.token_end_ps.resize(k + 1, 0);
    p.token_end_ps[k] = std::max(p.token_end_ps[k], op_end[i]);
  }
  p.tokens = static_cast<int64_t>(p.token_end_ps.size());
  return p;
}

Trial Study::run(const Scenario& s) {
  Trial t;
  t.scenario = s;
  check_policy(s.policy, s.name("policy"));
  if (!s.workload.gen.routing_trace.empty() && !s.workload.file.empty()) {
    throw InputError::at(SourcePos{s.name("routing_trace")},
                         "a routing trace shapes a generated workload; a workload file holds its "
                         "own routing");
  }
  if (s.expert_cache.on() && !s.realistic()) {
    throw InputError::at(SourcePos{s.name("expert_cache")},
                         "an expert cache is what a runtime keeps under realistic routing; the "
                         "routing here is '{}' (the plan itself decides what stays)",
                         get_field(s, "routing"));
  }
  const auto topo = topology(s);
  // Before planning, not after.
  if (!s.on_host.empty()) planner::require_host_cpu(*topo, s.name("on_host"));
  t.topology = topo->name;
  planner::Target target = make_target(*topo, s.device, s.devices, s.name("device"));
  target.budget = s.budget;
  // A shard of tensor parallelism runs beside its peers: said before planning, at the flag
  // or the workload file (bind refuses a plan of it the same way).
  const std::shared_ptr<const Workload> from_file =
      s.workload.file.empty() ? nullptr : workload(s, s.workload.gen);
  const bool file = from_file != nullptr;
  check_tp_group(*topo, target, file ? hw::workload_tp(*from_file) : s.workload.gen.tp,
                 from_file.get(), file ? s.workload.file : s.name("tp"));
  t.device_tier = topo->tiers[target.device_tier].id;
  t.budget = planner::resolved(*topo, target).budget;

  auto conclude = [&] {
    // The phases have read the model: the notes cost no second read.
    if (s.workload.file.empty()) t.notes = model_warnings(*model(s.workload), s);
    t.ok = true;
    for (const PhaseResult& p : t.phases) {
      if (p.ok()) continue;
      t.ok = false;
      t.infeasible = p.outcome.infeasible;
      // A request names the phase that failed; a step's reason is the planner's own.
      t.reason = t.scenario.request ? fmt::format("{}: {}", p.phase, p.why()) : p.why();
      break;
    }
  };

  // Realistic routing: each phase is planned on its expected-routing twin (MoE only).
  // With an expert cache the runtime owns the routed experts: the plan is made without them.
  auto planned_for = [&](traces::GenOptions g) -> std::shared_ptr<const Workload> {
    if (!s.realistic() || !s.workload.file.empty()) return nullptr;
    g.routing = traces::Routing::kExpected;  // an expected count: no skew, no repeats
    g.routing_skew = 0;
    g.routing_repeat = 0;
    g.routing_trace.clear();
    auto w = workload(s, g);
    if (!planner::has_routed_experts(*w)) return nullptr;
    return s.expert_cache.on() ? workload(s, g, /*without_experts=*/true) : w;
  };
  auto phase = [&](traces::GenOptions g, std::string name) {
    if (s.realistic()) g.routing = traces::Routing::kSeeded;
    return run_phase(s, *topo, workload(s, g), std::move(name), planned_for(g));
  };

  if (!s.request) {
    if (s.realistic() && !s.workload.file.empty()) {
      throw InputError::at(SourcePos{s.name("routing")},
                           "realistic routing generates the planned and the realized workload: "
                           "give {} or {}, not a workload file",
                           s.name("model"), s.name("hf_config"));
    }
    t.phases.push_back(phase(s.workload.gen, "step"));
    conclude();
    return t;
  }

  const Request& r = *s.request;
  if (r.prompt < 1 || r.generate < 1) {
    throw InputError::at(SourcePos{s.name("prompt")}, "a request needs {} P >= 1 and {} G >= 1",
                         s.name("prompt"), s.name("generate"));
  }
  if (!s.workload.file.empty()) {
    throw InputError::at(SourcePos{s.name("prompt")},
                         "a request is generated from a model: give {} or {}, not a workload file",
                         s.name("model"), s.name("hf_config"));
  }
  traces::GenOptions g = s.workload.gen;
  g.phase = traces::Phase::kPrefill;
  g.seq = r.prompt;
  t.phases.push_back(phase(g, "prefill"));
  RequestMetrics m;
  const int64_t n = r.generate - 1;  // decode steps after the prefill's token
  std::optional<double> extrapolated_ps;
  if (n > 0) {
    g.phase = traces::Phase::kDecode;
    g.context = r.prompt;
    g.tokens = n <= kDecodeWhole ? n : kDecodeWindow;
    t.phases.push_back(phase(g, "decode"));
    if (n > kDecodeWhole && t.phases.back().ok()) {
      g.context = r.prompt + n - kDecodeWindow;
      PhaseResult last = phase(g, "decode (last window)");
      const Steady a = steady_of(t.phases.back().token_end_ps);
      const Steady b = last.ok() ? steady_of(last.token_end_ps) : Steady{};
      if (a.steady && b.steady) {
        // Tokens k .. n-1 at contexts P+k .. P+n-1, each at the per-token time linear in
        // context through the windows' steady means (at their middle contexts).
        const double c1 = static_cast<double>(r.prompt) + kDecodeWindow / 2.0;
        const double c2 = static_cast<double>(r.prompt + n - kDecodeWindow) + kDecodeWindow / 2.0;
        const double mid =
            static_cast<double>(r.prompt) + static_cast<double>(kDecodeWindow + n - 1) / 2.0;
        const double per_token = a.mean_ps + (b.mean_ps - a.mean_ps) * (mid - c1) / (c2 - c1);
        extrapolated_ps = static_cast<double>(t.phases.back().makespan_ps) +
                          static_cast<double>(n - kDecodeWindow) * per_token;
        m.extrapolated = true;
        m.decode_note = fmt::format(
            "decode of {} tokens extrapolated from two {}-token windows (contexts {} and {}): "
            "per-token time steady within {:.2f}% and {:.2f}%, linear in context between",
            n, kDecodeWindow, r.prompt, r.prompt + n - kDecodeWindow, 100 * a.spread,
            100 * b.spread);
        t.phases.push_back(std::move(last));
      } else {
        m.decode_note = fmt::format(
            "decode of {} tokens simulated whole: the per-token time is not steady in a {}-token "
            "window (spread {:.2f}%, {:.2f}%; limit {:.0f}%)",
            n, kDecodeWindow, 100 * a.spread, 100 * b.spread, 100 * kSteadySpread);
        g.context = r.prompt;
        g.tokens = n;
        t.phases.back() = phase(g, "decode");
      }
    } else {
      m.decode_note = fmt::format("decode of {} token{} simulated whole", n, n == 1 ? "" : "s");
    }
  } else {
    m.decode_note = "one token: the prefill's, no decode step";
  }
  conclude();
  if (t.ok) {
    m.ttft_ps = t.phases.front().makespan_ps;
    if (n > 0) {
      m.decode_ps =
          extrapolated_ps ? static_cast<int64_t>(*extrapolated_ps) : t.phases[1].makespan_ps;
      const double decode_s = static_cast<double>(m.decode_ps) * 1e-12;
      m.tpot_ms = 1e3 * decode_s / static_cast<double>(n);
      m.decode_tokens_per_s = static_cast<double>(g.batch * n) / decode_s;
    }
    m.throughput_tokens_per_s = static_cast<double>(g.batch * r.generate) /
                                (static_cast<double>(m.ttft_ps + m.decode_ps) * 1e-12);
    t.request = m;
  }
  return t;
}

int64_t Study::unlimited_latency(const Scenario& s) {
  const Trial t = unlimited_trial(s);
  return t.ok ? t.latency_ps() : 0;
}

Trial Study::unlimited_trial(const Scenario& s) {
  Scenario r = s;
  r.policy = "resident";
  r.budget = kUnlimited;
  r.expert_cache = {};  // every expert resident: nothing for a cache to do
  const auto topo = topology(s);
  const planner::Target target = make_target(*topo, s.device, s.devices, s.name("device"));
  r.sets.push_back(capacity_for_budget(*topo, target.device_tier, kUnlimited));
  return run(r);
}

}  // namespace tierflow::study
