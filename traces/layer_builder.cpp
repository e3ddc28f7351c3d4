#include "traces/layer_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/checked.h"
#include "core/diagnostics.h"

namespace tierflow::traces {

namespace {
/// A byte count as op()'s traffic argument (where -1 means "sum the tensors"): saturated
/// counts stay above every limit instead of turning negative.
int64_t op_bytes(uint64_t v) { return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)); }
}  // namespace

LayerBuilder::LayerBuilder(const Arch& a, const GenOptions& o)
    : a_(a),
      o_(o),
      quant_(quant_scheme(o)),
      nh_(a.heads / o.tp),
      nkv_(a.kv_heads % o.tp == 0 ? a.kv_heads / o.tp : 1),
      h_(a.hidden),
      inter_(a.intermediate / o.tp),
      moe_inter_(a.moe_intermediate / o.tp),
      shared_inter_((a.shared_intermediate > 0 ? a.shared_intermediate : a.moe_intermediate) /
                    o.tp),
      vocab_((a.vocab + o.tp - 1) / o.tp),
      batch_(o.batch),
      rng_(o.seed) {
  // The MLA latent is shared by all heads, so every TP shard caches all of it.
  const double kv_elems = a.attention == AttentionKind::kMla
                              ? static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim)
                              : 2.0 * static_cast<double>(nkv_ * a.head_dim);
  kv_token_bytes_ = bytes_of(kv_elems, o.kv_dtype);
  if (!o.routing_trace.empty() && o.routing == Routing::kSeeded && a.experts > 0) {
    trace_ = read_routing_trace(o.routing_trace);
  }
}

double LayerBuilder::norm_params() const {
  return a_.norm == NormKind::kLayerNorm ? 2.0 * static_cast<double>(h_) : static_cast<double>(h_);
}

Dtype LayerBuilder::matmul_dtype(const std::vector<uint32_t>& inputs) const {
  // Quantized weights are dequantized to the activation dtype inside the kernel (AWQ, GPTQ,
  // Marlin) unless --compute-dtype asks for the weight dtype's own units (fp8).
  for (uint32_t t : inputs) {
    const Tensor& x = w_.tensors[t];
    if (x.kind == TensorKind::kWeight && is_quantized(x.dtype)) return compute_dtype(o_);
  }
  return o_.act_dtype;
}

uint32_t LayerBuilder::linear_weight(const std::string& name,
                                     std::initializer_list<Matrix> matrices, double extra,
                                     int layer) {
  if (!quant_) {
    double params = extra;
    for (const Matrix& m : matrices) params += m.count * m.inputs * m.outputs;
    return weight(name, params, layer);
  }
  uint64_t bytes = bytes_of(extra, o_.act_dtype);
  for (const Matrix& m : matrices) {
    bytes = saturating_add(bytes, saturating_mul(saturating_count(m.count),
                                                 quant_->matrix_bytes(m.inputs, m.outputs)));
  }
  return w_.add_tensor(Tensor{name, bytes, TensorKind::kWeight, o_.weight_dtype, kExternal, layer});
}

uint32_t LayerBuilder::weight(const std::string& name, double params, int layer) {
  // AWQ and GPTQ quantize the decoder blocks' linear layers only: embeddings, the LM head,
  // norms and MoE routers stay in 16 bits.
  const Dtype d = quant_ ? o_.act_dtype : o_.weight_dtype;
  return w_.add_tensor(Tensor{name, bytes_of(params, d), TensorKind::kWeight, d, kExternal, layer});
}

uint32_t LayerBuilder::act(const std::string& name, double elements, int layer, TensorKind kind) {
  return w_.add_tensor(Tensor{name, std::max<uint64_t>(1, bytes_of(elements, o_.act_dtype)), kind,
                              o_.act_dtype, kExternal, layer});
}

uint32_t LayerBuilder::input(const std::string& name, uint64_t bytes) {
  return w_.add_tensor(Tensor{name, bytes, TensorKind::kInput, Dtype::kFp32, kExternal, -1});
}

