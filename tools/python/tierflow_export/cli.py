"""The command line, `python -m tierflow_export`: flags to arguments, one export, the
document written atomically and checked (verify.py) before it replaces the output.
Exit status: 0 ok, 2 bad input (one line `error: ...` on stderr), 3 internal error."""

import argparse
import sys

from . import __doc__ as package_doc
from .errors import ExportError, InternalError, one_line
from .exporter import trace
from .verify import verify_file
from .workload import check_output, render, write_atomic

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ExportError(message)


def parse_args(argv):
    """The parsed and checked flags (ExportError on bad ones); defaults filled in."""
    p = Parser(prog="python -m tierflow_export", description=package_doc.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p)
    args = p.parse_args(argv)
    check_flags(args)
    return args


def add_flags(p):
    """The flags of the command."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf-config", metavar="CONFIG.json",
                     help="Hugging Face config.json; the model is built from it with random "
                          "weights (AutoModelForCausalLM.from_config), nothing is downloaded")
    src.add_argument("--torchvision", metavar="NAME",
                     help="torchvision model builder, e.g. vit_b_16 (random weights)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--seq", type=int, default=None,
                   help="tokens per sequence (--hf-config; default 16)")
    p.add_argument("--image-size", type=int, default=None,
                   help="image side (--torchvision; default the model's, 224)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                   help="parameter and activation type (default bf16 for --hf-config, fp32 "
                        "for --torchvision)")
    p.add_argument("--train", action="store_true",
                   help="a training step: forward, loss, backward, AdamW")
    p.add_argument("--master-weights", action="store_true",
                   help="with --train: AdamW also updates an fp32 master copy of each weight")
    p.add_argument("--name", help="workload name (default derived from the model and shape)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the sample input")
    p.add_argument("-o", "--output", default="-", metavar="OUT.json",
                   help="output file, written atomically (default standard output)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say on standard error how the written document was checked (the "
                        "tierflow module's workload reader, or this exporter's own rules "
                        "where `import tierflow` fails)")


def check_flags(args):
    """Checks the flags that depend on one another and fills in the defaults."""
    if args.batch < 1:
        raise ExportError("--batch must be at least 1")
    if args.hf_config:
        if args.image_size is not None:
            raise ExportError("--image-size applies to --torchvision models")
        args.seq = 16 if args.seq is None else args.seq
        if args.seq < 1:
            raise ExportError("--seq must be at least 1")
        args.dtype = args.dtype or "bf16"
    else:
        if args.seq is not None:
            raise ExportError("--seq applies to --hf-config models")
        if args.image_size is not None and args.image_size < 1:
            raise ExportError("--image-size must be at least 1")
        args.dtype = args.dtype or "fp32"
    if args.master_weights and not args.train:
        raise ExportError("--master-weights needs --train")
    return args


def out_of_memory(e):
    """Python's MemoryError, or torch's allocator refusing a request (a RuntimeError)."""
    return isinstance(e, MemoryError) or \
        isinstance(e, RuntimeError) and "can't allocate memory" in str(e)


def main(argv=None):
    """Runs the command; returns the exit status."""
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        check_output(args.output, [("the model's config (--hf-config)", args.hf_config)])
        doc = trace(args, check=False).doc
        checked = []
        write_atomic(args.output, render(doc),
                     verify=lambda path: checked.append(verify_file(path, doc)))
    except ExportError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InternalError as e:
        print(f"error: internal: {one_line(e)}", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as e:  # noqa: BLE001
        if out_of_memory(e):
            print("error: out of memory running the model; use a smaller --batch, --seq, "
                  "--image-size or model", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"error: internal: {type(e).__name__}: {one_line(e)}", file=sys.stderr)
        return EXIT_INTERNAL
    if args.verbose:
        print(f"{args.output}: {checked[0]}", file=sys.stderr)
    if args.output != "-":
        ops = doc["ops"]
        print(f"{args.output}: {len(doc['tensors'])} tensors, {len(ops)} ops, "
              f"{doc['meta']['flops'] / 1e9:.3f} GFLOP")
    return 0
