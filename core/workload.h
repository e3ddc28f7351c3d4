// The operator DAG of one step on one device: ops with FLOPs and bytes, tensors with
// sizes and kinds. On disk: JSON `tierflow.workload/1` (docs/formats.md).
//
// Glossary
//   external  a tensor that exists before the step (weights, past KV, optimizer state,
//             inputs); otherwise its origin is the op that produces it.
//   update    an op reads a tensor and modifies it in place (KV append, optimizer step).
//   order     the op list is a topological order and the default execution order.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kinds.h"

namespace tierflow {

enum class TensorKind { kWeight, kActivation, kKv, kGrad, kOptimizerState, kInput, kOutput };
inline constexpr std::array<std::string_view, 7> kTensorKindNames = {
    "weight", "activation", "kv", "grad", "optimizer_state", "input", "output"};

inline constexpr uint32_t kExternal = UINT32_MAX;  ///< origin of an external tensor
/// The largest byte count a workload may give a tensor or an op's traffic (1 PiB), and the
/// most FLOPs one op may do (1e21): far above any real model, low enough that the times and
/// sums computed from them cannot overflow. docs/cli.md, "Limits".
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 50;
inline constexpr double kMaxOpFlops = 1e21;

struct Tensor {
  std::string name;
  uint64_t bytes = 0;
  TensorKind kind = TensorKind::kActivation;
  Dtype dtype = Dtype::kBf16;
  uint32_t origin = kExternal;  ///< producing op, or kExternal
  int32_t layer = -1;
};

struct Op {
  std::string name;
  OpKind kind = OpKind::kOther;
  Dtype dtype = Dtype::kBf16;
  double flops = 0;
  uint64_t bytes = 0;  ///< device-memory traffic for the roofline
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs;
  std::vector<uint32_t> updates;
  uint64_t workspace = 0;
  int32_t layer = -1;
  uint64_t collective_bytes = 0;
};

/// Provenance values of `meta`: strings, numbers or booleans, kept as JSON text.
using Meta = std::map<std::string, std::string>;

struct Workload {
  std::string name;
  Meta meta;  ///< value text as it appears in JSON (strings quoted)
  std::vector<Tensor> tensors;
  std::vector<Op> ops;

  uint32_t add_tensor(Tensor t);
  uint32_t add_op(Op op);  ///< sets `origin` of its outputs
};

/// A rule of docs/formats.md that a workload breaks: where (a tensor or op, a field,
/// an item of a list field) and why.
struct WorkloadIssue {
  bool on_op = false;
  uint32_t index = 0;
  std::string field;  ///< JSON key, e.g. "inputs"; empty = the object itself
  int item = -1;      ///< index within a list field
  std::string message;
};

/// Checks every rule of the format; the first broken one, in document order.
std::optional<WorkloadIssue> verify_workload(const Workload& w);

/// A size above the format's limits (kMaxTensorBytes, kMaxOpFlops): the field and why. The
/// verifier reports it at the field; the generators check what they built with it.
struct SizeIssue {
  std::string field;
  std::string message;
};
std::optional<SizeIssue> size_issue(const Tensor& t);
std::optional<SizeIssue> size_issue(const Op& op);

/// The rules of verify_workload one tensor or op at a time, so that a reader can check
/// each while it is still in cache: tensors 0, 1, 2, ... (`w` may grow between calls),
/// then ops 0, 1, 2, ... once every tensor is in `w`, then the origins and
/// `check_produced` once every op is. No issue means the workload verifies; after an
/// issue, stop and call verify_workload for the one to report (checked out of its order,
/// an op cannot yet name a cycle through later ops).
class WorkloadVerifier {
 public:
  /// With `messages` false, no check looks at ops after the one it checks (another thread
  /// may still be adding them), so an issue's message leaves out what needs them (the
  /// cycle behind a tensor read before it is produced): for readers that only need to know
  /// whether there is an issue and call verify_workload for the one to report.
  explicit WorkloadVerifier(const Workload& w, bool messages = true);
  ~WorkloadVerifier();
  WorkloadVerifier(const WorkloadVerifier&) = delete;
  WorkloadVerifier& operator=(const WorkloadVerifier&) = delete;

  /// Makes room for this many tensor and op names (optional; before the first check).
  void reserve(size_t tensors, size_t ops);
  /// Hints that the next tensor (op) checked is named `name`, to load its name slot early.
  void prefetch_tensor_name(std::string_view name) const;
  void prefetch_op_name(std::string_view name) const;
  /// Name and size of tensor `i`.
  std::optional<WorkloadIssue> check_tensor(uint32_t i);
  /// The origin of tensor `i` names an existing op.
  [[nodiscard]] std::optional<WorkloadIssue> check_origin(uint32_t i) const;
  /// Name, FLOPs and tensor lists of op `o`.
  std::optional<WorkloadIssue> check_op(uint32_t o);
  /// Every produced tensor is listed in its producer's outputs.
  [[nodiscard]] std::optional<WorkloadIssue> check_produced() const;

 private:
  class NameIndex;
  std::optional<WorkloadIssue> check_op_name(uint32_t o);     ///< name and FLOPs
  std::optional<WorkloadIssue> check_op_tensors(uint32_t o);  ///< tensor lists
  const Workload& w_;
  bool messages_ = true;
  std::unique_ptr<NameIndex> tensor_names_, op_names_;
  std::vector<bool> listed_;
  std::vector<uint32_t> seen_by_;  ///< the last op that named each tensor
};

/// Sum of op FLOPs, tensor bytes by kind, and similar figures for `trace info`.
struct WorkloadTotals {
  double flops = 0;
  std::array<uint64_t, kTensorKindNames.size()> bytes_by_kind{};
  std::array<uint64_t, kTensorKindNames.size()> count_by_kind{};
};
WorkloadTotals totals(const Workload& w);

/// The dtype an op dequantizes its weights from (weight-only quantization): the narrowest
/// dtype of 8 bits or fewer among its `weight` inputs that is narrower than the op's own
/// dtype; nullopt when it reads no such weight (an op computing in fp8 on fp8 weights).
std::optional<Dtype> dequantized_dtype(const Workload& w, const Op& op);

/// Ops topologically sorted by their tensor dependencies using Boost.Graph; nullopt when
/// the dependencies have a cycle (then `cycle` lists op ids along one cycle).
std::optional<std::vector<uint32_t>> topological_order(const Workload& w,
                                                       std::vector<uint32_t>* cycle = nullptr);

}  // namespace tierflow
