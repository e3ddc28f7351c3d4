#include "core/workload_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "core/json_reader.h"

namespace tierflow {
namespace {

constexpr std::array<std::string_view, 5> kTopKeys = {"format", "name", "meta", "tensors",
                                                      "ops"};
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
size_t key_index(std::string_view key, const std::array<std::string_view, N>& keys,
                 size_t& hint) {
  if (hint < N && keys[hint] == key) return hint++;
  for (size_t i = 0; i < N; ++i) {
    if (keys[i] == key) {
      hint = i + 1;
      return i;
    }
  }
  return N;
}

class Reader {
 public:
  explicit Reader(JsonReader& r) : r_(r) {}

  Workload read() {
    Workload w;
    WorkloadVerifier verifier(w);
    verifier_ = &verifier;
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
        read_tensors(w);
        has_tensors = true;
      } else if (key == "ops") {
        // Ops are checked as they are read only when every tensor is already there.
        if (!has_tensors) checking_ = false;
        read_ops(w);
        has_ops = true;
      } else {
        unknown_key(r_, at, key, "the workload", kTopKeys);
      }
    }
    for (auto [ok, k] : {std::pair{has_format, "format"},
                         {has_name, "name"},
                         {has_tensors, "tensors"},
                         {has_ops, "ops"}}) {
      if (!ok) r_.fail_at(top, "the workload is missing required key '{}'", k);
    }
    if (auto issue = finish_checks(w, verifier)) report(*issue);
    return w;
  }

 private:
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

  /// Reads an id list into `ids` with one allocation.
  void read_ids(std::string_view what, std::vector<uint32_t>& ids) {
    ids_.clear();
    r_.begin_array(what);
    while (r_.next_item()) {
      ids_.push_back(static_cast<uint32_t>(r_.read_uint(what, UINT32_MAX - 1)));
    }
    ids.assign(ids_.begin(), ids_.end());
  }

  void read_tensors(Workload& w) {
    r_.begin_array("tensors");
    std::string_view key;
    while (r_.next_item()) {
      const size_t obj = r_.offset();
      tensor_at_.push_back(obj);
      Tensor t;
      uint32_t have = 0;  // bit per key of kTensorKeys
      size_t hint = 0;
      r_.begin_object("a tensor");
      while (r_.next_key(key)) {
        const size_t k = key_index(key, kTensorKeys, hint);
        if (k < 32 && (have & (1U << k)) != 0) {
          r_.fail_at(r_.key_offset(), "duplicate key '{}' in tensor {}", key, w.tensors.size());
        }
        switch (k) {
          case 0: {  // id
            const size_t v = r_.offset();
            const uint64_t id = r_.read_uint("id", UINT32_MAX);
            if (id != w.tensors.size()) {
              r_.fail_at(v,
                         "tensor id {} out of order: ids are 0, 1, 2, ... in order (expected {})",
                         id, w.tensors.size());
            }
            break;
          }
          case 1:
            t.name = r_.read_string_view("name");
            if (checking_) verifier_->prefetch_tensor_name(t.name);
            break;
          case 2:
            t.kind = static_cast<TensorKind>(read_enum(r_, "kind", kTensorKindNames));
            break;
          case 3:
            t.dtype = static_cast<Dtype>(read_enum(r_, "dtype", kDtypeNames));
            break;
          case 4:
            t.bytes = r_.read_uint("bytes", UINT64_MAX);
            break;
          case 5:  // origin
            if (r_.peek() == JsonReader::Kind::kString) {
              const size_t v = r_.offset();
              if (r_.read_string_view("origin") != "external") {
                r_.fail_at(v, "origin: expected \"external\" or an op id");
              }
              t.origin = kExternal;
            } else {
              t.origin = static_cast<uint32_t>(r_.read_uint("origin", UINT32_MAX - 1));
            }
            break;
          case 6:
            t.layer = static_cast<int32_t>(r_.read_int("layer", -1, INT32_MAX));
            break;
          default:
            unknown_key(r_, r_.key_offset(), key, fmt::format("tensor {}", w.tensors.size()),
                        kTensorKeys);
        }
        have |= 1U << k;
      }
      // id, name, kind, bytes, origin are required.
      for (size_t k : {0U, 1U, 2U, 4U, 5U}) {
        if ((have & (1U << k)) == 0) {
          r_.fail_at(obj, "tensor {} is missing required key '{}'", w.tensors.size(),
                     kTensorKeys[k]);
        }
      }
      w.tensors.push_back(std::move(t));
      if (checking_ && verifier_->check_tensor(static_cast<uint32_t>(w.tensors.size() - 1))) {
        checking_ = false;
      }
    }
  }