uint32_t LayerBuilder::op(const std::string& name, OpKind kind, double flops,
                          std::vector<uint32_t> inputs, std::vector<uint32_t> outputs,
                          std::vector<uint32_t> updates, int layer, int64_t bytes,
                          uint64_t collective) {
  uint64_t traffic = 0;
  if (bytes >= 0) {
    traffic = static_cast<uint64_t>(bytes);
  } else {
    for (uint32_t t : inputs) traffic = saturating_add(traffic, w_.tensors[t].bytes);
    for (uint32_t t : outputs) traffic = saturating_add(traffic, w_.tensors[t].bytes);
    for (uint32_t t : updates) traffic = saturating_add(traffic, saturating_mul(2, w_.tensors[t].bytes));
  }
  const Dtype dtype = kind == OpKind::kMatmul || kind == OpKind::kExpert || kind == OpKind::kRouter
                          ? matmul_dtype(inputs)
                          : o_.act_dtype;
  const uint32_t id = w_.add_op(Op{name, kind, dtype, flops, traffic, std::move(inputs),
                                   std::move(outputs), std::move(updates), 0, layer, collective});
  if (recording_ >= 0) recorded_[static_cast<size_t>(recording_)].push_back(id);
  return id;
}

void LayerBuilder::declare_weights(int layers) {
  const double h = static_cast<double>(h_);
  // OPT-350m style: embeddings of width e, projected to and from the hidden size.
  const double e = a_.project_in_out > 0 ? a_.project_in_out : h;
  embed_w_ = weight("embed.w", static_cast<double>(vocab_) * e + a_.learned_positions * h, -1);
  if (a_.project_in_out > 0) {
    project_in_w_ = weight("project_in.w", e * h, -1);
    project_out_w_ = weight("project_out.w", h * e, -1);
  }
  lw_.resize(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    LayerWeights& lw = lw_[static_cast<size_t>(l)];
    const std::string p = fmt::format("L{}.", l);
    const double nh = static_cast<double>(nh_);
    lw.attn_norm = weight(p + "attn_norm.w", norm_params(), l);
    if (a_.attention == AttentionKind::kMla) {
      const double qk = a_.qk_nope_head_dim + a_.qk_rope_head_dim;
      const double qr = a_.q_lora_rank;
      const double kvr = a_.kv_lora_rank;
      // q: down-projection, its norm and up-projection (or one projection without q_lora).
      lw.wq = qr > 0 ? linear_weight(p + "wq", {{h, qr}, {qr, nh * qk}}, qr, l)
                     : linear_weight(p + "wq", {{h, nh * qk}}, 0, l);
      lw.wkv_a = linear_weight(p + "wkv_a", {{h, kvr + a_.qk_rope_head_dim}}, kvr, l);
      lw.wkv_b =
          linear_weight(p + "wkv_b", {{kvr, nh * (a_.qk_nope_head_dim + a_.v_head_dim)}}, 0, l);
      lw.wo = linear_weight(p + "wo", {{nh * a_.v_head_dim, h}}, 0, l);
    } else {
      const double qkv_out = static_cast<double>((nh_ + 2 * nkv_) * a_.head_dim);
      // Biases, q/k norms and the per-head sink logits travel with the projection.
      lw.wqkv = linear_weight(p + "wqkv", {{h, qkv_out}},
                              (a_.qkv_bias ? qkv_out : 0) + (a_.qk_norm ? 2.0 * a_.head_dim : 0) +
                                  (a_.attention_sinks ? nh : 0),
                              l);
      lw.wo = linear_weight(p + "wo", {{nh * a_.head_dim, h}}, a_.o_bias ? h : 0, l);
    }
    lw.mlp_norm = weight(p + "mlp_norm.w", norm_params(), l);
    if (a_.post_norms) {
      lw.post_attn_norm = weight(p + "post_attn_norm.w", norm_params(), l);
      lw.post_mlp_norm = weight(p + "post_mlp_norm.w", norm_params(), l);
    }
    if (a_.is_moe_layer(l)) {
      lw.router = weight(p + "router.w", h * a_.experts + (a_.router_bias ? a_.experts : 0), l);
      // Gate and up (h -> I_e each), then down (I_e -> h); with mlp_bias (gpt-oss) their
      // biases too.
      const double mi = static_cast<double>(moe_inter_);
      for (int x = 0; x < a_.experts; ++x) {
        lw.experts.push_back(linear_weight(fmt::format("{}expert{}.w", p, x),
                                           {{h, 2.0 * mi}, {mi, h}},
                                           a_.mlp_bias ? 2.0 * mi + h : 0, l));
      }
      if (a_.shared_experts > 0) {
        const double si = static_cast<double>(shared_inter_);
        const double n = a_.shared_experts;
        lw.shared = linear_weight(p + "shared.w", {{h, 2.0 * si, n}, {si, h, n}},
                                  (a_.mlp_bias ? n * (2.0 * si + h) : 0) +
                                      (a_.shared_expert_gate ? h : 0),
                                  l);
      }
    } else if (a_.mlp == MlpKind::kGated) {
      const double i = static_cast<double>(inter_);
      lw.w_up = linear_weight(p + "w_gate_up", {{h, 2.0 * i}}, a_.mlp_bias ? 2.0 * i : 0, l);
      lw.w_down = linear_weight(p + "w_down", {{i, h}}, a_.mlp_bias ? h : 0, l);
    } else {
      const double i = static_cast<double>(inter_);
      lw.w_up = linear_weight(p + "w_fc1", {{h, i}}, a_.mlp_bias ? i : 0, l);
      lw.w_down = linear_weight(p + "w_fc2", {{i, h}}, a_.mlp_bias ? h : 0, l);
    }
  }
  final_norm_w_ = weight("final_norm.w", norm_params(), -1);
  lm_head_w_ =
      a_.tied_embeddings ? embed_w_ : weight("lm_head.w", static_cast<double>(vocab_) * e, -1);
}

