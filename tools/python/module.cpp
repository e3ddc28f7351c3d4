// The `_tierflow` extension module: the classes and functions behind `import tierflow`.
// tools/python/tierflow/__init__.py gives them keyword signatures with the CLI's defaults
// and turns tables into pandas DataFrames; docs/python.md documents the result.
//
// Each call converts its arguments, releases the interpreter lock while the C++ side
// (api.h) works, then converts the result. tierflow::InputError becomes
// tierflow.InputError (a ValueError carrying file, line, col and message); any other C++
// exception a RuntimeError.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>
#include <string>
#include <vector>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/kinds.h"
#include "core/plan_json.h"
#include "core/workload_json.h"
#include "planner/print.h"
#include "sim/report.h"
#include "tools/export/export.h"
#include "tools/python/api.h"
#include "tools/python/convert.h"
#include "tools/study/hw_show.h"
#include "tools/study/scenario.h"
#include "tools/study/target.h"
#include "traces/arch_loader.h"
#include "traces/workload_info.h"

#ifndef TIERFLOW_VERSION
#define TIERFLOW_VERSION "unknown"
#endif

namespace py = pybind11;

namespace tierflow::python {
namespace {

/// Each warning as a Python UserWarning (the GIL held).
void warn_all(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) {
    if (PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 1) != 0) throw py::error_already_set();
  }
}

/// The Python class of InputError; the module holds the reference.
PyObject* input_error_type = nullptr;

/// One plan of report() and export_plan(): (Plan or None, Topology or None, path, hw, sets),
/// as the package builds it. The handles stay alive in the caller's list.
PlanSource plan_source(const py::handle& item) {
  const auto t = item.cast<py::tuple>();
  PlanSource s;
  if (!t[0].is_none()) s.plan = t[0].cast<PlanHandle*>();
  if (!t[1].is_none()) s.topology = t[1].cast<TopologyHandle*>();
  s.path = t[2].cast<std::string>();
  s.hw = t[3].cast<std::string>();
  s.sets = t[4].cast<std::vector<std::string>>();
  return s;
}

py::object optional_int(int v) {
  return v > 0 ? py::object(py::int_(v)) : py::object(py::none());
}

void raise_input_error(const InputError& e) {
  py::object type = py::reinterpret_borrow<py::object>(input_error_type);
  py::object err = type(e.what());
  err.attr("file") = e.pos().file;
  err.attr("line") = optional_int(e.pos().line);
  err.attr("col") = optional_int(e.pos().col);
  err.attr("message") = e.message();
  PyErr_SetObject(input_error_type, err.ptr());
}

/// The question's number from its name; InputError at `question` naming the four.
study::Question question_of(const std::string& name) {
  const auto i = index_of(study::kQuestionNames, name);
  if (!i) {
    throw InputError::at(
        SourcePos{"question"}, "unknown question '{}' (one of: {}){}", name,
        fmt::join(study::kQuestionNames, ", "),
        did_you_mean(name, std::span<const std::string_view>(study::kQuestionNames)));
  }
  return static_cast<study::Question>(*i);
}

/// `top` of Workload.info: as `trace info --top` takes it.
int info_top(const py::object& top) {
  return static_cast<int>(to_count(top, "top", traces::kMaxInfoTop));
}

double seconds(int64_t ps) {
  return static_cast<double>(ps) * 1e-12;
}

py::dict bounds_dict(const PlanHandle& p) {
  const planner::Bounds& b = p.outcome.bounds;
  const Workload& w = *p.workload.workload;
  py::dict d;
  d["residency"] = b.residency;
  d["residency_op"] = b.residency_op < w.ops.size()
                          ? py::object(py::str(w.ops[b.residency_op].name))
                          : py::object(py::none());
  d["makespan_ps"] = b.makespan_ps;
  d["compute_ps"] = b.compute_ps;
  d["traffic_bytes"] = b.traffic_bytes;
  d["traffic_ps"] = b.traffic_ps;
  d["pinned_bytes"] = b.pinned_bytes;
  d["pinned_ps"] = b.pinned_ps;
  d["ingress_bytes_per_s"] = b.ingress;
  return d;
}

