"""tierflow for notebooks: plan and score how LLM tensors move across a memory hierarchy.

    import tierflow
    topo = tierflow.load_topology("h100-sxm-8gpu")
    w = tierflow.generate("llama-3-8b", batch=4, context=4096, tokens=8)
    p = tierflow.plan(topo, w, budget="8GiB")
    s = tierflow.simulate(p)
    s.makespan_s, s.device_peak

Every function takes the CLI's defaults as keyword arguments. Bad input raises
tierflow.InputError, a ValueError with .file, .line, .col and .message whose text is
"FILE:LINE:COL: message"; "does not fit" is a result, not an exception (Plan.ok is False and
Plan.infeasible True; a what-if answer has found False; a study row has status
'infeasible'). Any other failure inside tierflow raises RuntimeError. Tables (compare,
sweep, columns) are pandas DataFrames. The reference is docs/python.md.
"""

import difflib
import json
import math
import os
import warnings

# Tables are pandas DataFrames: without pandas, fail here with what to install rather than
# at the first table.
try:
    import pandas as _pandas  # noqa: F401
except ImportError as _e:
    raise ImportError(
        "tierflow needs pandas for its tables (compare, sweep, columns): install it "
        "(Debian: apt install python3-pandas; pip: pip install pandas)") from _e

try:
    from . import _tierflow
except ImportError as _e:
    raise ImportError(
        f"tierflow's compiled part (_tierflow) is not beside {os.path.dirname(__file__)}: that "
        "is the source tree's copy of the package. Build the module (scripts/main.sh builds "
        "build/release/python) and put that build's python/ folder first on PYTHONPATH") from _e
from ._tierflow import InputError, Plan, Simulation, Topology, Workload

__version__ = _tierflow.__version__
DEFAULT_MODEL = _tierflow.DEFAULT_MODEL  # the model a scenario without one runs, as the CLI's

# They are tierflow's: tracebacks and reprs name them so.
for _cls in (InputError, Plan, Simulation, Topology, Workload):
    _cls.__module__ = __name__
del _cls


class SimulationError(RuntimeError):
    """export(): the plan's simulation stopped (a broken rule, a full tier, programs waiting
    on each other), so nothing was written; the text names the plan and the step."""


__all__ = [
    "InputError", "SimulationError", "Topology", "Workload", "Plan", "Simulation", "Replay",
    "Serving", "DEFAULT_MODEL",
    "load_topology", "generate", "load_workload", "plan", "simulate", "replay", "serve",
    "whatif", "compare", "report", "export", "export_formats",
    "sweep", "columns", "policies", "topologies", "models",
]

# An installed package carries the shipped configs (hw/, models/) beside itself and points
# TIERFLOW_CONFIG_DIR there unless it is set; the build tree's module reads them from the
# source tree.
_BUNDLED_CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
if os.path.isdir(_BUNDLED_CONFIGS) and not os.environ.get("TIERFLOW_CONFIG_DIR"):
    os.environ["TIERFLOW_CONFIG_DIR"] = _BUNDLED_CONFIGS


def _input_error(source, message):
    """A tierflow.InputError for input that has no file position (an argument)."""
    err = InputError(f"{source}: {message}")
    err.file, err.line, err.col, err.message = source, None, None, message
    return err


def _text(value, name):
    """A field value as the scenario fields read it: words, integers, quantities."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{name}: expected a str, int, float or bool, not {type(value).__name__}")


def _out_path(value, name):
    """An output path ("" when None): an empty one is refused, as the CLI refuses it."""
    if value is None:
        return ""
    path = _text(value, name)
    if not path:
        raise _input_error(name, "an empty path: give a file name")
    return path


def _count(value, name, most=2**32 - 1):
    """A whole number from 0 to `most` (a bad value is an InputError naming the argument, not
    the binding's TypeError)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, not {type(value).__name__}")
    if not 0 <= value <= most:
        raise _input_error(name, f"expected a whole number from 0 to {most}, got {value}")
    return value


def _bytes(value, name):
    """Bytes: an int is a count of bytes, a str carries its unit ("40GiB")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected bytes as an int or a str such as '40GiB'")
    if isinstance(value, int):
        return f"{value}B"
    if isinstance(value, str):
        if not value.strip():  # "" would read as no value, the default, unnoticed
            raise _input_error(name, "an empty value; leave the argument out for its default")
        return value
    raise TypeError(f"{name}: expected bytes as an int or a str such as '40GiB', not {type(value).__name__}")


def _fraction(value, name):
    """A fraction: 0.01 or "1%"."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{name}: expected a fraction such as 0.01 or '1%'")
    return repr(value) if isinstance(value, float) else str(value)


