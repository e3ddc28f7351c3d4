"""What the PyTorch runtime (tools/python/tierflow_torch) costs its host per step.

The runtime issues every step of a plan from one Python thread; on a GPU a step reaches the
device no earlier than the host has issued the steps before it, so the host time per step
bounds how fast a plan runs (docs/torch_runtime.md, "Predicting the runtime's time"). This
benchmark measures it on a tiny model, where the kernels themselves take little: it exports
the model, plans it with the tierflow CLI, runs the plan REPS times with --profile (the first
run checked against the un-offloaded model) and prints, per kind of step, the median over
the runs of the mean host time per step, with the un-offloaded model's own forward time per
op beside it (the same kernels with Hugging Face's Python around them, no plan; for a
training step its backward and AdamW as well).

  .venv/bin/python bench/torch_runtime_bench.py [--hf-config CONFIG.json] [--layers N]
      [--seq S] [--budget SIZE] [--train] [--reps R] [--device cpu|cuda] [--tierflow BIN]
      [--json]

Defaults: tests/python/configs/mistral_tiny.json with 8 layers, 64 tokens, a 512KiB budget,
9 runs, the CPU. Run on demand; its numbers go to docs/performance.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))

KINDS = ("compute", "prefetch", "store", "detach")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hf-config", default=os.path.join(ROOT, "tests", "python", "configs",
                                                       "mistral_tiny.json"))
    p.add_argument("--layers", type=int, default=8, help="num_hidden_layers (0: the config's)")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--budget", default="512KiB")
    p.add_argument("--train", action="store_true", help="a training step (forward, backward, "
                   "AdamW) instead of a prefill")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--tierflow", default=None, help="the CLI (default: $TIERFLOW_BIN, then "
                   "this tree's build/bench, build/release, build/rel, build/test)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    for flag, value, least in (("--layers", args.layers, 0), ("--seq", args.seq, 1),
                               ("--reps", args.reps, 1)):
        if value < least:
            p.error(f"{flag} must be at least {least}, got {value}")
    return args


def cli(explicit):
    builds = ("bench", "release", "rel", "test")
    for c in (explicit, os.environ.get("TIERFLOW_BIN"),
              *(os.path.join(ROOT, "build", b, "tools", "tierflow") for b in builds)):
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("torch_runtime_bench: no tierflow CLI (--tierflow or $TIERFLOW_BIN)")


def prepare(args, work):
    """(plan path, source dict): the config with its layers, exported and planned."""
    with open(args.hf_config, encoding="utf-8") as f:
        config = json.load(f)
    if args.layers:
        config["num_hidden_layers"] = args.layers
    config_path = os.path.join(work, "config.json")
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    workload = os.path.join(work, "workload.json")
    plan = os.path.join(work, "plan.json")
    subprocess.run([sys.executable, "-m", "tierflow_export", "--hf-config", config_path,
                    "--seq", str(args.seq), "-o", workload] + (["--train"] if args.train else []),
                   check=True,
                   stdout=subprocess.DEVNULL,
                   env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools", "python")))
    subprocess.run([cli(args.tierflow), "plan", "--hw", "h100-sxm-8gpu", "--workload", workload,
                    "--devices", "1", "--budget", args.budget, "--policy", "tierflow", "-o",
                    plan], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([cli(args.tierflow), "sim", "--plan", plan, "--json", "-o",
                    os.path.join(work, "sim.json")], check=True, stdout=subprocess.DEVNULL)
    return plan, {"hf_config": config_path, "seq": args.seq, "train": args.train}


def reference_us(source, device, reps):
    """The median wall time of the un-offloaded run in microseconds (tierflow_torch's
    reference: the model's own forward, and for a training step its backward and AdamW,
    everything on the device), warm: a first run apart."""
    from tierflow_torch.model import load_model
    from tierflow_torch.reference import run_reference
    model = load_model(source)
    torch = model.torch
    times = []
    for _ in range(reps + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        run_reference(model, device)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(times[1:])


def main(argv):
    args = parse_args(argv)
    from tierflow_torch.runner import run
    with tempfile.TemporaryDirectory() as work:
        plan, source = prepare(args, work)
        sim = os.path.join(work, "sim.json")
        per_kind = {k: [] for k in KINDS}
        run_s, steps, ops = [], None, None
        reference = reference_us(source, args.device, args.reps)
        for rep in range(args.reps):
            report = run(plan, source, device=args.device, check=rep == 0, sim_report=sim,
                         profile=True)
            if rep == 0:
                if not report["ok"]:
                    sys.exit("torch_runtime_bench: the run's check failed")
                ops = report["ops"]
            steps = report["steps"]
            run_s.append(report["timings"]["run_s"])
            for kind, t in report["profile"]["totals"].items():
                per_kind[kind].append(t["host_us"] / t["steps"])
    result = {
        "model": os.path.basename(args.hf_config), "layers": args.layers, "seq": args.seq,
        "train": args.train,
        "device": args.device, "reps": args.reps, "ops": ops, "steps": steps,
        "host_us_per_step": {k: round(statistics.median(v), 2)
                             for k, v in per_kind.items() if v},
        "run_ms": round(statistics.median(run_s) * 1e3, 2),
        "reference_us_per_op": round(reference / ops, 1),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"model        {result['model']}, {args.layers or 'its'} layers, {args.seq} tokens"
          f"{', a training step' if args.train else ''}, "
          f"{ops} ops, {steps['executed']} steps, on {args.device}; median of {args.reps} runs")
    for k, v in result["host_us_per_step"].items():
        print(f"host/step    {k:9s} {v:8.2f} us ({steps[k]} steps)")
    print(f"run          {result['run_ms']:.2f} ms (profiled)")
    print(f"reference    {result['reference_us_per_op']:.1f} us per op (the un-offloaded "
          "run, median of as many warm runs)")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main(sys.argv[1:])
    print(f"took         {time.perf_counter() - t0:.1f} s", file=sys.stderr)