void LayerBuilder::set_micro_batch(int64_t m, int64_t batch, std::string name) {
  if (m == mb_ && batch == batch_ && name == mb_name_) return;
  const auto need = static_cast<size_t>(std::max(m, mb_) + 1);
  if (kv_by_mb_.size() < need) kv_by_mb_.resize(need);
  kv_by_mb_[static_cast<size_t>(mb_)] = std::move(kv_);
  kv_ = std::move(kv_by_mb_[static_cast<size_t>(m)]);
  mb_ = m;
  batch_ = batch;
  mb_name_ = std::move(name);
}

void LayerBuilder::declare_past_kv(int layers, int64_t context) {
  kv_.assign(static_cast<size_t>(layers), {});
  for (int l = 0; l < layers; ++l) {
    // A sliding layer keeps only the last `window` tokens.
    const int64_t kept = a_.attended(l, context);
    for (int64_t done = 0, k = 0; done < kept; done += o_.kv_block, ++k) {
      const uint32_t t =
          w_.add_tensor(Tensor{fmt::format("{}L{}.kv{}", mb_name_, l, k),
                               saturating_mul(static_cast<uint64_t>(batch_ * o_.kv_block), kv_token_bytes_),
                               TensorKind::kKv, o_.kv_dtype, kExternal, l});
      kv_[static_cast<size_t>(l)].push_back(KvBlock{t, std::min(o_.kv_block, kept - done)});
    }
  }
}

uint32_t LayerBuilder::embed(const std::string& prefix, uint32_t token_ids, int64_t tokens) {
  const double rows = static_cast<double>(tokens * h_);
  const uint32_t x = act(prefix + "x.embed", rows, -1);
  // A lookup reads one row per token (plus the position row for learned positions).
  const auto read = bytes_of(rows * (a_.learned_positions > 0 ? 2 : 1), w_.tensors[embed_w_].dtype);
  embed_op_ = op(prefix + "embed", OpKind::kEmbedding, 0, {token_ids, embed_w_}, {x}, {}, -1,
                 op_bytes(saturating_add(saturating_add(read, w_.tensors[x].bytes), w_.tensors[token_ids].bytes)));
  if (a_.project_in_out == 0) return x;
  const uint32_t y = act(prefix + "x.project_in", rows, -1);
  op(prefix + "project_in", OpKind::kMatmul, 2.0 * rows * a_.project_in_out, {x, project_in_w_},
     {y}, {}, -1);
  return y;
}

