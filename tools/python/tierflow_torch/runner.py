"""One run: load the plan and the model, place every tensor at its home, execute the
program, compare with the un-offloaded model and with the simulator's prediction."""

import json
import os
import shutil
import subprocess
import time

from .errors import InputError
from .executor import Executor
from .memory import CpuBackend, CudaBackend, Memory
from .model import load_model
from .plan import load_plan
from .reference import run_reference

REPORT_FORMAT = "tierflow.torch_run/1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def find_tierflow(explicit=None):
    """The tierflow CLI: the given path, $TIERFLOW_BIN, `tierflow` on PATH, or this source
    tree's build (build/test, build/release); None when there is none."""
    candidates = [explicit, os.environ.get("TIERFLOW_BIN"), shutil.which("tierflow"),
                  os.path.join(ROOT, "build", "test", "tools", "tierflow"),
                  os.path.join(ROOT, "build", "release", "tools", "tierflow")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    if explicit:
        raise InputError(f"--tierflow {explicit}: not an executable")
    return None


def simulate(plan_path, sim_report=None, tierflow=None):
    """The simulator's report on the plan (`tierflow sim --plan PLAN --json`), read from
    sim_report when given; (report, None) or (None, why not)."""
    if sim_report:
        try:
            with open(sim_report, encoding="utf-8") as f:
                return json.load(f), None
        except OSError as e:
            raise InputError(f"--sim-report {sim_report}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise InputError(f"--sim-report {sim_report}:{e.lineno}:{e.colno}: {e.msg}") \
                from None
    binary = find_tierflow(tierflow)
    if binary is None:
        return None, "no tierflow CLI found (--tierflow, $TIERFLOW_BIN or PATH)"
    result = subprocess.run([binary, "sim", "--plan", plan_path, "--json"], capture_output=True,
                            text=True, timeout=3600)
    if result.returncode != 0:
        why = result.stderr.strip() or "no message"
        return None, f"tierflow sim failed (exit {result.returncode}): {why}"
    return json.loads(result.stdout), None


def predicted(report, device_tier):
    """(peak bytes, makespan in ps) of the device tier's first instance, from a sim report."""
    if report is None:
        return None, None
    tiers = [t for t in report.get("tiers", []) if t.get("tier") == device_tier]
    tiers.sort(key=lambda t: t.get("instance", 0))
    return (tiers[0]["peak"] if tiers else None), report.get("makespan_ps")


def dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def compare(torch, name, got, want):
    """One equality check, as a report row."""
    row = {"name": name, "dtype": dtype_name(want), "shape": list(want.shape)}
    if got is None:
        row.update(equal=False, why="the plan kept no copy of it")
        return row
    got = got.detach().cpu()
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        row.update(equal=False, why=f"got {dtype_name(got)} {list(got.shape)}")
        return row
    equal = bool(torch.equal(got, want))
    row["equal"] = equal
    if not equal:
        diff = (got.double() - want.double()).abs()
        row["why"] = f"max abs difference {diff.max().item():.3g}"
    return row


MARK_SAMPLES = 256  # profile marks timed after a profiled run, for mark_host_us


def mark_host_us(backend, n=MARK_SAMPLES):
    """The host time of one profile mark (a timing event made and recorded), in
    microseconds: what --profile adds to each compute step and copy; None on the CPU."""
    if backend.name != "cuda":
        return None
    t0 = time.perf_counter_ns()
    for _ in range(n):
        backend.profile_mark("compute")
    us = (time.perf_counter_ns() - t0) / n / 1e3
    backend.synchronize()
    return round(us, 3)


def profile_report(records, t0_ns, start=None, mark_us=None):
    """The profile of a run (Executor.run's records): every step's host interval and, on
    CUDA, the interval of its work on its stream, in microseconds from the run's start
    (host: the clock read before the first step; stream: the start event), per kind of
    step the totals, and the host time of one profile mark (mark_host_us)."""
    def us(mark):
        return None if mark is None or start is None else round(start.elapsed_time(mark) * 1e3, 3)
    steps, totals = [], {}
    for index, kind, target, h0, h1, m0, m1 in records:
        row = {"step": index, "kind": kind, "target": target,
               "host_begin_us": round((h0 - t0_ns) / 1e3, 3),
               "host_end_us": round((h1 - t0_ns) / 1e3, 3),
               "stream_begin_us": us(m0), "stream_end_us": us(m1)}
        steps.append(row)
        t = totals.setdefault(kind, {"steps": 0, "host_us": 0.0, "stream_us": 0.0})
        t["steps"] += 1
        t["host_us"] += row["host_end_us"] - row["host_begin_us"]
        if row["stream_begin_us"] is not None and row["stream_end_us"] is not None:
            t["stream_us"] += row["stream_end_us"] - row["stream_begin_us"]
    for t in totals.values():
        t["host_us"] = round(t["host_us"], 3)
        t["stream_us"] = round(t["stream_us"], 3) if start is not None else None
    return {"steps": steps, "totals": totals, "mark_host_us": mark_us}


def memory_report(records, wl):
    """The memory profile of a run (Executor.run's memory records): every step's tracked
    bytes before and after it and, on CUDA, the caching allocator's bytes after it and the
    most it held while the step was issued; and the runtime's extra: the most the allocator
    held beyond the plan's tensors (the more of the tracked bytes before and after the step)
    and the running op's workspace, with the step where (None on the CPU)."""
    steps, extra = [], None
    for index, kind, target, before, after, allocated, peak in records:
        workspace = wl.ops[target].workspace if kind == "compute" else 0
        steps.append({"step": index, "kind": kind, "target": target, "tracked_before": before,
                      "tracked_after": after, "workspace": workspace,
                      "allocated": allocated, "peak_allocated": peak})
        if peak is not None:
            over = peak - max(before, after) - workspace
            if extra is None or over > extra["bytes"]:
                extra = {"bytes": over, "step": index, "kind": kind, "target": target}
    peaks = [r["peak_allocated"] for r in steps if r["peak_allocated"] is not None]
    return {"steps": steps, "tracked_peak": max((r["tracked_after"] for r in steps), default=0),
            "allocated_peak": max(peaks) if peaks else None, "extra": extra}


def run(plan_path, source, device="cpu", check=False, sim_report=None, tierflow=None,
        profile=False, memory_profile=False):
    """Runs the plan at plan_path on the model `source` names (see model.exporter_args) and
    returns the report (a dict, REPORT_FORMAT). With profile, the report's "profile" holds
    every step's host and stream intervals (profile_report; timing events on CUDA cost the
    run a little); with memory_profile, "memory_profile" every step's bytes (memory_report;
    the allocator's peak reset before every step, which costs the host time: not a run to
    time). Raises InputError on bad input and PlanError when a step cannot run as
    the plan says."""
    clock = time.perf_counter
    t0 = clock()
    plan = load_plan(plan_path)
    model = load_model(source, plan.workload.get("meta"))
    model.check_against(plan)
    torch = model.torch
    t_trace = clock() - t0

    if device not in ("cpu", "cuda"):
        raise InputError(f"device {device!r}: cpu or cuda")
    backend = CudaBackend(torch) if device == "cuda" else CpuBackend(torch)
    if backend.name == "cuda":
        # Exact equality with the un-offloaded run needs the same kernels to give the same
        # bits: no autotuned or nondeterministic cuDNN algorithms.
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    memory = Memory(torch, backend, plan.workload, plan)
    wl = model.wl
    state_of = {}
    for _, (p_tid, states) in wl.optimizer.items():
        for s in states:
            state_of[s] = p_tid
    resized = []
    for t in wl.tensors:
        if t.origin != "external":
            continue
        if t.kind == "optimizer_state":
            # As torch.optim.AdamW makes them: zeros like the weight (its dtype).
            value = torch.zeros_like(model.values[state_of[t.id]])
        else:
            value = model.values[t.id]
        if value.numel() * value.element_size() != t.bytes:
            resized.append(t.name)
        memory.place_external(t.id, value)

    reference, t_reference = None, None
    if check:
        t1 = clock()
        reference = run_reference(model, backend.device)
        t_reference = clock() - t1
    model.release_weights()

    executor = Executor(model, plan, memory, backend)
    measured = {}
    records = [] if profile else None
    memory_records = [] if memory_profile else None
    start = None
    if backend.name == "cuda":
        backend.timing = bool(profile)
        backend.synchronize()
        torch.cuda.reset_peak_memory_stats(backend.device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(backend.compute)
        backend.begin(start)
    t2_ns = time.perf_counter_ns()
    t2 = clock()
    executor.run(records, memory_records)
    if backend.name == "cuda":
        backend.join()
        end.record(backend.compute)
        backend.synchronize()
        measured["makespan_s"] = start.elapsed_time(end) / 1e3
        measured["peak_bytes"] = torch.cuda.max_memory_allocated(backend.device)
    t_run = clock() - t2

    sim, sim_note = simulate(plan.path, sim_report, tierflow)
    peak_pred, makespan_ps = predicted(sim, plan.device_tier)

    steps = plan.steps
    counts = {k: sum(1 for s in steps if s.kind == k)
              for k in ("compute", "prefetch", "store", "detach")}
    executed_cache = [e for e in executor.executed if e[1] != "compute"]
    report = {
        "format": REPORT_FORMAT,
        "plan": plan.name,
        "policy": plan.meta.get("policy"),
        "device": backend.name,
        "model": model.doc["meta"].get("model"),
        "phase": model.doc["meta"].get("phase"),
        "batch": model.doc["meta"].get("batch"),
        "ops": len(wl.ops),
        "tensors": len(wl.tensors),
        "steps": dict(executed=len(executor.executed), **counts),
        "cache_steps_in_plan_order": executed_cache == plan.cache_steps(),
        "device_bytes": {
            "tracked_peak": memory.peak,
            "tracked_peak_step": memory.peak_step,
            "predicted_peak": peak_pred,
            "budget": plan.budget,
            "within_predicted": None if peak_pred is None else memory.peak <= peak_pred,
            "final": memory.current,
        },
        "timings": {"trace_s": round(t_trace, 3), "run_s": round(t_run, 3),
                    "reference_s": None if t_reference is None else round(t_reference, 3),
                    "simulated_makespan_s": None if makespan_ps is None else makespan_ps / 1e12},
        "saved_tensors": dict(executor.saved_stats) if model.train else None,
        "notes": list(executor.notes),
        "executed_cache_steps": [list(e) for e in executed_cache],
    }
    if sim_note:
        report["notes"].append(sim_note)
    if resized:
        report["notes"].append(
            f"{len(resized)} external tensors (e.g. '{resized[0]}') have another size in torch "
            "than in the workload (AdamW keeps a bf16 weight's state in bf16, the workload "
            "in fp32); the tracked bytes are the workload's")
    if measured:
        report["measured"] = measured
    if records is not None:
        report["profile"] = profile_report(records, t2_ns, start, mark_host_us(backend))
    if memory_records is not None:
        report["memory_profile"] = memory_report(memory_records, wl)
    if executor.loss is not None:
        report["loss"] = executor.loss.item()
    if reference is not None:
        report["check"] = check_results(torch, model, memory, executor, reference)
        report["ok"] = bool(report["check"]["ok"] and report["cache_steps_in_plan_order"] and
                            report["device_bytes"]["within_predicted"] is not False)
    return report


def check_results(torch, model, memory, executor, reference):
    wl = model.wl
    rows = []
    outs = reference["outputs"]
    for tid, want in zip(model.traced.output_tids, outs):
        rows.append(compare(torch, wl.tensors[tid].name, memory.final_value(tid), want))
    result = {"outputs": rows}
    ok = all(r["equal"] for r in rows)
    if model.train:
        loss = compare(torch, "loss", executor.loss, reference["loss"])
        weights = [compare(torch, wl.tensors[tid].name, memory.final_value(tid), want)
                   for tid, want in sorted(reference["weights"].items())]
        states = [compare(torch, wl.tensors[tid].name, memory.final_value(tid), want)
                  for tid, want in sorted(reference["states"].items())]
        result["loss"] = loss
        result["weights"] = {"equal": sum(r["equal"] for r in weights), "of": len(weights),
                             "unequal": [r for r in weights if not r["equal"]][:10]}
        result["optimizer_states"] = {"equal": sum(r["equal"] for r in states),
                                      "of": len(states),
                                      "unequal": [r for r in states if not r["equal"]][:10]}
        ok = ok and loss["equal"] and all(r["equal"] for r in weights + states) and \
            len(states) == 2 * len(wl.optimizer)
    result["ok"] = ok
    return result


def fmt_bytes(n):
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"


def text(report):
    """The report as a table for people."""
    r = report
    s = r["steps"]
    db = r["device_bytes"]
    lines = [f"plan         {r['plan']} (policy {r['policy']}) on {r['device']}",
             f"model        {r['model']} {r['phase']}, batch {r['batch']}: {r['ops']} ops, "
             f"{r['tensors']} tensors",
             f"steps        {s['executed']} executed: {s['compute']} compute, {s['prefetch']} "
             f"prefetch, {s['store']} store, {s['detach']} detach; cache steps in plan order: "
             f"{'yes' if r['cache_steps_in_plan_order'] else 'NO'}"]
    within = db["within_predicted"]
    lines.append(f"device bytes tracked peak {fmt_bytes(db['tracked_peak'])} ({db['tracked_peak']}"
                 f" B, step {db['tracked_peak_step']}), predicted peak "
                 f"{fmt_bytes(db['predicted_peak'])} ({db['predicted_peak']} B), budget "
                 f"{fmt_bytes(db['budget'])}: " +
                 ("within the prediction" if within else
                  "unknown" if within is None else "ABOVE the prediction"))
    if "measured" in r:
        m = r["measured"]
        lines.append(f"measured     makespan {m['makespan_s'] * 1e3:.3f} ms (simulated "
                     f"{(r['timings']['simulated_makespan_s'] or 0) * 1e3:.3f} ms), peak "
                     f"allocated {fmt_bytes(m['peak_bytes'])} (predicted "
                     f"{fmt_bytes(db['predicted_peak'])})")
    if "loss" in r:
        lines.append(f"loss         {r['loss']:.6g}")
    if r.get("saved_tensors"):
        st = r["saved_tensors"]
        lines.append(f"backward     autograd's saved tensors: {st['from_plan_tensors']} from plan "
                     f"tensors on the device, {st['meta_operands']} product operands not read "
                     f"(meta), {st['recomputed_ops']} forward ops recomputed from their inputs")
    c = r.get("check")
    if c is not None:
        outs = c["outputs"]
        lines.append("outputs      " + "; ".join(
            f"{o['name']} {o['dtype']} {o['shape']}: " +
            ("equal" if o["equal"] else f"DIFFERENT ({o.get('why')})") for o in outs) +
            " (against the un-offloaded model, torch.equal)")
        if "loss" in c:
            w, st = c["weights"], c["optimizer_states"]
            lines.append(f"training     loss {'equal' if c['loss']['equal'] else 'DIFFERENT'}; "
                         f"updated weights {w['equal']}/{w['of']} equal; AdamW states "
                         f"{st['equal']}/{st['of']} equal")
        lines.append(f"check        {'ok' if r['ok'] else 'FAILED'}")
    t = r["timings"]
    lines.append(f"timings      trace {t['trace_s']:.2f} s, run {t['run_s']:.2f} s" +
                 (f", reference {t['reference_s']:.2f} s" if t["reference_s"] is not None
                  else "") +
                 (f"; simulated makespan {t['simulated_makespan_s'] * 1e3:.3f} ms"
                  if t["simulated_makespan_s"] is not None else ""))
    if "profile" in r:
        for kind, t in sorted(r["profile"]["totals"].items()):
            lines.append(f"profile      {kind}: {t['steps']} steps, host "
                         f"{t['host_us'] / 1e3:.3f} ms" +
                         (f", stream {t['stream_us'] / 1e3:.3f} ms" if t["stream_us"] else ""))
    if "memory_profile" in r:
        m = r["memory_profile"]
        line = f"memory       tracked peak {fmt_bytes(m['tracked_peak'])} over the steps"
        if m["allocated_peak"] is not None:
            e = m["extra"]
            line += (f"; allocated peak {fmt_bytes(m['allocated_peak'])}, at most "
                     f"{fmt_bytes(e['bytes'])} ({e['bytes']} B) beyond the plan's tensors and "
                     f"the op's workspace (step {e['step']}, {e['kind']})")
        lines.append(line)
    for n in r["notes"]:
        lines.append(f"note         {n}")
    return "\n".join(lines) + "\n"
