// Training: the loss, backward ops derived from the recorded forward ops, and AdamW.
#include <fmt/format.h>

#include "core/diagnostics.h"
#include "traces/layer_builder.h"

namespace tierflow::traces {

void LayerBuilder::begin_record(int l) {
  if (recorded_.size() <= static_cast<size_t>(l)) recorded_.resize(static_cast<size_t>(l) + 1);
  recording_ = l;
}

void LayerBuilder::grad_target(uint32_t t, std::vector<uint32_t>& outputs,
                               std::vector<uint32_t>& updates) {
  if (grad_.size() < w_.tensors.size()) grad_.resize(w_.tensors.size(), kExternal);
  if (grad_[t] != kExternal) {
    // A tensor read by several ops: later contributions accumulate in place.
    if (std::find(updates.begin(), updates.end(), grad_[t]) == updates.end()) {
      updates.push_back(grad_[t]);
    }
    return;
  }
  const Tensor& x = w_.tensors[t];
  const double elements =
      static_cast<double>(x.bytes) * 8.0 / kDtypeBits[static_cast<size_t>(x.dtype)];
  const uint32_t g = w_.add_tensor(Tensor{x.name + ".grad", bytes_of(elements, o_.act_dtype),
                                          TensorKind::kGrad, o_.act_dtype, kExternal, x.layer});
  grad_.resize(w_.tensors.size(), kExternal);
  grad_[t] = g;
  outputs.push_back(g);
}

void LayerBuilder::backward_op(uint32_t f) {
  const Op fwd = w_.ops[f];  // a copy: adding ops below may move the vector
  if (grad_.size() < w_.tensors.size()) grad_.resize(w_.tensors.size(), kExternal);
  std::vector<uint32_t> gouts;
  for (uint32_t t : fwd.outputs) {
    if (grad_[t] != kExternal) gouts.push_back(grad_[t]);
  }
  if (gouts.empty()) return;  // nothing downstream needs a gradient from this op
  std::vector<uint32_t> acts;
  std::vector<uint32_t> weights;
  for (uint32_t t : fwd.inputs) {
    const TensorKind k = w_.tensors[t].kind;
    if (k == TensorKind::kWeight) {
      weights.push_back(t);
    } else if (k != TensorKind::kInput) {
      acts.push_back(t);
    }
  }
  auto emit = [&](const std::string& suffix, OpKind kind, double flops, std::vector<uint32_t> in,
                  const std::vector<uint32_t>& targets, uint64_t collective = 0) {
    std::vector<uint32_t> outs, upds;
    for (uint32_t t : targets) grad_target(t, outs, upds);
    if (outs.empty() && upds.empty()) return;
    op(fwd.name + suffix, kind, flops, std::move(in), std::move(outs), std::move(upds), fwd.layer,
       -1, collective);
  };
  auto concat = [](std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  switch (fwd.kind) {
    case OpKind::kMatmul:
    case OpKind::kExpert:
    case OpKind::kRouter:
      // dX = dY W^T and dW = X^T dY: each as many FLOPs as the forward product.
      emit(".dgrad", fwd.kind, fwd.flops, concat(gouts, weights), acts);
      emit(".wgrad", fwd.kind, fwd.flops, concat(gouts, acts), weights);
      break;
    case OpKind::kEmbedding: {
      // Scatter-add of the output gradient rows into the table's gradient.
      const double rows = static_cast<double>(w_.tensors[fwd.outputs[0]].bytes) * 8.0 /
                          kDtypeBits[static_cast<size_t>(o_.act_dtype)];
      emit(".wgrad", OpKind::kEmbedding, rows, gouts, weights);
      break;
    }
    case OpKind::kCollective:
      emit(".bwd", OpKind::kCollective, fwd.flops, gouts, acts, fwd.collective_bytes);
      break;
    default:
      emit(".bwd", fwd.kind, 2.0 * fwd.flops, concat(concat(gouts, acts), weights),
           concat(acts, weights));
      break;
  }
}

void LayerBuilder::backward(uint32_t logits, const std::vector<uint32_t>& layer_inputs,
                            int64_t tokens) {
  recording_ = -1;
  const auto layers = static_cast<int>(layer_inputs.size()) - 1;
  // Cross-entropy against the labels: softmax and its gradient, ~5 FLOPs per logit.
  const uint32_t labels = input("labels", static_cast<uint64_t>(tokens) * 4);
  std::vector<uint32_t> outs, upds;
  grad_target(logits, outs, upds);
  op("loss", OpKind::kElementwise, 5.0 * static_cast<double>(tokens) * static_cast<double>(vocab_),
     {logits, labels}, outs, upds, -1);
  const auto& head_ops = recorded_[static_cast<size_t>(layers)];
  for (auto it = head_ops.rbegin(); it != head_ops.rend(); ++it) backward_op(*it);

  for (int l = layers - 1; l >= 0; --l) {
    std::vector<uint32_t> ops = recorded_[static_cast<size_t>(l)];
    if (o_.checkpoint) {
      // Only the layer input was kept: run the layer again, then differentiate the copy.
      const int scratch = layers + 1;
      begin_record(scratch);
      const uint32_t out = layer(l, layer_inputs[static_cast<size_t>(l)], tokens,
                                 Pass{o_.seq, 0, false, "recompute."});
      recording_ = -1;
      ops = std::move(recorded_[static_cast<size_t>(scratch)]);
      recorded_[static_cast<size_t>(scratch)].clear();
      grad_.resize(w_.tensors.size(), kExternal);
      grad_[out] = grad_[layer_inputs[static_cast<size_t>(l) + 1]];
    }
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) backward_op(*it);
  }
  if (embed_op_ != kExternal) backward_op(embed_op_);
}

void LayerBuilder::optimizer() {
  const size_t n = w_.tensors.size();
  grad_.resize(n, kExternal);
  for (uint32_t t = 0; t < n; ++t) {
    if (w_.tensors[t].kind != TensorKind::kWeight || grad_[t] == kExternal) continue;
    const Tensor wt = w_.tensors[t];
    const double params =
        static_cast<double>(wt.bytes) * 8.0 / kDtypeBits[static_cast<size_t>(wt.dtype)];
    auto state = [&](const char* what) {
      return w_.add_tensor(Tensor{fmt::format("{}.{}", wt.name, what),
                                  bytes_of(params, Dtype::kFp32), TensorKind::kOptimizerState,
                                  Dtype::kFp32, kExternal, wt.layer});
    };
    std::vector<uint32_t> upd = {t, state("adam_m"), state("adam_v")};
    // Low-precision weights are updated through an fp32 master copy.
    if (wt.dtype != Dtype::kFp32) upd.push_back(state("master"));
    // AdamW: two moment updates, bias corrections, the step and weight decay: ~12 FLOPs.
    const uint32_t id = op(fmt::format("adamw.{}", wt.name), OpKind::kOptimizer, 12.0 * params,
                           {grad_[t]}, {}, upd, wt.layer);
    w_.ops[id].dtype = Dtype::kFp32;
  }
}

}  // namespace tierflow::traces
