"""What the PyTorch runtime itself costs, read from a profiled run (`run --profile`): the
host time it spends issuing each kind of step, as the topology's dispatch fields
(hw_models/topology.h: Device::dispatch_*), so that a plan made with them predicts the
runtime's time (docs/torch_runtime.md, "Predicting the runtime's time").

The runtime issues every step from one Python thread in program order and never waits for
the GPU, so a step reaches the GPU no earlier than the host has issued the steps before it.
Each compute step and copy of a profiled run also paid for one profile mark (a timing event
made and recorded, `mark_host_us` in the profile), which is taken off.

From a run with --memory-profile on CUDA it also reads what the runtime holds beyond the
plan's tensors and the running op's workspace (the caching allocator's context, libraries'
workspaces, its rounding), as the device's `reserved` bytes: capacity plans cannot use.
"""

from .errors import InputError
from .plan import read_json

FORMAT = "tierflow.torch_dispatch/1"


def read_profile(path):
    try:
        report = read_json(path, "a tierflow_torch run report is expected")
    except InputError as e:
        raise InputError(f"--profile {e}") from None
    if not isinstance(report, dict) or report.get("format") != "tierflow.torch_run/1":
        raise InputError(f"--profile {path}: not a tierflow_torch run report "
                         "(`python -m tierflow_torch run ... --profile --json -o FILE`)")
    if not isinstance(report.get("profile"), dict) and \
            not isinstance(report.get("memory_profile"), dict):
        raise InputError(f"--profile {path}: the run was not profiled (run it with --profile "
                         "or --memory-profile)")
    return report


def dispatch(report):
    """Per kind of step (compute, copy, detach): the mean host time in seconds less the
    profile's own mark, and the number of steps it comes from; None for a kind the run has
    no step of."""
    prof = report.get("profile") or {}
    totals = prof.get("totals", {})
    mark = prof.get("mark_host_us") or 0.0

    def mean(kinds, marked):
        steps = sum(totals.get(k, {}).get("steps", 0) for k in kinds)
        if steps == 0:
            return None, 0
        host = sum(totals.get(k, {}).get("host_us", 0.0) for k in kinds) / steps
        return max(0.0, host - (mark if marked else 0.0)) / 1e6, steps

    out = {}
    for name, kinds, marked in (("compute", ["compute"], True),
                                ("copy", ["prefetch", "store"], True),
                                ("detach", ["detach"], False)):
        seconds, steps = mean(kinds, marked)
        out[name] = {"seconds": seconds, "steps": steps}
    return out, mark


def extra_memory(report):
    """What the runtime held beyond the plan (memory_profile's extra: bytes, step, kind),
    or None: no memory profile, or one from the CPU, which has no allocator statistics."""
    extra = (report.get("memory_profile") or {}).get("extra")
    return extra if isinstance(extra, dict) and isinstance(extra.get("bytes"), int) else None


def sets(costs, extra, device):
    """`--set` values for tierflow plan and sim (whole nanoseconds, bytes)."""
    out = [f"devices.{device}.dispatch_{name}={round(c['seconds'] * 1e9)}ns"
           for name, c in costs.items() if c["seconds"] is not None]
    if extra is not None:
        out.append(f"devices.{device}.reserved={max(0, extra['bytes'])}B")
    return out


def calibrate(path, device="dev"):
    report = read_profile(path)
    costs, mark = dispatch(report)
    extra = extra_memory(report)
    if extra is None and not any(c["steps"] for c in costs.values()):
        raise InputError(f"--profile {path}: nothing to read: a memory profile from the CPU "
                         "has no allocator statistics (run it on CUDA, or with --profile)")
    return {"format": FORMAT, "profile": path, "device": report.get("device"),
            "plan": report.get("plan"), "mark_host_us": mark,
            "dispatch": {k: {"seconds": v["seconds"], "steps": v["steps"]}
                         for k, v in costs.items()},
            "extra_memory": extra,
            "sets": sets(costs, extra, device)}


def text(result):
    d = result["dispatch"]

    def us(name):
        s = d[name]["seconds"]
        return "-" if s is None else f"{s * 1e6:.1f} us"
    lines = []
    if any(v["steps"] for v in d.values()):
        lines += [f"dispatch     from {d['compute']['steps']} compute, {d['copy']['steps']} "
                  f"prefetch and store, {d['detach']['steps']} detach steps of "
                  f"{result['profile']} ({result['device']}), less "
                  f"{result['mark_host_us'] or 0:.1f} us per profile mark",
                  f"per step     compute {us('compute')}, copy {us('copy')}, detach "
                  f"{us('detach')}"]
    e = result["extra_memory"]
    if e is not None:
        lines.append(f"memory       the runtime held up to {e['bytes']} B beyond the plan's "
                     f"tensors and the running op's workspace (step {e['step']}, {e['kind']}): "
                     "the device's reserved bytes")
    if result["device"] != "cuda":
        lines.append("note         a CPU run computes on its host thread: its dispatch is its "
                     "compute")
    lines.append("flags        " + " ".join(f"--set {s}" for s in result["sets"]))
    return "\n".join(lines) + "\n"
