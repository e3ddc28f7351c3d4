#!/usr/bin/env python3
"""Export a tierflow workload (tierflow.workload/1, docs/formats.md) from a PyTorch model.

The model is traced with torch.fx (Hugging Face models with transformers.utils.fx), run
once on CPU on a sample input to learn every tensor's real shape and dtype, and turned into
the operator DAG of one step: ops with FLOPs and bytes, tensors with sizes and kinds. With
--train the forward pass is followed by a loss, the backward pass derived from the forward
graph, and one AdamW step per parameter.

  torch_export.py --hf-config CONFIG.json --seq 16 --batch 1 [--dtype bf16] -o OUT.json
  torch_export.py --torchvision vit_b_16 --batch 2 [--train] -o OUT.json

See docs/torch_export.md for the mapping and the FLOP conventions. Exit status: 0 ok,
2 bad input (one line `error: ...` on stderr), 3 internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import re
import sys
import tempfile
import warnings

FORMAT = "tierflow.workload/1"
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
MAX_BYTES = 1 << 50


class ExportError(Exception):
    """Bad input: a flag, a file, or a model this exporter cannot handle."""


class InternalError(Exception):
    """A bug in this exporter (an invariant of the produced workload does not hold)."""


# ---------------------------------------------------------------------------------------
# FLOP conventions (documented in docs/torch_export.md). A multiply-add is 2 FLOPs.

NORM_FLOPS_PER_ELEMENT = 5  # LayerNorm / RMSNorm / GroupNorm / BatchNorm, per output element
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide
LOSS_FLOPS_PER_LOGIT = 5  # cross-entropy: log-softmax and the pick of the label
ADAMW_FLOPS_PER_ELEMENT = 12  # two moment updates, bias corrections, sqrt, divide, decay
BACKWARD_FACTOR = 2  # non-matmul backward op: 2x the FLOPs of its forward op

# FLOPs per output element of elementwise functions and activations (default 1).
ELEMENTWISE_COST = {
    "gelu": 8, "silu": 4, "sigmoid": 4, "tanh": 4, "softplus": 4, "mish": 8,
    "hardswish": 4, "hardsigmoid": 3, "elu": 3, "selu": 4, "leaky_relu": 2,
    "softmax": SOFTMAX_FLOPS_PER_ELEMENT, "log_softmax": SOFTMAX_FLOPS_PER_ELEMENT,
}
ACTIVATION_MODULES = {
    "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh", "ReLU": "relu",
    "ReLU6": "relu", "Softplus": "softplus", "Mish": "mish", "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid", "ELU": "elu", "SELU": "selu", "LeakyReLU": "leaky_relu",
    "Softmax": "softmax", "LogSoftmax": "log_softmax", "GELUActivation": "gelu",
    "SiLUActivation": "silu", "NewGELUActivation": "gelu", "FastGELUActivation": "gelu",
    "QuickGELUActivation": "gelu", "PytorchGELUTanh": "gelu",
}
NORM_MODULE_SUFFIXES = ("LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d",
                        "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "LocalResponseNorm")

# Functions and methods, by name (torch.*, torch.nn.functional.*, Tensor methods, operator.*).
VIEW_NAMES = {
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "expand", "expand_as", "flatten", "unflatten", "narrow", "select", "split",
    "split_with_sizes", "chunk", "unbind", "movedim", "moveaxis", "swapaxes", "swapdims",
    "detach", "as_strided", "diagonal", "unfold",
}
MATMUL_NAMES = {"matmul", "bmm", "mm", "baddbmm", "addmm", "addbmm", "einsum", "mv", "dot"}
REDUCTION_NAMES = {"sum", "mean", "var", "std", "amax", "amin", "logsumexp", "norm", "prod",
                   "var_mean", "std_mean", "cumsum", "cumprod", "max", "min"}
SELECT_NAMES = {"topk", "sort", "argsort", "argmax", "argmin", "kthvalue", "median", "mode"}
COPY_NAMES = {
    "cat", "concat", "stack", "hstack", "vstack", "clone", "contiguous", "to", "float", "half",
    "bfloat16", "double", "type", "type_as", "gather", "index_select", "getitem", "repeat",
    "repeat_interleave", "masked_select", "flip", "roll", "tril", "triu", "one_hot", "pad",
    "take_along_dim", "index", "nonzero", "where_index", "copy", "new_tensor", "tile",
}
FACTORY_NAMES = {
    "arange", "full", "zeros", "ones", "empty", "rand", "randn", "randint", "tensor",
    "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
    "new_zeros", "new_ones", "new_full", "new_empty", "linspace", "eye", "tril_indices",
    "triu_indices",
}
NONDIFF_NAMES = {
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not",
    "logical_xor", "isnan", "isinf", "isfinite", "and_", "or_", "xor", "invert", "bitwise_and",
    "bitwise_or", "bitwise_not", "floor", "ceil", "round", "sign", "floordiv", "floor_divide",
    "any", "all", "bincount", "histc", "searchsorted", "bucketize", "nonzero", "where1",
}
ADD_NAMES = {"add", "iadd", "sub", "isub", "rsub", "__add__", "__radd__", "__sub__",
             "__rsub__", "__iadd__", "__isub__"}
INPLACE_OPERATOR_NAMES = {"setitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "ipow",
                          "imod", "iand", "ior", "ixor", "ilshift", "irshift", "imatmul"}

LAYER_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(?:[A-Za-z_]*?_)?(\d+)(?=\.|$)")
ATTENTION_RE = re.compile(r"attn|attention", re.IGNORECASE)


def layer_of(path):
    """Transformer block index from a module path ("model.layers.3.mlp" -> 3), else -1."""
    m = LAYER_RE.search(path or "")
    return int(m.group(1)) if m else -1


def function_name(target):
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None) or str(target)
    return name


def canonical_name(name):
    """Operator dunder names to plain names: __add__ -> add, __radd__ -> add."""
    if name.startswith("__r") and name.endswith("__") and name[3:-2] in ("add", "sub", "mul",
                                                                          "truediv", "matmul",
                                                                          "pow", "floordiv"):
        return "r" + name[3:-2] if name[3:-2] == "sub" else name[3:-2]
    if name.startswith("__i") and name.endswith("__") and len(name) > 5:
        return "i" + name[3:-2]
    if name.startswith("__") and name.endswith("__"):
        return name[2:-2]
    return name


# ---------------------------------------------------------------------------------------
# The workload being built.

class Tensor:
    __slots__ = ("id", "name", "kind", "dtype", "bytes", "origin", "layer", "floating",
                 "trainable", "numel")

    def __init__(self, tid, name, kind, dtype, nbytes, origin, layer, floating, numel,
                 trainable=False):
        self.id, self.name, self.kind, self.dtype = tid, name, kind, dtype
        self.bytes, self.origin, self.layer = nbytes, origin, layer
        self.floating, self.numel, self.trainable = floating, numel, trainable


class Op:
    __slots__ = ("id", "name", "kind", "dtype", "flops", "bytes", "inputs", "outputs",
                 "updates", "layer", "bw", "in_vals", "out_vals")

    def __init__(self, oid, name, kind, dtype, flops, nbytes, inputs, outputs, updates, layer,
                 bw, in_vals, out_vals):
        self.id, self.name, self.kind, self.dtype = oid, name, kind, dtype
        self.flops, self.bytes = flops, nbytes
        self.inputs, self.outputs, self.updates, self.layer = inputs, outputs, updates, layer
        self.bw, self.in_vals, self.out_vals = bw, in_vals, out_vals


class Workload:
    def __init__(self):
        self.tensors = []
        self.ops = []
        self._tensor_names = set()
        self._op_names = set()
        self.version = {}  # tensor id -> number of in-place updates so far
        # What add_training_step derived, for tools/python/tierflow_torch, which executes
        # the backward ops: value -> needs a gradient; value -> its gradient tensor;
        # backward op id -> (forward op id or None for the loss, "dgrad" | "wgrad" | "bwd" |
        # "loss", the values whose gradients it creates or adds to); a value that took its
        # consumer's gradient tensor without an op -> (that forward op id, the output value);
        # optimizer op id -> (weight tensor id, state tensor ids).
        self.requires = {}
        self.grad = {}
        self.backward = {}
        self.grad_alias = {}
        self.optimizer = {}

    @staticmethod
    def _unique(name, used):
        if name not in used:
            used.add(name)
            return name
        n = 2
        while f"{name}#{n}" in used:
            n += 1
        used.add(f"{name}#{n}")
        return f"{name}#{n}"

    def add_tensor(self, name, kind, dtype, nbytes, origin, layer, floating, numel,
                   trainable=False):
        if not 1 <= nbytes <= MAX_BYTES:
            raise InternalError(f"tensor {name}: size {nbytes} bytes out of range")
        t = Tensor(len(self.tensors), self._unique(name, self._tensor_names), kind, dtype,
                   int(nbytes), origin, layer, floating, numel, trainable)
        self.tensors.append(t)
        return t.id

    def val(self, tid):
        """The current value of a tensor: (id, number of in-place updates applied)."""
        return (tid, self.version.get(tid, 0))

    def add_op(self, name, kind, dtype, flops, nbytes, inputs, out_specs, updates=(), layer=-1,
               bw=None):
        """Adds an op; out_specs are (name, kind, dtype, bytes, floating, numel) of new
        tensors. Returns (op, [output tensor ids])."""
        inputs = _dedup(inputs)
        updates = _dedup(updates)
        inputs = [t for t in inputs if t not in updates]
        oid = len(self.ops)
        outs = [self.add_tensor(n, k, d, b, oid, layer, f, e) for (n, k, d, b, f, e) in out_specs]
        in_vals = [self.val(t) for t in inputs + updates]
        out_vals = [(t, 0) for t in outs]
        for t in updates:
            self.version[t] = self.version.get(t, 0) + 1
            out_vals.append(self.val(t))
        if not (isinstance(flops, int) and flops >= 0):
            raise InternalError(f"op {name}: bad FLOP count {flops!r}")
        op = Op(oid, self._unique(name, self._op_names), kind, dtype, int(flops), int(nbytes),
                inputs, outs, updates, layer, bw or {"rule": "nondiff"}, in_vals, out_vals)
        self.ops.append(op)
        return op, outs

    def bytes_of(self, tids):
        return sum(self.tensors[t].bytes for t in _dedup(tids))


def _dedup(seq):
    seen, out = set(), []
    for x in seq:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


# ---------------------------------------------------------------------------------------
# Python 3.11 compatibility of torch 1.13's fx (Debian 12 builds torch 1.13.1 for Python
# 3.11, which torch 1.13 predates). Two spots read code objects the pre-3.11 way.

def patch_torch_fx_for_python311(torch):
    if sys.version_info < (3, 11) or int(torch.__version__.split(".")[0]) >= 2:
        return
    import dis
    import types
    import torch.fx._symbolic_trace as symbolic_trace
    import torch.fx.proxy as proxy

    varstuff = symbolic_trace.HAS_VARSTUFF

    def patch_function(fn, nargs):
        # Make *args and **kwargs plain positional parameters, keeping every other field
        # of the code object (3.11 added co_qualname and co_exceptiontable).
        code = fn.__code__.replace(co_argcount=nargs, co_posonlyargcount=0,
                                   co_kwonlyargcount=0, co_flags=fn.__code__.co_flags & ~varstuff)
        return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                                  fn.__closure__)

    def proxy_iter(self):
        # 3.11 bytecode has inline cache entries, so f_lasti // 2 is no longer the index of
        # the current instruction; find it by offset.
        frame = inspect.currentframe().f_back
        for inst in dis.get_instructions(frame.f_code):
            if inst.offset == frame.f_lasti:
                if inst.opname == "UNPACK_SEQUENCE":
                    return (self[i] for i in range(inst.argval))
                break
        return self.tracer.iter(self)

    symbolic_trace._patch_function = patch_function
    proxy.Proxy.__iter__ = proxy_iter


# ---------------------------------------------------------------------------------------
# Tracing: record the module path (scope) of every node.

def scoped_tracer(base, model, leaf_suffixes=()):
    """A subclass of the fx tracer `base` that stamps node.meta["tierflow_scope"] with the
    path of the innermost module being traced, and treats modules whose class name ends in
    one of leaf_suffixes as leaves."""
    paths = {id(m): name for name, m in model.named_modules()}

    class ScopedTracer(base):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._tierflow_scope = [""]

        def is_leaf_module(self, m, qualified_name):
            if leaf_suffixes and type(m).__name__.endswith(leaf_suffixes):
                return True
            return super().is_leaf_module(m, qualified_name)

        def call_module(self, m, forward, args, kwargs):
            self._tierflow_scope.append(paths.get(id(m), self._tierflow_scope[-1]))
            try:
                return super().call_module(m, forward, args, kwargs)
            finally:
                self._tierflow_scope.pop()

        def create_node(self, *a, **k):
            node = super().create_node(*a, **k)
            node.meta["tierflow_scope"] = self._tierflow_scope[-1]
            return node

    return ScopedTracer


# ---------------------------------------------------------------------------------------
# Recording: run the traced graph on the sample input and build the forward ops.

class Ref:
    """A node's tensor value: a workload tensor id, or a parameter/buffer not yet used."""
    __slots__ = ("tid", "weight", "weight_name")

    def __init__(self, tid=None, weight=None, weight_name=None):
        self.tid, self.weight, self.weight_name = tid, weight, weight_name