def _strings(values, name):
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name}: expected a list of strings, not one string")
    return [_text(v, name) for v in values]


def _topology(topology, overrides=()):
    """A Topology from a Topology, a path or a shipped name (None: the default), with
    `overrides` after its own."""
    if isinstance(topology, Topology):
        if not overrides:
            return topology
        return load_topology(topology._unchanged_file(), set=list(topology.sets) + list(overrides))
    return load_topology(topology, set=overrides)


def _plan_topology(plan, topology, overrides):
    """The topology a Plan runs on: its own (None), or `topology` with the plan's own
    overrides first and `overrides` after them, as `sim --hw T --set ...` applies them to a
    plan file."""
    if topology is None and not overrides:
        return None
    if topology is None:
        return _topology(plan.topology, overrides)
    own = list(plan.topology.sets)
    if isinstance(topology, Topology):
        return load_topology(topology._unchanged_file(), set=own + list(topology.sets) + list(overrides))
    return load_topology(topology, set=own + list(overrides))


def _file_topology(topology, overrides):
    """(hw, overrides) for a plan file run on `topology` (None: the plan's own): a Topology's
    own overrides come before `overrides`, as `sim --hw T --set ...` applies them."""
    if isinstance(topology, Topology):
        return topology._unchanged_file(), list(topology.sets) + overrides
    return ("" if topology is None else _text(topology, "topology")), overrides


def _scenario_fields(fields, hw, sets, model_set):
    """(path, value) pairs for the study's scenario, `fields` in order (the command's
    defaults come first, in C++: study::set_command_defaults)."""
    out = []
    if hw is not None:
        if isinstance(hw, Topology):
            out.append(("hw", hw._unchanged_file()))
            out.extend(("set", s) for s in hw.sets)
        else:
            out.append(("hw", _text(hw, "hw")))
    out.extend(("set", s) for s in _strings(sets, "set"))
    for item in _strings(model_set, "model_set"):
        key, eq, value = item.partition("=")
        if not eq:
            raise _input_error("model_set", f"'{item}' is not KEY=VALUE")
        out.append((f"model.{key}", value))
    merged = dict(fields)
    # One workload source, as the CLI's --model, --hf-config and --workload exclude each other.
    sources = [k for k in ("model", "hf_config", "workload") if merged.get(k) is not None]
    if len(sources) > 1:
        raise _input_error(sources[1], f"give one of model, hf_config or workload, not "
                                       f"{' and '.join(sources)}")
    for path, value in merged.items():
        if value is None:
            continue
        if path == "budget":
            out.append((path, _bytes(value, path)))
        elif path == "pins":
            pins = _strings(value, path)
            for pin in pins:
                if ";" in pin:
                    raise _input_error(path, f"'{pin}' holds ';': give each pin as its own item")
            out.append((path, ";".join(pins)))
        else:
            out.append((path, _text(value, path)))
    return out


def _axes(vary):
    """--vary axes: {PATH: [V1, V2]} or ["PATH=V1,V2", ...]."""
    if vary is None:
        return []
    if isinstance(vary, dict):
        axes = []
        for path, values in vary.items():
            if isinstance(values, (str, bytes)):
                raise _input_error("vary", f"{path}: give its values as a list, not one string")
            texts = [_text(v, path) for v in values]
            if path == "pins":  # a partial pin's tiers, as --vary writes them: hbm:0.2+ddr:0.8
                texts = [t.replace(",", "+") for t in texts]
            for t in texts:
                if "," in t:
                    raise _input_error("vary", f"{path}: '{t}' holds ',', which separates values")
            axes.append(f"{path}=" + ",".join(texts))
        return axes
    return _strings(vary, "vary")


def _dtype(kind, values):
    """The pandas dtype of a column: from its declared type, else from its cells."""
    if not kind:
        present = [v for v in values if v is not None]
        if present and all(isinstance(v, bool) for v in present):
            kind = "BOOLEAN"
        elif present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            kind = "INTEGER"
        elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            kind = "REAL"
        else:
            kind = "TEXT"
    return {"INTEGER": "Int64", "REAL": "float64", "BOOLEAN": "boolean", "TEXT": object}[kind]


def _frame(table):
    """A DataFrame of (names, types, rows): integers and booleans as pandas' nullable
    Int64 and boolean, reals as float64 (NaN for null), text as str or None."""
    import pandas as pd

    names, types, rows = table
    data = {}
    for i, (name, kind) in enumerate(zip(names, types)):
        values = [row[i] for row in rows]
        data[name] = pd.Series(values, dtype=_dtype(kind, values))
    return pd.DataFrame(data, columns=names)


