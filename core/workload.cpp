#include "core/workload.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "core/diagnostics.h"
#include "core/huge_pages.h"

namespace tierflow {

uint32_t Workload::add_tensor(Tensor t) {
  tensors.push_back(std::move(t));
  return static_cast<uint32_t>(tensors.size() - 1);
}

uint32_t Workload::add_op(Op op) {
  const auto id = static_cast<uint32_t>(ops.size());
  for (uint32_t t : op.outputs) {
    TF_ASSERT(t < tensors.size(), "op '{}' outputs unknown tensor {}", op.name, t);
    tensors[t].origin = id;
  }
  ops.push_back(std::move(op));
  return id;
}

namespace {

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

Graph dependency_graph(const Workload& w) {
  Graph g(w.ops.size());
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    auto add_reads = [&](const std::vector<uint32_t>& ids) {
      for (uint32_t t : ids) {
        if (t < w.tensors.size() && w.tensors[t].origin != kExternal &&
            w.tensors[t].origin < w.ops.size() && w.tensors[t].origin != o) {
          boost::add_edge(w.tensors[t].origin, o, g);
        }
      }
    };
    add_reads(w.ops[o].inputs);
    add_reads(w.ops[o].updates);
  }
  return g;
}

/// Records one cycle found by depth-first search.
struct CycleFinder : boost::default_dfs_visitor {
  std::vector<size_t>* parent;
  std::vector<uint32_t>* cycle;
  void tree_edge(Graph::edge_descriptor e, const Graph& g) const {
    (*parent)[boost::target(e, g)] = boost::source(e, g);
  }
  void back_edge(Graph::edge_descriptor e, const Graph& g) const {
    if (!cycle->empty()) return;
    const size_t from = boost::source(e, g);
    const size_t to = boost::target(e, g);
    for (size_t v = from; v != to; v = (*parent)[v]) cycle->push_back(static_cast<uint32_t>(v));
    cycle->push_back(static_cast<uint32_t>(to));
    std::reverse(cycle->begin(), cycle->end());
  }
};

}  // namespace

