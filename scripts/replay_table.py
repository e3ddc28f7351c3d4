#!/usr/bin/env python3
"""The table of a validation run: replays of plans, measured against simulated.

  replay_table.py RUNS ROW...      ROW = LABEL|PLAN.json|PREFIX

For each ROW, reads PREFIX1.json .. PREFIX<RUNS>.json (`tierflow replay --json`) and prints
one Markdown row: simulated and median measured makespan, the medians of the per-transfer
error median and p90 (by count, and by copy time: the error below which 90% of the
simulated copy time lies), exposed wait measured and simulated, device peak measured and
predicted, and the plan's peak order:
  fixed   program order alone fixes every allocation and free (one program, no cache step
          waits on an event): the peak must match byte for byte;
  timing  a detach that waits on a store frees when the store lands, so the peak may differ
          by what is allocated meanwhile.
A ROW whose plan is missing says so; one whose replays all failed says that.
Used by scripts/replay_validation.sh and scripts/gpu_validation.sh.
"""

import json
import os
import statistics
import sys


def ms(ps):
    return f"{ps / 1e9:.1f} ms"


def pct(x):
    return f"{100 * x:+.1f}%"


def peak_order(plan):
    progs = plan["programs"]
    fixed = len(progs) == 1 and not any(
        "wait" in s and "compute" not in s for s in progs[0]["steps"])
    return "fixed" if fixed else "timing"


def row(label, plan_path, prefix, runs):
    if not os.path.exists(plan_path):
        return f"| {label} | no plan (see the plan's output) |" + " |" * 11
    order = peak_order(json.load(open(plan_path)))
    rs = []
    for i in range(1, runs + 1):
        path = f"{prefix}{i}.json"
        if os.path.exists(path):
            r = json.load(open(path))
            if "error" not in r:
                rs.append(r)
    if not rs:
        return f"| {label} | no replay ran |" + " |" * 10 + f" {order} |"
    sim = rs[0]["makespan_ps"]["simulated"]
    meas = statistics.median(r["makespan_ps"]["measured"] for r in rs)
    med = statistics.median(r["transfers"]["duration_error_median"] for r in rs)
    p90 = statistics.median(r["transfers"]["duration_error_p90_abs"] for r in rs)
    # by copy time: older replay files lack it
    p90t = [r["transfers"].get("duration_error_p90_abs_by_time") for r in rs]
    p90t = f"{100 * statistics.median(p90t):.1f}%" if None not in p90t else "-"
    wait = statistics.median(r["exposed_wait"]["total_ps"] for r in rs)
    peaks = [p for r in rs for p in r["peak_device_memory"]]
    exact = "exact" if all(p["equal"] for p in peaks) else "DIFFERS"
    shift = max(r["size_shift"] for r in rs)
    sizes = f", sizes 1:{2 ** shift}" if shift else ""
    return (f"| {label} | {ms(sim)} | {ms(meas)} ({len(rs)} runs{sizes}) | {pct(meas / sim - 1)} "
            f"| {pct(med)} | {100 * p90:.1f}% | {p90t} | {ms(wait)} | "
            f"{ms(rs[0]['exposed_wait']['simulated_ps'])} | {peaks[0]['measured']:,} B | "
            f"{peaks[0]['predicted']:,} B | {exact} | {order} |")


def main(argv):
    if len(argv) < 2 or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    runs = int(argv[0])
    print("| plan | simulated | measured (median) | error | transfer error median | p90 abs | "
          "p90 abs by copy time | "
          "exposed wait measured | simulated | device peak measured | predicted | | "
          "peak order |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in argv[1:]:
        parts = spec.split("|")
        if len(parts) != 3:
            print(f"replay_table.py: a ROW is LABEL|PLAN.json|PREFIX, not {spec!r}",
                  file=sys.stderr)
            return 2
        print(row(*parts, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