  void read_ops(Workload& w) {
    r_.begin_array("ops");
    std::string_view key;
    while (r_.next_item()) {
      const size_t obj = r_.offset();
      op_at_.push_back(obj);
      Op op;
      uint32_t have = 0;  // bit per key of kOpKeys
      size_t hint = 0;
      r_.begin_object("an op");
      while (r_.next_key(key)) {
        const size_t k = key_index(key, kOpKeys, hint);
        if (k < 32 && (have & (1U << k)) != 0) {
          r_.fail_at(r_.key_offset(), "duplicate key '{}' in op {}", key, w.ops.size());
        }
        switch (k) {
          case 0: {  // id
            const size_t v = r_.offset();
            const uint64_t id = r_.read_uint("id", UINT32_MAX);
            if (id != w.ops.size()) {
              r_.fail_at(v, "op id {} out of order: ids are 0, 1, 2, ... in order (expected {})",
                         id, w.ops.size());
            }
            break;
          }
          case 1:
            op.name = r_.read_string_view("name");
            if (checking_) verifier_->prefetch_op_name(op.name);
            break;
          case 2:
            op.kind = static_cast<OpKind>(read_enum(r_, "kind", kOpKindNames));
            break;
          case 3:
            op.dtype = static_cast<Dtype>(read_enum(r_, "dtype", kDtypeNames));
            break;
          case 4: {
            const size_t v = r_.offset();
            op.flops = r_.read_number("flops");
            if (op.flops < 0) r_.fail_at(v, "flops: must not be negative");
            break;
          }
          case 5:
            op.bytes = r_.read_uint("bytes", UINT64_MAX);
            break;
          case 6:
            read_ids("inputs", op.inputs);
            break;
          case 7:
            read_ids("outputs", op.outputs);
            break;
          case 8:
            read_ids("updates", op.updates);
            break;
          case 9:
            op.workspace = r_.read_uint("workspace", kMaxTensorBytes);
            break;
          case 10:
            op.layer = static_cast<int32_t>(r_.read_int("layer", -1, INT32_MAX));
            break;
          case 11:
            op.collective_bytes = r_.read_uint("collective_bytes", UINT64_MAX);
            break;
          default:
            unknown_key(r_, r_.key_offset(), key, fmt::format("op {}", w.ops.size()), kOpKeys);
        }
        have |= 1U << k;
      }
      // id, name, kind, flops, bytes, inputs, outputs are required.
      for (size_t k : {0U, 1U, 2U, 4U, 5U, 6U, 7U}) {
        if ((have & (1U << k)) == 0) {
          r_.fail_at(obj, "op {} is missing required key '{}'", w.ops.size(), kOpKeys[k]);
        }
      }
      w.ops.push_back(std::move(op));
      if (checking_ && verifier_->check_op(static_cast<uint32_t>(w.ops.size() - 1))) {
        checking_ = false;
      }
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
  WorkloadVerifier* verifier_ = nullptr;
  bool checking_ = true;  ///< no issue yet, and every object read so far was checked
  std::vector<size_t> tensor_at_;
  std::vector<size_t> op_at_;
  std::vector<uint32_t> ids_;  ///< read_ids' buffer
};

// The writer appends with std::to_chars: fmt's iterator interface was the hot spot when
// writing a million ops.
template <class Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

/// The shortest text that reads back to the same double.
void append_double(std::string& out, double v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

void append_ids(std::string& out, const std::vector<uint32_t>& ids) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    append_int(out, ids[i]);
  }
  out += ']';
}

}  // namespace