py::list offloads_list(const PlanHandle& p) {
  const Workload& w = *p.workload.workload;
  const hw::Topology& topo = *p.topology.topology;
  py::list out;
  for (const planner::OffloadInfo& f : p.outcome.offloads) {
    py::dict d;
    d["tensor"] = w.tensors[f.tensor].name;
    d["bytes"] = f.bytes;
    d["tier"] = f.tier == planner::kNone ? py::object(py::none())
                                         : py::object(py::str(topo.tiers[f.tier].id));
    d["fetches"] = f.fetches;
    d["stores"] = f.stores;
    d["gap_ps"] = f.gap_ps;
    d["transfer_ps"] = f.transfer_ps;
    d["exposed_ps"] = f.exposed_ps;
    out.append(std::move(d));
  }
  return out;
}

/// A metric of a simulation that ran to the end; None otherwise.
template <class F>
py::object if_ran(const SimulationHandle& s, F f) {
  return s.phase.sim->error ? py::object(py::none()) : py::cast(f(s.phase));
}

void bind_classes(py::module_& m) {
  py::class_<TopologyHandle, std::shared_ptr<TopologyHandle>>(
      m, "Topology", "A loaded hardware topology (tierflow.load_topology).")
      .def_property_readonly("name", [](const TopologyHandle& t) { return t.topology->name; })
      .def_property_readonly("description",
                             [](const TopologyHandle& t) { return t.topology->description; })
      .def_property_readonly(
          "file", [](const TopologyHandle& t) { return t.file; }, "the YAML it was read from")
      .def_property_readonly(
          "sets", [](const TopologyHandle& t) { return t.sets; },
          "the PATH=VALUE overrides applied")
      .def("_unchanged_file", &unchanged_topology_file,
           "the file, for a call that reads it again; InputError when it changed since it was read")
      .def_property_readonly(
          "devices",
          [](const TopologyHandle& t) {
            return to_python(study::show_json(*t.topology)["devices"]);
          },
          "device classes as dicts (as in `tierflow hw show --json`)")
      .def_property_readonly(
          "tiers",
          [](const TopologyHandle& t) { return to_python(study::show_json(*t.topology)["tiers"]); },
          "memory tiers as dicts, in base units")
      .def_property_readonly(
          "links",
          [](const TopologyHandle& t) { return to_python(study::show_json(*t.topology)["links"]); },
          "links as dicts, in base units")
      .def_property_readonly("switches",
                             [](const TopologyHandle& t) {
                               return to_python(study::show_json(*t.topology)["switches"]);
                             })
      .def(
          "to_dict",
          [](const TopologyHandle& t) { return to_python(study::show_json(*t.topology)); },
          "everything `tierflow hw show --json` prints")
      .def(
          "show",
          [](const TopologyHandle& t, bool all_routes) {
            return study::show_text(*t.topology, study::ShowOptions{all_routes});
          },
          py::arg("all_routes") = false, "the text of `tierflow hw show`")
      .def("__repr__", [](const TopologyHandle& t) {
        return fmt::format("<tierflow.Topology '{}' from {}{}>", t.topology->name, t.file,
                           t.sets.empty() ? "" : fmt::format(" with {}", fmt::join(t.sets, " ")));
      });

  py::class_<WorkloadHandle, std::shared_ptr<WorkloadHandle>>(
      m, "Workload", "The operator graph of one step (tierflow.generate, tierflow.load_workload).")
      .def_property_readonly("name", [](const WorkloadHandle& w) { return w.workload->name; })
      .def_property_readonly("description", [](const WorkloadHandle& w) { return w.description; })
      .def_property_readonly("num_ops",
                             [](const WorkloadHandle& w) { return w.workload->ops.size(); })
      .def_property_readonly("num_tensors",
                             [](const WorkloadHandle& w) { return w.workload->tensors.size(); })
      .def(
          "info",
          [](const WorkloadHandle& w, const py::object& top) {
            return to_python(traces::info_json(*w.workload, {info_top(top)}));
          },
          py::arg("top") = 10, "what `tierflow trace info --json` prints")
      .def(
          "info_text",
          [](const WorkloadHandle& w, const py::object& top) {
            return traces::info_text(*w.workload, {info_top(top)});
          },
          py::arg("top") = 10, "what `tierflow trace info` prints")
      .def(
          "to_json",
          [](const WorkloadHandle& w) {
            py::gil_scoped_release release;
            return write_workload(*w.workload);
          },
          "the workload as JSON text (tierflow.workload/1)")
      .def(
          "save",
          [](const WorkloadHandle& w, const std::filesystem::path& path) {
            py::gil_scoped_release release;
            write_file_atomic(path.string(), write_workload(*w.workload));
          },
          py::arg("path"), "writes the workload JSON to `path` (atomically)")
      .def("__repr__", [](const WorkloadHandle& w) {
        return fmt::format("<tierflow.Workload {}: {} ops, {} tensors>", w.description,
                           w.workload->ops.size(), w.workload->tensors.size());
      });

  py::class_<PlanHandle, std::shared_ptr<PlanHandle>>(
      m, "Plan", "A planning outcome (tierflow.plan): a plan when `ok`, else the reason.")
      .def_property_readonly("ok", [](const PlanHandle& p) { return p.outcome.ok; })
      .def_property_readonly(
          "infeasible", [](const PlanHandle& p) { return p.outcome.infeasible; },
          "the target cannot be met (does not fit); false when ok")
      .def_property_readonly("reason", [](const PlanHandle& p) { return p.outcome.reason; })
      .def_property_readonly("pipeline", [](const PlanHandle& p) { return p.outcome.pipeline; })
      .def_property_readonly(
          "budget", [](const PlanHandle& p) { return p.outcome.budget; },
          "device bytes per program planned for")
      .def_property_readonly("bounds", &bounds_dict, "the lower bounds (residency, makespan, ...)")
      .def_property_readonly("estimated_peak",
                             [](const PlanHandle& p) { return p.outcome.estimated_peak; })
      .def_property_readonly(
          "resident_peak", [](const PlanHandle& p) { return p.outcome.resident_peak; },
          "the estimated peak with nothing offloaded")
      .def_property_readonly(
          "simulated",
          [](const PlanHandle& p) -> py::object {
            if (!p.outcome.evaluation) return py::none();
            const planner::Evaluation& e = *p.outcome.evaluation;
            py::dict d;
            d["ok"] = e.ok;
            d["error"] = e.error;
            d["makespan_ps"] = e.makespan_ps;
            d["device_peak"] = e.device_peak;
            return d;
          },
          "the planner's simulated score of the plan: makespan_ps, device_peak")
      .def_property_readonly("offloads", &offloads_list,
                             "offloaded tensors, largest first (as --explain)")
      .def_property_readonly("notes", [](const PlanHandle& p) { return p.outcome.notes; })
      .def_property_readonly(
          "portfolio",
          [](const PlanHandle& p) {
            py::list out;
            for (const planner::PortfolioTrial& t : p.outcome.portfolio) {
              py::dict d;
              d["pipeline"] = t.pipeline;
              d["tries"] = t.tries;
              d["result"] = t.result;
              d["best"] = t.best;
              out.append(std::move(d));
            }
            return out;
          },
          "the tierflow policy's portfolio as tried: pipeline, tries, result, best (as "
          "--explain)")
      .def_property_readonly("warnings",
                             [](const PlanHandle& p) { return planner::plan_warnings(p.outcome); })
      .def_property_readonly(
          "stats",
          [](const PlanHandle& p) {
            py::list out;
            for (const planner::Stat& s : p.outcome.stats) {
              py::dict d;
              d["pass"] = s.pass;
              d["name"] = s.name;
              d["value"] = s.value;
              out.append(std::move(d));
            }
            return out;
          },
          "the passes' counters (as --stats)")
      .def_property_readonly(
          "num_programs", [](const PlanHandle& p) { return p.plan ? p.plan->programs.size() : 0; })
      .def_property_readonly("num_steps",
                             [](const PlanHandle& p) {
                               size_t n = 0;
                               if (p.plan) {
                                 for (const Program& prog : p.plan->programs)
                                   n += prog.steps.size();
                               }
                               return n;
                             })
      .def_property_readonly(
          "topology",
          [](const PlanHandle& p) { return std::make_shared<TopologyHandle>(p.topology); })
      .def_property_readonly(
          "workload",
          [](const PlanHandle& p) { return std::make_shared<WorkloadHandle>(p.workload); })
      .def(
          "text",
          [](const PlanHandle& p, const py::object& given) -> std::string {
            if (!p.plan)
              throw InputError::at(SourcePos{"plan"}, "no plan was made: {}", p.outcome.reason);
            // One of the plan's programs: "from 0 to N-1" names how many there are.
            const auto last = static_cast<int64_t>(p.plan->programs.size()) - 1;
            const auto program = static_cast<size_t>(to_count(given, "program", last));
            return planner::plan_text(*p.plan, *p.workload.workload, program);
          },
          py::arg("program") = 0, "one line per step of a program (as --print-after)")
      .def(
          "to_json",
          [](const PlanHandle& p, const std::filesystem::path& path) {
            py::gil_scoped_release release;
            return plan_json(p, path.string());
          },
          py::arg("path") = "plan.json",
          "the plan JSON (tierflow.plan/2, workload inline) as save(path) would write it")
      .def(
          "save",
          [](const PlanHandle& p, const std::filesystem::path& path) {
            py::gil_scoped_release release;
            save_plan(p, path.string());
          },
          py::arg("path"), "writes the plan JSON; `tierflow sim --plan PATH` runs it")
      .def("__repr__", [](const PlanHandle& p) {
        return p.outcome.ok
                   ? fmt::format("<tierflow.Plan ok: {} programs, pipeline {}>",
                                 p.plan->programs.size(), p.outcome.pipeline)
                   : fmt::format("<tierflow.Plan {}: {}>",
                                 p.outcome.infeasible ? "infeasible" : "failed", p.outcome.reason);
      });

  py::class_<SimulationHandle, std::shared_ptr<SimulationHandle>>(
      m, "Simulation", "A simulated plan (tierflow.simulate). Metrics are None when it failed.")
      .def_property_readonly(
          "ok", [](const SimulationHandle& s) { return !s.phase.sim->error.has_value(); })
      .def_property_readonly("error",
                             [](const SimulationHandle& s) -> py::object {
                               if (!s.phase.sim->error) return py::none();
                               return py::str(s.phase.sim->error->message);
                             })
      .def_property_readonly(
          "error_kind",
          [](const SimulationHandle& s) -> py::object {
            if (!s.phase.sim->error) return py::none();
            return py::str(std::string(sim::error_kind_name(s.phase.sim->error->kind)));
          },
          "plan rule, capacity, deadlock or topology")
      .def_property_readonly("makespan_ps",
                             [](const SimulationHandle& s) {
                               return if_ran(
                                   s, [](const study::PhaseResult& p) { return p.makespan_ps; });
                             })
      .def_property_readonly(
          "makespan_s",
          [](const SimulationHandle& s) {
            return if_ran(s, [](const study::PhaseResult& p) { return seconds(p.makespan_ps); });
          })
      .def_property_readonly(
          "exposed_ps",
          [](const SimulationHandle& s) {
            return if_ran(s, [](const study::PhaseResult& p) { return p.exposed_ps; });
          },
          "time compute waited on transfers")
      .def_property_readonly(
          "exposed_s",
          [](const SimulationHandle& s) {
            return if_ran(s, [](const study::PhaseResult& p) { return seconds(p.exposed_ps); });
          })
      .def_property_readonly(
          "device_peak",
          [](const SimulationHandle& s) {
            return if_ran(s, [](const study::PhaseResult& p) { return p.device_peak; });
          },
          "bytes, the device tier's peak, largest over the programs")
      .def_property_readonly("moved_bytes",
                             [](const SimulationHandle& s) {
                               return if_ran(
                                   s, [](const study::PhaseResult& p) { return p.moved_bytes; });
                             })
      .def_property_readonly(
          "tier_peaks",
          [](const SimulationHandle& s) {
            return if_ran(s, [](const study::PhaseResult& p) { return p.tier_peak; });
          },
          "bytes per tier id, the largest instance")
      .def_property_readonly(
          "link_bytes",
          [](const SimulationHandle& s) {
            return if_ran(s, [](const study::PhaseResult& p) { return p.link_bytes; });
          },
          "bytes per link direction, instances summed")
      .def_property_readonly("busiest_link",
                             [](const SimulationHandle& s) {
                               return if_ran(
                                   s, [](const study::PhaseResult& p) { return p.busiest_link; });
                             })
      .def_property_readonly(
          "binding",
          [](const SimulationHandle& s) {
            return if_ran(s, [](const study::PhaseResult& p) { return p.binding; });
          },
          "what limits the plan: a link or tier port, or compute")
      .def(
          "report",
          [](const SimulationHandle& s, bool transfers) {
            return to_python(report_json(s, transfers));
          },
          py::arg("transfers") = false, "the report of `tierflow sim --json` (tierflow.report/1)")
      .def(
          "report_text", [](const SimulationHandle& s) { return report_text(s); },
          "the table `tierflow sim` prints")
      .def("__repr__", [](const SimulationHandle& s) {
        if (s.phase.sim->error)
          return fmt::format("<tierflow.Simulation failed: {}>", s.phase.sim->error->message);
        return fmt::format("<tierflow.Simulation makespan {:.6g} s, device peak {} bytes>",
                           seconds(s.phase.makespan_ps), s.phase.device_peak);
      });
}

