// chakra: one Chakra execution trace per program, for ASTRA-sim (docs/formats.md
// "Chakra execution traces" has the mapping and what it loses).
//
//   plan step              Chakra node (id = the step's index in its program)
//   compute (collective)   COMP_NODE (COMM_COLL_NODE, ALL_REDUCE of the op's inputs)
//   compute on the host    COMP_NODE with is_cpu_op true, after the previous host step and
//                          its anchor
//   prefetch / store       MEM_LOAD_NODE / MEM_STORE_NODE (a host prefetch: is_cpu_op
//                          true, dst_tier the host tier)
//   detach                 none: its waits pass to the next prefetch or store of its tensor
//   wait on an event       data_deps += the node of the step completing it
//   program order          data_deps += compute on the previous compute, cache on its anchor
//                          (upstream's convention: order in data_deps, ctrl_deps left for a
//                          parent operator, which tierflow's nodes do not have)
//   operands               `inputs` / `outputs` attributes: string lists of tensor name and
//                          byte count pairs, what ASTRA-sim's local-memory tracking reads
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "core/diagnostics.h"
#include "core/io.h"
#include "tools/export/chakra/chakra_et.pb.h"
#include "tools/export/step_table.h"
#include "tools/export/writers.h"

namespace tierflow::exporter {
namespace {

namespace pb = ::tierflow::chakra;

/// The schema version the traces declare (tools/export/chakra/chakra_et.proto), as
/// upstream's producers write it for this schema.
constexpr std::string_view kChakraVersion = "1.0.0";

/// Appends `m` as Chakra frames it: its byte count as a varint, then its bytes,
/// serialized deterministically.
void append_delimited(std::string& out, const google::protobuf::MessageLite& m) {
  std::string body;
  {
    google::protobuf::io::StringOutputStream stream(&body);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    TF_ASSERT(m.SerializeToCodedStream(&coded), "cannot serialize a Chakra message");
  }
  uint64_t n = body.size();
  while (n >= 0x80) {
    out += static_cast<char>((n & 0x7f) | 0x80);
    n >>= 7;
  }
  out += static_cast<char>(n);
  out += body;
}

void attr_int(pb::AttributeProto* a, std::string_view name, int64_t v) {
  a->set_name(std::string(name));
  a->set_int64_val(v);
}
void attr_uint(pb::AttributeProto* a, std::string_view name, uint64_t v) {
  a->set_name(std::string(name));
  a->set_uint64_val(v);
}
void attr_text(pb::AttributeProto* a, std::string_view name, std::string_view v) {
  a->set_name(std::string(name));
  a->set_string_val(std::string(v));
}
void attr_bool(pb::AttributeProto* a, std::string_view name, bool v) {
  a->set_name(std::string(name));
  a->set_bool_val(v);
}

/// Picoseconds as whole microseconds, rounded to the nearest (Chakra's time unit).
uint64_t micros(int64_t ps) {
  return static_cast<uint64_t>((std::max<int64_t>(ps, 0) + 500'000) / 1'000'000);
}

/// FLOPs as Chakra's integer `num_ops`, rounded and clamped to int64, and at least 1: a
/// roofline divides by it (an op with no FLOPs, an embedding lookup, then takes its
/// memory time, tensor_size over the bandwidth).
int64_t ops_count(double flops) {
  if (!(flops >= 1)) return 1;
  if (flops >= 9.2e18) return std::numeric_limits<int64_t>::max();
  return std::llround(flops);
}

/// Operands as ASTRA-sim's local-memory tracking reads them: an attribute whose string
/// list alternates tensor name and byte count.
void attr_operands(pb::AttributeProto* a, std::string_view name, const Workload& w,
                   std::initializer_list<const std::vector<uint32_t>*> lists) {
  a->set_name(std::string(name));
  auto* values = a->mutable_string_list();
  for (const std::vector<uint32_t>* list : lists) {
    for (uint32_t t : *list) {
      values->add_values(w.tensors[t].name);
      values->add_values(std::to_string(w.tensors[t].bytes));
    }
  }
}

/// Simulated times of a node: Chakra's microsecond fields and the exact picoseconds.
void set_times(pb::Node& n, const StepRow& r) {
  if (r.start_ps < 0 || r.end_ps < 0) return;
  n.set_start_time_micros(micros(r.start_ps));
  n.set_duration_micros(micros(r.end_ps - r.start_ps));
  attr_uint(n.add_attr(), "start_ps", static_cast<uint64_t>(r.start_ps));
  attr_uint(n.add_attr(), "duration_ps", static_cast<uint64_t>(r.end_ps - r.start_ps));
}

/// Program order and event waits, both as data_deps (see the mapping above).
void set_deps(pb::Node& n, const std::set<uint64_t>& order, const std::set<uint64_t>& data) {
  std::set<uint64_t> all = data;
  all.insert(order.begin(), order.end());
  for (uint64_t d : all) n.add_data_deps(d);
}

}  // namespace

std::string chakra_stem(const ExportInput& in) {
  if (!in.options.stem.empty()) return in.options.stem;
  return std::filesystem::path(in.plan_file).stem().string();
}

std::string chakra_trace(const ExportInput& in, size_t program) {
  const Program& prog = in.plan.programs[program];
  const auto producers = event_producers(in.plan);
  std::string out;

  pb::GlobalMetadata meta;
  meta.set_version(std::string(kChakraVersion));
  attr_text(meta.add_attr(), "producer", "tierflow export");
  attr_text(meta.add_attr(), "plan", in.plan.name);
  attr_uint(meta.add_attr(), "program", program);
  attr_uint(meta.add_attr(), "device", prog.device);
  attr_text(meta.add_attr(), "topology", in.topology.name);
  attr_uint(meta.add_attr(), "makespan_ps", static_cast<uint64_t>(in.sim->makespan));
  append_delimited(out, meta);

  // Data deps a detach leaves to the next prefetch or store of its tensor.
  std::map<uint32_t, std::set<uint64_t>> carried;
  int last_compute = -1;
  int last_host = -1;
  for (const StepRow& r : step_rows(in, program)) {
    const Step& s = *r.step;
    std::set<uint64_t> ctrl, data;  // program order, event waits
    std::vector<std::string> cross;  // waits on other programs' events
    for (uint32_t e : s.wait) {
      const auto [p, i] = producers.at(e);
      if (p == program) {
        data.insert(i);
      } else {
        cross.push_back(fmt::format("event {}: program {} step {}", e, p, i));
      }
    }
    if (s.kind == StepKind::kDetach) {
      carried[s.target].insert(data.begin(), data.end());
      continue;
    }

    pb::Node n;
    n.set_id(r.index);
    attr_bool(n.add_attr(), "is_cpu_op", s.host);
    if (s.kind == StepKind::kCompute) {
      const Op& op = in.workload.ops[s.target];
      n.set_name(op.name);
      int& previous = s.host ? last_host : last_compute;
      if (previous >= 0) ctrl.insert(static_cast<uint64_t>(previous));
      if (s.host && r.anchor >= 0) ctrl.insert(static_cast<uint64_t>(r.anchor));
      previous = static_cast<int>(r.index);
      if (s.host) attr_int(n.add_attr(), "event", s.event);
      attr_int(n.add_attr(), "num_ops", ops_count(op.flops));
      attr_uint(n.add_attr(), "tensor_size", std::max<uint64_t>(op.bytes, 1));
      attr_operands(n.add_attr(), "inputs", in.workload, {&op.inputs, &op.updates});
      attr_operands(n.add_attr(), "outputs", in.workload, {&op.outputs, &op.updates});
      attr_text(n.add_attr(), "op_kind", name_of(op.kind));
      attr_int(n.add_attr(), "layer", op.layer);
      if (op.kind == OpKind::kCollective) {
        n.set_type(pb::COMM_COLL_NODE);
        uint64_t message = 0;
        for (uint32_t t : op.inputs) message += in.workload.tensors[t].bytes;
        attr_int(n.add_attr(), "comm_type", pb::ALL_REDUCE);
        attr_int(n.add_attr(), "comm_size", static_cast<int64_t>(message));
        attr_int(n.add_attr(), "collective_bytes", static_cast<int64_t>(op.collective_bytes));
      } else {
        n.set_type(pb::COMP_NODE);
      }
    } else {
      const Tensor& t = in.workload.tensors[s.target];
      const bool prefetch = s.kind == StepKind::kPrefetch;
      n.set_type(prefetch ? pb::MEM_LOAD_NODE : pb::MEM_STORE_NODE);
      n.set_name(fmt::format("{} {}", kStepKindNames[static_cast<size_t>(s.kind)], t.name));
      if (r.anchor >= 0) ctrl.insert(static_cast<uint64_t>(r.anchor));
      if (auto it = carried.find(s.target); it != carried.end()) {
        data.insert(it->second.begin(), it->second.end());
        carried.erase(it);
      }
      attr_uint(n.add_attr(), "tensor_size", t.bytes);
      attr_text(n.add_attr(), "tensor_name", t.name);
      // A load writes the tensor into device memory; a store reads it from there.
      const std::vector<uint32_t> none, one = {s.target};
      attr_operands(n.add_attr(), "inputs", in.workload, {prefetch ? &none : &one});
      attr_operands(n.add_attr(), "outputs", in.workload, {prefetch ? &one : &none});
      attr_text(n.add_attr(), "tensor_kind", kTensorKindNames[static_cast<size_t>(t.kind)]);
      attr_text(n.add_attr(), "src_tier", r.from_tier);
      attr_text(n.add_attr(), "dst_tier", r.to_tier);
      attr_text(n.add_attr(), "route", fmt::format("{}", fmt::join(r.route, ",")));
      attr_int(n.add_attr(), "event", s.event);
      if (r.queue_ps >= 0) attr_uint(n.add_attr(), "queue_ps", static_cast<uint64_t>(r.queue_ps));
    }
    set_times(n, r);
    if (!cross.empty()) {
      pb::AttributeProto* a = n.add_attr();
      a->set_name("cross_program_waits");
      for (const std::string& c : cross) a->mutable_string_list()->add_values(c);
    }
    set_deps(n, ctrl, data);
    append_delimited(out, n);
  }
  return out;
}

void write_chakra(const ExportInput& in, const std::string& out) {
  const std::string stem = chakra_stem(in);
  TF_ASSERT(!stem.empty(), "empty Chakra file stem for '{}'", in.plan_file);
  // One file per program, appearing together: a failure to write any (a full disk) leaves
  // every earlier trace in the folder as it was, not some programs of one plan beside
  // others of another.
  OutputSet files;
  for (size_t p = 0; p < in.plan.programs.size(); ++p) {
    const auto path = std::filesystem::path(out) / fmt::format("{}.{}.et", stem, p);
    files.add(path.string(), chakra_trace(in, p));
  }
  files.publish();
  if (in.notes == nullptr) return;
  // Traces of the same stem beyond this plan's programs, from an earlier export: ASTRA-sim
  // run on more NPUs than this plan has programs would read them as this plan's.
  std::vector<std::pair<size_t, std::string>> stale;
  const std::string prefix = stem + ".";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(".et")) continue;
    const std::string_view digits =
        std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - 3);
    size_t program = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), program);
    if (err != std::errc() || end != digits.data() + digits.size() || digits.empty() ||
        (digits.size() > 1 && digits.front() == '0') || program < in.plan.programs.size()) {
      continue;
    }
    stale.emplace_back(program, name);
  }
  if (stale.empty()) return;
  std::sort(stale.begin(), stale.end());
  std::vector<std::string> names;
  for (size_t i = 0; i < stale.size() && i < 4; ++i) names.push_back(stale[i].second);
  if (stale.size() > 4) names.push_back(fmt::format("... ({} in all)", stale.size()));
  in.notes->push_back(fmt::format(
      "{} also holds {} from another export: this plan has {} program{}, and ASTRA-sim run on "
      "more NPUs would read {} as its own; remove {} or export to an empty folder",
      out, fmt::join(names, ", "), in.plan.programs.size(), in.plan.programs.size() == 1 ? "" : "s",
      stale.size() == 1 ? "it" : "them", stale.size() == 1 ? "it" : "them"));
}

}  // namespace tierflow::exporter
