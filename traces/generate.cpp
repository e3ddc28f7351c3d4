#include "traces/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/checked.h"
#include "core/diagnostics.h"
#include "core/json_writer.h"
#include "traces/layer_builder.h"
#include "traces/quant.h"

namespace tierflow::traces {

uint64_t bytes_of(double params, Dtype dtype) {
  return saturating_count(params * kDtypeBits[static_cast<size_t>(dtype)] / 8.0);
}

namespace {

/// How messages name option `field` (a GenOptions member), as the caller spells it.
std::string opt(const GenOptions& o, std::string_view field) {
  return option_name(field, !o.field_names);
}

void check_options(const Arch& a, const GenOptions& o) {
  auto bad = [&](std::string_view field, std::string msg) {
    throw InputError(SourcePos{opt(o, field)}, std::move(msg));
  };
  auto name = [&](std::string_view field) { return opt(o, field); };
  if (o.batch < 1) bad("batch", "batch must be at least 1");
  // The largest counts (docs/cli.md, "Limits"): far beyond real deployments, small enough
  // that every product of counts and model sizes the generator forms fits in 64 bits.
  for (auto [field, value, max] : {std::tuple{"batch", o.batch, kMaxBatch},
                                   {"seq", o.seq, kMaxSeq},
                                   {"context", o.context, kMaxContext},
                                   {"tokens", o.tokens, kMaxDecodeTokens},
                                   {"kv_block", o.kv_block, kMaxSeq},
                                   {"tp", int64_t{o.tp}, int64_t{kMaxTp}}}) {
    if (value > max) {
      bad(field, fmt::format("{} {} is above the largest allowed, {}", name(field), value, max));
    }
  }
  if (o.phase != Phase::kDecode && o.batch * o.seq > kMaxStepTokens) {
    bad("seq",
        fmt::format("{} {} x {} {} is {} tokens in one step, above the largest "
                    "allowed, {}",
                    name("batch"), o.batch, name("seq"), o.seq, o.batch * o.seq, kMaxStepTokens));
  }
  if (o.micro_batches < 1 || o.micro_batches > o.batch || o.batch % o.micro_batches != 0) {
    bad("micro_batches", fmt::format("{} does not divide the batch of {} into "
                                     "micro-batches of whole sequences",
                                     o.micro_batches, o.batch));
  }
  if (o.micro_batches > 1 && o.micro_batches <= o.batch && o.layers >= 0 && o.layers <= a.layers) {
    // Every micro-batch runs every layer (every step): counted before any op is made.
    constexpr uint64_t kOpsPerLayerAtLeast = 8;  // norms, projections, attention, MLP, residuals
    const auto n_layers = static_cast<uint64_t>(o.layers == 0 ? a.layers : o.layers);
    const auto steps =
        static_cast<uint64_t>(o.phase == Phase::kDecode ? std::max<int64_t>(o.tokens, 1) : 1);
    const uint64_t ops = saturating_mul(
        saturating_mul(saturating_mul(static_cast<uint64_t>(o.micro_batches), n_layers), steps),
        kOpsPerLayerAtLeast);
    if (ops > kMaxGeneratedOps) {
      bad("micro_batches",
          fmt::format("{} micro-batches x {} layers x {} steps is at least {} ops, above the "
                      "largest workload generated, {}",
                      o.micro_batches, n_layers, steps, ops, kMaxGeneratedOps));
    }
  }
  if (o.micro_batches > 1 && o.phase == Phase::kTrain) {
    bad("micro_batches",
        "micro-batches are an inference schedule (FlexGen's zig-zag "
        "blocks); a training step runs its batch whole");
  }
  if (o.tp < 1) bad("tp", "tensor-parallel degree must be at least 1");
  if (a.heads % o.tp != 0) {
    bad("tp",
        fmt::format("tp {} does not divide the {} attention heads of {}", o.tp, a.heads, a.name));
  }
  if (a.attention == AttentionKind::kGqa && a.kv_heads % o.tp != 0 && o.tp % a.kv_heads != 0) {
    bad("tp", fmt::format("tp {} neither divides nor is a multiple of the {} KV heads of {}", o.tp,
                          a.kv_heads, a.name));
  }
  for (auto [width, what] :
       {std::pair{a.intermediate, "intermediate"}, {a.moe_intermediate, "moe_intermediate"}}) {
    if (width % o.tp != 0) {
      bad("tp", fmt::format("tp {} does not divide {} = {} of {}", o.tp, what, width, a.name));
    }
  }
  if (o.phase == Phase::kDecode && o.tokens < 1)
    bad("tokens", fmt::format("decode needs {} >= 1", name("tokens")));
  if (o.phase != Phase::kDecode && o.seq < 1)
    bad("seq", fmt::format("{} must be at least 1", name("seq")));
  if (o.context < 0) bad("context", fmt::format("{} must not be negative", name("context")));
  if (o.kv_block < 1) bad("kv_block", fmt::format("{} must be at least 1", name("kv_block")));
  if (o.layers < 0 || o.layers > a.layers) {
    bad("layers", fmt::format("{} must be between 0 (all) and {}", name("layers"), a.layers));
  }
  if (o.phase != Phase::kTrain && o.layers >= 0 && o.layers <= a.layers && o.kv_block >= 1 &&
      o.context >= 0) {
    // One tensor per KV block and layer (and in a prefill one write op each), counted
    // before any is made: a tiny --kv-block over a long context is refused, not allocated.
    const int64_t kept = o.phase == Phase::kDecode ? o.context + std::max<int64_t>(o.tokens, 0)
                                                   : std::max<int64_t>(o.seq, 0);
    uint64_t blocks = 0;
    for (int l = 0, n = o.layers == 0 ? a.layers : o.layers; l < n; ++l) {
      const int64_t attended = a.attended(l, kept);
      blocks = saturating_add(blocks, static_cast<uint64_t>((attended + o.kv_block - 1) / o.kv_block));
    }
    if (blocks > kMaxGeneratedOps) {
      bad("kv_block",
          fmt::format("{} {} over {} tokens gives {} KV-cache blocks, above the largest "
                      "workload generated, {} tensors; raise {}",
                      name("kv_block"), o.kv_block, kept, blocks, kMaxGeneratedOps,
                      name("kv_block")));
    }
  }
  if (a.experts > 0 && o.layers >= 0 && o.layers <= a.layers) {
    // One weight tensor per expert and MoE layer, counted before any is made.
    uint64_t experts = 0;
    for (int l = 0, n = o.layers == 0 ? a.layers : o.layers; l < n; ++l) {
      if (a.is_moe_layer(l)) experts = saturating_add(experts, static_cast<uint64_t>(a.experts));
    }
    if (experts > kMaxGeneratedOps) {
      bad("layers", fmt::format("{} experts over the MoE layers of {} layers are {} expert weight "
                                "tensors, above the largest workload generated, {} tensors; give "
                                "fewer {}",
                                a.experts, o.layers == 0 ? a.layers : o.layers, experts,
                                kMaxGeneratedOps, name("layers")));
    }
  }
  if (o.phase == Phase::kTrain &&
      (o.weight_dtype == Dtype::kInt4 || o.weight_dtype == Dtype::kFp4)) {
    bad("weight_dtype", "training with 4-bit weights is not modelled");
  }
  if (o.compute_dtype && *o.compute_dtype != o.act_dtype && *o.compute_dtype != o.weight_dtype) {
    bad("compute_dtype",
        fmt::format("{} {} is neither the activation dtype ({}) nor the weight dtype ({})",
                    name("compute_dtype"), name_of(*o.compute_dtype), name_of(o.act_dtype),
                    name_of(o.weight_dtype)));
  }
  if (o.compute_dtype && *o.compute_dtype == o.weight_dtype && *o.compute_dtype != o.act_dtype &&
      !is_quantized(o.weight_dtype)) {
    bad("compute_dtype",
        fmt::format("{} {}: weights of {} bits are not quantized; matmuls compute in the "
                    "activation dtype ({})",
                    name("compute_dtype"), name_of(*o.compute_dtype),
                    kDtypeBits[static_cast<size_t>(o.weight_dtype)], name_of(o.act_dtype)));
  }
  if (o.quant_group < -1) {
    bad("quant_group", fmt::format("{} must be 0 (per channel) or more", name("quant_group")));
  }
  if (!(o.routing_skew >= 0 && o.routing_skew <= kMaxRoutingSkew)) {
    bad("routing_skew", fmt::format("{} must be from 0 to {}, got {}", name("routing_skew"),
                                    kMaxRoutingSkew, o.routing_skew));
  }
  if (!(o.routing_repeat >= 0 && o.routing_repeat <= 1)) {
    bad("routing_repeat", fmt::format("{} is a probability, from 0 to 1, got {}",
                                      name("routing_repeat"), o.routing_repeat));
  }
  if ((o.routing_skew > 0 || o.routing_repeat > 0) && o.routing != Routing::kSeeded) {
    bad(o.routing_skew > 0 ? "routing_skew" : "routing_repeat",
        fmt::format("skew and repeats shape the seeded router: give {} seeded", name("routing")));
  }
  if (!o.routing_trace.empty() && o.routing != Routing::kSeeded) {
    bad("routing_trace",
        fmt::format("a routing trace is the routing that runs: give {} seeded", name("routing")));
  }
  if (!o.routing_trace.empty() && (o.routing_skew > 0 || o.routing_repeat > 0)) {
    bad("routing_trace",
        "a routing trace's picks are given: skew and repeats shape the seeded "
        "router, not a trace");
  }
  // Scales and zero points belong to weights stored quantized for inference; anywhere else
  // they would be ignored, and the user would read results of a scheme that did not run.
  if (o.quant_group != -1 || o.quant_zeros) {
    const char* field = o.quant_group != -1 ? "quant_group" : "quant_zeros";
    const std::string given = o.quant_group != -1 ? fmt::format("{} {}", name(field), o.quant_group)
                                                  : std::string(name(field));
    if (!is_quantized(o.weight_dtype)) {
      bad(field, fmt::format("{} is for quantized weights (int4, int8, fp4, fp8), and these are "
                             "{}: it would be ignored",
                             given, name_of(o.weight_dtype)));
    }
    if (o.phase == Phase::kTrain) {
      bad(field, fmt::format("{}: a training step keeps every weight in {} without scales: it "
                             "would be ignored",
                             given, name_of(o.weight_dtype)));
    }
  }
  if (o.quant_zeros && (o.weight_dtype == Dtype::kFp8 || o.weight_dtype == Dtype::kFp4)) {
    bad("quant_zeros", fmt::format("{} weights are scaled only; zero points are for int4 and "
                                   "int8",
                                   name_of(o.weight_dtype)));
  }
}

/// Every size the generator computed (saturated where it overflowed) must be within the
/// workload format's limits: a bigger one comes from the model's sizes and the counts
/// together, so the message names both.
void check_generated_sizes(const Arch& a, const GenOptions& o, const Workload& w) {
  auto refuse = [&](std::string_view what, std::string_view name, const SizeIssue& s) {
    throw InputError(SourcePos{opt(o, "batch")},
                     fmt::format("model '{}' at these counts gives {} '{}': {}; lower "
                                 "{}, {}, {} or {}, or the model's sizes",
                                 a.name, what, name, s.message, opt(o, "batch"), opt(o, "seq"),
                                 opt(o, "context"), opt(o, "kv_block")));
  };
  for (const Tensor& t : w.tensors) {
    if (auto s = size_issue(t)) refuse("tensor", t.name, *s);
  }
  for (const Op& op : w.ops) {
    if (auto s = size_issue(op)) refuse("op", op.name, *s);
  }
}

Meta make_meta(const Arch& a, const GenOptions& o) {
  Meta m;
  m["model"] = json_string(a.name);
  m["phase"] = json_string(kPhaseNames[static_cast<size_t>(o.phase)]);
  m["batch"] = std::to_string(o.batch);
  m["tp"] = std::to_string(o.tp);
  m["weight_dtype"] = json_string(name_of(o.weight_dtype));
  m["kv_dtype"] = json_string(name_of(o.kv_dtype));
  m["act_dtype"] = json_string(name_of(o.act_dtype));
  const std::optional<QuantScheme> q = quant_scheme(o);
  if (q || o.compute_dtype) m["compute_dtype"] = json_string(name_of(compute_dtype(o)));
  if (q) {
    m["quant_group"] = std::to_string(q->group);
    m["quant_scale_dtype"] = json_string(name_of(q->scale));
    m["quant_zeros"] = q->zeros ? "true" : "false";
  }
  if (o.phase == Phase::kDecode) {
    m["context"] = std::to_string(o.context);
    m["tokens"] = std::to_string(o.tokens);
    m["kv_block"] = std::to_string(o.kv_block);
  } else {
    m["seq"] = std::to_string(o.seq);
  }
  if (o.phase == Phase::kPrefill) m["kv_block"] = std::to_string(o.kv_block);
  if (o.phase == Phase::kTrain) m["checkpoint"] = o.checkpoint ? "true" : "false";
  if (a.experts > 0) {
    m["routing"] = json_string(kRoutingNames[static_cast<size_t>(o.routing)]);
    if (o.routing == Routing::kSeeded && o.routing_trace.empty()) m["seed"] = std::to_string(o.seed);
    if (!o.routing_trace.empty()) m["routing_trace"] = json_string(o.routing_trace);
    if (o.routing_skew > 0) m["routing_skew"] = fmt::format("{}", o.routing_skew);
    if (o.routing_repeat > 0) m["routing_repeat"] = fmt::format("{}", o.routing_repeat);
  }
  if (o.layers != 0) m["layers"] = std::to_string(o.layers);
  if (o.micro_batches > 1) m["micro_batches"] = std::to_string(o.micro_batches);
  return m;
}

}  // namespace

double attention_pairs(double window, double past, double tokens) {
  const auto attended = [window](double n) {
    if (window <= 0 || n <= window) return n * (n + 1) / 2;
    return window * (window + 1) / 2 + (n - window) * window;
  };
  return attended(past + tokens) - attended(past);
}

Workload generate(const Arch& a, const GenOptions& o) {
  check_options(a, o);
  LayerBuilder b(a, o);
  b.workload().name = fmt::format("{}-{}", a.name, kPhaseNames[static_cast<size_t>(o.phase)]);
  b.workload().meta = make_meta(a, o);
  const int layers = o.layers == 0 ? a.layers : o.layers;
  b.declare_weights(layers);

  // Micro-batches (1: the batch whole, no "mbN." names; a training step has one): each its
  // activations and KV cache. enter(m) makes micro-batch m the builder's current one.
  const int64_t n = o.micro_batches;
  const int64_t mb = o.batch / n;
  const auto mb_name = [n](int64_t m) { return n == 1 ? std::string() : fmt::format("mb{}.", m); };
  const auto enter = [&](int64_t m) {
    b.set_micro_batch(m, mb, mb_name(m));
    return static_cast<size_t>(m);
  };
  std::vector<uint32_t> xs(static_cast<size_t>(n));  // each micro-batch's hidden state

  switch (o.phase) {
    case Phase::kPrefill: {
      // Each micro-batch embeds its sequences, then each layer runs for every micro-batch in
      // turn (FlexGen's zig-zag blocks), each writing its own KV cache.
      const int64_t t = mb * o.seq;
      for (int64_t m = 0; m < n; ++m) {
        const size_t i = enter(m);
        b.declare_past_kv(layers, 0);
        const uint32_t ids = b.input(mb_name(m) + "tokens", static_cast<uint64_t>(t) * 4);
        xs[i] = b.embed(mb_name(m), ids, t);
      }
      for (int l = 0; l < layers; ++l) {
        for (int64_t m = 0; m < n; ++m) {
          const size_t i = enter(m);
          xs[i] = b.layer(l, xs[i], t, Pass{o.seq, 0, true, mb_name(m)});
        }
      }
      // Only the last token of each sequence is sampled.
      for (int64_t m = 0; m < n; ++m) {
        const size_t i = enter(m);
        b.head(xs[i], mb, mb_name(m));
      }
      break;
    }
    case Phase::kDecode: {
      std::vector<uint32_t> ids(static_cast<size_t>(n));
      for (int64_t m = 0; m < n; ++m) {
        const size_t i = enter(m);
        b.declare_past_kv(layers, o.context);
        ids[i] = b.input(mb_name(m) + "tokens.0", static_cast<uint64_t>(mb) * 4);
      }
      const size_t before = b.workload().tensors.size();
      for (int64_t s = 0; s < o.tokens; ++s) {
        const auto step = [&](int64_t m) { return fmt::format("t{}.{}", s, mb_name(m)); };
        for (int64_t m = 0; m < n; ++m) {
          const size_t i = enter(m);
          xs[i] = b.embed(step(m), ids[i], mb);
        }
        // The zig-zag block schedule: each layer for every micro-batch in turn.
        for (int l = 0; l < layers; ++l) {
          for (int64_t m = 0; m < n; ++m) {
            const size_t i = enter(m);
            xs[i] = b.layer(l, xs[i], mb, Pass{1, o.context + s, true, step(m)});
          }
        }
        for (int64_t m = 0; m < n; ++m) {
          const size_t i = enter(m);
          ids[i] = b.sample(b.head(xs[i], mb, step(m)), step(m));
        }
        if (s == 0 && saturating_mul(b.workload().ops.size(), static_cast<uint64_t>(o.tokens)) >
                          kMaxGeneratedOps) {
          throw InputError(SourcePos{opt(o, "tokens")},
                           fmt::format("{} decode steps of {} ops each would be above the "
                                       "largest workload generated, {} ops",
                                       o.tokens, b.workload().ops.size(), kMaxGeneratedOps));
        }
        if (s == 0) {
          // Every step adds as many ops as the first, and as many tensors give or take a
          // new KV block per layer: one allocation each instead of doubling (a million
          // ops moved and twice the memory touched).
          Workload& w = b.workload();
          const auto steps = static_cast<size_t>(o.tokens);
          const auto new_blocks =
              static_cast<size_t>(layers) * (steps / static_cast<size_t>(o.kv_block) + 2);
          w.ops.reserve(w.ops.size() * steps);
          w.tensors.reserve(w.tensors.size() + (w.tensors.size() - before) * (steps - 1) +
                            new_blocks);
        }
      }
      break;
    }
    case Phase::kTrain: {
      const int64_t t = o.batch * o.seq;
      uint32_t x = b.embed("", b.input("tokens", static_cast<uint64_t>(t) * 4), t);
      std::vector<uint32_t> layer_inputs;
      for (int l = 0; l < layers; ++l) {
        layer_inputs.push_back(x);
        b.begin_record(l);
        x = b.layer(l, x, t, Pass{o.seq, 0, false, ""});
      }
      layer_inputs.push_back(x);
      b.begin_record(layers);
      const uint32_t logits = b.head(x, t, "");
      b.backward(logits, layer_inputs, t);
      b.optimizer();
      break;
    }
  }
  Workload w = std::move(b.workload());
  check_generated_sizes(a, o, w);
#ifndef NDEBUG
  // A generator bug, not bad input. Checked in debug builds (the sanitizer CI run) and by
  // the generator tests; release builds skip the pass, and every reader verifies anyway.
  if (auto issue = verify_workload(w)) {
    TF_ASSERT(false, "generated workload breaks the format: {} {} {}: {}",
              issue->on_op ? "op" : "tensor", issue->index, issue->field, issue->message);
  }
#endif
  return w;
}

}  // namespace tierflow::traces