void bind_functions(py::module_& m) {
  m.def(
      "load_topology",
      [](const std::string& name, const std::vector<std::string>& sets) {
        py::gil_scoped_release release;
        return std::make_shared<TopologyHandle>(load_topology(name, sets));
      },
      py::arg("name"), py::arg("sets"));

  m.def(
      "generate",
      [](const Fields& fields) {
        std::shared_ptr<WorkloadHandle> h;
        {
          py::gil_scoped_release release;
          h = std::make_shared<WorkloadHandle>(generate(fields));
        }
        warn_all(h->warnings);
        return h;
      },
      py::arg("fields"));

  m.def(
      "load_workload",
      [](const std::string& path) {
        py::gil_scoped_release release;
        return std::make_shared<WorkloadHandle>(load_workload(path));
      },
      py::arg("path"));

  m.def(
      "plan",
      [](const TopologyHandle& t, const WorkloadHandle& w, const PlanOptions& o) {
        py::gil_scoped_release release;
        return std::make_shared<PlanHandle>(make_plan(t, w, o));
      },
      py::arg("topology"), py::arg("workload"), py::arg("options"));

  py::class_<PlanOptions>(m, "PlanOptions")
      .def(py::init<>())
      .def_readwrite("policy", &PlanOptions::policy)
      .def_readwrite("pipeline", &PlanOptions::pipeline)
      .def_readwrite("device", &PlanOptions::device)
      .def_readwrite("devices", &PlanOptions::devices)
      .def_readwrite("budget", &PlanOptions::budget)
      .def_readwrite("max_overhead", &PlanOptions::max_overhead)
      .def_readwrite("pins", &PlanOptions::pins)
      .def_readwrite("threads", &PlanOptions::threads)
      .def_readwrite("verify_each", &PlanOptions::verify_each)
      .def_readwrite("on_host", &PlanOptions::on_host);

  m.def(
      "simulate",
      [](const PlanHandle& p, std::optional<std::shared_ptr<TopologyHandle>> topology, bool wait,
         const std::string& timeline) {
        py::gil_scoped_release release;
        return std::make_shared<SimulationHandle>(
            simulate(p, topology ? topology->get() : nullptr, SimRequest{wait, timeline}));
      },
      py::arg("plan"), py::arg("topology"), py::arg("wait_when_full"), py::arg("timeline"));

  m.def(
      "simulate_file",
      [](const std::string& path, const std::string& hw, const std::vector<std::string>& sets,
         bool wait, const std::string& timeline) {
        py::gil_scoped_release release;
        return std::make_shared<SimulationHandle>(
            simulate_file(path, hw, sets, SimRequest{wait, timeline}));
      },
      py::arg("path"), py::arg("hw"), py::arg("sets"), py::arg("wait_when_full"),
      py::arg("timeline"));

  // Replays return a plain dict that the package wraps in tierflow.Replay.
  const auto replay_dict = [](const ReplayHandle& h) {
    py::dict d;
    d["ok"] = !h.error.has_value();
    d["ran"] = h.ran;
    d["error"] = h.error ? py::object(py::str(h.error->message)) : py::object(py::none());
    d["error_kind"] = h.error
                          ? py::object(py::str(std::string(sim::error_kind_name(h.error->kind))))
                          : py::object(py::none());
    d["json"] = h.json;
    d["table"] = h.table;
    return d;
  };
  const auto replay_request = [](const std::string& backend, const std::string& copy,
                                 const std::string& compute, std::optional<int> device,
                                 const std::string& time_scale, const std::string& memory_limit,
                                 const std::string& timeline, const std::string& measured) {
    ReplayRequest r;
    r.measured = measured;
    r.settings.backend = backend;
    r.settings.copy = copy;
    r.settings.compute = compute;
    r.settings.device = device.value_or(0);
    r.settings.device_given = device.has_value();
    r.settings.time_scale = time_scale;
    r.settings.memory_limit = memory_limit;
    r.settings.cli = false;
    r.timeline = timeline;
    return r;
  };
  // A plan from plan() (`plan`), or a plan file (`path`, with `hw` and `sets`).
  m.def(
      "replay",
      [replay_dict, replay_request](const PlanHandle* plan, const std::string& path,
                                    const std::string& hw, const std::vector<std::string>& sets,
                                    std::optional<std::shared_ptr<TopologyHandle>> topology,
                                    const std::string& backend, const std::string& copy,
                                    const std::string& compute, std::optional<int> device,
                                    const std::string& time_scale, const std::string& memory_limit,
                                    const std::string& timeline, const std::string& measured) {
        const ReplayRequest r = replay_request(backend, copy, compute, device, time_scale,
                                               memory_limit, timeline, measured);
        ReplayHandle h;
        {
          py::gil_scoped_release release;
          h = plan != nullptr ? replay(*plan, topology ? topology->get() : nullptr, r)
                              : replay_file(path, hw, sets, r);
        }
        return replay_dict(h);
      },
      py::arg("plan").none(true), py::arg("path"), py::arg("hw"), py::arg("sets"),
      py::arg("topology"), py::arg("backend"), py::arg("copy"), py::arg("compute"),
      py::arg("device"), py::arg("time_scale"), py::arg("memory_limit"), py::arg("timeline"),
      py::arg("measured") = "");

  m.def(
      "serve",
      [](const Fields& fields) {
        ServeOutput out;
        {
          py::gil_scoped_release release;
          out = serve(fields);
        }
        return py::make_tuple(out.json, out.csv, out.notes);
      },
      py::arg("fields"));

  // The serving fields by name, as the CLI, sweeps and serve() take them (one list).
  m.def("serve_fields", [] {
    std::vector<std::string> out;
    for (const std::string_view f : study::serve_field_names()) out.emplace_back(f);
    return out;
  });

  m.def(
      "report",
      [](const py::list& plans, bool wait, size_t top, const std::string& output) {
        std::vector<PlanSource> sources;
        for (const py::handle& item : plans) sources.push_back(plan_source(item));
        ReportResult out;
        {
          py::gil_scoped_release release;
          out = report(sources, wait, top, output);
        }
        return py::make_tuple(out.html, out.errors);
      },
      py::arg("plans"), py::arg("wait_when_full"), py::arg("top"), py::arg("output"));

  m.def(
      "export_plan",
      [](const py::tuple& plan, const std::string& format, const std::string& output, bool wait,
         bool inline_workload, const std::string& stem) {
        const PlanSource source = plan_source(plan);
        ExportResult r;
        {
          py::gil_scoped_release release;
          r = export_plan(source, format, output, wait, inline_workload, stem);
        }
        return py::make_tuple(r.error ? py::object(py::str(*r.error)) : py::object(py::none()),
                              r.notes);
      },
      py::arg("plan"), py::arg("format"), py::arg("output"), py::arg("wait_when_full"),
      py::arg("inline_workload"), py::arg("stem"));

  m.def("export_formats", [] {
    py::list out;
    for (const exporter::Format& f : exporter::formats()) {
      out.append(py::make_tuple(std::string(f.name),
                                f.output == exporter::OutputKind::kFolder ? "folder" : "file",
                                std::string(f.description)));
    }
    return out;
  });

  m.def(
      "whatif",
      [](const Fields& fields, const std::string& question, const std::string& max_overhead,
         double min_throughput, double max_tpot_ms, const std::vector<std::string>& vary,
         const std::string& plan_out) {
        WhatIfRequest r;
        r.plan_out = plan_out;
        r.question = question_of(question);
        r.max_overhead = max_overhead;
        r.min_throughput = min_throughput;
        r.max_tpot_ms = max_tpot_ms;
        for (const std::string& v : vary) r.vary.push_back(study::parse_axis(v, "vary"));
        WhatIfResult out;
        {
          py::gil_scoped_release release;
          out = whatif(fields, r);
        }
        warn_all(out.warnings);
        return to_python(out.doc);
      },
      py::arg("fields"), py::arg("question"), py::arg("max_overhead"), py::arg("min_throughput"),
      py::arg("max_tpot_ms"), py::arg("vary"), py::arg("plan_out") = "");

  m.def(
      "compare",
      [](const Fields& fields, const std::vector<std::string>& policies) {
        CompareResult r;
        {
          py::gil_scoped_release release;
          r = compare(fields, policies);
        }
        warn_all(r.warnings);
        return py::make_tuple(table_to_python(r.table.columns, r.table.types, r.table.rows),
                              r.reference_s, r.best);
      },
      py::arg("fields"), py::arg("policies"));

  m.def(
      "sweep",
      [](const SweepRequest& r) {
        SweepResult s;
        {
          py::gil_scoped_release release;
          s = sweep(r);
        }
        py::dict summary;
        summary["name"] = s.name;
        summary["sweep_id"] = s.sweep_id;
        summary["db"] = s.db;
        summary["points"] = s.summary.points;
        summary["skipped"] = s.summary.skipped;
        summary["ran"] = s.summary.ran;
        summary["ok"] = s.summary.ok;
        summary["infeasible"] = s.summary.infeasible;
        summary["failed"] = s.summary.failed;
        summary["seconds"] = s.summary.seconds;
        summary["noted"] = s.summary.noted;  // points run with notes (the `notes` column)
        return py::make_tuple(table_to_python(s.table.columns, s.table.types, s.table.rows),
                              summary);
      },
      py::arg("request"));

  py::class_<SweepRequest>(m, "SweepRequest")
      .def(py::init<>())
      .def_readwrite("path", &SweepRequest::path)
      .def_readwrite("text", &SweepRequest::text)
      .def_readwrite("name", &SweepRequest::name)
      .def_readwrite("dir", &SweepRequest::dir)
      .def_readwrite("db", &SweepRequest::db)
      .def_readwrite("jobs", &SweepRequest::jobs)
      .def_readwrite("shard", &SweepRequest::shard)
      .def_readwrite("retry_failed", &SweepRequest::retry_failed);

  m.def(
      "columns",
      [] {
        py::list out;
        for (const study::Column& c : study::columns()) {
          py::dict d;
          d["name"] = c.name;
          d["type"] = std::string(study::kCellTypeNames[static_cast<size_t>(c.type)]);
          d["description"] = std::string(c.description);
          out.append(std::move(d));
        }
        return out;
      },
      "the study row's columns: name, type and description");

  m.def(
      "policies",
      [] {
        py::list out;
        for (const planner::Policy& p : planner::policies()) {
          py::dict d;
          d["name"] = std::string(p.name);
          d["pipeline"] = std::string(p.pipeline);
          d["summary"] = std::string(p.summary);
          out.append(std::move(d));
        }
        return out;
      },
      "the planning policies: name, pipeline and summary");

  m.def(
      "topologies", [] { return study::shipped_topology_names(); },
      "names of the shipped topologies");
  m.def(
      "models", [] { return traces::shipped_arch_names(study::config_dir()); },
      "names of the shipped models");
  m.def(
      "config_dir", [] { return study::config_dir(); }, "the folder holding hw/ and models/");
  m.def("parse_milliseconds", &study::parse_milliseconds, py::arg("text"), py::arg("source"),
        "a duration in milliseconds, as --max-tpot takes it ('50', '50ms', '0.05s')");
}

}  // namespace
}  // namespace tierflow::python

PYBIND11_MODULE(_tierflow, m) {
  using namespace tierflow::python;
  m.doc() = "tierflow's C++ core; use the `tierflow` package, which wraps it.";
  m.attr("__version__") = TIERFLOW_VERSION;
  m.attr("DEFAULT_MODEL") = std::string(tierflow::study::kDefaultModel);
  // The module holds the class; the translator borrows it.
  input_error_type = py::exception<tierflow::InputError>(m, "InputError", PyExc_ValueError).ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tierflow::InputError& e) {
      raise_input_error(e);
    }
  });
  bind_classes(m);
  bind_functions(m);
}