uint32_t LayerBuilder::norm(const std::string& name, uint32_t x, uint32_t w, int64_t tokens,
                            int layer) {
  const uint32_t y = act(name + ".out", static_cast<double>(tokens * h_), layer);
  const double per = a_.norm == NormKind::kLayerNorm ? 8.0 : 4.0;
  op(name, OpKind::kNorm, per * static_cast<double>(tokens * h_), {x, w}, {y}, {}, layer);
  return y;
}

uint32_t LayerBuilder::allreduce(const std::string& name, uint32_t x, int64_t tokens, int layer) {
  if (o_.tp == 1) return x;
  const double tp = o_.tp;
  const uint32_t y = act(name + ".out", static_cast<double>(tokens * h_), layer);
  // Ring all-reduce: each device sends 2 (tp - 1) / tp of the message.
  const auto sent =
      saturating_count(2.0 * (tp - 1) / tp * static_cast<double>(w_.tensors[x].bytes));
  op(name, OpKind::kCollective, (tp - 1) / tp * static_cast<double>(tokens * h_), {x}, {y}, {},
     layer, -1, sent);
  return y;
}

uint32_t LayerBuilder::layer(int l, uint32_t x, int64_t tokens, const Pass& pass) {
  const LayerWeights& lw = lw_[static_cast<size_t>(l)];
  const std::string p = fmt::format("{}L{}.", pass.prefix, l);
  const double th = static_cast<double>(tokens * h_);
  uint32_t xn = norm(p + "attn_norm", x, lw.attn_norm, tokens, l);
  uint32_t o = allreduce(p + "attn_allreduce", attention_block(l, xn, tokens, pass), tokens, l);
  if (a_.post_norms) o = norm(p + "post_attn_norm", o, lw.post_attn_norm, tokens, l);
  uint32_t x2 = act(p + "x.attn_residual", th, l);
  op(p + "attn_residual", OpKind::kElementwise, th, {x, o}, {x2}, {}, l);
  uint32_t x2n = norm(p + "mlp_norm", x2, lw.mlp_norm, tokens, l);
  uint32_t m = a_.is_moe_layer(l) ? moe_block(l, x2n, tokens, p) : mlp_block(l, x2n, tokens, p);
  m = allreduce(p + "mlp_allreduce", m, tokens, l);
  if (a_.post_norms) m = norm(p + "post_mlp_norm", m, lw.post_mlp_norm, tokens, l);
  uint32_t out = act(p + "x.out", th, l);
  op(p + "mlp_residual", OpKind::kElementwise, th, {x2, m}, {out}, {}, l);
  return out;
}