std::optional<std::vector<uint32_t>> topological_order(const Workload& w,
                                                       std::vector<uint32_t>* cycle) {
  const Graph g = dependency_graph(w);
  std::vector<size_t> reversed;
  try {
    boost::topological_sort(g, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    if (cycle != nullptr) {
      cycle->clear();
      std::vector<size_t> parent(w.ops.size(), SIZE_MAX);
      boost::depth_first_search(g, boost::visitor(CycleFinder{{}, &parent, cycle}));
    }
    return std::nullopt;
  }
  std::vector<uint32_t> order(reversed.rbegin(), reversed.rend());
  return std::vector<uint32_t>(order.begin(), order.end());
}

/// Names seen so far, for duplicate detection over a million names: open addressing with
/// linear probing (std::unordered_map was the verifier's hot spot). A slot is 8 bytes,
/// the upper half of the name's hash beside its id + 1 (0 = empty, so that fresh zeroed
/// pages are an empty table); a probe touches a stored name only on a hash match. The
/// table lives in huge pages, so a probe costs a cache miss but rarely a TLB miss. Sized
/// once by reserve() when the count is known; otherwise it doubles at half full.
class WorkloadVerifier::NameIndex {
 public:
  NameIndex() { allocate(kMinCapacity); }

  /// Makes room for `names` names, so that the table never grows; before the first insert.
  void reserve(size_t names) {
    if (used_ > 0) return;
    size_t want = kMinCapacity;
    while (want < 2 * names) want *= 2;
    if (want > capacity_) allocate(want);
  }

  /// Starts loading the slot where `name` would go: a miss in this table is the cost of
  /// the verifier, and the reader has other work to do meanwhile.
  void prefetch(std::string_view name) const { __builtin_prefetch(&slots_[home(hash(name))]); }

  /// Inserts `name` with `id`; returns the id already stored when the name is a duplicate.
  /// `name_of(id)` gives the name of a stored id.
  template <class NameOf>
  std::optional<uint32_t> insert(std::string_view name, uint32_t id, const NameOf& name_of) {
    const uint64_t h = hash(name);
    for (size_t i = home(h);; i = (i + 1) & (capacity_ - 1)) {
      Slot& s = slots_[i];
      if (s.id_plus_1 == 0) {
        s = Slot{tag(h), id + 1};
        if (++used_ * 2 > capacity_) grow(name_of);
        return std::nullopt;
      }
      if (s.tag == tag(h) && name_of(s.id_plus_1 - 1) == name) return s.id_plus_1 - 1;
    }
  }

 private:
  static constexpr size_t kMinCapacity = 1024;
  struct Slot {
    uint32_t tag;
    uint32_t id_plus_1;
  };
  /// A 64-bit hash eight bytes at a time (a byte-wise FNV-1a cost as much as the misses).
  static uint64_t hash(std::string_view name) {
    constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
    uint64_t h = name.size() * kMul;
    const char* p = name.data();
    size_t n = name.size();
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t word = 0;
      std::memcpy(&word, p, 8);
      h = (h ^ word) * kMul;
      h ^= h >> 32;
    }
    if (n > 0) {
      uint64_t word = 0;
      std::memcpy(&word, p, n);
      h = (h ^ word) * kMul;
      h ^= h >> 32;
    }
    // MurmurHash3's finalizer: every input bit reaches the low bits that pick the slot.
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 33;
    return h;
  }
  static uint32_t tag(uint64_t h) { return static_cast<uint32_t>(h >> 32); }
  [[nodiscard]] size_t home(uint64_t h) const { return h & (capacity_ - 1); }
  void allocate(size_t capacity) {
    pages_ = ZeroedPages(capacity * sizeof(Slot));
    slots_ = static_cast<Slot*>(pages_.data());
    capacity_ = capacity;
    used_ = 0;
  }
  /// Doubles the table. A slot keeps only half of the hash, so names are hashed again.
  template <class NameOf>
  void grow(const NameOf& name_of) {
    ZeroedPages old = std::move(pages_);
    const auto* old_slots = static_cast<const Slot*>(old.data());
    const size_t old_capacity = capacity_;
    allocate(capacity_ * 2);
    for (size_t k = 0; k < old_capacity; ++k) {
      if (old_slots[k].id_plus_1 == 0) continue;
      size_t i = home(hash(name_of(old_slots[k].id_plus_1 - 1)));
      while (slots_[i].id_plus_1 != 0) i = (i + 1) & (capacity_ - 1);
      slots_[i] = old_slots[k];
      ++used_;
    }
  }
  ZeroedPages pages_;
  Slot* slots_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

WorkloadVerifier::WorkloadVerifier(const Workload& w, bool messages)
    : w_(w),
      messages_(messages),
      tensor_names_(std::make_unique<NameIndex>()),
      op_names_(std::make_unique<NameIndex>()) {}

WorkloadVerifier::~WorkloadVerifier() = default;

namespace {
WorkloadIssue tensor_issue(uint32_t i, std::string field, std::string msg) {
  return WorkloadIssue{false, i, std::move(field), -1, std::move(msg)};
}
WorkloadIssue op_issue(uint32_t i, std::string field, int item, std::string msg) {
  return WorkloadIssue{true, i, std::move(field), item, std::move(msg)};
}
}  // namespace

void WorkloadVerifier::prefetch_tensor_name(std::string_view name) const {
  tensor_names_->prefetch(name);
}

void WorkloadVerifier::prefetch_op_name(std::string_view name) const {
  op_names_->prefetch(name);
}

std::optional<WorkloadIssue> WorkloadVerifier::check_tensor(uint32_t i) {
  const Tensor& t = w_.tensors[i];
  if (t.name.empty()) return tensor_issue(i, "name", "a tensor name must not be empty");
  const auto name_of = [this](uint32_t k) { return std::string_view(w_.tensors[k].name); };
  if (auto other = tensor_names_->insert(t.name, i, name_of)) {
    return tensor_issue(i, "name",
                        fmt::format("duplicate tensor name '{}' (also tensor {})", t.name, *other));
  }
  if (t.bytes == 0) return tensor_issue(i, "bytes", "a tensor must have at least 1 byte");
  if (auto s = size_issue(t)) return tensor_issue(i, std::move(s->field), std::move(s->message));
  return std::nullopt;
}

std::optional<WorkloadIssue> WorkloadVerifier::check_origin(uint32_t i) const {
  const uint32_t origin = w_.tensors[i].origin;
  const auto no = static_cast<uint32_t>(w_.ops.size());
  if (origin != kExternal && origin >= no) {
    return tensor_issue(i, "origin",
                        fmt::format("origin op {} does not exist (the workload "
                                    "has {} ops)",
                                    origin, no));
  }
  return std::nullopt;
}

void WorkloadVerifier::reserve(size_t tensors, size_t ops) {
  tensor_names_->reserve(tensors);
  op_names_->reserve(ops);
}

std::optional<WorkloadIssue> WorkloadVerifier::check_op(uint32_t o) {
  if (auto issue = check_op_name(o)) return issue;
  return check_op_tensors(o);
}

std::optional<WorkloadIssue> WorkloadVerifier::check_op_name(uint32_t o) {
  const Workload& w = w_;
  const Op& op = w.ops[o];
  if (op.name.empty()) return op_issue(o, "name", -1, "an op name must not be empty");
  const auto name_of = [&w](uint32_t k) { return std::string_view(w.ops[k].name); };
  if (auto other = op_names_->insert(op.name, o, name_of)) {
    return op_issue(o, "name", -1,
                    fmt::format("duplicate op name '{}' (also op {})", op.name, *other));
  }
  if (!std::isfinite(op.flops) || op.flops < 0) {
    return op_issue(o, "flops", -1, "flops must be a finite number >= 0");
  }
  if (auto s = size_issue(op)) return op_issue(o, std::move(s->field), -1, std::move(s->message));
  return std::nullopt;
}

std::optional<WorkloadIssue> WorkloadVerifier::check_op_tensors(uint32_t o) {
  const Workload& w = w_;
  const auto nt = static_cast<uint32_t>(w.tensors.size());
  if (seen_by_.size() != nt) {
    listed_.assign(nt, false);
    seen_by_.assign(nt, kExternal);
  }
  const Op& op = w.ops[o];
  const std::pair<const char*, const std::vector<uint32_t>*> lists[] = {
      {"inputs", &op.inputs}, {"outputs", &op.outputs}, {"updates", &op.updates}};
  for (const auto& [field, ids] : lists) {
    const bool is_output = std::string_view(field) == "outputs";
    for (size_t k = 0; k < ids->size(); ++k) {
      const uint32_t t = (*ids)[k];
      const int item = static_cast<int>(k);
      if (t >= nt) {
        return op_issue(
            o, field, item,
            fmt::format("tensor {} does not exist (the workload has {} tensors)", t, nt));
      }
      if (seen_by_[t] == o) {
        return op_issue(
            o, field, item,
            fmt::format("tensor {} '{}' appears twice in op '{}'", t, w.tensors[t].name, op.name));
      }
      seen_by_[t] = o;
      const uint32_t origin = w.tensors[t].origin;
      if (is_output) {
        if (origin != o) {
          return op_issue(o, field, item,
                          origin == kExternal
                              ? fmt::format("tensor {} '{}' is external and cannot be an "
                                            "output; list it under 'updates' to modify it",
                                            t, w.tensors[t].name)
                              : fmt::format("tensor {} '{}' is produced by op {}, not by this "
                                            "op",
                                            t, w.tensors[t].name, origin));
        }
        listed_[t] = true;
      } else if (origin != kExternal && origin >= o) {
        if (origin == o) {
          return op_issue(o, field, item,
                          fmt::format("op '{}' reads tensor {} '{}', which it produces itself",
                                      op.name, t, w.tensors[t].name));
        }
        std::vector<uint32_t> cycle;
        std::string why = "; move the op after its producer";
        if (messages_ && !topological_order(w, &cycle) &&
            std::find(cycle.begin(), cycle.end(), o) != cycle.end()) {
          std::string path;
          for (uint32_t c : cycle) path += fmt::format("{} -> ", c);
          why = fmt::format("; the ops form a cycle: {}{}", path, cycle.front());
        }
        return op_issue(o, field, item,
                        fmt::format("tensor {} '{}' is read before it is produced (by op {}){}", t,
                                    w.tensors[t].name, origin, why));
      }
    }
  }
  return std::nullopt;
}

std::optional<WorkloadIssue> WorkloadVerifier::check_produced() const {
  for (uint32_t i = 0; i < w_.tensors.size(); ++i) {
    // With no ops checked, listed_ is empty and nothing is listed.
    const bool listed = i < listed_.size() && listed_[i];
    if (w_.tensors[i].origin != kExternal && !listed) {
      return tensor_issue(i, "origin",
                          fmt::format("origin is op {}, but that op does not list tensor {} in "
                                      "its outputs",
                                      w_.tensors[i].origin, i));
    }
  }
  return std::nullopt;
}

// Bounded so that no time or sum computed from them overflows (docs/cli.md, "Limits").
std::optional<SizeIssue> size_issue(const Tensor& t) {
  if (t.bytes <= kMaxTensorBytes) return std::nullopt;
  return SizeIssue{"bytes", fmt::format("{} bytes is absurd for one tensor (limit 2^50 = 1PiB)", t.bytes)};
}

std::optional<SizeIssue> size_issue(const Op& op) {
  if (!(op.flops <= kMaxOpFlops)) {  // NaN too
    return SizeIssue{
        "flops", fmt::format("{} FLOPs is absurd for one op (limit {:g})", op.flops, kMaxOpFlops)};
  }
  for (const auto& [field, bytes] : {std::pair{"bytes", op.bytes}, {"collective_bytes", op.collective_bytes}}) {
    if (bytes > kMaxTensorBytes) {
      return SizeIssue{field, fmt::format("{} bytes is absurd for one op (limit 2^50 = 1PiB)", bytes)};
    }
  }
  return std::nullopt;
}

std::optional<WorkloadIssue> verify_workload(const Workload& w) {
  WorkloadVerifier v(w);
  const auto nt = static_cast<uint32_t>(w.tensors.size());
  const auto no = static_cast<uint32_t>(w.ops.size());
  v.reserve(nt, no);
  for (uint32_t i = 0; i < nt; ++i) {
    if (auto issue = v.check_tensor(i)) return issue;
    if (auto issue = v.check_origin(i)) return issue;
  }
  for (uint32_t o = 0; o < no; ++o) {
    if (auto issue = v.check_op(o)) return issue;
  }
  return v.check_produced();
}

WorkloadTotals totals(const Workload& w) {
  WorkloadTotals t;
  for (const Op& op : w.ops) t.flops += op.flops;
  for (const Tensor& x : w.tensors) {
    t.bytes_by_kind[static_cast<size_t>(x.kind)] += x.bytes;
    t.count_by_kind[static_cast<size_t>(x.kind)] += 1;
  }
  return t;
}

std::optional<Dtype> dequantized_dtype(const Workload& w, const Op& op) {
  const int op_bits = kDtypeBits[static_cast<size_t>(op.dtype)];
  std::optional<Dtype> narrowest;
  for (uint32_t t : op.inputs) {
    const Tensor& x = w.tensors[t];
    const int bits = kDtypeBits[static_cast<size_t>(x.dtype)];
    if (x.kind != TensorKind::kWeight || bits > 8 || bits >= op_bits) continue;
    if (!narrowest || bits < kDtypeBits[static_cast<size_t>(*narrowest)]) narrowest = x.dtype;
  }
  return narrowest;
}

}  // namespace tierflow
