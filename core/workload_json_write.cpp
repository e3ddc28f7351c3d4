// Writing workloads as JSON, in the layout that core/workload_layout.h describes; reading
// them is core/workload_json.cpp. The tensor and op loops append directly (a million ops are
// written in one pass): names and numbers go through the JSON writer's own functions
// (core/json_writer.h: append_json_string, append_json_double).
#include <charconv>
#include <string>

#include "core/json_writer.h"
#include "core/workload_json.h"

namespace tierflow {
namespace {

// The writer appends with std::to_chars: fmt's iterator interface was the hot spot when
// writing a million ops.
template <class Int>
void append_int(std::string& out, Int v) {
  char buf[24];
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

void write_meta(JsonWriter& w, const Meta& meta) {
  w.begin_object();
  // The values are JSON text already (strings quoted).
  for (const auto& [k, v] : meta) w.key(k).raw(v);
  w.end_object();
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
  JsonWriter meta(out);
  write_meta(meta, w.meta);
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
    append_json_double(out, op.flops);
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