def load_topology(path=None, set=()):
    """Loads a topology: a YAML path or a shipped name ("h100-sxm-8gpu"; None: the
    default, h100-sxm-8gpu) with PATH=VALUE overrides (`tierflow hw show --set`)."""
    name = "" if path is None else _text(path, "path")
    return _tierflow.load_topology(name, _strings(set, "set"))


def generate(model=None, phase="decode", batch=1, seq=None, context=None, tokens=None, tp=1,
             layers=0, weight_dtype="bf16", kv_dtype="bf16", act_dtype="bf16", kv_block=256,
             checkpoint=False, routing=None, seed=1, hf_config=None, model_set=(),
             compute_dtype=None, quant_group=None, quant_zeros=False, routing_skew=0,
             routing_repeat=0, routing_trace=None, micro_batches=1, lenient=False):
    """Generates the operator graph of one step (`tierflow trace gen`): a shipped model
    name or a model YAML, or a Hugging Face config.json as `hf_config`; `model_set` holds
    KEY=VALUE overrides of the model's fields. `compute_dtype` (None: the activation
    dtype), `quant_group` (None: the weight dtype's default) and `quant_zeros` shape
    quantized weights as --compute-dtype, --quant-group and --quant-zeros do; `routing_skew`
    and `routing_repeat` shape the seeded router as --routing-skew and --routing-repeat;
    `routing_trace` (a tierflow.routing/1 file) gives the picks instead, with
    routing="seeded" (the default with a routing trace; else "expected"); `micro_batches`
    runs a decode batch as FlexGen's zig-zag blocks; `lenient` (with hf_config), as
    --lenient: unknown config.json fields that change no count are UserWarnings, not
    errors. model: None is DEFAULT_MODEL
    (llama-3.1-70b), the CLI's default. context: None is 4096, cut to the model's
    max_context less the tokens when that is shorter (with a UserWarning saying so), as
    trace gen does without --context. seq (prefill and training; None: 2048), context and
    tokens (decode; None: 1) and checkpoint (training) given to a step that does not read
    them raise InputError, as trace gen refuses the flags."""
    if model is not None and hf_config is not None:
        raise _input_error("hf_config", "give model or hf_config, not both")
    if lenient and hf_config is None:
        raise _input_error("lenient", "applies to an hf_config import")
    if routing is None:
        routing = "expected" if routing_trace is None else "seeded"
    if routing not in ("expected", "seeded"):  # as trace gen --routing takes it
        raise _input_error("routing", f"'{routing}' is not one of expected, seeded")
    if routing_trace is not None and seed != 1:  # as trace gen refuses --seed
        raise _input_error("seed", "a routing trace's picks are given, not drawn: it would be "
                           "ignored")
    if routing == "expected" and seed != 1:
        raise _input_error("seed", "it seeds the seeded router, and routing='expected' runs "
                           "none: it would be ignored")
    fields = [("hf_config", _text(hf_config, "hf_config")) if hf_config is not None
              else ("model", _text(DEFAULT_MODEL if model is None else model, "model"))]
    for item in _strings(model_set, "model_set"):
        key, eq, value = item.partition("=")
        if not eq:
            raise _input_error("model_set", f"'{item}' is not KEY=VALUE")
        fields.append((f"model.{key}", value))
    # A step's own arguments, given to a step that does not read them, would be ignored.
    decode = phase == "decode"
    for name, value, read in (("seq", seq, not decode), ("context", context, decode),
                              ("tokens", tokens, decode),
                              ("checkpoint", checkpoint or None, phase == "train")):
        if value is not None and not read and phase in ("decode", "prefill", "train"):
            takes = ("activation checkpointing is training's" if name == "checkpoint"
                     else "decode takes context (the tokens cached) and tokens (those generated)"
                     if decode else "prefill and training take seq (tokens per sequence)")
            raise _input_error(name, f"a {phase} step does not read it, so it would be ignored: "
                                     f"{takes}")
    if context is not None:
        fields.append(("context", _text(context, "context")))
    seq = 2048 if seq is None else seq
    tokens = 1 if tokens is None else tokens
    for name, value in (("phase", phase), ("batch", batch), ("seq", seq), ("tokens", tokens), ("tp", tp), ("layers", layers),
                        ("weight_dtype", weight_dtype), ("kv_dtype", kv_dtype),
                        ("act_dtype", act_dtype), ("kv_block", kv_block),
                        ("checkpoint", checkpoint), ("routing", routing), ("seed", seed),
                        ("compute_dtype", "" if compute_dtype is None else compute_dtype),
                        ("quant_group", "" if quant_group is None else quant_group),
                        ("quant_zeros", quant_zeros), ("routing_skew", routing_skew),
                        ("routing_repeat", routing_repeat),
                        ("routing_trace", "" if routing_trace is None else routing_trace),
                        ("micro_batches", micro_batches), ("lenient", lenient)):
        fields.append((name, _text(value, name)))
    return _tierflow.generate(fields)


