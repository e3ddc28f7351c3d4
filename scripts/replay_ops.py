#!/usr/bin/env python3
"""Where a replay's time went, op by op: the compute steps of replays in each compute mode,
grouped by op name (the part after the layer and token), the host's gap between compute
steps, and (with --sim) the transfers by direction and size against the simulator's.
Reads the workload, the plan, `tierflow replay --json` files and `tierflow sim --json`
(scripts/gpu_validation.sh keeps them all); writes a Markdown report.

    scripts/replay_ops.py --workload w.json --plan p.json --sim w.sim.json \
        timed='w.timed.replay*.json' gemm='w.gemm.replay*.json'

Per op group: its steps, the first step's time apart from the median of the rest (a
one-time cost, such as a GEMM kernel loaded on its first use, shows there), and the
total. Per mode, the median gap between the end of a compute step and the start of the
next one that did not wait on a transfer: the host's cost per step beyond what the step
itself measures.
"""
import argparse
import collections
import glob
import json
import statistics
import sys


def group_of(name):
    """'t0.L12.qkv' -> 'qkv'; 'adamw.L1.w_down' -> 'adamw.w_down'; 'lm_head' -> 'lm_head'."""
    parts = [p for p in name.split(".") if not (p[:1] in "tL" and p[1:].isdigit())]
    return ".".join(parts) or name


def load_runs(pattern):
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"error: no replay JSON matches {pattern}")
    return [json.load(open(f)) for f in files]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--sim", help="tierflow sim --json of the plan: transfers by size")
    ap.add_argument("runs", nargs="+", help="MODE=GLOB of tierflow.replay/1 JSON files")
    a = ap.parse_args()
    ops = {o["id"]: o for o in json.load(open(a.workload))["ops"]}
    plan = json.load(open(a.plan))
    op_of = {}
    for p, prog in enumerate(plan["programs"]):
        for i, s in enumerate(prog["steps"]):
            if "compute" in s:
                op_of[(p, i)] = s["compute"]
    modes = []
    for arg in a.runs:
        mode, _, pattern = arg.partition("=")
        modes.append((mode, load_runs(pattern)))

    out = []
    # Compute steps: per group, median over runs of each step, then over the group's steps.
    per = {}
    for mode, runs in modes:
        steps = collections.defaultdict(list)
        for r in runs:
            for s in r["measured_steps"]:
                if s["kind"] == "compute":
                    steps[(s["program"], s["step"])].append((s["end_ps"] - s["start_ps"]) / 1e6)
        per[mode] = {k: statistics.median(v) for k, v in steps.items()}
    keys = sorted(per[modes[0][0]], key=lambda k: k)
    groups = collections.OrderedDict()
    for k in keys:
        o = ops[op_of[k]]
        groups.setdefault((group_of(o["name"]), o["kind"], o["dtype"]), []).append(k)
    head = "| op | kind | steps | GFLOP | MB |"
    rule = "|---|---|---|---|---|"
    for mode, _ in modes:
        head += f" {mode} first (us) | {mode} median of the rest (us) | {mode} total (ms) |"
        rule += "---|---|---|"
    out += ["## Compute steps by op", "", head, rule]
    order = sorted(groups, key=lambda g: -sum(per[modes[-1][0]][k] for k in groups[g]))
    for g in order:
        ks = groups[g]
        o = ops[op_of[ks[0]]]
        row = f"| {g[0]} | {g[1]} {g[2]} | {len(ks)} | {o['flops'] / 1e9:.3g} | {o['bytes'] / 1e6:.3g} |"
        for mode, _ in modes:
            t = [per[mode][k] for k in ks]
            rest = f"{statistics.median(t[1:]):,.1f}" if len(t) > 1 else "-"
            row += f" {t[0]:,.1f} | {rest} | {sum(t) / 1e3:,.2f} |"
        out.append(row)

    # Host cost per step: the gap before a compute step that did not wait.
    out += ["", "## Gaps between compute steps", "",
            "| mode | steps | median gap (us) | p10 | p90 | median issue to start (us) |",
            "|---|---|---|---|---|---|"]
    for mode, runs in modes:
        gaps, issue = [], []
        for r in runs:
            cs = sorted((s for s in r["measured_steps"] if s["kind"] == "compute"),
                        key=lambda s: s["start_ps"])
            for x, y in zip(cs, cs[1:]):
                if y["waited_ps"] < 1e6:  # under 1 us: it did not wait on a transfer
                    gaps.append((y["start_ps"] - x["end_ps"]) / 1e6)
                    issue.append((y["start_ps"] - y["issue_ps"]) / 1e6)
        if not gaps:
            continue
        gaps.sort()
        out.append(f"| {mode} | {len(gaps)} | {statistics.median(gaps):.1f} | "
                   f"{gaps[len(gaps) // 10]:.1f} | {gaps[len(gaps) * 9 // 10]:.1f} | "
                   f"{statistics.median(issue):.1f} |")
    if a.sim:
        out += transfers(json.load(open(a.sim)), modes)
    print("\n".join(out))


def transfers(sim, modes):
    """Transfers by direction and size decade: simulated against measured durations."""
    by_step = {(t["program"], t["step"]): t for t in sim["transfers"]}
    out = ["", "## Transfers by size", "",
           "| mode | kind | bytes | count | simulated median (us) | measured median (us) | "
           "error median |", "|---|---|---|---|---|---|---|"]
    for mode, runs in modes:
        rows = collections.defaultdict(list)
        for r in runs:
            for s in r["measured_steps"]:
                t = by_step.get((s["program"], s["step"]))
                if t is None or t["end_ps"] <= t["start_ps"]:
                    continue
                decade = 10 ** (len(str(max(1, t["bytes"]))) - 1)
                rows[(t["kind"], decade)].append(
                    ((t["end_ps"] - t["start_ps"]) / 1e6, (s["end_ps"] - s["start_ps"]) / 1e6))
        for (kind, decade), v in sorted(rows.items()):
            sim_us = statistics.median(x for x, _ in v)
            real_us = statistics.median(y for _, y in v)
            err = statistics.median(y / x - 1 for x, y in v)
            out.append(f"| {mode} | {kind} | {decade:,}+ | {len(v)} | {sim_us:,.1f} | "
                       f"{real_us:,.1f} | {100 * err:+.0f}% |")
    return out


if __name__ == "__main__":
    main()