EMPTY = object()  # a tensor with no elements: no workload tensor, dropped from op inputs
NEW = object()  # marks a result tensor that needs a new workload tensor


def make_recorder(torch, fx):
    dtype_names = {
        torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16",
        torch.float16: "fp16", torch.int8: "int8", torch.uint8: "int8",
    }

    def storage_ptr(t):
        try:
            return t.storage().data_ptr() if t.numel() > 0 else None
        except Exception:  # noqa: BLE001 - tensors without storage (sparse, ...)
            return None

    def tensor_leaves(x, out):
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                tensor_leaves(y, out)
        elif isinstance(x, dict):
            for k in x:
                tensor_leaves(x[k], out)
        return out

    def map_struct(x, fn):
        """The structure of x (tuples for lists) with fn(t) for each tensor t, None for
        everything else, in a fixed traversal order."""
        if isinstance(x, torch.Tensor):
            return fn(x)
        if isinstance(x, (list, tuple)):
            return tuple(map_struct(y, fn) for y in x)
        if isinstance(x, dict):
            return {k: map_struct(x[k], fn) for k in x}
        return None

    def replace_new(x, it):
        if isinstance(x, tuple):
            return tuple(replace_new(y, it) for y in x)
        if isinstance(x, dict):
            return {k: replace_new(x[k], it) for k in x}
        return next(it) if x is NEW else x

    class Recorder(fx.Interpreter):
        def __init__(self, gm, model, wl, dtype_label, inputs_labels, moe_paths):
            super().__init__(gm)
            self.model = model
            self.wl = wl
            self.dtype_label = dtype_label  # e.g. {"bf16": "fp16"}: label bf16 tensors fp16
            self.input_labels = inputs_labels
            self.refs = {}  # node -> structure of Ref / EMPTY / None
            self.weight_tid = {}  # id(parameter or buffer) -> tensor id
            self.param_names = {}
            self.trainable = set()
            for name, p in model.named_parameters():
                self.param_names.setdefault(id(p), name)
                if p.requires_grad:
                    self.trainable.add(id(p))
            for name, b in model.named_buffers():
                self.param_names.setdefault(id(b), name)
            self.moe_paths = moe_paths
            self.outputs = []
            # For tools/python/tierflow_torch, which runs the graph again with a plan:
            # the ops each node emitted (ids, in order) and the values of nodes that
            # produced no tensor (sizes, dtypes, devices), which it does not recompute.
            self.node_ops = {}
            self.consts = {}

        # -- helpers ---------------------------------------------------------------

        def dtype_of(self, t):
            d = dtype_names.get(t.dtype)
            if d is None:
                # The format has no wider integer or boolean type: integer and boolean
                # tensors are labelled int8 and keep their true byte size.
                d = "int8" if not t.is_floating_point() else "fp32"
            return self.dtype_label.get(d, d)

        def nbytes(self, t):
            return t.numel() * t.element_size()

        def resolve(self, ref):
            if ref.tid is None:
                w = ref.weight
                tid = self.weight_tid.get(id(w))
                if tid is None:
                    name = self.param_names.get(id(w), ref.weight_name)
                    tid = self.wl.add_tensor(name, "weight", self.dtype_of(w), self.nbytes(w),
                                             "external", layer_of(name), w.is_floating_point(),
                                             w.numel(), trainable=id(w) in self.trainable)
                    self.weight_tid[id(w)] = tid
                ref.tid = tid
            return ref.tid

        def weight_ref(self, w, name):
            return Ref(weight=w, weight_name=name)

        def tensor_args(self, node_args, real_args):
            """(Ref, real tensor) for every tensor in the arguments, in order."""
            out = []

            def zipval(v, real):
                if (isinstance(v, Ref) or v is EMPTY) and isinstance(real, torch.Tensor):
                    out.append((v, real))
                elif isinstance(v, (list, tuple)) and isinstance(real, (list, tuple)):
                    for a, r in zip(v, real):
                        zipval(a, r)
                elif isinstance(v, dict) and isinstance(real, dict):
                    for k in v:
                        if k in real:
                            zipval(v[k], real[k])

            def walk(a, r):
                if isinstance(a, fx.Node):
                    zipval(self.refs.get(a), r)
                elif isinstance(a, (list, tuple)) and isinstance(r, (list, tuple)):
                    for x, y in zip(a, r):
                        walk(x, y)
                elif isinstance(a, dict) and isinstance(r, dict):
                    for k in a:
                        if k in r:
                            walk(a[k], r[k])

            walk(node_args, real_args)
            return out

        def read_bytes(self, pairs):
            """Bytes read from each distinct tensor: the view's size, at most the tensor's."""
            per = {}
            for ref, real in pairs:
                tid = self.resolve(ref)
                per[tid] = max(per.get(tid, 0), min(self.nbytes(real), self.wl.tensors[tid].bytes))
            return sum(per.values())

        def scope(self, n):
            if n.op == "call_module":
                return n.target
            return n.meta.get("tierflow_scope", "")

        def op_name(self, n):
            if n.op == "call_module":
                return n.target
            s = n.meta.get("tierflow_scope", "")
            return f"{s}.{n.name}" if s else n.name

        def moe_block(self, path):
            best = None
            for p in self.moe_paths:
                if path == p or path.startswith(p + "."):
                    if best is None or len(p) > len(best):
                        best = p
            return best

        def in_expert(self, path):
            block = self.moe_block(path)
            return block is not None and path.startswith(block + ".experts.")

        def in_router_zone(self, path):
            block = self.moe_block(path)
            if block is None:
                return False
            rest = path[len(block):]
            return not rest.startswith(".experts.") and not rest.startswith(".shared_expert.")

        def emit(self, n, kind, flops, in_pairs, results, bw, nbytes=None):
            """One op reading in_pairs (Ref, real) and producing the tensors `results`;
            nbytes defaults to what it reads plus what it writes. Returns the results' Refs."""
            inputs = [self.resolve(r) for r, _ in in_pairs]
            name = self.op_name(n)
            layer = layer_of(self.scope(n))
            specs = []
            for i, t in enumerate(results):
                tname = name if len(results) == 1 else f"{name}.{i}"
                specs.append((tname, "activation", self.dtype_of(t), self.nbytes(t),
                              t.is_floating_point(), t.numel()))
            # matrix products run in their operands' type, other ops in their result's
            floats = [real for _, real in in_pairs if real.is_floating_point()]
            if bw.get("rule") not in ("linear", "matmul"):
                floats = [t for t in results if t.is_floating_point()] + floats
            dtype = self.dtype_of(floats[0]) if floats else self.dtype_of(results[0])
            if nbytes is None:
                nbytes = self.read_bytes(in_pairs) + sum(self.nbytes(t) for t in results)
            for key, value in list(bw.items()):
                if isinstance(value, Ref):
                    bw[key] = self.resolve(value)
            _, outs = self.wl.add_op(name, kind, dtype, int(flops), nbytes, inputs, specs,
                                     layer=layer, bw=bw)
            return [Ref(tid=t) for t in outs]

        # -- the interpreter ---------------------------------------------------------

        def run_node(self, n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            first = len(self.wl.ops)
            result = getattr(self, n.op)(n.target, args, kwargs)
            self.refs[n] = self.record(n, args, kwargs, result)
            self.node_ops[n] = list(range(first, len(self.wl.ops)))
            if not tensor_leaves(result, []):
                self.consts[n] = result
            return result

        def record(self, n, args, kwargs, result):
            if n.op == "placeholder":
                if not isinstance(result, torch.Tensor):
                    return None
                name = self.input_labels.get(n.target, n.target.lstrip("*"))
                tid = self.wl.add_tensor(name, "input", self.dtype_of(result),
                                         max(1, self.nbytes(result)), "external", -1,
                                         result.is_floating_point(), result.numel())
                return Ref(tid=tid)
            if n.op == "get_attr":
                return map_struct(result, lambda t: self.weight_ref(t, n.target))
            if n.op == "output":
                self.outputs = [r for r, _ in self.tensor_args(n.args, args) if isinstance(r, Ref)]
                return None
            if n.op == "call_module":
                return self.record_module(n, args, kwargs, result)
            return self.record_function(n, args, kwargs, result)

        def new_results(self, result, pairs):
            """Map the result's tensors: EMPTY if it has no elements, the input's Ref if it
            shares an input's storage (a view or the input itself), else NEW. Returns the
            mapped structure and the NEW tensors in order."""
            ptrs = {}
            for ref, real in pairs:
                p = storage_ptr(real)
                if p is not None and isinstance(ref, Ref):
                    ptrs.setdefault(p, ref)
            new = []

            def f(t):
                if t.numel() == 0:
                    return EMPTY
                ref = ptrs.get(storage_ptr(t))
                if ref is not None:
                    return ref
                new.append(t)
                return NEW

            return map_struct(result, f), new

        def finish(self, n, result, mapped_new, make_op):
            """One op, make_op(new tensors) -> their Refs, for the NEW tensors of the result;
            returns the result's structure of Refs."""
            mapped, new = mapped_new
            refs = make_op(new) if new else []
            return replace_new(mapped, iter(refs))

        # -- modules -----------------------------------------------------------------

        def module_weights(self, m, prefix):
            pairs = []
            for name, p in list(m.named_parameters()) + list(m.named_buffers()):
                ref = self.weight_ref(p, f"{prefix}.{name}")
                pairs.append((ref, p))
            return pairs

        def record_module(self, n, args, kwargs, result):
            m = self.fetch_attr(n.target)
            cls = type(m).__name__
            acts = [(r, t) for r, t in self.tensor_args(n.args, args) + self.tensor_args(
                n.kwargs, kwargs) if r is not EMPTY]
            leaves = tensor_leaves(result, [])
            if leaves and all(t.numel() == 0 for t in leaves):
                return map_struct(result, lambda t: EMPTY)  # an expert that got no tokens
            torch_nn = torch.nn
            if isinstance(m, torch_nn.MultiheadAttention):
                return self.record_mha(n, m, args, kwargs, acts, result)
            weights = self.module_weights(m, n.target)
            mapped = self.new_results(result, acts + weights)
            path = n.target

            if isinstance(m, torch_nn.Linear):
                x = acts[0]
                out = result
                N, K = m.out_features, m.in_features
                M = out.numel() // N
                flops = 2 * M * K * N + (M * N if m.bias is not None else 0)
                kind = "expert" if self.in_expert(path) else (
                    "router" if self.in_router_zone(path) else "matmul")
                w = [r for r, t in weights if t is m.weight][0]
                b = [r for r, t in weights if m.bias is not None and t is m.bias]
                bw = {"rule": "linear", "x": x[0], "w": w, "b": b[0] if b else None,
                      "mkn": M * K * N, "mn": M * N}
                return self.finish(n, result, mapped, lambda new: self.emit(
                    n, kind, flops, [x] + [p for p in weights if p[1] is m.weight or
                                           p[1] is m.bias], new, bw))
            if isinstance(m, (torch_nn.Conv1d, torch_nn.Conv2d, torch_nn.Conv3d)):
                x = acts[0]
                kernel = math.prod(m.kernel_size)
                out = result
                batch_spatial = out.numel() // m.out_channels
                macs = batch_spatial * m.out_channels * (m.in_channels // m.groups) * kernel
                bias = batch_spatial * m.out_channels if m.bias is not None else 0
                w = [r for r, t in weights if t is m.weight][0]
                b = [r for r, t in weights if m.bias is not None and t is m.bias]
                bw = {"rule": "linear", "x": x[0], "w": w, "b": b[0] if b else None,
                      "mkn": macs, "mn": bias}
                return self.finish(n, result, mapped, lambda new: self.emit(
                    n, "matmul", 2 * macs + bias, [x] + weights, new, bw))
            if isinstance(m, torch_nn.Embedding):
                ids = acts[0]
                w = weights[0]
                bw = {"rule": "embedding", "ids": ids[0], "w": w[0]}

                def make(new):
                    out_bytes = sum(self.nbytes(t) for t in new)
                    # reads the gathered rows and the indices, writes the rows
                    nb = self.nbytes(ids[1]) + 2 * out_bytes
                    return self.emit(n, "embedding", 0, [ids, w], new, bw, nbytes=nb)
                return self.finish(n, result, mapped, make)
            if cls.endswith(NORM_MODULE_SUFFIXES):
                return self.finish(n, result, mapped, lambda new: self.emit(
                    n, "norm", NORM_FLOPS_PER_ELEMENT * sum(t.numel() for t in new),
                    acts + weights, new, {"rule": "generic"}))
            if cls in ACTIVATION_MODULES:
                fname = ACTIVATION_MODULES[cls]
                return self.finish(n, result, mapped, lambda new: self.elementwise(
                    n, fname, acts + weights, new))
            # Dropout and Identity return their input in eval mode (a view, handled by
            # new_results); anything else is an opaque op.
            return self.finish(n, result, mapped, lambda new: self.emit(
                n, "other", sum(t.numel() for t in new if t.is_floating_point()),
                acts + weights, new, {"rule": "generic"}))

        def record_mha(self, n, m, args, kwargs, acts, result):
            """nn.MultiheadAttention as in_proj, QK^T, softmax, AV and out_proj."""
            path = n.target
            q = args[0] if args else kwargs.get("query")
            k = args[1] if len(args) > 1 else kwargs.get("key")
            v = args[2] if len(args) > 2 else kwargs.get("value")
            if not (q is k and k is v) or not m._qkv_same_embed_dim or m.bias_k is not None:
                raise ExportError(f"{path}: only self-attention nn.MultiheadAttention "
                                  "(query is key is value, packed in_proj) is supported")
            x_pair = [(r, t) for r, t in acts if t is q][0]
            masks = [(r, t) for r, t in acts if t is not q]
            batch_first = getattr(m, "batch_first", False)
            L, N, E = (q.shape[1], q.shape[0], q.shape[2]) if batch_first else tuple(q.shape)
            H = m.num_heads
            Dh = E // H
            T = N * L
            el = q.element_size()
            dt = self.dtype_of(q)
            layer = layer_of(path)
            floating, wl = q.is_floating_point(), self.wl
            w_in = self.weight_ref(m.in_proj_weight, f"{path}.in_proj_weight")
            b_in = self.weight_ref(m.in_proj_bias, f"{path}.in_proj_bias") \
                if m.in_proj_bias is not None else None
            w_out = self.weight_ref(m.out_proj.weight, f"{path}.out_proj.weight")
            b_out = self.weight_ref(m.out_proj.bias, f"{path}.out_proj.bias") \
                if m.out_proj.bias is not None else None
            xr = self.resolve(x_pair[0])
            w_in_t, w_out_t = self.resolve(w_in), self.resolve(w_out)
            b_in_t = self.resolve(b_in) if b_in else None
            b_out_t = self.resolve(b_out) if b_out else None

            def op(name, kind, flops, inputs, out_elems, nbytes, bw):
                spec = [(name, "activation", dt, out_elems * el, floating, out_elems)]
                o, outs = wl.add_op(name, kind, dt, flops, nbytes, inputs, spec, layer=layer,
                                    bw=bw)
                return outs[0]

            def wb(t):
                return wl.tensors[t].bytes if t is not None else 0

            qkv_bytes = T * 3 * E * el
            qkv = op(f"{path}.in_proj", "matmul", 2 * T * E * 3 * E + (T * 3 * E if b_in else 0),
                     [xr, w_in_t] + ([b_in_t] if b_in else []), T * 3 * E,
                     wl.tensors[xr].bytes + wb(w_in_t) + wb(b_in_t) + qkv_bytes,
                     {"rule": "linear", "x": xr, "w": w_in_t, "b": b_in_t,
                      "mkn": T * E * 3 * E, "mn": T * 3 * E})
            s_elems = N * H * L * L
            mm = 2 * N * H * L * L * Dh
            scores = op(f"{path}.qk", "attention", mm, [qkv], s_elems,
                        qkv_bytes * 2 // 3 + s_elems * el,
                        {"rule": "matmul", "operands": [qkv, qkv], "mm_flops": mm})
            mask_ids = [self.resolve(r) for r, _ in masks]
            probs = op(f"{path}.softmax", "elementwise", SOFTMAX_FLOPS_PER_ELEMENT * s_elems,
                       [scores] + mask_ids, s_elems, 2 * s_elems * el + wl.bytes_of(mask_ids),
                       {"rule": "generic"})
            ctx = op(f"{path}.av", "attention", mm, [probs, qkv], T * E,
                     s_elems * el + qkv_bytes // 3 + T * E * el,
                     {"rule": "matmul", "operands": [probs, qkv], "mm_flops": mm})
            out = op(f"{path}.out_proj", "matmul", 2 * T * E * E + (T * E if b_out else 0),
                     [ctx, w_out_t] + ([b_out_t] if b_out else []), T * E,
                     2 * T * E * el + wb(w_out_t) + wb(b_out_t),
                     {"rule": "linear", "x": ctx, "w": w_out_t, "b": b_out_t,
                      "mkn": T * E * E, "mn": T * E})
            real_out = result[0] if isinstance(result, (tuple, list)) else result
            if real_out.numel() != T * E:
                raise InternalError(f"{path}: attention output has {real_out.numel()} elements,"
                                    f" expected {T * E}")
            rest = tuple(None for _ in result[1:]) if isinstance(result, (tuple, list)) else ()
            if any(isinstance(x, torch.Tensor) for x in (result[1:] if rest else ())):
                raise ExportError(f"{path}: need_weights=True is not supported")
            return (Ref(tid=out),) + rest if isinstance(result, (tuple, list)) else Ref(tid=out)

        # -- functions and methods ------------------------------------------------------

        def elementwise(self, n, fname, pairs, new, kind=None, rule="generic"):
            floating_out = [t for t in new if t.is_floating_point()]
            if fname in REDUCTION_NAMES or fname in SELECT_NAMES:
                flops = sum(t.numel() for _, t in pairs if t.is_floating_point())
            else:
                flops = ELEMENTWISE_COST.get(fname, 1) * sum(t.numel() for t in floating_out)
            if fname in COPY_NAMES or fname in FACTORY_NAMES or fname in NONDIFF_NAMES:
                flops = 0
            if kind is None:
                kind = "elementwise"
                if fname in ("softmax", "topk", "sort", "argsort") and \
                        self.in_router_zone(self.scope(n)):
                    kind = "router"
            return self.emit(n, kind, flops, pairs, new, {"rule": rule})

        def record_function(self, n, args, kwargs, result):
            fname = canonical_name(function_name(n.target))
            pairs = [(r, t) for r, t in self.tensor_args(n.args, args) + self.tensor_args(
                n.kwargs, kwargs)]
            inplace = fname in INPLACE_OPERATOR_NAMES or (
                fname.endswith("_") and not fname.startswith("_") and isinstance(n.target, str))
            if any(r is EMPTY for r, _ in pairs):
                # An op on an empty tensor (an expert that got no tokens): drop the empty
                # inputs; an in-place op left with nothing to add does nothing.
                if inplace and pairs[0][0] is EMPTY:
                    return EMPTY if isinstance(result, torch.Tensor) else None
                pairs = [(r, t) for r, t in pairs if r is not EMPTY]
                if inplace and len(pairs) <= 1:
                    return pairs[0][0] if isinstance(result, torch.Tensor) else None
            result_leaves = tensor_leaves(result, [])
            if inplace:
                return self.record_inplace(n, fname, pairs, result)
            if not result_leaves:
                return None
            if not pairs:
                fname = "arange" if fname not in FACTORY_NAMES else fname  # made from constants
            if fname in VIEW_NAMES and pairs:
                base = pairs[0][0]
                return map_struct(result, lambda t: EMPTY if t.numel() == 0 else base)
            if fname == "getitem" and not isinstance(args[0], torch.Tensor):
                # element of a tuple or list result
                container = self.refs.get(n.args[0]) if isinstance(n.args[0], fx.Node) else None
                idx = args[1]
                if isinstance(container, (tuple, list)):
                    try:
                        return container[idx]
                    except (IndexError, TypeError):
                        return None
                if isinstance(container, dict):
                    return container.get(idx)
                return None
            mapped = self.new_results(result, pairs)
            scope = self.scope(n)

            if fname in MATMUL_NAMES:
                return self.finish(n, result, mapped, lambda new: self.matmul(
                    n, fname, args, pairs, new, scope))
            if fname == "linear":
                return self.finish(n, result, mapped, lambda new: self.functional_linear(
                    n, pairs, new, scope))
            if fname in ("scaled_dot_product_attention", "_scaled_dot_product_attention"):
                return self.finish(n, result, mapped, lambda new: self.sdpa(n, pairs, new))
            if fname in ("layer_norm", "rms_norm", "group_norm", "batch_norm",
                         "instance_norm"):
                return self.finish(n, result, mapped, lambda new: self.emit(
                    n, "norm", NORM_FLOPS_PER_ELEMENT * sum(t.numel() for t in new), pairs,
                    new, {"rule": "generic"}))
            if fname == "embedding":
                ids = [p for p in pairs if not p[1].is_floating_point()]
                w = [p for p in pairs if p[1].is_floating_point()]

                def make(new):
                    nb = sum(self.nbytes(t) for _, t in ids) + 2 * sum(self.nbytes(t) for t in new)
                    return self.emit(n, "embedding", 0, ids + w, new, {
                        "rule": "embedding", "ids": ids[0][0], "w": w[0][0]}, nbytes=nb)
                return self.finish(n, result, mapped, make)
            if fname in FACTORY_NAMES:
                return self.finish(n, result, mapped, lambda new: self.emit(
                    n, "elementwise", 0, [], new, {"rule": "nondiff"}))
            if fname in ADD_NAMES and all(t.is_floating_point() for t in result_leaves):
                return self.finish(n, result, mapped, lambda new: self.add(
                    n, fname, args, pairs, new))
            if fname in ("contiguous", "clone", "dropout", "identity"):
                rule = "identity"
            elif fname in COPY_NAMES:
                rule = "copy"
            elif fname in NONDIFF_NAMES:
                rule = "nondiff"
            else:
                rule = "generic"
            return self.finish(n, result, mapped, lambda new: self.elementwise(
                n, fname, pairs, new, rule=rule))

        def record_inplace(self, n, fname, pairs, result):
            """An in-place op: it updates its first tensor argument."""
            if not pairs:
                return None
            target_ref, target = pairs[0]
            others = [(r, t) for r, t in pairs[1:] if r is not target_ref]
            tid = self.resolve(target_ref)
            base = fname.rstrip("_")
            if fname == "setitem" or base in ("copy", "fill", "zero", "index_add", "index_copy",
                                              "index_fill", "masked_fill", "scatter",
                                              "scatter_add", "index_put"):
                flops = 0 if fname == "setitem" or base in ("copy", "fill", "zero", "index_copy",
                                                             "index_fill", "masked_fill",
                                                             "scatter", "index_put") \
                    else sum(t.numel() for _, t in others if t.is_floating_point())
                rule = "copy" if flops == 0 else "generic"
            else:
                flops = ELEMENTWISE_COST.get(base.lstrip("i"), 1) * target.numel()
                rule = "generic"
            inputs = [self.resolve(r) for r, _ in others]
            nb = self.read_bytes(others) + 2 * min(self.nbytes(target), self.wl.tensors[tid].bytes)
            floats = [t for _, t in pairs if t.is_floating_point()]
            dtype = self.dtype_of(floats[0] if floats else target)
            self.wl.add_op(self.op_name(n), "elementwise", dtype, flops, nb, inputs, [],
                           updates=[tid], layer=layer_of(self.scope(n)), bw={"rule": rule})
            if isinstance(result, torch.Tensor):
                return target_ref
            return None

        def matmul(self, n, fname, args, pairs, new, scope):
            out = new[0]
            floats = [p for p in pairs]
            if fname == "einsum":
                flops = einsum_flops(args[0], [t for _, t in pairs])
                operands = [r for r, _ in pairs]
                add = None
            else:
                if fname in ("baddbmm", "addmm", "addbmm"):
                    add, a, b = floats[0], floats[1], floats[2]
                else:
                    add, (a, b) = None, floats[:2]
                K = a[1].shape[-1] if a[1].dim() >= 1 else 1
                flops = 2 * out.numel() * K
                operands = [a[0], b[0]]
                add = add[0] if add else None
            mm = flops
            if add is not None:
                flops += out.numel()
            operand_is_weight = any(r.tid is None or self.wl.tensors[self.resolve(r)].kind ==
                                    "weight" for r in operands)
            kind = "attention" if ATTENTION_RE.search(scope) and not operand_is_weight \
                and "rotary" not in scope else "matmul"
            if self.in_expert(scope):
                kind = "expert"
            bw = {"rule": "matmul", "operands": [self.resolve(r) for r in operands],
                  "mm_flops": mm, "add": self.resolve(add) if add is not None else None}
            return self.emit(n, kind, flops, pairs, new, bw)

        def functional_linear(self, n, pairs, new, scope):
            x, w = pairs[0], pairs[1]
            b = pairs[2] if len(pairs) > 2 else None
            out = new[0]
            N, K = w[1].shape[0], w[1].shape[-1]
            M = out.numel() // N
            flops = 2 * M * K * N + (M * N if b else 0)
            kind = "expert" if self.in_expert(scope) else (
                "router" if self.in_router_zone(scope) else "matmul")
            bw = {"rule": "linear", "x": self.resolve(x[0]), "w": self.resolve(w[0]),
                  "b": self.resolve(b[0]) if b else None, "mkn": M * K * N, "mn": M * N}
            return self.emit(n, kind, flops, pairs, new, bw)

        def sdpa(self, n, pairs, new):
            q, k, v = pairs[0][1], pairs[1][1], pairs[2][1]
            Lq, D = q.shape[-2], q.shape[-1]
            Lk = k.shape[-2]
            heads = q.numel() // (Lq * D)
            flops = 2 * heads * Lq * Lk * D + 2 * heads * Lq * Lk * v.shape[-1] + \
                SOFTMAX_FLOPS_PER_ELEMENT * heads * Lq * Lk
            return self.emit(n, "attention", flops, pairs, new, {"rule": "generic"})

        def add(self, n, fname, args, pairs, new):
            out = new[0]
            operands = []
            for i, (r, t) in enumerate(pairs):
                negate = (fname in ("sub", "isub") and i == 1) or (fname == "rsub" and i == 0)
                operands.append((r, t.numel(), negate))
            bw = {"rule": "add", "out_numel": out.numel()}
            refs = self.emit(n, "elementwise", out.numel(), pairs, new, bw)
            bw["operands"] = [(self.resolve(r), numel, neg) for r, numel, neg in operands]
            return refs

    return Recorder


def einsum_flops(equation, operands):
    """2 x the product of every index size (each output element sums over the rest)."""
    lhs = equation.replace(" ", "").split("->")[0]
    sizes = {}
    for spec, t in zip(lhs.split(","), operands):
        spec = spec.replace("...", "")
        dims = list(t.shape)[-len(spec):] if spec else []
        for c, s in zip(spec, dims):
            sizes[c] = s
    return 2 * math.prod(sizes.values()) if sizes else 0



# ---------------------------------------------------------------------------------------
# Training step: loss, backward derived from the forward ops, AdamW.

def add_training_step(wl, logits_tids, label_tid, master_weights):
    """Appends the loss, the backward ops (the forward ops in reverse) and one AdamW op per
    parameter. Names follow the C++ generator (traces/): backward ops end in .dgrad, .wgrad
    or .bwd, gradients are TENSOR.grad and accumulate in place, AdamW is adamw.WEIGHT."""
    fwd_ops = list(wl.ops)
    requires = {}  # value -> needs a gradient
    for t in wl.tensors:
        if t.origin == "external":
            requires[(t.id, 0)] = t.trainable and t.floating
    for op in fwd_ops:
        flag = op.bw.get("rule") != "nondiff" and any(requires.get(v, False) for v in op.in_vals)
        for v in op.out_vals:
            requires[v] = flag and wl.tensors[v[0]].floating

    grad = {}  # value -> its gradient tensor

    def needs(v):
        return v is not None and requires.get(v, False)

    def emit(name, kind, dtype, flops, inputs, targets, layer, of=None, part="bwd"):
        """A backward op of forward op `of` reading `inputs` and adding to the gradients of
        the values `targets`: the first contribution to a gradient creates it, later ones
        update it."""
        outs, updates, new = [], [], []
        targets = _dedup(targets)
        for v in targets:
            if v in grad:
                updates.append(grad[v])
            else:
                t = wl.tensors[v[0]]
                new.append(v)
                outs.append((f"{t.name}.grad" if v[1] == 0 else f"{t.name}@{v[1]}.grad",
                             "grad", t.dtype, t.bytes, True, t.numel))
        if not outs and not updates:
            return
        inputs = _dedup(inputs)
        nbytes = wl.bytes_of([i for i in inputs if i not in updates]) + \
            sum(o[3] for o in outs) + 2 * wl.bytes_of(updates)
        bop, tids = wl.add_op(name, kind, dtype, int(flops), nbytes, inputs, outs, updates,
                              layer=layer)
        for v, g in zip(new, tids):
            grad[v] = g
        wl.backward[bop.id] = (of, part, targets)

    # The loss: cross-entropy of the logits against the labels, which yields the logits'
    # gradient directly.
    numel = sum(wl.tensors[t].numel for t in logits_tids)
    emit("loss", "elementwise", "fp32", LOSS_FLOPS_PER_LOGIT * numel,
         list(logits_tids) + [label_tid], [wl.val(t) for t in logits_tids], -1, part="loss")

    for op in reversed(fwd_ops):
        gouts = [grad[v] for v in op.out_vals if v in grad]
        if not gouts:
            continue
        need = [v for v in _dedup(op.in_vals) if needs(v)]
        if not need:
            continue
        bw, kind, layer, dtype = op.bw, op.kind, op.layer, op.dtype
        rule = bw.get("rule")
        vals = {v[0]: v for v in op.in_vals}
        gy = gouts[0]
        of = op.id
        if rule == "linear":  # x W^T (+ b), and convolutions
            x, w = vals.get(bw["x"]), vals.get(bw["w"])
            b = vals.get(bw["b"]) if bw["b"] is not None else None
            if needs(x):
                emit(f"{op.name}.dgrad", kind, dtype, 2 * bw["mkn"], [gy, bw["w"]], [x], layer,
                     of, "dgrad")
            if needs(w) or needs(b):
                flops = (2 * bw["mkn"] if needs(w) else 0) + (bw["mn"] if needs(b) else 0)
                emit(f"{op.name}.wgrad", kind, dtype, flops, [gy, bw["x"]],
                     [v for v in (w, b) if needs(v)], layer, of, "wgrad")
        elif rule == "matmul":  # A B: dA = dY B^T, dB = A^T dY, each the forward's FLOPs
            operands = bw["operands"]
            targets = [vals[t] for t in operands if needs(vals.get(t))]
            flops = bw["mm_flops"] * len(targets)
            if bw.get("add") is not None and needs(vals.get(bw["add"])):
                targets.append(vals[bw["add"]])
                flops += wl.tensors[gy].numel
            emit(f"{op.name}.bwd", kind, dtype, flops, [gy] + operands, targets, layer, of)
        elif rule == "embedding":  # scatter-add of the output gradient's rows
            if needs(vals.get(bw["w"])):
                emit(f"{op.name}.wgrad", "embedding", dtype,
                     sum(wl.tensors[g].numel for g in gouts), gouts + [bw["ids"]],
                     [vals[bw["w"]]], layer, of, "wgrad")
        elif rule in ("add", "identity"):
            # The gradient passes through: an operand without a gradient yet takes the
            # output's; one with a gradient, a broadcast one (summed over the broadcast
            # dimensions) or a subtracted one (negated) needs an op.
            operands = bw.get("operands") or [(v[0], wl.tensors[v[0]].numel, False)
                                             for v in need]
            work, flops = [], 0
            for tid, numel, negate in operands:
                v = vals.get(tid)
                if not needs(v):
                    continue
                if v not in grad and not negate and numel == wl.tensors[gy].numel and \
                        len(gouts) == 1:
                    grad[v] = gy
                    wl.grad_alias[v] = (op.id, [o for o in op.out_vals if o in grad][0])
                else:
                    work.append(v)
                    flops += wl.tensors[gy].numel
            if work:
                emit(f"{op.name}.bwd", "elementwise", dtype, flops, gouts, work, layer, of)
        elif rule == "copy":
            emit(f"{op.name}.bwd", "elementwise", dtype, 0, gouts, need, layer, of)
        else:  # generic: reads the output gradients and the op's inputs, 2x the FLOPs
            saved = [v[0] for v in op.in_vals if v not in op.out_vals]
            emit(f"{op.name}.bwd", kind, dtype, BACKWARD_FACTOR * op.flops, gouts + saved,
                 need, layer, of)

    # AdamW, one op per parameter tensor that got a gradient.
    for p in list(wl.tensors):
        g = grad.get((p.id, 0)) if p.origin == "external" and p.kind == "weight" else None
        if g is None:
            continue
        states = [wl.add_tensor(f"{p.name}.{what}", "optimizer_state", "fp32", p.numel * 4,
                                "external", p.layer, True, p.numel)
                  for what in (("adam_m", "adam_v", "master") if master_weights
                               else ("adam_m", "adam_v"))]
        updated = [p.id] + states
        aop, _ = wl.add_op(f"adamw.{p.name}", "optimizer", "fp32",
                           ADAMW_FLOPS_PER_ELEMENT * p.numel,
                           wl.tensors[g].bytes + 2 * wl.bytes_of(updated), [g], [],
                           updates=updated, layer=p.layer)
        wl.optimizer[aop.id] = (p.id, states)
    wl.requires = requires
    wl.grad = grad


# ---------------------------------------------------------------------------------------
# Checks of the verifier rules of docs/formats.md, run on every export.

def check_workload(doc):
    """Returns a list of violations of the tierflow.workload/1 verifier rules."""
    errors = []
    tensors, ops = doc.get("tensors", []), doc.get("ops", [])
    names = set()
    producer = {}
    for i, t in enumerate(tensors):
        if t.get("id") != i:
            errors.append(f"tensors[{i}]: id {t.get('id')} is not its index")
        if t["name"] in names:
            errors.append(f"tensors[{i}]: duplicate name {t['name']}")
        names.add(t["name"])
        if not (isinstance(t["bytes"], int) and 1 <= t["bytes"] <= MAX_BYTES):
            errors.append(f"tensors[{i}]: bytes {t['bytes']} out of range")
        if t["origin"] != "external":
            if not (isinstance(t["origin"], int) and 0 <= t["origin"] < len(ops)):
                errors.append(f"tensors[{i}]: origin {t['origin']} is no op")
    names = set()
    for i, op in enumerate(ops):
        if op.get("id") != i:
            errors.append(f"ops[{i}]: id {op.get('id')} is not its index")
        if op["name"] in names:
            errors.append(f"ops[{i}]: duplicate name {op['name']}")
        names.add(op["name"])
        if not (isinstance(op["flops"], (int, float)) and math.isfinite(op["flops"]) and
                op["flops"] >= 0):
            errors.append(f"ops[{i}]: flops {op['flops']}")
        if not (isinstance(op["bytes"], int) and op["bytes"] >= 0):
            errors.append(f"ops[{i}]: bytes {op['bytes']}")
        seen = set()
        for field in ("inputs", "outputs", "updates"):
            for t in op.get(field, []):
                if not (isinstance(t, int) and 0 <= t < len(tensors)):
                    errors.append(f"ops[{i}].{field}: no tensor {t}")
                    continue
                if t in seen:
                    errors.append(f"ops[{i}]: tensor {t} appears twice")
                seen.add(t)
                if field == "outputs":
                    if tensors[t]["origin"] != i:
                        errors.append(f"ops[{i}]: output {t} has origin {tensors[t]['origin']}")
                    if t in producer:
                        errors.append(f"ops[{i}]: tensor {t} already produced by op {producer[t]}")
                    producer[t] = i
                else:
                    o = tensors[t]["origin"]
                    if o != "external" and not (isinstance(o, int) and o < i):
                        errors.append(f"ops[{i}]: reads tensor {t} before op {o} produces it")
    for i, t in enumerate(tensors):
        if t["origin"] != "external" and producer.get(i) != t["origin"]:
            errors.append(f"tensors[{i}]: origin op {t['origin']} does not list it in outputs")
    return errors


# ---------------------------------------------------------------------------------------
# JSON

def to_document(wl, name, meta):
    tensors = [{"id": t.id, "name": t.name, "kind": t.kind, "dtype": t.dtype, "bytes": t.bytes,
                "origin": t.origin, "layer": t.layer} for t in wl.tensors]
    ops = [{"id": o.id, "name": o.name, "kind": o.kind, "dtype": o.dtype, "flops": o.flops,
            "bytes": o.bytes, "inputs": o.inputs, "outputs": o.outputs, "updates": o.updates,
            "workspace": 0, "layer": o.layer, "collective_bytes": 0} for o in wl.ops]
    return {"format": FORMAT, "name": name, "meta": meta, "tensors": tensors, "ops": ops}


def render(doc):
    """Deterministic text: keys in the documented order, one tensor or op per line."""
    def one(x):
        return json.dumps(x, ensure_ascii=True, separators=(", ", ": "))

    lines = ["{",
             f'  "format": {one(doc["format"])},',
             f'  "name": {one(doc["name"])},',
             f'  "meta": {one(doc["meta"])},']
    for key, last in (("tensors", False), ("ops", True)):
        items = doc[key]
        if not items:
            lines.append(f'  "{key}": []' + ("" if last else ","))
            continue
        lines.append(f'  "{key}": [')
        lines.extend(f"    {one(x)}" + ("," if i + 1 < len(items) else "")
                     for i, x in enumerate(items))
        lines.append("  ]" + ("" if last else ","))
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    if path == "-":
        sys.stdout.write(text)
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ExportError(f"{path}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------------------
# Models

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp32": "float32"}
FILL_BLOCK = 1_000_003  # a prime: rows of a tiled weight never repeat one another


@contextlib.contextmanager
def parameters_on_meta(torch):
    """Every parameter registered inside is moved to the meta device (no memory, no
    initialisation). torch 1.13 has no default-device context; modules create their
    parameters with torch.empty (memory never touched) and register them, which is where
    this moves them. Buffers stay where they are."""
    register = torch.nn.Module.register_parameter

    def register_on_meta(module, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def fill_weights(model, torch, seed):
    """Gives a model built under parameters_on_meta real, deterministic weights, fast:
    matrices are a seeded normal block, tiled and scaled by 1/sqrt(fan-in); biases are 0,
    other vectors (norm weights) 1. Only the MoE routing depends on the values."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    # to_empty makes a new Parameter per module, which unties tied weights: note where
    # each parameter is used, to tie them again.
    places = {}
    for module in model.modules():
        for key, p in module._parameters.items():
            if p is not None:
                places.setdefault(id(p), []).append((module, key))
    model.to_empty(device="cpu")
    for uses in places.values():
        first = uses[0][0]._parameters[uses[0][1]]
        for module, key in uses[1:]:
            module._parameters[key] = first
    gen = torch.Generator().manual_seed(seed)
    block = torch.randn(FILL_BLOCK, generator=gen, dtype=torch.float64)
    block = torch.cat([block, block])
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
        for index, (name, p) in enumerate(model.named_parameters()):
            flat = p.view(-1)
            if p.dim() >= 2:
                scale = 1.0 / math.sqrt(max(1, p.numel() // p.shape[0]))
                offset = (index * 7919) % FILL_BLOCK
                for start in range(0, flat.numel(), FILL_BLOCK):
                    n = min(FILL_BLOCK, flat.numel() - start)
                    flat[start:start + n].copy_(block[offset:offset + n] * scale)
            elif name.endswith("bias"):
                flat.zero_()
            else:
                flat.fill_(1.0)
    return model


def load_hf(args, torch):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        with open(args.hf_config, encoding="utf-8") as f:
            config_dict = json.load(f)
    except OSError as e:
        raise ExportError(f"{args.hf_config}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"{args.hf_config}:{e.lineno}:{e.colno}: {e.msg}") from None
    if not isinstance(config_dict, dict) or "model_type" not in config_dict:
        raise ExportError(f"{args.hf_config}: a Hugging Face config.json with a model_type "
                          "is expected")
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import fx as hf_fx
    import torch.fx as fx
    transformers.logging.set_verbosity_error()
    model_type = config_dict.pop("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    if model_type not in CONFIG_MAPPING:
        import difflib
        close = difflib.get_close_matches(str(model_type), list(CONFIG_MAPPING.keys()), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ExportError(f"{args.hf_config}: model_type {model_type!r} is not known to "
                          f"transformers {transformers.__version__}{hint}")
    try:
        config = AutoConfig.for_model(model_type, **config_dict)
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{args.hf_config}: {one_line(e)}") from None
    config.use_cache = False
    try:
        with parameters_on_meta(torch):
            model = AutoModelForCausalLM.from_config(
                config, attn_implementation="eager",
                torch_dtype=getattr(torch, TORCH_DTYPES[args.dtype]))
    except Exception as e:  # noqa: BLE001 - any failure to build is a bad config
        raise ExportError(f"{args.hf_config}: cannot build the model: {one_line(e)}") from None
    model = fill_weights(model, torch, args.seed).eval()
    vocab = config.vocab_size
    gen = torch.Generator().manual_seed(args.seed)
    sample = {"input_ids": torch.randint(0, vocab, (args.batch, args.seq), generator=gen),
              "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long)}
    names = list(sample)

    # HFTracer resolves shape-dependent Python control flow from metadata it computes on
    # the meta device, which torch 1.13 cannot do for everything (torch.where on an expert
    # mask yields garbage indices, so tracing a Mixtral fails at random). This tracer
    # computes the metadata from real values instead: it runs the model eagerly on the
    # sample input alongside the trace, which also makes RMSNorm leaves (one norm op each)
    # work with their real weights.
    base = scoped_tracer(hf_fx.HFTracer, model, leaf_suffixes=("RMSNorm",))

    def real_value(v):
        if isinstance(v, fx.Proxy):
            return object.__getattribute__(v, "_metadata")
        return v

    failures = []  # the first error of the eager run that goes with the trace

    class Tracer(base):
        def trace(self, root, concrete_args=None, dummy_inputs=None, **kw):
            # Trace with the real inputs, so that shape-dependent branches match them
            # (HFTracer would otherwise make up inputs of random shapes).
            kw["complete_concrete_args_with_inputs_not_in_dummy_inputs"] = False
            return super().trace(root, concrete_args=concrete_args,
                                 dummy_inputs=dummy_inputs or dict(sample), **kw)

        def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None,
                         proxy_factory_fn=None):
            proxy = fx.Tracer.create_proxy(self, kind, target, args, kwargs, name, type_expr,
                                           proxy_factory_fn)
            if kind == "output":
                return proxy
            first_failure = failures[0] if failures else None
            self._disable_module_getattr = True
            self._disable_call_module = True
            try:
                a = fx.node.map_aggregate(args, real_value)
                k = fx.node.map_aggregate(kwargs, real_value)
                if kind == "placeholder":
                    if target not in sample and target not in self.meta_args:
                        return proxy
                    value = sample[target] if target in sample else self.meta_args[target]
                elif kind == "get_attr":
                    value = self.root
                    for atom in target.split("."):
                        value = getattr(value, atom)
                elif kind == "call_function":
                    value = target(*a, **k)
                elif kind == "call_method":
                    value = getattr(a[0], target)(*a[1:], **k)
                else:  # call_module
                    value = self.orig_forward(*a, **k)
            except Exception as e:  # noqa: BLE001 - no metadata, as HFTracer does
                if not isinstance(e, AttributeError) and first_failure is None:
                    first_failure = f"{function_name(target)}: {one_line(e)}"
                    failures.append(first_failure)
                return proxy
            finally:
                self._disable_module_getattr = False
                self._disable_call_module = False
            proxy.install_metadata(value)
            return proxy

    try:
        with torch.no_grad():
            gm = hf_fx.symbolic_trace(model, input_names=names, tracer_cls=Tracer)
    except Exception as e:  # noqa: BLE001
        cause = f" (running the model failed first at {failures[0]})" if failures else ""
        raise ExportError(f"cannot trace {type(model).__name__} with torch.fx: "
                          f"{one_line(e)}{cause}") from None
    stem = os.path.splitext(os.path.basename(args.hf_config))[0]
    info = {"model": config_dict.get("_name_or_path") or stem, "family": model_type,
            "class": type(model).__name__}
    return model, gm, [sample[k] for k in names], {}, info, stem


def load_torchvision(args, torch):
    import torch.fx as fx
    import torchvision
    builder = getattr(torchvision.models, args.torchvision, None)
    if builder is None or not callable(builder) or args.torchvision.startswith("_"):
        raise ExportError(f"--torchvision: no model {args.torchvision!r} in torchvision "
                          f"{torchvision.__version__}")
    kwargs = {"weights": None}
    if args.image_size and "image_size" in inspect.signature(
            getattr(torchvision.models, "VisionTransformer").__init__).parameters and \
            args.torchvision.startswith("vit_"):
        kwargs["image_size"] = args.image_size  # ViTs size their position embedding by it
    try:
        with parameters_on_meta(torch):
            model = builder(**kwargs)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"--torchvision {args.torchvision}: {one_line(e)}") from None
    model = fill_weights(model, torch, args.seed).to(
        getattr(torch, TORCH_DTYPES[args.dtype])).eval()
    size = args.image_size or getattr(model, "image_size", 224)
    gen = torch.Generator().manual_seed(args.seed)
    image = torch.randn(args.batch, 3, size, size, generator=gen).to(
        getattr(torch, TORCH_DTYPES[args.dtype]))
    tracer = scoped_tracer(fx.Tracer, model)()
    try:
        graph = tracer.trace(model)
        gm = fx.GraphModule(model, graph)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"cannot trace {args.torchvision} with torch.fx: {one_line(e)}") from None
    info = {"model": args.torchvision, "family": "torchvision", "image_size": size}
    return model, gm, [image], {"x": "image"}, info, args.torchvision


def moe_block_paths(model, torch):
    """Paths of the modules holding a ModuleList of experts (sparse MoE blocks)."""
    return sorted(name for name, m in model.named_modules()
                  if isinstance(getattr(m, "experts", None), torch.nn.ModuleList))


class Traced:
    """A traced model and the workload recorded from it (see trace)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def trace(args):
    """Builds, traces and runs the model that `args` (parse_args) names and records its
    workload. Returns a Traced with: torch, model, gm (the fx GraphModule), inputs (the
    sample inputs in placeholder order), recorder (node -> tensor refs, node -> op ids,
    parameter -> tensor id), wl (the Workload), output_tids, label_tid (None unless
    --train), info, stem and doc (the tierflow.workload/1 document). The graph and the
    names are the ones the exported file has, so a plan made for that file refers to them
    (tools/python/tierflow_torch runs it)."""
    warnings.filterwarnings(os.environ.get("TORCH_EXPORT_WARNINGS", "ignore"))
    import torch
    import torch.fx as fx
    patch_torch_fx_for_python311(torch)
    torch.set_num_threads(1)  # the same arithmetic, hence the same MoE routing, every run
    if args.hf_config:
        model, gm, inputs, labels, info, stem = load_hf(args, torch)
    else:
        model, gm, inputs, labels, info, stem = load_torchvision(args, torch)

    wl = Workload()
    Recorder = make_recorder(torch, fx)
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
    output_tids = _dedup(rec.resolve(r) for r in rec.outputs)
    for t in output_tids:
        if wl.tensors[t].kind == "activation":
            wl.tensors[t].kind = "output"

    phase = "train" if args.train else ("prefill" if args.hf_config else "forward")
    label = None
    if args.train:
        # int64 labels: one per token (causal LM), one per image (classifier)
        count = args.batch * (args.seq if args.hf_config else 1)
        label = wl.add_tensor("labels", "input", "int8", count * 8, "external", -1, False,
                              count)
        add_training_step(wl, output_tids, label, args.master_weights)

    meta = {"model": info["model"], "source": "tools/torch_export.py", "phase": phase,
            "batch": args.batch}
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

    name = args.name or (f"{stem}-{phase}-b{args.batch}" +
                         (f"-s{args.seq}" if args.hf_config else ""))
    doc = to_document(wl, name, meta)
    problems = check_workload(doc)
    if problems:
        raise InternalError("the workload breaks the format rules: " + "; ".join(problems[:3]))
    return Traced(torch=torch, model=model, gm=gm, inputs=inputs, recorder=rec, wl=wl,
                  output_tids=output_tids, label_tid=label, info=info, stem=stem, doc=doc)


def export(args):
    return trace(args).doc


# ---------------------------------------------------------------------------------------
# Command line

def one_line(e):
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ExportError(message)


def parse_args(argv):
    p = Parser(prog="torch_export.py", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = p.parse_args(argv)
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


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        doc = export(args)
        write_atomic(args.output, render(doc))
    except ExportError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InternalError as e:
        print(f"error: internal: {one_line(e)}", file=sys.stderr)
        return EXIT_INTERNAL
    except MemoryError:
        print("error: out of memory running the model; use a smaller --batch, --seq or model",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001
        print(f"error: internal: {type(e).__name__}: {one_line(e)}", file=sys.stderr)
        return EXIT_INTERNAL
    if args.output != "-":
        ops = doc["ops"]
        print(f"{args.output}: {len(doc['tensors'])} tensors, {len(ops)} ops, "
              f"{doc['meta']['flops'] / 1e9:.3f} GFLOP")
    return 0


if __name__ == "__main__":
    sys.exit(main())