def load_workload(path):
    """Reads and verifies a workload JSON (tierflow.workload/1)."""
    return _tierflow.load_workload(_text(path, "path"))


def plan(topology, workload, policy=None, budget=None, pins=(), devices=1, max_overhead=None,
         device=None, pipeline=None, threads=0, verify_each=False, on_host=None):
    """Plans a workload on a topology with the simulator in the loop (`tierflow plan`).

    topology: a Topology, a YAML path or a shipped name. workload: a Workload or a JSON path.
    policy: one of tierflow.policies() (default "tierflow"); pipeline: passes to run instead
    of a policy's (not both).
    budget: device bytes per program ("40GiB" or an int); max_overhead instead minimises
    the budget with the makespan within that of the fastest (0.01 or "1%"). pins:
    ["weight=ddr", ...]. devices: programs, one per device (0: every device of the class).
    on_host: op kinds the host CPU runs where it can ("attention"), as --on-host.
    Returns a Plan; when it does not fit, Plan.ok is False and Plan.infeasible True.
    """
    o = _tierflow.PlanOptions()
    o.policy = "" if policy is None else _text(policy, "policy")
    o.pipeline = "" if pipeline is None else _text(pipeline, "pipeline")
    o.device = "" if device is None else _text(device, "device")
    o.devices = _count(devices, "devices")
    o.budget = _bytes(budget, "budget")
    o.max_overhead = _fraction(max_overhead, "max_overhead")
    o.pins = _strings(pins, "pins")
    o.threads = _count(threads, "threads", 4096)
    o.verify_each = verify_each
    o.on_host = "" if on_host is None else _text(on_host, "on_host")
    if not isinstance(workload, Workload):
        workload = load_workload(workload)
    return _tierflow.plan(_topology(topology), workload, o)


def _on_full(value):
    """on_full as simulate(), report() and export() take it: True for "wait"."""
    if value not in ("fail", "wait"):
        raise _input_error("on_full", f"'{value}' is not 'fail' or 'wait'")
    return value == "wait"


def simulate(plan, topology=None, set=(), on_full="fail", timeline=None):
    """Simulates a plan (`tierflow sim`): a Plan from plan(), or a plan JSON path.

    topology: run it on this Topology, YAML path or shipped name instead of the plan's own;
    set: overrides applied after the plan's. on_full: "fail" (a full tier is an error) or
    "wait" (a memory stall). timeline: write the Chrome trace (Perfetto) there.
    Returns a Simulation; a plan that cannot run gives ok False and the error.
    """
    wait = _on_full(on_full)
    out = _out_path(timeline, "timeline")
    overrides = _strings(set, "set")
    if isinstance(plan, Plan):
        return _tierflow.simulate(plan, _plan_topology(plan, topology, overrides), wait, out)
    hw, overrides = _file_topology(topology, overrides)
    return _tierflow.simulate_file(_text(plan, "plan"), hw, overrides, wait, out)


def _plan_source(plan, topology, overrides):
    """(Plan or None, Topology or None, path, hw, sets) for the module: a Plan runs on
    `topology` (None: its own) with the overrides after its own; a plan file as `--hw
    --set` run it."""
    if isinstance(plan, Plan):
        return (plan, _plan_topology(plan, topology, overrides), "", "", [])
    if isinstance(plan, (str, os.PathLike)):
        hw, sets = _file_topology(topology, overrides)
        return (None, None, _text(plan, "plan"), hw, sets)
    raise TypeError(f"plan: expected a Plan or a plan JSON path, not {type(plan).__name__}")


def report(plans, topology=None, set=(), on_full="fail", top=40, output=None):
    """The HTML page `tierflow report` writes: each plan (a Plan, a plan JSON path, or a list
    of them) simulated with its memory by tensor kind, link bandwidth, activity and exposed
    waits over time; with several plans, a comparison. topology, set, on_full: as for
    simulate(), for every plan. top: rows of the exposed-wait table. output: also write the
    page there (atomically). Returns the page as a str. A run that stops is drawn up to the
    stop, and a UserWarning names its error (the CLI exits 1 or 3).
    """
    wait = _on_full(on_full)
    items = list(plans) if isinstance(plans, (list, tuple)) else [plans]
    if not items:
        raise _input_error("plans", "no plan: give a Plan, a plan JSON path or a list of them")
    overrides = _strings(set, "set")
    sources = [_plan_source(p, topology, overrides) for p in items]
    html, errors = _tierflow.report(sources, wait,
                                    _count(top, "top", most=1_000_000), _out_path(output, "output"))
    for error in errors:
        warnings.warn(error, UserWarning, stacklevel=2)
    return html


