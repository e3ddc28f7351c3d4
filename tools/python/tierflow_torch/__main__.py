"""python -m tierflow_torch run --plan PLAN.json (--hf-config CONFIG.json --seq S --batch B |
--torchvision vit_b_16 --batch B [--train]) [--device cpu|cuda] [--check] [--profile] [--json]
python -m tierflow_torch calibrate --profile RUN.json [--device ID] [--json] [-o FILE]

Exit status: 0 ok (with --check: every check passed), 1 a check failed, 2 bad input or a
plan that cannot run (one line `error: ...` naming the step), 3 internal error.
"""

import argparse
import json
import sys
import traceback

from .errors import InputError, PlanError

EXIT_CHECK = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise InputError(message)


def parse_args(argv):
    p = Parser(prog="python -m tierflow_torch",
               description="Run a tierflow plan on the PyTorch model its workload was "
                           "exported from (docs/torch_runtime.md).")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="execute a plan on the model")
    r.error = p.error
    r.add_argument("--plan", required=True, metavar="PLAN.json", help="tierflow.plan/2 file")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf-config", metavar="CONFIG.json",
                     help="Hugging Face config.json the workload was exported from")
    src.add_argument("--torchvision", metavar="NAME", help="torchvision model, e.g. vit_b_16")
    r.add_argument("--batch", type=int, help="batch size (default: the workload's)")
    r.add_argument("--seq", type=int, help="tokens per sequence (default: the workload's)")
    r.add_argument("--image-size", type=int, help="image side (default: the workload's)")
    r.add_argument("--dtype", choices=("bf16", "fp16", "fp32"),
                   help="parameter type (default: the workload's)")
    r.add_argument("--train", action="store_true", default=None,
                   help="a training step (default: when the workload's phase is train)")
    r.add_argument("--seed", type=int, default=0,
                   help="seed of the weights and inputs, as given to tierflow_export")
    r.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: functional run with the device memory tracked (default); "
                        "cuda: one GPU, copies on side streams")
    r.add_argument("--check", action="store_true",
                   help="compare with the un-offloaded model (exact equality) and the tracked "
                        "peak with the simulator's; exit 1 when a check fails")
    r.add_argument("--sim-report", metavar="REPORT.json",
                   help="`tierflow sim --plan PLAN --json` output to compare with (default: "
                        "run tierflow sim)")
    r.add_argument("--tierflow", metavar="BIN", help="the tierflow CLI (default: "
                   "$TIERFLOW_BIN, PATH, then this tree's build/)")
    r.add_argument("--profile", action="store_true",
                   help="record every step's host time and, on CUDA, its time on its stream "
                        "(timing events): the report's \"profile\"")
    r.add_argument("--memory-profile", action="store_true",
                   help="record every step's tracked bytes and, on CUDA, the caching "
                        "allocator's: the report's \"memory_profile\", with what the runtime "
                        "holds beyond the plan (resets the allocator's peak every step: not a "
                        "run to time)")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.add_argument("-o", "--output", metavar="FILE", help="write the report here")
    c = sub.add_parser("calibrate", help="the runtime's host time per step, from a profiled "
                       "run, as --set flags for tierflow plan and sim")
    c.error = p.error
    c.add_argument("--profile", required=True, metavar="RUN.json",
                   help="the JSON report of `run --profile --json`")
    c.add_argument("--device", default="dev", metavar="ID",
                   help="the topology's device id the flags set (default: dev, as calibrate "
                        "names it)")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.add_argument("-o", "--output", metavar="FILE", help="write the result here")
    return p.parse_args(argv)


def check_output(path, inputs):
    """InputError unless `path` (-o) can take the output: checked before the run, so that a
    path that cannot be written, or that names an input, costs no run."""
    import tierflow_export as te
    try:
        te.check_output(path, inputs)
    except te.ExportError as e:
        raise InputError(str(e)) from None


def write(out, path):
    """The output to `path` through a temporary file beside it, renamed when complete (a
    failed write leaves what was there); standard output without one."""
    if not path:
        sys.stdout.write(out)
        return
    import tierflow_export as te
    try:
        te.write_atomic(path, out)
    except te.ExportError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None


def main(argv=None):
    from .executor import InternalError
    from .runner import run, text
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        if args.command == "calibrate":
            from . import calibrate
            check_output(args.output, [("the profiled run (--profile)", args.profile)])
            result = calibrate.calibrate(args.profile, args.device)
            write(json.dumps(result, indent=1) + "\n" if args.json else calibrate.text(result),
                  args.output)
            return 0
        check_output(args.output, [("the plan (--plan)", args.plan),
                                   ("the model's config (--hf-config)", args.hf_config),
                                   ("the simulator's report (--sim-report)", args.sim_report)])
        for flag in ("batch", "seq", "image_size"):
            if getattr(args, flag) is not None and getattr(args, flag) < 1:
                raise InputError(f"--{flag.replace('_', '-')} must be at least 1")
        source = {"hf_config": args.hf_config, "torchvision": args.torchvision,
                  "batch": args.batch, "seq": args.seq, "image_size": args.image_size,
                  "dtype": args.dtype, "train": args.train, "seed": args.seed}
        report = run(args.plan, source, device=args.device, check=args.check,
                     sim_report=args.sim_report, tierflow=args.tierflow,
                     profile=args.profile, memory_profile=args.memory_profile)
        write(json.dumps(report, indent=1) + "\n" if args.json else text(report), args.output)
    except (InputError, PlanError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InternalError as e:
        print(f"error: internal: {e}", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as e:  # noqa: BLE001 - a bug: its traceback, and never exit 1 (a check)
        traceback.print_exc()
        print(f"error: internal: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL
    if args.check and not report.get("ok"):
        return EXIT_CHECK
    return 0


if __name__ == "__main__":
    sys.exit(main())