uint32_t LayerBuilder::attention_block(int l, uint32_t xn, int64_t tokens, const Pass& pass) {
  const LayerWeights& lw = lw_[static_cast<size_t>(l)];
  const std::string p = fmt::format("{}L{}.", pass.prefix, l);
  const double t = static_cast<double>(tokens);
  const double nh = static_cast<double>(nh_);
  const bool mla = a_.attention == AttentionKind::kMla;
  const double dqk = mla ? a_.qk_nope_head_dim + a_.qk_rope_head_dim : a_.head_dim;
  const double dv = mla ? a_.v_head_dim : a_.head_dim;
  const double latent = a_.kv_lora_rank + a_.qk_rope_head_dim;
  const double kv_elems = mla ? latent : 2.0 * static_cast<double>(nkv_ * a_.head_dim);

  // Q, K and V projections; K/V go into the KV cache (inference) or an activation.
  const uint32_t q = act(p + "q", t * nh * dqk, l);
  std::vector<uint32_t> qkv_in = {xn};
  double qkv_flops = 0;
  if (mla) {
    qkv_in.push_back(lw.wq);
    qkv_in.push_back(lw.wkv_a);
    const double qr = a_.q_lora_rank;
    const double hd = static_cast<double>(h_);
    const double q_params = qr > 0 ? hd * qr + qr * nh * dqk : hd * nh * dqk;
    qkv_flops = 2.0 * t * (q_params + static_cast<double>(h_) * latent);
  } else {
    qkv_in.push_back(lw.wqkv);
    const double out = static_cast<double>((nh_ + 2 * nkv_) * a_.head_dim);
    qkv_flops = 2.0 * t * static_cast<double>(h_) * out + (a_.qkv_bias ? t * out : 0);
  }
  std::vector<uint32_t> qkv_out = {q};
  std::vector<uint32_t> qkv_upd;
  std::vector<uint32_t> attn_in = {q};
  uint64_t kv_written = 0;
  if (pass.write_kv) {
    auto& blocks = kv_[static_cast<size_t>(l)];
    auto update = [&](uint32_t b) {
      if (std::find(qkv_out.begin(), qkv_out.end(), b) == qkv_out.end() &&
          std::find(qkv_upd.begin(), qkv_upd.end(), b) == qkv_upd.end()) {
        qkv_upd.push_back(b);
      }
    };
    // A sliding layer keeps its last `cap` tokens in a ring of slots: of the new tokens
    // only the last min(seq, cap) are stored.
    const int64_t cap = a_.is_sliding_layer(l) ? a_.sliding_window : INT64_MAX;
    int64_t stored = 0;
    for (const KvBlock& b : blocks) stored += b.filled;
    const int64_t keep = std::min(pass.seq, cap);
    int64_t pos = pass.past + pass.seq - keep;  // position of the first token stored
    for (int64_t left = keep; left > 0;) {
      int64_t n = 0;
      if (stored < cap) {
        // Append: fill the last block, then open new ones.
        if (blocks.empty() || blocks.back().filled == o_.kv_block) {
          const uint32_t b =
              w_.add_tensor(Tensor{fmt::format("{}L{}.kv{}", mb_name_, l, blocks.size()),
                                   saturating_mul(static_cast<uint64_t>(batch_ * o_.kv_block), kv_token_bytes_),
                                   TensorKind::kKv, o_.kv_dtype, kExternal, l});
          blocks.push_back(KvBlock{b, 0});
          qkv_out.push_back(b);
        } else {
          update(blocks.back().tensor);
        }
        n = std::min({left, o_.kv_block - blocks.back().filled, cap - stored});
        blocks.back().filled += n;
        stored += n;
      } else {
        // Full window: overwrite the oldest slot, pos % cap.
        const int64_t slot = pos % cap;
        update(blocks[static_cast<size_t>(slot / o_.kv_block)].tensor);
        n = std::min({left, o_.kv_block - slot % o_.kv_block, cap - slot});
      }
      left -= n;
      pos += n;
    }
    kv_written = saturating_mul(static_cast<uint64_t>(batch_ * keep), kv_token_bytes_);
    for (const KvBlock& b : blocks) attn_in.push_back(b.tensor);
  } else {
    const uint32_t kv = act(p + "kv", t * kv_elems, l);
    qkv_out.push_back(kv);
    attn_in.push_back(kv);
  }
  uint64_t qkv_bytes =
      saturating_add(saturating_add(w_.tensors[xn].bytes, w_.tensors[q].bytes), kv_written);
  for (size_t i = 1; i < qkv_in.size(); ++i) {
    qkv_bytes = saturating_add(qkv_bytes, w_.tensors[qkv_in[i]].bytes);
  }
  if (!pass.write_kv) qkv_bytes = saturating_add(qkv_bytes, w_.tensors[qkv_out.back()].bytes);
  op(p + "qkv", OpKind::kMatmul, qkv_flops, qkv_in, qkv_out, qkv_upd, l,
     op_bytes(qkv_bytes));

  // Attention over past + new tokens, causal within the new ones.
  const double b = static_cast<double>(batch_);
  const double s = static_cast<double>(pass.seq);
  // Query-key pairs: the token at position i attends min(i, window) positions.
  const double window = a_.is_sliding_layer(l) ? static_cast<double>(a_.sliding_window) : 0.0;
  const double past = static_cast<double>(pass.past);
  const double pairs = b * attention_pairs(window, past, s);
  double attn_flops = 0;
  if (mla && pass.seq == 1) {
    // Absorbed: scores and values over the latent, plus the per-token absorption matmuls.
    attn_flops = pairs * (2 * nh * latent + 2 * nh * a_.kv_lora_rank) +
                 2 * t * nh * a_.kv_lora_rank * (a_.qk_nope_head_dim + a_.v_head_dim);
  } else if (mla) {
    // Expanded: rebuild K and V from the latent, then ordinary attention.
    attn_flops = 2 * t * a_.kv_lora_rank * nh * (a_.qk_nope_head_dim + a_.v_head_dim) +
                 pairs * 2 * nh * (dqk + dv);
  } else {
    attn_flops = pairs * 2 * nh * (dqk + dv);
  }
  if (a_.attn_softcap) attn_flops += kSoftcapFlops * pairs * nh;
  if (mla) attn_in.push_back(lw.wkv_b);
  const uint32_t ao = act(p + "attn.out", t * nh * dv, l);
  const double cached_tokens = window > 0 ? std::min(past + s, window) : past + s;
  uint64_t attn_bytes = saturating_add(w_.tensors[q].bytes, w_.tensors[ao].bytes);
  attn_bytes = saturating_add(
      attn_bytes, pass.write_kv ? saturating_mul(saturating_count(b * cached_tokens), kv_token_bytes_)
                                : w_.tensors[attn_in[1]].bytes);
  if (mla) attn_bytes = saturating_add(attn_bytes, w_.tensors[lw.wkv_b].bytes);
  op(p + "attention", OpKind::kAttention, attn_flops, attn_in, {ao}, {}, l,
     op_bytes(attn_bytes));

  const uint32_t o = act(p + "attn.o", t * static_cast<double>(h_), l);
  op(p + "o_proj", OpKind::kMatmul, 2.0 * t * nh * dv * static_cast<double>(h_), {ao, lw.wo}, {o},
     {}, l);
  return o;
}

