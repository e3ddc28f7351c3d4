#include "traces/workload_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "core/table.h"
#include "core/units.h"

namespace tierflow::traces {
namespace {

using json = nlohmann::ordered_json;

/// Forward, backward (names ending .dgrad/.wgrad/.bwd), optimizer.
enum Part { kForward, kBackward, kOptimizer };
constexpr std::array<std::string_view, 3> kPartNames = {"forward", "backward", "optimizer"};

Part part_of(const Op& op) {
  if (op.kind == OpKind::kOptimizer) return kOptimizer;
  const std::string_view n = op.name;
  for (std::string_view s : {".dgrad", ".wgrad", ".bwd"}) {
    if (n.size() > s.size() && n.substr(n.size() - s.size()) == s) return kBackward;
  }
  return kForward;
}

double elements(const Tensor& t) {
  return static_cast<double>(t.bytes) * 8.0 / kDtypeBits[static_cast<size_t>(t.dtype)];
}

struct Summary {
  double params = 0;       ///< elements of all weight tensors
  double params_read = 0;  ///< elements of weight tensors some op reads
  std::array<double, 3> flops{};
  std::array<size_t, 3> ops{};
  std::array<double, kOpKindNames.size()> flops_by_kind{};
  uint64_t collective_bytes = 0;
  std::optional<double> kv_bytes_per_token;
  /// Tokens the KV cache holds at the step's end (batch x (context + tokens) in decode,
  /// batch x seq in prefill), when the meta says; its blocks round each sequence up.
  std::optional<double> kv_tokens;
  std::vector<uint32_t> largest;
};

std::optional<double> meta_number(const Workload& w, const std::string& key) {
  auto it = w.meta.find(key);
  if (it == w.meta.end()) return std::nullopt;
  try {
    return std::stod(it->second);
  } catch (...) {
    return std::nullopt;
  }
}

Summary summarize(const Workload& w, int top) {
  Summary s;
  std::vector<bool> read(w.tensors.size(), false);
  for (const Op& op : w.ops) {
    const Part p = part_of(op);
    s.flops[p] += op.flops;
    s.ops[p] += 1;
    s.flops_by_kind[static_cast<size_t>(op.kind)] += op.flops;
    s.collective_bytes += op.collective_bytes;
    for (uint32_t t : op.inputs) read[t] = true;
  }
  // Quantized weights (traces/quant.h) carry scales (and zeros) per group: count elements
  // at the bits per element the meta's scheme gives, exact up to rounding and to the biases
  // kept in 16 bits.
  const auto group = meta_number(w, "quant_group");
  auto scale_dtype = Dtype::kFp16;
  if (auto it = w.meta.find("quant_scale_dtype"); it != w.meta.end() && it->second.size() > 2) {
    if (auto d =
            index_of(kDtypeNames, std::string_view(it->second).substr(1, it->second.size() - 2))) {
      scale_dtype = static_cast<Dtype>(*d);
    }
  }
  const auto zeros = w.meta.find("quant_zeros");
  const bool has_zeros = zeros != w.meta.end() && zeros->second == "true";
  auto weight_elements = [&](const Tensor& t) {
    const double bits = kDtypeBits[static_cast<size_t>(t.dtype)];
    if (!group || *group <= 0 || bits > 8) return elements(t);
    const double per =
        bits + (kDtypeBits[static_cast<size_t>(scale_dtype)] + (has_zeros ? bits : 0.0)) / *group;
    return static_cast<double>(t.bytes) * 8.0 / per;
  };
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    if (w.tensors[i].kind != TensorKind::kWeight) continue;
    s.params += weight_elements(w.tensors[i]);
    if (read[i]) s.params_read += weight_elements(w.tensors[i]);
  }
  // KV per token: KV blocks hold batch x kv_block tokens each.
  const auto batch = meta_number(w, "batch");
  const auto block = meta_number(w, "kv_block");
  if (batch && block && *batch > 0 && *block > 0) {
    std::vector<uint64_t> per_layer;
    for (const Tensor& t : w.tensors) {
      if (t.kind != TensorKind::kKv || t.layer < 0) continue;
      if (per_layer.size() <= static_cast<size_t>(t.layer))
        per_layer.resize(static_cast<size_t>(t.layer) + 1, 0);
      per_layer[static_cast<size_t>(t.layer)] = t.bytes;  // blocks of one layer are equal
    }
    double sum = 0;
    for (uint64_t b : per_layer) sum += static_cast<double>(b);
    if (sum > 0) s.kv_bytes_per_token = sum / (*batch * *block);
    auto phase = w.meta.find("phase");
    const auto context = meta_number(w, "context"), tokens = meta_number(w, "tokens");
    const auto seq = meta_number(w, "seq");
    if (phase != w.meta.end() && phase->second == "\"decode\"" && context && tokens) {
      s.kv_tokens = *batch * (*context + *tokens);
    } else if (phase != w.meta.end() && phase->second == "\"prefill\"" && seq) {
      s.kv_tokens = *batch * *seq;
    }
  }
  s.largest.resize(w.tensors.size());
  std::iota(s.largest.begin(), s.largest.end(), 0U);
  const auto n = std::min<size_t>(static_cast<size_t>(std::max(top, 0)), s.largest.size());
  std::partial_sort(s.largest.begin(), s.largest.begin() + static_cast<std::ptrdiff_t>(n),
                    s.largest.end(), [&](uint32_t a, uint32_t b) {
                      return w.tensors[a].bytes != w.tensors[b].bytes
                                 ? w.tensors[a].bytes > w.tensors[b].bytes
                                 : a < b;
                    });
  s.largest.resize(n);
  return s;
}

std::string count(double v) {
  if (v >= 1e12) return fmt::format("{:.3f} T", v / 1e12);
  if (v >= 1e9) return fmt::format("{:.3f} G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.3f} M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.3f} k", v / 1e3);
  return fmt::format("{}", v);
}

}  // namespace