def export_formats():
    """The formats export() writes, as `tierflow export --list-formats`: a list of (name,
    "file" or "folder", description)."""
    return [tuple(f) for f in _tierflow.export_formats()]


def export(plan, format, output, topology=None, set=(), on_full="fail", inline_workload=False,
           stem=None):
    """Writes a plan, simulated once, in another format (`tierflow export`): plan a Plan or a
    plan JSON path; format one of export_formats() (chakra, csv, chrome, ...); output a
    file, or a folder for chakra (created when missing). topology, set, on_full: as for
    simulate(). inline_workload: plan-json embeds the workload (plan-json of a Plan is
    Plan.save()). stem: chakra's file names STEM.PROGRAM.et (default: the plan file's name,
    or the Plan's name). A simulation that stops writes nothing: SimulationError. What the
    CLI prints as a note (traces of another export left in a chakra folder) is a UserWarning.
    """
    wait = _on_full(on_full)
    if not isinstance(inline_workload, bool):
        raise TypeError(f"inline_workload: expected a bool, not {type(inline_workload).__name__}")
    source = _plan_source(plan, topology, _strings(set, "set"))
    error, notes = _tierflow.export_plan(source, _text(format, "format"),
                                         _out_path(output, "output"), wait, inline_workload,
                                         "" if stem is None else _text(stem, "stem"))
    if error is not None:
        raise SimulationError(error)
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=2)


class Replay:
    """A plan run for real and by the simulator (tierflow.replay, `tierflow replay`).

    ok: it ran to the end; error, error_kind: why not (None when ok). ran: it ran at all
    (a plan the topology or the memory limit refuses does not start). document: the
    `tierflow replay --json` document (tierflow.replay/1) as a dict, None when it did not
    run; table: the text `tierflow replay` prints. measured_s, simulated_s: the makespans;
    makespan_error: measured / simulated - 1; steps(): every measured step as a DataFrame.
    """

    def __init__(self, result):
        self.ok = result["ok"]
        self.ran = result["ran"]
        self.error = result["error"]
        self.error_kind = result["error_kind"]
        self.document = json.loads(result["json"]) if result["ran"] else None
        self.table = result["table"]

    def _makespan(self, which):
        return None if self.document is None else self.document["makespan_ps"][which] / 1e12

    @property
    def measured_s(self):
        return self._makespan("measured")

    @property
    def simulated_s(self):
        return self._makespan("simulated")

    @property
    def makespan_error(self):
        if self.document is None or self.document["makespan_ps"]["simulated"] == 0:
            return None
        m = self.document["makespan_ps"]
        return m["measured"] / m["simulated"] - 1

    def steps(self):
        """The measured steps (program, step, kind, issue_ps, start_ps, end_ps, waited_ps)."""
        import pandas as pd

        rows = [] if self.document is None else self.document["measured_steps"]
        cols = ["program", "step", "kind", "issue_ps", "start_ps", "end_ps", "waited_ps"]
        return pd.DataFrame(rows, columns=cols)

    def __repr__(self):
        if not self.ran:
            return f"<tierflow.Replay refused: {self.error}>"
        return (f"<tierflow.Replay {self.document['backend']}: measured {self.measured_s:.6g} s, "
                f"simulated {self.simulated_s:.6g} s ({100 * (self.makespan_error or 0):+.1f}%)"
                f"{'' if self.ok else ', stopped: ' + self.error}>")


def replay(plan, topology=None, set=(), backend="cpu", copy="paced", compute="timed",
           time_scale="auto", memory_limit=None, device=None, timeline=None, measured=None):
    """Runs a plan for real and compares it with the simulator (`tierflow replay`).

    plan: a Plan from plan(), or a plan JSON path. topology, set: as for simulate().
    backend: "cpu" (arenas in RAM, memcpy threads) or "cuda" (where the module was built
    with it). copy: "paced" or "native" (cpu); compute: "timed" or "gemm" (cuda); device:
    the CUDA device ordinal. time_scale: real seconds per plan second, or "auto".
    memory_limit: most memory the arenas may take, e.g. "512MiB" (default: the CLI's).
    timeline: write the measured timeline (Chrome trace) there. measured: instead of a run,
    a replay recorded earlier (`tierflow replay --json`) scored against this simulation, as
    --measured (the backend arguments are refused beside it). Returns a Replay.
    """
    if measured is not None:
        given = {"backend": backend != "cpu", "copy": copy != "paced", "compute": compute != "timed",
                 "time_scale": time_scale != "auto", "memory_limit": memory_limit is not None,
                 "device": device is not None}
        for key in [k for k, v in given.items() if v]:
            raise _input_error(key, "runs a replay; measured scores a recorded one instead")
    args = (_text(backend, "backend"), _text(copy, "copy"), _text(compute, "compute"),
            None if device is None else _count(device, "device", 2**31 - 1), str(time_scale),
            "" if memory_limit is None else _text(memory_limit, "memory_limit"),
            _out_path(timeline, "timeline"), _out_path(measured, "measured"))
    overrides = _strings(set, "set")
    if isinstance(plan, Plan):
        return Replay(_tierflow.replay(plan, "", "", [], _plan_topology(plan, topology, overrides),
                                       *args))
    hw, overrides = _file_topology(topology, overrides)
    return Replay(_tierflow.replay(None, _text(plan, "plan"), hw, overrides, None, *args))


