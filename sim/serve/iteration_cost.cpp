#include "sim/serve/iteration_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "core/diagnostics.h"
#include "hw_models/cost.h"

namespace tierflow::serve {
namespace {

/// Probe shapes: small, inside any sliding window, and far enough apart that the affine
/// coefficients come out of differences of exact integer byte counts.
constexpr int64_t kDecodeContexts[2] = {1, 3};
constexpr int64_t kPrefillTokens[2] = {2, 4};

/// The attention op of layer `layer` in a probe.
const Op& attention_op(const Workload& w, int layer) {
  for (const Op& op : w.ops) {
    if (op.layer == layer && op.kind == OpKind::kAttention) return op;
  }
  TF_ASSERT(false, "the probe has no attention op in layer {}", layer);
  return w.ops.front();
}

double cached_tokens(double window, double past, double tokens) {
  return window > 0 ? std::min(past + tokens, window) : past + tokens;
}

}  // namespace

IterationCost::IterationCost(const traces::Arch& arch, const traces::GenOptions& gen,
                             const hw::Topology& t, size_t device, size_t device_tier, int pp)
    : arch_(arch), gen_(gen), topo_(t), device_(device), device_tier_(device_tier) {
  if (pp < 1 || pp > std::max(1, arch.layers)) {
    throw InputError(SourcePos{"pp"},
                     fmt::format("expected 1 to {} pipeline stages (one layer each at least) for "
                                 "{}, got {}",
                                 std::max(1, arch.layers), arch.name, pp));
  }
  gen_.routing = traces::Routing::kExpected;  // MoE: the expected experts of T tokens
  gen_.layers = 0;
  std::map<std::pair<bool, bool>, size_t> index;
  for (int l = 0; l < arch.layers; ++l) {
    const std::pair<bool, bool> key{arch.is_moe_layer(l), arch.is_sliding_layer(l)};
    const auto [it, fresh] = index.try_emplace(key, classes_.size());
    if (fresh) {
      LayerClass c;
      c.first = l;
      c.window = key.second ? static_cast<double>(arch.sliding_window) : 0.0;
      classes_.push_back(c);
    }
    classes_[it->second].count += 1;
    probe_layers_ = std::max(probe_layers_, classes_[it->second].first + 1);
  }
  for (LayerClass& c : classes_) probe_attention(c);
  // The stages' layers as vLLM splits them (get_pp_indices): evenly, the remainder one each
  // to the stages before the last, from the last back.
  const int layers = std::max(1, arch.layers);
  stages_.resize(static_cast<size_t>(pp));
  for (Stage& st : stages_) {
    st.layers = layers / pp;
    st.count.assign(classes_.size(), 0);
  }
  for (int i = 0; i < layers % pp; ++i) stages_[static_cast<size_t>(pp - 2 - i)].layers += 1;
  std::vector<size_t> stage_of(static_cast<size_t>(layers), 0);
  for (int l = 0, s = 0, in_stage = 0; l < layers; ++l) {
    while (in_stage == stages_[static_cast<size_t>(s)].layers) {
      ++s;
      in_stage = 0;
    }
    stage_of[static_cast<size_t>(l)] = static_cast<size_t>(s);
    ++in_stage;
  }
  for (int l = 0; l < arch.layers; ++l) {
    const std::pair<bool, bool> key{arch.is_moe_layer(l), arch.is_sliding_layer(l)};
    stages_[stage_of[static_cast<size_t>(l)]].count[index.at(key)] += 1;
  }
  // The whole model once, for the bytes each stage's devices hold: a layer's tensors on its
  // stage, those outside the layers where their readers run (the embedding on the first,
  // the head on the last; a tied embedding on both).
  traces::GenOptions whole = probe_options(traces::Phase::kDecode, 1, 1);
  whole.layers = 0;
  const Workload w = traces::generate(arch_, whole);
  std::vector<uint8_t> sides(w.tensors.size(), 0);  // 1: read before the layers, 2: after
  bool seen_layer = false;
  for (const Op& op : w.ops) {
    if (op.layer >= 0) {
      seen_layer = true;
      continue;
    }
    for (const uint32_t x : op.inputs) sides[x] |= seen_layer ? 2 : 1;
  }
  std::vector<uint64_t> kv(stages_.size(), 0);
  for (uint32_t i = 0; i < w.tensors.size(); ++i) {
    const Tensor& x = w.tensors[i];
    if (x.kind != TensorKind::kWeight && x.kind != TensorKind::kKv) continue;
    const auto add = [&](size_t st) {
      (x.kind == TensorKind::kWeight ? stages_[st].weights : kv[st]) += x.bytes;
    };
    if (x.layer >= 0 && x.layer < layers) {
      add(stage_of[static_cast<size_t>(x.layer)]);
    } else {
      if ((sides[i] & 1) != 0 || sides[i] == 0) add(0);
      if ((sides[i] & 2) != 0 && (stages_.size() > 1 || sides[i] == 2)) add(stages_.size() - 1);
    }
  }
  // One block per layer of kv_block tokens for the one sequence.
  for (size_t st = 0; st < stages_.size(); ++st) {
    stages_[st].kv = kv[st] / static_cast<uint64_t>(whole.kv_block);
    weight_bytes_ = std::max(weight_bytes_, stages_[st].weights);
    kv_token_bytes_ = std::max(kv_token_bytes_, stages_[st].kv);
  }
  // Every op the model has must run on the device: said now, not midway through a trace.
  for (uint32_t i = 0; i < w.ops.size(); ++i) (void)op_time(w, i);
}

traces::GenOptions IterationCost::probe_options(traces::Phase phase, int64_t batch,
                                                int64_t tokens) const {
  traces::GenOptions g = gen_;
  g.phase = phase;
  g.batch = batch;
  if (phase == traces::Phase::kPrefill) {
    g.seq = tokens;
  } else {
    g.context = tokens;
    g.tokens = 1;
  }
  g.layers = probe_layers_;
  return g;
}

Workload IterationCost::probe(traces::Phase phase, int64_t batch, int64_t tokens) const {
  return traces::generate(arch_, probe_options(phase, batch, tokens));
}

Time IterationCost::op_time(const Workload& w, uint32_t op) const {
  const std::optional<Duration> d = hw::op_time(topo_, device_, device_tier_, w, op, collective_);
  if (!d) {
    const Op& o = w.ops[op];
    throw InputError(SourcePos{"model"},
                     fmt::format("op '{}' computes in {}, which device '{}' has no peak rate "
                                 "for (it has {})",
                                 o.name, name_of(o.dtype), topo_.devices[device_].id,
                                 topo_.devices[device_].peak_dtypes()));
  }
  return d->ps;
}

IterationCost::OpTimes IterationCost::op_times(const Workload& w) {
  OpTimes t;
  t.layer.assign(classes_.size(), 0);
  std::vector<int> class_at(static_cast<size_t>(probe_layers_), -1);
  for (size_t c = 0; c < classes_.size(); ++c) {
    class_at[static_cast<size_t>(classes_[c].first)] = static_cast<int>(c);
  }
  bool seen_layer = false;
  for (uint32_t i = 0; i < w.ops.size(); ++i) {
    const Op& op = w.ops[i];
    if (op.layer < 0) {
      (seen_layer ? t.head : t.embed) += op_time(w, i);
      continue;
    }
    seen_layer = true;
    const int c = op.layer < probe_layers_ ? class_at[static_cast<size_t>(op.layer)] : -1;
    if (c < 0 || op.kind == OpKind::kAttention) continue;
    t.layer[static_cast<size_t>(c)] += op_time(w, i);
  }
  return t;
}

void IterationCost::probe_attention(LayerClass& c) {
  // Decode (one new token): F = X pairs + Y, B = Q + K cached + Z; a batch of two gives Q.
  double f[2], b[2], p[2], k[2];
  for (int i = 0; i < 2; ++i) {
    const Workload w = probe(traces::Phase::kDecode, 1, kDecodeContexts[i]);
    const Op& op = attention_op(w, c.first);
    f[i] = op.flops;
    b[i] = static_cast<double>(op.bytes);
    p[i] = traces::attention_pairs(c.window, double(kDecodeContexts[i]), 1);
    k[i] = cached_tokens(c.window, double(kDecodeContexts[i]), 1);
    if (i == 0) {
      c.dtype = op.dtype;
      c.dequant = dequantized_dtype(w, op);
    }
  }
  Attention& d = c.decode;
  d.flops_per_pair = (f[1] - f[0]) / (p[1] - p[0]);
  d.flops_per_token = f[0] - d.flops_per_pair * p[0];
  d.bytes_per_cached = (b[1] - b[0]) / (k[1] - k[0]);
  {
    const Workload w = probe(traces::Phase::kDecode, 2, kDecodeContexts[0]);
    const double b2 = static_cast<double>(attention_op(w, c.first).bytes);
    d.bytes_per_token = b2 - b[0] - d.bytes_per_cached * k[0];
  }
  d.bytes_fixed = b[0] - d.bytes_per_token - d.bytes_per_cached * k[0];

  // Prefill (s new tokens, nothing cached): F = X pairs + Y s, B = Q s + K s + Z with the
  // decode probe's K (the same KV bytes per token).
  double s[2];
  for (int i = 0; i < 2; ++i) {
    const Workload w = probe(traces::Phase::kPrefill, 1, kPrefillTokens[i]);
    const Op& op = attention_op(w, c.first);
    s[i] = double(kPrefillTokens[i]);
    f[i] = op.flops;
    b[i] = static_cast<double>(op.bytes);
    p[i] = traces::attention_pairs(c.window, 0, s[i]);
    k[i] = cached_tokens(c.window, 0, s[i]);
  }
  Attention& pf = c.prefill;
  pf.flops_per_pair = (f[0] * s[1] - f[1] * s[0]) / (p[0] * s[1] - p[1] * s[0]);
  pf.flops_per_token = (f[0] - pf.flops_per_pair * p[0]) / s[0];
  pf.bytes_per_cached = d.bytes_per_cached;
  const double r0 = b[0] - pf.bytes_per_cached * k[0];
  const double r1 = b[1] - pf.bytes_per_cached * k[1];
  pf.bytes_per_token = (r1 - r0) / (s[1] - s[0]);
  pf.bytes_fixed = r0 - pf.bytes_per_token * s[0];
}

const std::vector<Time>& IterationCost::tokens_times(int64_t tokens) {
  if (const auto it = by_tokens_.find(tokens); it != by_tokens_.end()) {
    ++hits_;
    return it->second;
  }
  ++probes_;
  OpTimes t = op_times(probe(traces::Phase::kPrefill, 1, tokens));
  std::vector<Time>& out = by_tokens_[tokens];
  out.reserve(1 + t.layer.size());
  out.push_back(t.embed);
  out.insert(out.end(), t.layer.begin(), t.layer.end());
  return out;
}

Time IterationCost::head_time(int64_t seqs) {
  if (seqs == 0) return 0;
  if (const auto it = by_seqs_.find(seqs); it != by_seqs_.end()) {
    ++hits_;
    return it->second;
  }
  ++probes_;
  return by_seqs_[seqs] = op_times(probe(traces::Phase::kDecode, seqs, 1)).head;
}

void IterationCost::attention_times(std::span<const SeqWork> work) {
  attention_.resize(classes_.size());
  for (size_t ci = 0; ci < classes_.size(); ++ci) {
    const LayerClass& c = classes_[ci];
    double flops = 0;
    double bytes = 0;
    bool any_decode = false, any_prefill = false;
    for (const SeqWork& s : work) {
      const bool decode = s.tokens == 1;
      const Attention& a = decode ? c.decode : c.prefill;
      const double past = static_cast<double>(s.past);
      const double n = static_cast<double>(s.tokens);
      flops +=
          a.flops_per_pair * traces::attention_pairs(c.window, past, n) + a.flops_per_token * n;
      bytes += a.bytes_per_token * n + a.bytes_per_cached * cached_tokens(c.window, past, n);
      (decode ? any_decode : any_prefill) = true;
    }
    // The constant bytes (MLA's up-projection weights) are read once per op.
    bytes += std::max(any_decode ? c.decode.bytes_fixed : 0.0,
                      any_prefill ? c.prefill.bytes_fixed : 0.0);
    const std::optional<Duration> d = hw::op_time(
        topo_, device_, device_tier_, OpKind::kAttention, c.dtype, flops,
        Bytes{static_cast<uint64_t>(std::llround(std::max(0.0, bytes)))}, Bytes{0}, c.dequant);
    TF_ASSERT(d.has_value(), "attention was timed by the probes");
    attention_[ci] = d->ps;
  }
}

void IterationCost::stage_times(std::span<const SeqWork> work, std::vector<Time>& out) {
  int64_t tokens = 0;
  int64_t seqs = 0;
  for (const SeqWork& s : work) {
    tokens += s.tokens;
    seqs += (s.samples ? 1 : 0) + s.verify;
  }
  TF_ASSERT(tokens > 0, "an iteration without tokens");
  const std::vector<Time>& per_layer = tokens_times(tokens);
  attention_times(work);
  out.assign(stages_.size(), 0);
  for (size_t st = 0; st < stages_.size(); ++st) {
    Time t = 0;
    for (size_t c = 0; c < classes_.size(); ++c) {
      t += (per_layer[1 + c] + attention_[c]) * stages_[st].count[c];
    }
    out[st] = t;
  }
  out.front() += per_layer[0];
  out.back() += head_time(seqs);
}

Time IterationCost::time(std::span<const SeqWork> work) {
  stage_times(work, stage_scratch_);
  Time total = 0;
  for (const Time t : stage_scratch_) total += t;
  return total;
}

uint64_t IterationCost::workspace_bytes(int64_t tokens, int64_t seqs) {
  auto it = workspace_.find(tokens);
  if (it == workspace_.end()) {
    // Activations live from their producer to their last reader; the most live at once.
    const Workload w = probe(traces::Phase::kPrefill, 1, tokens);
    std::vector<uint32_t> last(w.tensors.size(), 0);
    for (uint32_t i = 0; i < w.ops.size(); ++i) {
      for (uint32_t x : w.ops[i].inputs) last[x] = i;
    }
    std::vector<std::vector<uint32_t>> dies(w.ops.size());
    uint64_t live = 0, peak = 0;
    for (uint32_t i = 0; i < w.ops.size(); ++i) {
      for (uint32_t x : w.ops[i].outputs) {
        const TensorKind k = w.tensors[x].kind;
        if (k != TensorKind::kActivation && k != TensorKind::kOutput) continue;
        live += w.tensors[x].bytes;
        dies[std::max(last[x], i)].push_back(x);
      }
      peak = std::max(peak, live);
      for (uint32_t x : dies[i]) live -= w.tensors[x].bytes;
    }
    it = workspace_.emplace(tokens, peak).first;
  }
  // The logits of every sampling sequence: vocabulary x activation bytes each.
  const traces::GenOptions g = probe_options(traces::Phase::kDecode, 1, 1);
  const uint64_t logit_bytes =
      traces::bytes_of(static_cast<double>((arch_.vocab + g.tp - 1) / g.tp), g.act_dtype);
  return it->second + logit_bytes * static_cast<uint64_t>(std::max<int64_t>(seqs, 0));
}

}  // namespace tierflow::serve