uint32_t LayerBuilder::mlp_block(int l, uint32_t xn, int64_t tokens, const std::string& p) {
  const LayerWeights& lw = lw_[static_cast<size_t>(l)];
  const double t = static_cast<double>(tokens);
  const double h = static_cast<double>(h_);
  const double i = static_cast<double>(inter_);
  const bool gated = a_.mlp == MlpKind::kGated;
  const uint32_t up = act(p + (gated ? "mlp.gate_up" : "mlp.fc1"), t * i * (gated ? 2 : 1), l);
  op(p + (gated ? "gate_up" : "fc1"), OpKind::kMatmul, 2.0 * t * h * i * (gated ? 2 : 1),
     {xn, lw.w_up}, {up}, {}, l);
  const uint32_t a = act(p + "mlp.act", t * i, l);
  // SiLU(gate) * up is ~5 FLOPs per element; ReLU one.
  op(p + "act", OpKind::kElementwise, (gated ? 5.0 : 1.0) * t * i, {up}, {a}, {}, l);
  const uint32_t d = act(p + "mlp.down", t * h, l);
  op(p + (gated ? "down" : "fc2"), OpKind::kMatmul, 2.0 * t * i * h, {a, lw.w_down}, {d}, {}, l);
  return d;
}

void LayerBuilder::route_skewed(int l, int64_t tok, std::vector<int64_t>& load) {
  const int e = a_.experts;
  const int k = std::min(a_.experts_per_token, e);
  const auto layer = static_cast<size_t>(l);
  if (popularity_.size() <= layer) {
    popularity_.resize(layer + 1);
    previous_.resize(layer + 1);
  }
  std::vector<double>& weight = popularity_[layer];
  if (weight.empty()) {
    // Rank r (from 1) weighs 1 / r^skew; which expert has which rank is seeded per layer.
    std::vector<int> rank(static_cast<size_t>(e));
    for (int j = 0; j < e; ++j) rank[static_cast<size_t>(j)] = j + 1;
    std::shuffle(rank.begin(), rank.end(), rng_);
    weight.resize(static_cast<size_t>(e));
    for (int j = 0; j < e; ++j) {
      weight[static_cast<size_t>(j)] =
          std::pow(static_cast<double>(rank[static_cast<size_t>(j)]), -o_.routing_skew);
    }
  }
  // Decode: one stream per sequence (its previous step); else one stream of tokens.
  const auto stream = static_cast<size_t>(o_.phase == Phase::kDecode ? tok : 0);
  auto& prev = previous_[layer];
  if (prev.size() <= stream) prev.resize(stream + 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  if (!prev[stream].empty() && o_.routing_repeat > 0 && unit(rng_) < o_.routing_repeat) {
    for (const int j : prev[stream]) ++load[static_cast<size_t>(j)];
    return;
  }
  // k distinct experts, each drawn by weight among those not drawn yet.
  picked_.clear();
  double left = 0;
  for (const double w : weight) left += w;
  for (int n = 0; n < k; ++n) {
    double u = unit(rng_) * left;
    int pick = -1;
    for (int j = 0; j < e; ++j) {
      if (std::find(picked_.begin(), picked_.end(), j) != picked_.end()) continue;
      pick = j;  // the last one not drawn, should rounding leave u above every weight
      if (u < weight[static_cast<size_t>(j)]) break;
      u -= weight[static_cast<size_t>(j)];
    }
    picked_.push_back(pick);
    left -= weight[static_cast<size_t>(pick)];
    ++load[static_cast<size_t>(pick)];
  }
  prev[stream] = picked_;
}

void LayerBuilder::route_traced(int l, int64_t tokens, std::vector<int64_t>& load) {
  const auto layer = static_cast<size_t>(l);
  if (passes_.size() <= layer) passes_.resize(layer + 1, 0);
  const uint32_t pass = passes_[layer]++;
  const auto k = static_cast<size_t>(a_.experts_per_token);
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const RoutingPick* p = trace_->find(pass, static_cast<uint32_t>(l), static_cast<uint64_t>(tok));
    if (p == nullptr) {
      throw InputError::at(
          SourcePos{trace_->file},
          "no pick for pass {}, layer {}, token {}: the workload routes {} token{} a pass{}",
          pass, l, tok, tokens, tokens == 1 ? "" : "s",
          o_.phase == Phase::kDecode ? " (decode: one per sequence, a pass per step)" : "");
    }
    const SourcePos at{trace_->file, static_cast<int>(p->line), static_cast<int>(p->column)};
    if (p->experts.size() != k) {
      throw InputError(at, fmt::format("pass {}, layer {}, token {} picks {} expert{}; {} picks "
                                       "{} a token",
                                       pass, l, tok, p->experts.size(),
                                       p->experts.size() == 1 ? "" : "s", a_.name, k));
    }
    for (const uint16_t e : p->experts) {
      if (e >= a_.experts) {
        throw InputError(at, fmt::format("expert {} of pass {}, layer {}, token {}: {} has {} "
                                         "routed experts (0 to {})",
                                         e, pass, l, tok, a_.name, a_.experts, a_.experts - 1));
      }
      ++load[e];
    }
  }
}

