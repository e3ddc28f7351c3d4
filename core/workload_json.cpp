#include "core/workload_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/json_reader.h"

namespace tierflow {
namespace {

const std::vector<std::string> kTopKeys = {"format", "name", "meta", "tensors", "ops"};
const std::vector<std::string> kTensorKeys = {"id", "name", "kind", "dtype", "bytes", "origin",
                                              "layer"};
const std::vector<std::string> kOpKeys = {"id",      "name",    "kind",      "dtype",
                                          "flops",   "bytes",   "inputs",    "outputs",
                                          "updates", "workspace", "layer", "collective_bytes"};

template <size_t N>
size_t read_enum(JsonReader& r, std::string_view what,
                 const std::array<std::string_view, N>& names) {
  const size_t at = r.offset();
  const std::string v = r.read_string(what);
  if (auto i = index_of(names, v)) return *i;
  std::vector<std::string> choices(names.begin(), names.end());
  r.fail_at(at, "{}: '{}' is not one of: {}{}", what, v, fmt::join(choices, ", "),
            did_you_mean(v, choices));
}

[[noreturn]] void unknown_key(JsonReader& r, size_t at, const std::string& key,
                              std::string_view where, const std::vector<std::string>& keys) {
  r.fail_at(at, "unknown key '{}' in {}{}", key, where, did_you_mean(key, keys));
}

std::vector<uint32_t> read_ids(JsonReader& r, std::string_view what) {
  std::vector<uint32_t> ids;
  r.begin_array(what);
  while (r.next_item()) ids.push_back(static_cast<uint32_t>(r.read_uint(what, UINT32_MAX - 1)));
  return ids;
}

class Reader {
 public:
  Reader(std::string_view text, const std::string& name) : r_(text, name) {}

  Workload read() {
    Workload w;
    const size_t top = r_.offset();
    r_.begin_object("the workload");
    std::string key;
    bool has_format = false, has_name = false, has_tensors = false, has_ops = false;
    while (true) {
      if (!r_.next_key(key)) break;
      const size_t at = r_.key_offset();
      if (key == "format") {
        const size_t v = r_.offset();
        const std::string f = r_.read_string("format");
        if (f != kWorkloadFormat) {
          r_.fail_at(v, "unsupported format '{}': this tierflow reads '{}'", f, kWorkloadFormat);
        }
        has_format = true;
      } else if (key == "name") {
        w.name = r_.read_string("name");
        has_name = true;
      } else if (key == "meta") {
        r_.begin_object("meta");
        std::string mk;
        while (r_.next_key(mk)) w.meta[mk] = r_.read_scalar_json("a meta value");
      } else if (key == "tensors") {
        read_tensors(w);
        has_tensors = true;
      } else if (key == "ops") {
        read_ops(w);
        has_ops = true;
      } else {
        unknown_key(r_, at, key, "the workload", kTopKeys);
      }
    }
    r_.expect_end();
    for (auto [ok, k] : {std::pair{has_format, "format"}, {has_name, "name"},
                         {has_tensors, "tensors"}, {has_ops, "ops"}}) {
      if (!ok) r_.fail_at(top, "the workload is missing required key '{}'", k);
    }
    if (auto issue = verify_workload(w)) report(*issue);
    return w;
  }

