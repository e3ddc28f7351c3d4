"""Reading a tierflow.plan/2 (or /1) file (docs/formats.md) and the workload it refers to.

Only what the runtime needs is checked here: the shapes of the fields, references that
exist, one program. The plan rules themselves (residency, events, data loss) are checked
by `tierflow plan verify` and, as the plan runs, by the executor, which names the step that
breaks one.
"""

import hashlib
import json
import os

from .errors import InputError

PLAN_FORMAT = "tierflow.plan/2"
PLAN_FORMATS = (PLAN_FORMAT, "tierflow.plan/1")
WORKLOAD_FORMAT = "tierflow.workload/1"
STEP_KINDS = ("compute", "prefetch", "store", "detach")

# Workload fields with defaults (docs/formats.md): filled in before two workloads are compared.
TENSOR_DEFAULTS = {"dtype": "bf16", "layer": -1}
OP_DEFAULTS = {"dtype": "bf16", "updates": [], "workspace": 0, "layer": -1,
               "collective_bytes": 0}


class Step:
    """One program step: kind (compute, prefetch, store, detach), target (op or tensor id),
    tier (prefetch: from, store: to), event (or None), wait (event ids), index (position
    in the program)."""
    __slots__ = ("index", "kind", "target", "tier", "event", "wait")

    def __init__(self, index, kind, target, tier, event, wait):
        self.index, self.kind, self.target = index, kind, target
        self.tier, self.event, self.wait = tier, event, wait

    def describe(self, workload):
        """`compute 'NAME'`, `prefetch 'T' from ddr`, ... with names from the workload."""
        if self.kind == "compute":
            return f"compute '{workload['ops'][self.target]['name']}'"
        name = workload["tensors"][self.target]["name"]
        if self.kind == "prefetch":
            return f"prefetch '{name}' from {self.tier}"
        if self.kind == "store":
            return f"store '{name}' to {self.tier}"
        return f"detach '{name}'"


class Plan:
    """A plan: name, meta, path, device_tier, tiers, home (tier per tensor), steps (of its
    one program) and workload (the document, loaded from its file or inline)."""

    def __init__(self, doc, path, workload, workload_path):
        self.doc = doc
        self.path = path
        self.name = doc.get("name", "")
        self.meta = doc.get("meta") or {}
        # plan/2 keeps the budget as a field; plan/1 kept it in meta.
        self.budget = doc.get("budget", self.meta.get("budget"))
        self.device_tier = doc["device_tier"]
        self.tiers = list(doc.get("tiers") or [])
        self.home = list(doc["home"])
        self.workload = workload
        self.workload_path = workload_path
        self.steps = []

    def cache_steps(self):
        """(index, kind, tensor) of every cache step, in program order."""
        return [(s.index, s.kind, s.target) for s in self.steps if s.kind != "compute"]


def read_json(path, what):
    """The JSON document at path; InputError naming the file (and file:line:col) else."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}:{e.colno}: {e.msg} ({what})") from None


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_plan(path):
    """Reads a plan file and its workload; raises InputError naming the file and the fault."""
    doc = read_json(path, "a tierflow.plan/2 file is expected")
    if isinstance(doc, dict) and doc.get("format") == "tierflow.plan/3":
        raise InputError(f"{path}: the plan computes on the host (tierflow.plan/3), which "
                         "this runtime does not run yet: `tierflow sim` simulates it")
    if not isinstance(doc, dict) or doc.get("format") not in PLAN_FORMATS:
        raise InputError(f"{path}: not a {PLAN_FORMAT} file (format "
                         f"{doc.get('format') if isinstance(doc, dict) else None!r})")
    for key in ("workload", "device_tier", "home", "programs"):
        if key not in doc:
            raise InputError(f"{path}: missing key '{key}'")
    ref = doc["workload"]
    if isinstance(ref, dict) and "inline" in ref:
        workload, workload_path = ref["inline"], None
    elif isinstance(ref, dict) and "file" in ref:
        workload_path = os.path.join(os.path.dirname(os.path.abspath(path)), ref["file"])
        if not os.path.exists(workload_path):
            raise InputError(f"{path}: its workload {ref['file']} does not exist "
                             f"(looked for {workload_path})")
        if ref.get("sha256") and _sha256(workload_path) != ref["sha256"]:
            raise InputError(f"{path}: its workload {workload_path} changed since the plan "
                             "was made (sha256 differs)")
        workload = read_json(workload_path, "a tierflow.workload/1 file is expected")
    else:
        raise InputError(f"{path}: 'workload' must be {{\"file\": ...}} or {{\"inline\": ...}}")
    if not isinstance(workload, dict) or workload.get("format") != WORKLOAD_FORMAT:
        raise InputError(f"{path}: its workload is not a {WORKLOAD_FORMAT} document")
    plan = Plan(doc, path, workload, workload_path)
    ntensors, nops = len(workload.get("tensors", [])), len(workload.get("ops", []))
    if len(plan.home) != ntensors:
        raise InputError(f"{path}: 'home' has {len(plan.home)} tiers for {ntensors} tensors")
    programs = doc["programs"]
    if not isinstance(programs, list) or len(programs) != 1:
        raise InputError(f"{path}: the runtime runs one program (one device); the plan has "
                         f"{len(programs) if isinstance(programs, list) else 0}")
    for i, raw in enumerate(programs[0].get("steps", [])):
        where = f"{path}: programs[0].steps[{i}]"
        kinds = [k for k in STEP_KINDS if k in raw]
        if len(kinds) != 1:
            raise InputError(f"{where}: a step has exactly one of {', '.join(STEP_KINDS)}")
        kind = kinds[0]
        target = raw[kind]
        limit = nops if kind == "compute" else ntensors
        if not isinstance(target, int) or not 0 <= target < limit:
            raise InputError(f"{where}: {kind} {target!r} names no "
                             f"{'op' if kind == 'compute' else 'tensor'} of the workload")
        tier = raw.get("from") if kind == "prefetch" else raw.get("to")
        if kind in ("prefetch", "store") and not isinstance(tier, str):
            raise InputError(f"{where}: {kind} needs '{'from' if kind == 'prefetch' else 'to'}'")
        wait = raw.get("wait") or []
        if not isinstance(wait, list) or not all(isinstance(e, int) for e in wait):
            raise InputError(f"{where}: 'wait' must be a list of event ids")
        plan.steps.append(Step(i, kind, target, tier, raw.get("event"), list(wait)))
    return plan


def normalized(workload):
    """The workload's tensors and ops with every default filled in, for comparison."""
    tensors = [dict(TENSOR_DEFAULTS, **t) for t in workload.get("tensors", [])]
    ops = [dict(OP_DEFAULTS, **o) for o in workload.get("ops", [])]
    return tensors, ops


def first_difference(a, b):
    """Where two workloads' tensors and ops first differ, as text, or None when they agree."""
    ta, oa = normalized(a)
    tb, ob = normalized(b)
    for what, xs, ys in (("tensors", ta, tb), ("ops", oa, ob)):
        if len(xs) != len(ys):
            return f"{len(xs)} {what} against {len(ys)}"
        for i, (x, y) in enumerate(zip(xs, ys)):
            if x != y:
                keys = [k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
                k = keys[0]
                return (f"{what}[{i}] ('{y.get('name')}'): {k} is {x.get(k)!r} in the model, "
                        f"{y.get(k)!r} in the plan")
    return None
