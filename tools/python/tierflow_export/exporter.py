"""One export: build, trace and run the model that the parsed arguments name, record its
workload (with --train the training step), and make the tierflow.workload/1 document."""

import os
import warnings

from .errors import ExportError, InternalError, one_line
from .loaders import load_hf, load_torchvision, moe_block_paths
from .rules import check_workload
from .training import add_training_step
from .workload import Workload, dedup, to_document

# meta.source of every document. It names the script the exporter was before it became
# this package, and stays so that an export is byte-identical to earlier exports of the
# same model with the same flags.
SOURCE = "python3 -m tierflow_export"


class Traced:
    """A traced model and the workload recorded from it (see trace)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def trace(args, check=True):
    """Builds, traces and runs the model that `args` (parse_args) names and records its
    workload. Returns a Traced with: torch, model, gm (the fx GraphModule), inputs (the
    sample inputs in placeholder order), recorder (node -> tensor refs, node -> op ids,
    parameter -> tensor id), wl (the Workload), output_tids, label_tid (None unless
    --train), info, stem and doc (the tierflow.workload/1 document). The graph and the
    names are the ones the exported file has, so a plan made for that file refers to them
    (tools/python/tierflow_torch runs it). With check, the document is checked against the
    format rules in Python (rules.py; InternalError if it breaks one); the command line
    instead checks the file it writes (verify.py)."""
    warnings.filterwarnings(os.environ.get("TORCH_EXPORT_WARNINGS", "ignore"))
    import torch
    from .tracer import patch_torch_fx_for_python311
    patch_torch_fx_for_python311(torch)
    torch.set_num_threads(1)  # the same arithmetic, hence the same MoE routing, every run
    if args.hf_config:
        model, gm, inputs, labels, info, stem = load_hf(args, torch)
    else:
        model, gm, inputs, labels, info, stem = load_torchvision(args, torch)

    wl = Workload()
    rec, output_tids = record(torch, gm, model, inputs, wl, args, labels)
    phase = "train" if args.train else ("prefill" if args.hf_config else "forward")
    label = None
    if args.train:
        # int64 labels: one per token (causal LM), one per image (classifier)
        count = args.batch * (args.seq if args.hf_config else 1)
        label = wl.add_tensor("labels", "input", "int8", count * 8, "external", -1, False,
                              count)
        add_training_step(wl, output_tids, label, args.master_weights)

    name = args.name or (f"{stem}-{phase}-b{args.batch}" +
                         (f"-s{args.seq}" if args.hf_config else ""))
    doc = to_document(wl, name, document_meta(args, torch, info, phase, wl))
    if check:
        problems = check_workload(doc)
        if problems:
            raise InternalError("the workload breaks the format rules: " +
                                "; ".join(problems[:3]))
    return Traced(torch=torch, model=model, gm=gm, inputs=inputs, recorder=rec, wl=wl,
                  output_tids=output_tids, label_tid=label, info=info, stem=stem, doc=doc)


def record(torch, gm, model, inputs, wl, args, labels):
    """Runs the graph on the sample inputs with a Recorder that adds the forward ops to
    wl; the outputs become tensors of kind output. Returns (recorder, output tensor ids)."""
    from .recorder import Recorder  # imports torch.fx: after trace() set up warnings
    rec = Recorder(gm, model, wl, {"bf16": "fp16"} if args.dtype == "fp16" else {}, labels,
                   moe_block_paths(model, torch))
    try:
        with torch.no_grad():
            rec.run(*inputs)
    except ExportError:
        raise
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"cannot run the traced model on the sample input: "
                          f"{type(e).__name__}: {one_line(e)}") from None
    output_tids = dedup(rec.resolve(r) for r in rec.outputs)
    for t in output_tids:
        if wl.tensors[t].kind == "activation":
            wl.tensors[t].kind = "output"
    return rec, output_tids


def document_meta(args, torch, info, phase, wl):
    """The document's meta: the model, the shape and phase, the library versions and the
    total FLOPs, keys in this order."""
    meta = {"model": info["model"], "source": SOURCE, "phase": phase, "batch": args.batch}
    if args.hf_config:
        meta["seq"] = args.seq
        meta["family"] = info["family"]
    else:
        meta["image_size"] = info["image_size"]
    meta["dtype"] = args.dtype
    if args.train:
        meta["optimizer"] = "adamw" + ("+fp32-master" if args.master_weights else "")
    meta["torch"] = torch.__version__
    if args.hf_config:
        import transformers
        meta["transformers"] = transformers.__version__
    else:
        import torchvision
        meta["torchvision"] = torchvision.__version__
    meta["flops"] = sum(o.flops for o in wl.ops)
    return meta


def export(args):
    """The tierflow.workload/1 document of the model `args` names, checked as trace()
    checks it."""
    return trace(args).doc
