#include "core/workload_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <thread>

#include "core/huge_pages.h"
#include "core/json_reader.h"
#include "core/workload_layout.h"

namespace tierflow {
namespace {

constexpr std::array<std::string_view, 5> kTopKeys = {"format", "name", "meta", "tensors", "ops"};
constexpr std::array<std::string_view, 7> kTensorKeys = {"id",    "name",   "kind", "dtype",
                                                         "bytes", "origin", "layer"};
constexpr std::array<std::string_view, 12> kOpKeys = {
    "id",     "name",    "kind",    "dtype",     "flops", "bytes",
    "inputs", "outputs", "updates", "workspace", "layer", "collective_bytes"};

template <size_t N>
size_t read_enum(JsonReader& r, std::string_view what,
                 const std::array<std::string_view, N>& names) {
  const size_t at = r.offset();
  const std::string_view v = r.read_string_view(what);
  if (auto i = index_of(names, v)) return *i;
  std::vector<std::string> choices(names.begin(), names.end());
  r.fail_at(at, "{}: '{}' is not one of: {}{}", what, v, fmt::join(choices, ", "),
            did_you_mean(v, choices));
}

template <size_t N>
[[noreturn]] void unknown_key(JsonReader& r, size_t at, std::string_view key,
                              std::string_view where, const std::array<std::string_view, N>& keys) {
  r.fail_at(at, "unknown key '{}' in {}{}", key, where, did_you_mean(key, keys));
}

/// Index of `key` in `keys`, trying `hint` first (files we write list keys in order).
template <size_t N>
size_t key_index(std::string_view key, const std::array<std::string_view, N>& keys, size_t& hint) {
  if (hint < N && keys[hint] == key) return hint++;
  for (size_t i = 0; i < N; ++i) {
    if (keys[i] == key) {
      hint = i + 1;
      return i;
    }
  }
  return N;
}

/// Reads an id list into `ids` with one allocation (`buffer` is reused between lists).
void read_ids(JsonReader& r, std::string_view what, std::vector<uint32_t>& ids,
              std::vector<uint32_t>& buffer) {
  buffer.clear();
  r.begin_array(what);
  while (r.next_item()) {
    buffer.push_back(static_cast<uint32_t>(r.read_uint(what, UINT32_MAX - 1)));
  }
  ids.assign(buffer.begin(), buffer.end());
}

/// Reserves `n` elements, in huge pages when that is large.
template <class T>
void reserve_large(std::vector<T>& v, size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), v.capacity() * sizeof(T));
}

/// Reads one tensor object with the general reader (any layout; every error), as tensor `i`.
void read_tensor(JsonReader& r, Tensor& t, size_t i, const WorkloadVerifier* prefetch) {
  const size_t obj = r.offset();
  uint32_t have = 0;  // bit per key of kTensorKeys
  size_t hint = 0;
  std::string_view key;
  r.begin_object("a tensor");
  while (r.next_key(key)) {
    const size_t k = key_index(key, kTensorKeys, hint);
    if (k < 32 && (have & (1U << k)) != 0) {
      r.fail_at(r.key_offset(), "duplicate key '{}' in tensor {}", key, i);
    }
    switch (k) {
      case 0: {  // id
        const size_t v = r.offset();
        const uint64_t id = r.read_uint("id", UINT32_MAX);
        if (id != i) {
          r.fail_at(v, "tensor id {} out of order: ids are 0, 1, 2, ... in order (expected {})", id,
                    i);
        }
        break;
      }
      case 1:
        t.name = r.read_string_view("name");
        if (prefetch != nullptr) prefetch->prefetch_tensor_name(t.name);
        break;
      case 2:
        t.kind = static_cast<TensorKind>(read_enum(r, "kind", kTensorKindNames));
        break;
      case 3:
        t.dtype = static_cast<Dtype>(read_enum(r, "dtype", kDtypeNames));
        break;
      case 4:
        t.bytes = r.read_uint("bytes", UINT64_MAX);
        break;
      case 5:  // origin
        if (r.peek() == JsonReader::Kind::kString) {
          const size_t v = r.offset();
          if (r.read_string_view("origin") != "external") {
            r.fail_at(v, "origin: expected \"external\" or an op id");
          }
          t.origin = kExternal;
        } else {
          t.origin = static_cast<uint32_t>(r.read_uint("origin", UINT32_MAX - 1));
        }
        break;
      case 6:
        t.layer = static_cast<int32_t>(r.read_int("layer", -1, INT32_MAX));
        break;
      default:
        unknown_key(r, r.key_offset(), key, fmt::format("tensor {}", i), kTensorKeys);
    }
    have |= 1U << k;
  }
  // id, name, kind, bytes, origin are required.
  for (size_t k : {0U, 1U, 2U, 4U, 5U}) {
    if ((have & (1U << k)) == 0) {
      r.fail_at(obj, "tensor {} is missing required key '{}'", i, kTensorKeys[k]);
    }
  }
}