std::string info_text(const Workload& w, const InfoOptions& o) {
  const Summary s = summarize(w, o.top);
  const WorkloadTotals t = totals(w);
  std::string out = fmt::format("workload {}\n", w.name);
  for (const auto& [k, v] : w.meta) out += fmt::format("  {} = {}\n", k, v);
  out += fmt::format("  {} ops, {} tensors\n\n", w.ops.size(), w.tensors.size());

  Table p({"parameters", "count"}, {Table::Align::kLeft, Table::Align::kRight});
  p.add_row({"total (all weight tensors)", count(s.params)});
  p.add_row({"read by this step", count(s.params_read)});
  out += p.render() + "\n";

  Table b({"tensor kind", "tensors", "bytes"},
          {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight});
  for (size_t k = 0; k < kTensorKindNames.size(); ++k) {
    if (t.count_by_kind[k] == 0) continue;
    b.add_row({std::string(kTensorKindNames[k]), std::to_string(t.count_by_kind[k]),
               to_string_approx(Bytes{t.bytes_by_kind[k]})});
  }
  out += b.render();
  if (s.kv_bytes_per_token) {
    out += fmt::format("  KV cache per token (all layers): {} B\n", *s.kv_bytes_per_token);
    const uint64_t blocks = t.bytes_by_kind[static_cast<size_t>(TensorKind::kKv)];
    if (s.kv_tokens) {
      const auto held = static_cast<uint64_t>(*s.kv_tokens * *s.kv_bytes_per_token);
      out += fmt::format("  KV cache of the tokens: {} ({:.0f} tokens)",
                         to_string_approx(Bytes{held}), *s.kv_tokens);
      if (blocks > held) {
        out += fmt::format(
            "; the kv tensors ({}) round each sequence up to whole blocks of "
            "{} tokens",
            to_string_approx(Bytes{blocks}), meta_number(w, "kv_block").value_or(0));
      }
      out += "\n";
    }
  }
  out += "\n";

  Table f({"FLOPs", "ops", "FLOPs"},
          {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight});
  for (size_t i = 0; i < 3; ++i) {
    if (s.ops[i] == 0) continue;
    f.add_row({std::string(kPartNames[i]), std::to_string(s.ops[i]), count(s.flops[i])});
  }
  f.add_row({"total", std::to_string(w.ops.size()), count(t.flops)});
  for (size_t k = 0; k < kOpKindNames.size(); ++k) {
    if (s.flops_by_kind[k] > 0)
      f.add_row({"  " + std::string(kOpKindNames[k]), "", count(s.flops_by_kind[k])});
  }
  out += f.render();
  if (s.collective_bytes > 0) {
    out +=
        fmt::format("  collective bytes sent: {}\n", to_string_approx(Bytes{s.collective_bytes}));
  }
  out += "\n";

  Table l({"largest tensors", "kind", "bytes"},
          {Table::Align::kLeft, Table::Align::kLeft, Table::Align::kRight});
  for (uint32_t i : s.largest) {
    l.add_row({w.tensors[i].name,
               std::string(kTensorKindNames[static_cast<size_t>(w.tensors[i].kind)]),
               to_string_approx(Bytes{w.tensors[i].bytes})});
  }
  out += l.render();
  return out;
}

json info_json(const Workload& w, const InfoOptions& o) {
  const Summary s = summarize(w, o.top);
  const WorkloadTotals t = totals(w);
  json j;
  j["name"] = w.name;
  json meta = json::object();
  for (const auto& [k, v] : w.meta) meta[k] = json::parse(v);
  j["meta"] = meta;
  j["ops"] = w.ops.size();
  j["tensors"] = w.tensors.size();
  j["parameters"] = {{"total", s.params}, {"read", s.params_read}};
  json kinds = json::object();
  for (size_t k = 0; k < kTensorKindNames.size(); ++k) {
    kinds[std::string(kTensorKindNames[k])] = {{"tensors", t.count_by_kind[k]},
                                               {"bytes", t.bytes_by_kind[k]}};
  }
  j["bytes_by_kind"] = kinds;
  j["kv_bytes_per_token"] = s.kv_bytes_per_token ? json(*s.kv_bytes_per_token) : json(nullptr);
  j["kv_tokens"] = s.kv_tokens ? json(*s.kv_tokens) : json(nullptr);
  j["kv_token_bytes"] = s.kv_tokens && s.kv_bytes_per_token
                            ? json(*s.kv_tokens * *s.kv_bytes_per_token)
                            : json(nullptr);
  json flops = json::object();
  for (size_t i = 0; i < 3; ++i) flops[std::string(kPartNames[i])] = s.flops[i];
  flops["total"] = t.flops;
  json by_kind = json::object();
  for (size_t k = 0; k < kOpKindNames.size(); ++k)
    by_kind[std::string(kOpKindNames[k])] = s.flops_by_kind[k];
  flops["by_kind"] = by_kind;
  j["flops"] = flops;
  j["collective_bytes"] = s.collective_bytes;
  json largest = json::array();
  for (uint32_t i : s.largest) {
    largest.push_back({{"id", i},
                       {"name", w.tensors[i].name},
                       {"kind", kTensorKindNames[static_cast<size_t>(w.tensors[i].kind)]},
                       {"bytes", w.tensors[i].bytes}});
  }
  j["largest"] = largest;
  return j;
}

}  // namespace tierflow::traces