 private:
  void read_tensors(Workload& w) {
    r_.begin_array("tensors");
    while (r_.next_item()) {
      const size_t obj = r_.offset();
      tensor_at_.push_back(obj);
      Tensor t;
      bool has[4] = {false, false, false, false};  // id, name/kind, bytes, origin
      bool has_name = false;
      r_.begin_object("a tensor");
      std::string key;
      while (true) {
        if (!r_.next_key(key)) break;
        const size_t at = r_.key_offset();
        if (key == "id") {
          const size_t v = r_.offset();
          const uint64_t id = r_.read_uint("id", UINT32_MAX);
          if (id != w.tensors.size()) {
            r_.fail_at(v, "tensor id {} out of order: ids are 0, 1, 2, ... in order (expected {})",
                       id, w.tensors.size());
          }
          has[0] = true;
        } else if (key == "name") {
          t.name = r_.read_string("name");
          has_name = true;
        } else if (key == "kind") {
          t.kind = static_cast<TensorKind>(read_enum(r_, "kind", kTensorKindNames));
          has[1] = true;
        } else if (key == "dtype") {
          t.dtype = static_cast<Dtype>(read_enum(r_, "dtype", kDtypeNames));
        } else if (key == "bytes") {
          t.bytes = r_.read_uint("bytes", UINT64_MAX);
          has[2] = true;
        } else if (key == "origin") {
          if (r_.peek() == JsonReader::Kind::kString) {
            const size_t v = r_.offset();
            if (r_.read_string("origin") != "external") {
              r_.fail_at(v, "origin: expected \"external\" or an op id");
            }
            t.origin = kExternal;
          } else {
            t.origin = static_cast<uint32_t>(r_.read_uint("origin", UINT32_MAX - 1));
          }
          has[3] = true;
        } else if (key == "layer") {
          t.layer = static_cast<int32_t>(r_.read_int("layer", -1, INT32_MAX));
        } else {
          unknown_key(r_, at, key, fmt::format("tensor {}", w.tensors.size()), kTensorKeys);
        }
      }
      for (auto [ok, k] : {std::pair{has[0], "id"}, {has_name, "name"}, {has[1], "kind"},
                           {has[2], "bytes"}, {has[3], "origin"}}) {
        if (!ok) r_.fail_at(obj, "tensor {} is missing required key '{}'", w.tensors.size(), k);
      }
      w.tensors.push_back(std::move(t));
    }
  }

  void read_ops(Workload& w) {
    r_.begin_array("ops");
    while (r_.next_item()) {
      const size_t obj = r_.offset();
      op_at_.push_back(obj);
      Op op;
      uint32_t have = 0;  // bit per required key
      r_.begin_object("an op");
      std::string key;
      while (true) {
        if (!r_.next_key(key)) break;
        const size_t at = r_.key_offset();
        if (key == "id") {
          const size_t v = r_.offset();
          const uint64_t id = r_.read_uint("id", UINT32_MAX);
          if (id != w.ops.size()) {
            r_.fail_at(v, "op id {} out of order: ids are 0, 1, 2, ... in order (expected {})", id,
                       w.ops.size());
          }
          have |= 1U;
        } else if (key == "name") {
          op.name = r_.read_string("name");
          have |= 2U;
        } else if (key == "kind") {
          op.kind = static_cast<OpKind>(read_enum(r_, "kind", kOpKindNames));
          have |= 4U;
        } else if (key == "dtype") {
          op.dtype = static_cast<Dtype>(read_enum(r_, "dtype", kDtypeNames));
        } else if (key == "flops") {
          const size_t v = r_.offset();
          op.flops = r_.read_number("flops");
          if (op.flops < 0) r_.fail_at(v, "flops: must not be negative");
          have |= 8U;
        } else if (key == "bytes") {
          op.bytes = r_.read_uint("bytes", UINT64_MAX);
          have |= 16U;
        } else if (key == "inputs") {
          op.inputs = read_ids(r_, "inputs");
          have |= 32U;
        } else if (key == "outputs") {
          op.outputs = read_ids(r_, "outputs");
          have |= 64U;
        } else if (key == "updates") {
          op.updates = read_ids(r_, "updates");
        } else if (key == "workspace") {
          op.workspace = r_.read_uint("workspace", kMaxTensorBytes);
        } else if (key == "layer") {
          op.layer = static_cast<int32_t>(r_.read_int("layer", -1, INT32_MAX));
        } else if (key == "collective_bytes") {
          op.collective_bytes = r_.read_uint("collective_bytes", UINT64_MAX);
        } else {
          unknown_key(r_, at, key, fmt::format("op {}", w.ops.size()), kOpKeys);
        }
      }
      static constexpr const char* kRequired[] = {"id",    "name",   "kind",   "flops",
                                                  "bytes", "inputs", "outputs"};
      for (uint32_t b = 0; b < 7; ++b) {
        if ((have & (1U << b)) == 0) {
          r_.fail_at(obj, "op {} is missing required key '{}'", w.ops.size(), kRequired[b]);
        }
      }
      w.ops.push_back(std::move(op));
    }
  }