/// Reads one op object with the general reader (any layout; every error), as op `o`.
void read_op(JsonReader& r, Op& op, size_t o, std::vector<uint32_t>& ids) {
  const size_t obj = r.offset();
  uint32_t have = 0;  // bit per key of kOpKeys
  size_t hint = 0;
  std::string_view key;
  r.begin_object("an op");
  while (r.next_key(key)) {
    const size_t k = key_index(key, kOpKeys, hint);
    if (k < 32 && (have & (1U << k)) != 0) {
      r.fail_at(r.key_offset(), "duplicate key '{}' in op {}", key, o);
    }
    switch (k) {
      case 0: {  // id
        const size_t v = r.offset();
        const uint64_t id = r.read_uint("id", UINT32_MAX);
        if (id != o) {
          r.fail_at(v, "op id {} out of order: ids are 0, 1, 2, ... in order (expected {})", id, o);
        }
        break;
      }
      case 1:
        op.name = r.read_string_view("name");
        break;
      case 2:
        op.kind = static_cast<OpKind>(read_enum(r, "kind", kOpKindNames));
        break;
      case 3:
        op.dtype = static_cast<Dtype>(read_enum(r, "dtype", kDtypeNames));
        break;
      case 4: {
        const size_t v = r.offset();
        op.flops = r.read_number("flops");
        if (op.flops < 0) r.fail_at(v, "flops: must not be negative");
        break;
      }
      case 5:
        op.bytes = r.read_uint("bytes", UINT64_MAX);
        break;
      case 6:
        read_ids(r, "inputs", op.inputs, ids);
        break;
      case 7:
        read_ids(r, "outputs", op.outputs, ids);
        break;
      case 8:
        read_ids(r, "updates", op.updates, ids);
        break;
      case 9:
        op.workspace = r.read_uint("workspace", kMaxTensorBytes);
        break;
      case 10:
        op.layer = static_cast<int32_t>(r.read_int("layer", -1, INT32_MAX));
        break;
      case 11:
        op.collective_bytes = r.read_uint("collective_bytes", UINT64_MAX);
        break;
      default:
        unknown_key(r, r.key_offset(), key, fmt::format("op {}", o), kOpKeys);
    }
    have |= 1U << k;
  }
  // id, name, kind, flops, bytes, inputs, outputs are required.
  for (size_t k : {0U, 1U, 2U, 4U, 5U, 6U, 7U}) {
    if ((have & (1U << k)) == 0) {
      r.fail_at(obj, "op {} is missing required key '{}'", o, kOpKeys[k]);
    }
  }
}

constexpr size_t kNoShortcut = std::string_view::npos;

/// Reads the `ops` array at `r`'s position into `ops`, the offset of each op object into
/// `at`; `each(o)` runs once op `o` is read. With `shortcuts`, an op in write_workload's
/// layout is read by read_op_line, any other by the general reader. Errors throw InputError.
/// Returns false, with part of the array read, when `stop` (may be null) is set or the array holds
/// more than `limit` ops; `ops` then never grew past `limit` elements.
template <class Each>
bool read_op_array(JsonReader& r, bool shortcuts, std::vector<Op>& ops, std::vector<size_t>& at,
                   size_t limit, const std::atomic<bool>* stop, const Each& each) {
  std::vector<uint32_t> ids;
  const std::string_view text = r.text();
  r.begin_array("ops");
  while (r.next_item()) {
    if (ops.size() == limit) return false;
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return false;
    const size_t obj = r.offset();
    at.push_back(obj);
    const size_t o = ops.size();
    Op& op = ops.emplace_back();
    if (const size_t end = shortcuts ? read_op_line(text, obj, o, op, ids) : kNoShortcut;
        end != kNoShortcut) {
      r.skip_to(end);
    } else {
      op = Op();
      read_op(r, op, o, ids);
    }
    each(o);
  }
  return true;
}