void read_meta(JsonReader& r, Meta& meta) {
  r.begin_object("meta");
  std::string key;
  while (r.next_key(key)) {
    if (meta.count(key) != 0) r.fail_at(r.key_offset(), "duplicate key '{}' in meta", key);
    meta[key] = r.read_scalar_json("a meta value");
  }
}

void append_meta(std::string& out, const Meta& meta) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : meta) {
    out += first ? "" : ", ";
    first = false;
    append_json_string(out, k);
    out += ": ";
    out += v;
  }
  out += '}';
}

Workload read_workload_from(JsonReader& r) {
  Workload w = Reader(r).read();
  return w;
}

Workload read_workload_text(std::string_view text, const std::string& name) {
  JsonReader r(text, name);
  Workload w = Reader(r).read();
  r.expect_end();
  return w;
}

Workload read_workload(const std::string& path) {
  const FileText text(path);
  return read_workload_text(text.view(), path);
}

std::string write_workload(const Workload& w) {
  std::string out;
  size_t estimate = 256;
  for (const Tensor& t : w.tensors) estimate += 112 + t.name.size();
  for (const Op& op : w.ops) {
    estimate +=
        160 + op.name.size() + 12 * (op.inputs.size() + op.outputs.size() + op.updates.size());
  }
  out.reserve(estimate);
  out += "{\n  \"format\": \"";
  out += kWorkloadFormat;
  out += "\",\n  \"name\": ";
  append_json_string(out, w.name);
  out += ",\n  \"meta\": ";
  append_meta(out, w.meta);
  out += ",\n  \"tensors\": [";
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    const Tensor& t = w.tensors[i];
    out += i == 0 ? "\n    {\"id\": " : ",\n    {\"id\": ";
    append_int(out, i);
    out += ", \"name\": ";
    append_json_string(out, t.name);
    out += ", \"kind\": \"";
    out += kTensorKindNames[static_cast<size_t>(t.kind)];
    out += "\", \"dtype\": \"";
    out += name_of(t.dtype);
    out += "\", \"bytes\": ";
    append_int(out, t.bytes);
    out += ", \"origin\": ";
    if (t.origin == kExternal) {
      out += "\"external\"";
    } else {
      append_int(out, t.origin);
    }
    if (t.layer != -1) {
      out += ", \"layer\": ";
      append_int(out, t.layer);
    }
    out += '}';
  }
  out += w.tensors.empty() ? "],\n  \"ops\": [" : "\n  ],\n  \"ops\": [";
  for (size_t i = 0; i < w.ops.size(); ++i) {
    const Op& op = w.ops[i];
    out += i == 0 ? "\n    {\"id\": " : ",\n    {\"id\": ";
    append_int(out, i);
    out += ", \"name\": ";
    append_json_string(out, op.name);
    out += ", \"kind\": \"";
    out += name_of(op.kind);
    out += "\", \"dtype\": \"";
    out += name_of(op.dtype);
    out += "\", \"flops\": ";
    append_double(out, op.flops);
    out += ", \"bytes\": ";
    append_int(out, op.bytes);
    out += ", \"inputs\": ";
    append_ids(out, op.inputs);
    out += ", \"outputs\": ";
    append_ids(out, op.outputs);
    if (!op.updates.empty()) {
      out += ", \"updates\": ";
      append_ids(out, op.updates);
    }
    if (op.workspace != 0) {
      out += ", \"workspace\": ";
      append_int(out, op.workspace);
    }
    if (op.layer != -1) {
      out += ", \"layer\": ";
      append_int(out, op.layer);
    }
    if (op.collective_bytes != 0) {
      out += ", \"collective_bytes\": ";
      append_int(out, op.collective_bytes);
    }
    out += '}';
  }
  out += w.ops.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace tierflow

namespace tierflow {

std::string write_workload_embedded(const Workload& w, int indent) {
  const std::string text = write_workload(w);
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (size_t i = 0; i + 1 < text.size(); ++i) {  // the final newline is dropped
    out += text[i];
    if (text[i] == '\n') out += pad;
  }
  return out;
}

}  // namespace tierflow
