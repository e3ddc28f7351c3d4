"""Export a tierflow workload (tierflow.workload/1, docs/formats.md) from a PyTorch model.

The model is traced with torch.fx (Hugging Face models with transformers.utils.fx), run
once on CPU on a sample input to learn every tensor's real shape and dtype, and turned into
the operator DAG of one step: ops with FLOPs and bytes, tensors with sizes and kinds. With
--train the forward pass is followed by a loss, the backward pass derived from the forward
graph, and one AdamW step per parameter.

  python -m tierflow_export --hf-config CONFIG.json --seq 16 --batch 1 [--dtype bf16] -o OUT.json
  python -m tierflow_export --torchvision vit_b_16 --batch 2 [--train] -o OUT.json

The written document is checked by the tierflow module's workload reader where `import
tierflow` works, else by this package's Python rules. See docs/torch_export.md for the
mapping and the FLOP conventions. Exit status: 0 ok, 2 bad input (one line `error: ...` on
stderr), 3 internal error.

Modules: cli (the command line), exporter (trace: one export), loaders (models, weights,
sample inputs), tracer (the fx tracers), recorder and refs (the forward ops; what a node's
value maps to), training (loss, backward, AdamW), workload (the workload, its document, the
atomic write), flops and names (the FLOP conventions, what is recognised by name), verify
and rules (the checks).
Importing the package does not import torch; trace() does.
"""

from .cli import EXIT_BAD_INPUT, EXIT_INTERNAL, main, parse_args
from .errors import ExportError, InternalError
from .exporter import Traced, export, trace
from .loaders import fill_weights, parameters_on_meta
from .rules import check_workload
from .verify import verify_file
from .workload import (FORMAT, MAX_BYTES, Op, Tensor, Workload, check_output, render,
                       to_document, write_atomic)

__all__ = [
    "main", "parse_args", "trace", "export", "Traced", "ExportError", "InternalError",
    "EXIT_BAD_INPUT", "EXIT_INTERNAL", "Workload", "Tensor", "Op", "FORMAT", "MAX_BYTES",
    "to_document", "render", "write_atomic", "check_output", "verify_file", "check_workload",
    "parameters_on_meta", "fill_weights",
]