/// The `ops` array read on a second thread while the calling thread reads the tensors
/// before it, then checks the ops as they come. The thread starts where the layout puts
/// the array and appends to `w.ops`, never past the capacity it reserves (so that an op,
/// once published, stays where it is); the calling thread leaves `w.ops` alone but for
/// the published ops, and takes the result only if it meets "ops" at that very offset.
/// Otherwise it reads the array itself, so that errors and their order are those of
/// reading in one pass.
class OpsAhead {
 public:
  OpsAhead() = default;
  ~OpsAhead() { cancel(); }
  OpsAhead(const OpsAhead&) = delete;
  OpsAhead& operator=(const OpsAhead&) = delete;

  /// Starts reading the array that opens at `at` into `w.ops`, room for `count` ops.
  void start(const JsonReader& r, bool shortcuts, size_t at, size_t count, Workload& w) {
    at_ = at;
    started_ = true;
    thread_ = std::thread([this, text = r.text(), file = r.file(), shortcuts, count, &w] {
      bool ok = false;
      try {
        JsonReader reader(text, file);
        reader.seek(at_);
        reserve_large(w.ops, count);
        op_at_.reserve(count);
        // Published in batches: a waiting reader is woken once per batch, not per op.
        constexpr size_t kBatch = 1024;
        const auto publish = [&](size_t o) {
          if ((o + 1) % kBatch == 0) {
            progress_.store(uint64_t{o + 1} << 1, std::memory_order_release);
            progress_.notify_all();
          }
        };
        ok = read_op_array(reader, shortcuts, w.ops, op_at_, w.ops.capacity(), &stop_, publish);
        end_ = reader.offset();
      } catch (...) {
        // The calling thread reads the array again and reports what went wrong.
        ok = false;
      }
      ok_ = ok;
      progress_.store(uint64_t{w.ops.size()} << 1 | 1U, std::memory_order_release);
      progress_.notify_all();
    });
  }
  [[nodiscard]] bool started() const { return started_; }

  /// When the array opens at `at`: calls `each(o)` for every op as it is published, then
  /// joins the thread; true when it read the whole array. Otherwise (the layout misled)
  /// stops the thread and returns false.
  template <class Each>
  bool follow(size_t at, const Each& each) {
    if (!thread_.joinable()) return false;
    if (at != at_) {
      cancel();
      return false;
    }
    size_t done = 0;
    while (true) {
      const uint64_t progress = progress_.load(std::memory_order_acquire);
      const auto ready = static_cast<size_t>(progress >> 1);
      for (; done < ready; ++done) each(done, ready);
      if ((progress & 1U) != 0) break;
      progress_.wait(progress, std::memory_order_acquire);
    }
    thread_.join();
    return ok_;
  }

  /// Stops the thread if it runs (a failing read need not wait for the rest of the ops)
  /// and joins it.
  void cancel() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }
  /// After follow(): where the array ends and the offset of each op.
  [[nodiscard]] size_t end() const { return end_; }
  std::vector<size_t>& op_at() { return op_at_; }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  /// Ops published (the thread wrote them and leaves them alone) times 2, plus 1 once the
  /// thread is done.
  std::atomic<uint64_t> progress_{0};
  size_t at_ = 0;
  size_t end_ = 0;
  bool started_ = false;
  bool ok_ = false;
  std::vector<size_t> op_at_;
};

class Reader {
 public:
  Reader(JsonReader& r, const WorkloadReadOptions& options) : r_(r), options_(options) {}