std::vector<int64_t> LayerBuilder::route(int l, int64_t tokens) {
  const int e = a_.experts;
  const int k = a_.experts_per_token;
  std::vector<int64_t> load(static_cast<size_t>(e), 0);
  if (o_.routing == Routing::kExpected) {
    // The expected number of distinct experts, sharing the tokens x k assignments evenly.
    const auto m = std::clamp<int64_t>(std::llround(expected_distinct_experts(e, k, tokens)),
                                       std::min<int64_t>(k, e), e);
    const int64_t pairs = tokens * k;
    for (int64_t j = 0; j < m; ++j) {
      load[static_cast<size_t>(j)] = pairs / m + (j < pairs % m ? 1 : 0);
    }
    return load;
  }
  if (trace_) {
    route_traced(l, tokens, load);
    return load;
  }
  if (o_.routing_skew > 0 || o_.routing_repeat > 0) {
    for (int64_t tok = 0; tok < tokens; ++tok) route_skewed(l, tok, load);
    return load;
  }
  std::vector<int> ids(static_cast<size_t>(e));
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (int j = 0; j < e; ++j) ids[static_cast<size_t>(j)] = j;
    // k distinct experts by a partial Fisher-Yates shuffle.
    for (int j = 0; j < k; ++j) {
      std::uniform_int_distribution<int> pick(j, e - 1);
      std::swap(ids[static_cast<size_t>(j)], ids[static_cast<size_t>(pick(rng_))]);
      ++load[static_cast<size_t>(ids[static_cast<size_t>(j)])];
    }
  }
  return load;
}