class Serving:
    """A serving run (tierflow.serve, `tierflow serve`).

    summary: the `tierflow serve --json` document (tierflow.serve/1) as a dict (of the run at
    the answer, for a search); answer: the search's `tierflow.serve-answer/1` document, or
    None;
    requests: one row per request as a DataFrame (the `-o` CSV's columns; empty for
    cache_only); levels: the cache levels as a DataFrame; replicas: each replica's work as a
    DataFrame (the summary's `replica_work`: role, requests, iterations, busy_s, compute_s,
    prompt_tokens, output_tokens, preemptions; empty for cache_only); notes: what the trace
    reader and the settings said (the CLI's notes: e.g. kv_tiers listed slower first).
    """

    def __init__(self, result):
        import io

        import pandas as pd

        text, csv, notes = result
        document = json.loads(text)
        self.answer = None
        if document["format"] == "tierflow.serve-answer/1":
            self.answer = document
            document = document["run"] or {"levels": [], "cache_only": False}
        self.summary = document
        self.requests = pd.read_csv(io.StringIO(csv)) if csv else pd.DataFrame()
        self.levels = pd.DataFrame(self.summary["levels"])
        self.replicas = pd.DataFrame(self.summary.get("replica_work", []))
        self.notes = list(notes)

    def __repr__(self):
        s = self.summary
        if self.answer is not None:
            a = self.answer
            return (f"<tierflow.Serving {a['question']} for {a['target']['metric']}: "
                    f"{a['answer'] if a['found'] else 'none found'}>")
        if s["cache_only"]:
            return f"<tierflow.Serving cache only: {s['requests']} requests>"
        return (f"<tierflow.Serving {s['model']} on {s['topology']}: {s['finished']} requests, "
                f"p99 TTFT {s['ttft']['p99_s']} s>")


# The serving fields as the CLI and sweeps name them (tierflow's one list), and what only a
# run of serve() takes besides: its outputs and a search.
_SERVE_ARGS = tuple(_tierflow.serve_fields()) + ("timeline", "report", "find", "target")