  Workload read() {
    Workload w;
    // The reader needs to know only whether there is an issue: verify_workload names it.
    WorkloadVerifier verifier(w, /*messages=*/false);
    verifier_ = &verifier;
    // Declared after `w` and `verifier`: its thread is joined before they go away.
    OpsAhead ahead;
    const size_t top = r_.offset();
    r_.begin_object("the workload");
    std::string_view key;
    bool has_format = false, has_name = false, has_tensors = false, has_ops = false;
    std::vector<std::string> seen_keys;
    while (true) {
      if (!r_.next_key(key)) break;
      const size_t at = r_.key_offset();
      if (std::find(seen_keys.begin(), seen_keys.end(), key) != seen_keys.end()) {
        r_.fail_at(at, "duplicate key '{}' in the workload", key);
      }
      seen_keys.emplace_back(key);
      if (key == "format") {
        const size_t v = r_.offset();
        const std::string_view f = r_.read_string_view("format");
        if (f != kWorkloadFormat) {
          r_.fail_at(v, "unsupported format '{}': this tierflow reads '{}'", f, kWorkloadFormat);
        }
        has_format = true;
      } else if (key == "name") {
        w.name = r_.read_string("name");
        has_name = true;
      } else if (key == "meta") {
        read_meta(r_, w.meta);
      } else if (key == "tensors") {
        if (!has_ops) start_ahead(w, ahead, verifier);
        read_tensors(w);
        has_tensors = true;
      } else if (key == "ops") {
        ops_at_key_ = at;
        // Ops are checked as they are read only when every tensor is already there.
        if (!has_tensors) checking_ = false;
        read_ops(w, ahead);
        has_ops = true;
      } else {
        unknown_key(r_, at, key, "the workload", kTopKeys);
      }
    }
    ahead.cancel();  // nothing writes `w` from here on
    for (auto [ok, k] : {std::pair{has_format, "format"},
                         {has_name, "name"},
                         {has_tensors, "tensors"},
                         {has_ops, "ops"}}) {
      if (!ok) r_.fail_at(top, "the workload is missing required key '{}'", k);
    }
    // A workload without ops has nothing to plan: every figure of it would be 0.
    if (w.ops.empty()) r_.fail_at(ops_at_key_, "the workload has no ops: nothing to plan or run");
    if (auto issue = finish_checks(w, verifier)) report(*issue);
    return w;
  }

 private:
  /// Sizes what the tensors and ops fill from the layout, and starts reading the ops on a
  /// second thread when there are enough of them.
  void start_ahead(Workload& w, OpsAhead& ahead, WorkloadVerifier& verifier) {
    const size_t at = r_.offset();
    const WorkloadLayout layout = guess_workload_layout(r_.text(), at);
    if (layout.ops_at == std::string_view::npos) return;
    // The counts size vectors: a line is never shorter than 16 bytes.
    const size_t tensors = std::min(layout.tensors, (layout.ops_at - at) / 16 + 1);
    const size_t ops = std::min(layout.ops, (r_.text().size() - layout.ops_at) / 16 + 1);
    reserve_large(w.tensors, tensors);
    tensor_at_.reserve(tensors);
    verifier.reserve(tensors, ops);
    if (r_.text().size() - at < options_.parallel_min_bytes) return;
    if (ops > 0) ahead.start(r_, options_.shortcuts, layout.ops_at, ops, w);
  }

  /// The checks left after reading; verify_workload names the issue when one was found.
  std::optional<WorkloadIssue> finish_checks(const Workload& w, WorkloadVerifier& verifier) {
    if (checking_) {
      for (uint32_t i = 0; i < w.tensors.size(); ++i) {
        if (verifier.check_origin(i)) return verify_workload(w);
      }
      if (!verifier.check_produced()) return std::nullopt;
    }
    return verify_workload(w);
  }

  /// Reads the `tensors` array; each tensor takes the shortcut when it is in
  /// write_workload's layout, the general reader otherwise. Each is checked one tensor late
  /// (see read_op_array).
  void read_tensors(Workload& w) {
    const std::string_view text = r_.text();
    WorkloadVerifier* const verifier = checking_ ? verifier_ : nullptr;
    r_.begin_array("tensors");
    while (r_.next_item()) {
      const size_t obj = r_.offset();
      tensor_at_.push_back(obj);
      const size_t i = w.tensors.size();
      Tensor& t = w.tensors.emplace_back();
      if (const size_t end = options_.shortcuts ? read_tensor_line(text, obj, i, t) : kNoShortcut;
          end != kNoShortcut) {
        r_.skip_to(end);
        if (verifier != nullptr) verifier->prefetch_tensor_name(t.name);
      } else {
        t = Tensor();
        read_tensor(r_, t, i, verifier);
      }
      if (i > 0) check_tensor(static_cast<uint32_t>(i - 1));
    }
    if (!w.tensors.empty()) check_tensor(static_cast<uint32_t>(w.tensors.size() - 1));
  }

  void check_tensor(uint32_t i) {
    if (checking_ && verifier_->check_tensor(i)) checking_ = false;
  }