uint32_t LayerBuilder::moe_block(int l, uint32_t xn, int64_t tokens, const std::string& p) {
  const LayerWeights& lw = lw_[static_cast<size_t>(l)];
  const double t = static_cast<double>(tokens);
  const double h = static_cast<double>(h_);
  const double e = a_.experts;
  const uint32_t probs = act(p + "router.probs", t * e, l);
  // Scores, softmax/sigmoid and top-k selection.
  op(p + "router", OpKind::kRouter, 2.0 * t * h * e + 5.0 * t * e, {xn, lw.router}, {probs}, {}, l);
  std::vector<uint32_t> parts = {probs};
  const std::vector<int64_t> load = route(l, tokens);
  for (size_t j = 0; j < load.size(); ++j) {
    if (load[j] == 0) continue;
    const double n = static_cast<double>(load[j]);
    const uint32_t y = act(fmt::format("{}expert{}.out", p, j), n * h, l);
    const double inter = static_cast<double>(moe_inter_);
    // Gate/up, SiLU * up, down for the tokens routed here.
    op(fmt::format("{}expert{}", p, j), OpKind::kExpert,
       2.0 * n * 3.0 * h * inter + 5.0 * n * inter, {xn, lw.experts[j]}, {y}, {}, l,
       op_bytes(saturating_add(w_.tensors[lw.experts[j]].bytes, bytes_of(2.0 * n * h, o_.act_dtype))));
    parts.push_back(y);
  }
  if (a_.shared_experts > 0) {
    const uint32_t y = act(p + "shared.out", t * h, l);
    const double width = static_cast<double>(shared_inter_ * a_.shared_experts);
    op(p + "shared_expert", OpKind::kExpert, 2.0 * t * 3.0 * h * width + 5.0 * t * width,
       {xn, lw.shared}, {y}, {}, l);
    parts.push_back(y);
  }
  const uint32_t out = act(p + "moe.out", t * h, l);
  const double routed = static_cast<double>(a_.experts_per_token + a_.shared_experts);
  op(p + "moe_combine", OpKind::kElementwise, 2.0 * t * h * routed, parts, {out}, {}, l);
  return out;
}

uint32_t LayerBuilder::head(uint32_t x, int64_t tokens, const std::string& prefix) {
  uint32_t xn = norm(prefix + "final_norm", x, final_norm_w_, tokens, -1);
  const double t = static_cast<double>(tokens);
  double width = static_cast<double>(h_);
  if (a_.project_in_out > 0) {
    width = a_.project_in_out;
    const uint32_t y = act(prefix + "x.project_out", t * width, -1);
    op(prefix + "project_out", OpKind::kMatmul, 2.0 * t * static_cast<double>(h_) * width,
       {xn, project_out_w_}, {y}, {}, -1);
    xn = y;
  }
  const uint32_t logits =
      act(prefix + "logits", t * static_cast<double>(vocab_), -1,
          o_.phase == Phase::kTrain ? TensorKind::kActivation : TensorKind::kOutput);
  // Softcapping (Gemma-2) is folded into the head: a tanh per logit.
  op(prefix + "lm_head", OpKind::kMatmul,
     2.0 * t * width * static_cast<double>(vocab_) +
         (a_.final_softcap ? kSoftcapFlops * t * static_cast<double>(vocab_) : 0.0),
     {xn, lm_head_w_}, {logits}, {}, -1);
  return logits;
}

uint32_t LayerBuilder::sample(uint32_t logits, const std::string& prefix) {
  const uint32_t ids =
      w_.add_tensor(Tensor{prefix + "next_tokens", static_cast<uint64_t>(batch_) * 4,
                           TensorKind::kActivation, Dtype::kFp32, kExternal, -1});
  op(prefix + "sample", OpKind::kElementwise,
     static_cast<double>(batch_) * static_cast<double>(vocab_), {logits}, {ids}, {}, -1);
  return ids;
}

}  // namespace tierflow::traces