def serve(trace=None, arrivals=None, set=(), model_set=(), **options):
    """Serves a request trace (`tierflow serve`): `trace` (a Mooncake JSONL or Azure CSV
    path) or `arrivals` (a generator spec, "poisson,rate=5/s,n=1000,..."); `set` topology
    and `model_set` model overrides; the other options as the CLI's flags with `_`: hw,
    model, hf_config, tp (default: the least that leaves room for KV, in `notes`), pp
    (pipeline stages per replica, each of tp devices; default 1, or with tp not given
    either, the least that leave room where no TP does, in `notes`), replicas (default:
    as many as the devices hold beside any prefill replicas), prefill_replicas (disaggregated prefill: that many
    prefill-only replicas, `replicas` then decode), prefill_tp (theirs; default tp), device,
    router, decode_router (disaggregated: least-loaded, round-robin or prefix), device_policy, preemption, swap_space,
    swap_tier, spec_tokens, spec_accept, spec_draft (speculative decoding: draft tokens per
    step, each one's acceptance probability, a draft model or none for n-gram lookup),
    token_budget, max_seqs, kv_tiers, load,
    slo, rate_scale, first, block_tokens, warmup, weight_dtype, kv_dtype, act_dtype,
    cache_only, timeline, report (the HTML page `--report` writes: latency CDFs, hits per
    level, levels and sequences over time; with find, of the run at the answer). Returns a
    Serving; with find ("max-rate", "min-replicas", "min-devices", "split",
    "min-capacity:TIER", "upgrade") and target ("p99-ttft=2s", "goodput=95%", "hit=30%"), the search
    `tierflow serve --find` runs, as a Serving of the run at the answer whose `answer` holds
    the `tierflow.serve-answer/1` document (None: a plain run).
    """
    fields = []
    for key, value in (("trace", trace), ("arrivals", arrivals)):
        if value is not None:
            fields.append((key, _text(value, key)))
    for key, value in options.items():
        if key not in _SERVE_ARGS:
            close = difflib.get_close_matches(key, _SERVE_ARGS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise TypeError(f"serve() got an unexpected argument '{key}'{hint}")
        if value is None:
            continue
        if isinstance(value, Topology):
            fields.extend(("set", v) for v in value.sets)
            value = value._unchanged_file()
        fields.append((key, _out_path(value, key) if key in ("timeline", "report")
                       else _text(value, key)))
    fields.extend(("set", v) for v in _strings(set, "set"))
    fields.extend(("model_set", v) for v in _strings(model_set, "model_set"))
    return Serving(_tierflow.serve(fields))


_serve = serve  # whatif's `serve` argument (the settings) hides the function




def _limit(value, name, milliseconds=False):
    """A limit of a what-if search: a finite number above 0 (max_tpot: in ms, or a duration
    such as "50ms" or "0.05s"), as the CLI's --min-throughput and --max-tpot take them."""
    number = value
    if milliseconds and isinstance(value, str):
        number = _tierflow.parse_milliseconds(_text(value, name), name)  # as --max-tpot reads it
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise _input_error(name, f"expected a number, not {type(value).__name__}")
    if not math.isfinite(number) or number <= 0:
        raise _input_error(name, f"must be a finite number above 0, got {value!r}")
    return float(number)


def whatif(question="min-memory", max_overhead=None, min_throughput=None, max_tpot=None, vary=None,
           hw=None, set=(), model_set=(), trace=None, arrivals=None, target=None, serve=None,
           plan_out=None, **fields):
    """Answers a capacity question by search (`tierflow whatif --json`): min-memory,
    max-batch, max-context or upgrade. Returns the tierflow.whatif/1 document as a dict.

    About a service (`trace` or `arrivals` given, as `tierflow whatif --trace`): max-rate,
    min-replicas, min-devices, min-capacity:TIER, split or upgrade meeting `target` ("p99-ttft=2s"), the
    deployment from hw, set, model_set and the keywords model, hf_config, tp, device and the
    dtypes, the serving settings as `serve` ({FIELD: VALUE}, the fields of serve()).
    Returns the tierflow.serve-answer/1 document, the same as serve(find=...).answer.

    The scenario: `hw` (a Topology, YAML path or shipped name), `set` (topology overrides
    PATH=VALUE), `model_set` (model overrides KEY=VALUE) and any scenario field as a keyword
    (model, phase, batch, context, tokens, prompt, generate, budget, policy, layers, ...;
    tierflow.columns() and docs/python.md list them; `**{"tiers.hbm.capacity": "8GB"}`
    works too), starting from the command's defaults: batch 16, context 32768, tokens 8 (a
    default context past the model's max_context is cut to it, which the answer's note says).
    vary: {PATH: [V1, V2, ...]} answers for every point of the grid. plan_out: write the
    plan of the (first point's) answer there, as --plan-out (`tierflow sim --plan` runs it).
    """
    if trace is not None or arrivals is not None:
        step = "describes a step, not a service: a question about a service (trace or arrivals) " \
               "takes serve={FIELD: VALUE}"
        given = {"max_overhead": max_overhead is not None,
                 "min_throughput": min_throughput is not None, "max_tpot": max_tpot is not None,
                 "vary": vary is not None, "plan_out": plan_out is not None}
        deployment = ("model", "hf_config", "tp", "device", "weight_dtype", "kv_dtype", "act_dtype")
        for key in [k for k, v in given.items() if v] + [k for k in fields if k not in deployment]:
            raise _input_error(key, step)
        if target is None:
            raise _input_error("target", "a service question needs target METRIC=BOUND")
        if question == "min-memory":  # the step question, the default
            raise _input_error("question", "a question about a service is max-rate, min-replicas, "
                                           "min-devices, min-capacity:TIER, split or upgrade: "
                                           "give question=...")
        settings = {} if serve is None else serve
        if not isinstance(settings, dict):
            raise _input_error("serve", "expected a dict {FIELD: VALUE}, e.g. {'kv_tiers': 'ddr:1TB'}")
        for key in settings:
            if key in deployment or key in ("hw", "set", "model_set"):
                raise _input_error("serve", f"{key}: give it as whatif's {key}, not a serving setting")
            if key not in _SERVE_ARGS or key in ("trace", "arrivals", "find", "target", "timeline",
                                                 "report"):
                settings_names = [k for k in _SERVE_ARGS if k not in deployment + (
                    "hw", "trace", "arrivals", "find", "target", "timeline", "report")]
                close = difflib.get_close_matches(str(key), settings_names, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise _input_error("serve", f"{key}: not a serving setting of a question{hint}")
        options = dict(fields)
        options.update(settings)
        serving = _serve(trace=trace, arrivals=arrivals, set=set, model_set=model_set, hw=hw,
                         find=question, target=target, **options)
        # What the CLI notes on its standard error (a TP chosen, KV tiers listed slower first).
        for note in serving.notes:
            warnings.warn(note, UserWarning, stacklevel=2)
        return serving.answer
    # A limit the question does not use is refused, not ignored (as the CLI does).
    question = _text(question, "question")
    for name, value in (("target", target), ("serve", serve)):
        if value is not None:
            raise _input_error(name, "is for a question about a service: give trace or arrivals")
    if max_overhead is not None and question != "min-memory":
        raise _input_error("max_overhead", f"applies to question min-memory only (not {question})")
    for name, value in (("min_throughput", min_throughput), ("max_tpot", max_tpot)):
        if value is not None and question not in ("max-batch", "max-context"):
            raise _input_error(name, f"applies to question max-batch and max-context only "
                                     f"(not {question})")
    throughput = 0.0 if min_throughput is None else _limit(min_throughput, "min_throughput")
    tpot = 0.0 if max_tpot is None else _limit(max_tpot, "max_tpot", milliseconds=True)
    overhead = "1%" if max_overhead is None else _fraction(max_overhead, "max_overhead")
    return _tierflow.whatif(_scenario_fields(fields, hw, set, model_set),
                            question, overhead, throughput, tpot, _axes(vary),
                            _out_path(plan_out, "plan_out"))


def compare(policies=None, hw=None, set=(), model_set=(), **fields):
    """Every policy (or those named) on one scenario: the rows of `tierflow compare --csv`,
    a DataFrame with one study row per policy (with realistic MoE routing, the default, each
    policy's realistic row then its oracle row: the `routing` column tells them apart),
    columns as tierflow.columns(). `frame.attrs` holds `resident_reference_s` (the resident
    plan on unlimited memory, the fastest any plan can be) and `best` (the fastest row a
    runtime can run: its policy, as `compare --json` names it). The scenario as for whatif(), from the command's
    defaults: batch 1, context 4096, tokens 8 (a default context past the model's
    max_context is cut to it, with a UserWarning)."""
    names = [] if policies is None else _strings(policies, "policies")
    table, reference, best = _tierflow.compare(
        _scenario_fields(fields, hw, set, model_set), names)
    frame = _frame(table)
    frame.attrs["resident_reference_s"] = reference
    frame.attrs["best"] = best
    return frame


def sweep(spec, db=None, jobs=0, shard=None, retry_failed=False):
    """Runs a sweep (`tierflow sweep`) and returns its results table as a DataFrame: point,
    the axes that are not study columns, exit_class, then the study columns (for a spec of
    `kind: serve`, the serving columns: docs/sweeps.md, "Serving sweeps").

    spec: a path to a sweep YAML, the YAML text itself (any text with a line break), or a
    dict of the same shape (base, axes, name, description). db: a SQLite file to record
    into (a rerun resumes it; see docs/sweeps.md), None to keep it in memory. jobs: points
    at once (0: one per hardware thread). shard: "I/N" or (I, N). The DataFrame's
    attrs["sweep"] holds name, sweep_id, points, ran, ok, infeasible, failed, seconds.
    """
    r = _tierflow.SweepRequest()
    if isinstance(spec, dict):
        r.text = json.dumps(spec, indent=2)
        r.name = "<dict>"
        r.dir = os.getcwd()
    elif isinstance(spec, str) and "\n" in spec:
        r.text = spec
        r.dir = os.getcwd()
    else:
        r.path = _text(spec, "spec")
    r.db = ":memory:" if db is None else _text(db, "db")
    r.jobs = _count(jobs, "jobs", 4096)
    if shard is not None:
        if isinstance(shard, tuple) and len(shard) != 2:
            raise _input_error("shard", f"{shard!r}: give (I, N) or \"I/N\"")
        r.shard = f"{shard[0]}/{shard[1]}" if isinstance(shard, tuple) else _text(shard, "shard")
    r.retry_failed = retry_failed
    table, summary = _tierflow.sweep(r)
    frame = _frame(table)
    frame.attrs["sweep"] = summary
    return frame


def columns():
    """The study row's columns as a DataFrame: name, type and description."""
    import pandas as pd

    return pd.DataFrame(_tierflow.columns(), columns=["name", "type", "description"])


def policies():
    """The planning policies: a list of dicts with name, pipeline and summary."""
    return _tierflow.policies()


def topologies():
    """Names of the shipped topologies (configs/hw)."""
    return _tierflow.topologies()


def models():
    """Names of the shipped models (configs/models)."""
    return _tierflow.models()