  // Re-reads the faulty object to find the exact position of the field or item.
  [[noreturn]] void report(const WorkloadIssue& issue) {
    const size_t obj = issue.on_op ? op_at_[issue.index] : tensor_at_[issue.index];
    size_t at = obj;
    if (!issue.field.empty()) {
      r_.seek(obj);
      r_.begin_object("");
      std::string key;
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

  JsonReader r_;
  std::vector<size_t> tensor_at_;
  std::vector<size_t> op_at_;
};

void append_ids(std::string& out, const std::vector<uint32_t>& ids) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    fmt::format_to(std::back_inserter(out), "{}", ids[i]);
  }
  out += ']';
}

}  // namespace

Workload read_workload_text(std::string_view text, const std::string& name) {
  return Reader(text, name).read();
}

Workload read_workload(const std::string& path) {
  const std::string text = read_text_file(path);
  return read_workload_text(text, path);
}

std::string write_workload(const Workload& w) {
  std::string out;
  out.reserve(256 + w.tensors.size() * 128 + w.ops.size() * 192);
  auto app = std::back_inserter(out);
  fmt::format_to(app, "{{\n  \"format\": \"{}\",\n  \"name\": ", kWorkloadFormat);
  append_json_string(out, w.name);
  out += ",\n  \"meta\": {";
  bool first = true;
  for (const auto& [k, v] : w.meta) {
    out += first ? "" : ", ";
    first = false;
    append_json_string(out, k);
    out += ": ";
    out += v;
  }
  out += "},\n  \"tensors\": [";
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    const Tensor& t = w.tensors[i];
    fmt::format_to(app, "{}\n    {{\"id\": {}, \"name\": ", i == 0 ? "" : ",", i);
    append_json_string(out, t.name);
    fmt::format_to(app, ", \"kind\": \"{}\", \"dtype\": \"{}\", \"bytes\": {}, \"origin\": ",
                   kTensorKindNames[static_cast<size_t>(t.kind)], name_of(t.dtype), t.bytes);
    if (t.origin == kExternal) {
      out += "\"external\"";
    } else {
      fmt::format_to(app, "{}", t.origin);
    }
    if (t.layer != -1) fmt::format_to(app, ", \"layer\": {}", t.layer);
    out += '}';
  }
  out += w.tensors.empty() ? "],\n  \"ops\": [" : "\n  ],\n  \"ops\": [";
  for (size_t i = 0; i < w.ops.size(); ++i) {
    const Op& op = w.ops[i];
    fmt::format_to(app, "{}\n    {{\"id\": {}, \"name\": ", i == 0 ? "" : ",", i);
    append_json_string(out, op.name);
    // {} prints the shortest text that reads back to the same double.
    fmt::format_to(app, ", \"kind\": \"{}\", \"dtype\": \"{}\", \"flops\": {}, \"bytes\": {}, \"inputs\": ",
                   name_of(op.kind), name_of(op.dtype), op.flops, op.bytes);
    append_ids(out, op.inputs);
    out += ", \"outputs\": ";
    append_ids(out, op.outputs);
    if (!op.updates.empty()) {
      out += ", \"updates\": ";
      append_ids(out, op.updates);
    }
    if (op.workspace != 0) fmt::format_to(app, ", \"workspace\": {}", op.workspace);
    if (op.layer != -1) fmt::format_to(app, ", \"layer\": {}", op.layer);
    if (op.collective_bytes != 0) {
      fmt::format_to(app, ", \"collective_bytes\": {}", op.collective_bytes);
    }
    out += '}';
  }
  out += w.ops.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace tierflow