  /// Reads the `ops` array, or takes it from `ahead` and checks each op as it comes. An
  /// op is checked a few ops after its name's slot in the verifier's index was prefetched.
  void read_ops(Workload& w, OpsAhead& ahead) {
    const size_t at = r_.offset();
    constexpr size_t kAhead = 8;  // ops between the prefetch of a name slot and its use
    size_t prefetched = 0;
    const auto check_ready = [&](size_t o, size_t ready) {
      if (!checking_) return;
      for (const size_t until = std::min(ready, o + kAhead); prefetched < until; ++prefetched) {
        verifier_->prefetch_op_name(w.ops[prefetched].name);
      }
      if (verifier_->check_op(static_cast<uint32_t>(o))) checking_ = false;
    };
    if (ahead.started()) {
      if (ahead.follow(at, check_ready)) {
        r_.skip_to(ahead.end());
        op_at_ = std::move(ahead.op_at());
        return;
      }
      // The layout was not what it seemed: what the thread read and checked is dropped,
      // and the whole workload is verified at the end.
      w.ops.clear();
      checking_ = false;
    }
    const auto check_late = [&](size_t o) {
      if (!checking_) return;
      verifier_->prefetch_op_name(w.ops[o].name);
      if (o > 0 && verifier_->check_op(static_cast<uint32_t>(o - 1))) checking_ = false;
    };
    read_op_array(r_, options_.shortcuts, w.ops, op_at_, SIZE_MAX, nullptr, check_late);
    if (checking_ && !w.ops.empty() &&
        verifier_->check_op(static_cast<uint32_t>(w.ops.size() - 1))) {
      checking_ = false;
    }
  }

  // Re-reads the faulty object to find the exact position of the field or item.
  [[noreturn]] void report(const WorkloadIssue& issue) {
    const size_t obj = issue.on_op ? op_at_[issue.index] : tensor_at_[issue.index];
    size_t at = obj;
    if (!issue.field.empty()) {
      r_.seek(obj);
      r_.begin_object("");
      std::string_view key;
      while (true) {
        if (!r_.next_key(key)) break;
        if (key == issue.field) {
          at = r_.offset();
          if (issue.item >= 0) {
            r_.begin_array("");
            for (int i = 0; i <= issue.item && r_.next_item(); ++i) {
              at = r_.offset();
              if (i < issue.item) r_.skip_value();
            }
          }
          break;
        }
        r_.skip_value();
      }
    }
    r_.fail_at(at, "{} {}: {}", issue.on_op ? "op" : "tensor", issue.index, issue.message);
  }

  JsonReader& r_;
  WorkloadReadOptions options_;
  WorkloadVerifier* verifier_ = nullptr;
  bool checking_ = true;  ///< no issue yet, and every object read so far was checked
  std::vector<size_t> tensor_at_;
  std::vector<size_t> op_at_;
  size_t ops_at_key_ = 0;  ///< where the `ops` key is
};

}  // namespace

void read_meta(JsonReader& r, Meta& meta) {
  r.begin_object("meta");
  std::string key;
  while (r.next_key(key)) {
    if (meta.count(key) != 0) r.fail_at(r.key_offset(), "duplicate key '{}' in meta", key);
    const size_t at = r.offset();
    std::string value = r.read_scalar_json("a meta value");
    // The tensor parallelism a workload is a shard of decides where its collectives run
    // (hw::workload_tp): a whole number of devices, as trace gen writes it.
    if (key == "tp") {
      int64_t tp = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), tp);
      if (ec != std::errc() || end != value.data() + value.size() || tp < 1 || tp > kMaxMetaTp) {
        r.fail_at(at,
                  "meta 'tp' (the tensor parallelism this workload is a shard of) must be a "
                  "whole number from 1 to {}, got {}",
                  kMaxMetaTp, value);
      }
    }
    // A plan's bounds (the planner's lower bounds, which reports print): whole numbers of
    // picoseconds or bytes.
    if (key.starts_with("bounds_")) {
      uint64_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size()) {
        r.fail_at(at, "meta '{}' (a lower bound) must be a whole number of {} from 0, got {}", key,
                  key.ends_with("_ps") ? "picoseconds" : "bytes", value);
      }
    }
    meta[key] = std::move(value);
  }
}

Workload read_workload_from(JsonReader& r) {
  Workload w = Reader(r, WorkloadReadOptions{}).read();
  return w;
}

Workload read_workload_text(std::string_view text, const std::string& name,
                            const WorkloadReadOptions& options) {
  JsonReader r(text, name);
  Workload w = Reader(r, options).read();
  r.expect_end();
  return w;
}

Workload read_workload(const std::string& path) {
  const FileText text(path);
  return read_workload_text(text.view(), path);
}

}  // namespace tierflow
