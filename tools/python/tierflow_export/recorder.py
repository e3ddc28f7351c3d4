"""Recording: run the traced graph on the sample input and build the forward ops.

The Recorder is an fx Interpreter: it runs every node on real tensors and turns what the
node did into workload ops (FLOPs and bytes from the real shapes and dtypes, tensors for
the new results, views and in-place updates followed to the tensors they share storage
with). Importing this module imports torch; trace() imports it after setting up warnings.
"""

import math

import torch
import torch.fx as fx

from .errors import ExportError, InternalError
from .flops import (ELEMENTWISE_COST, NORM_FLOPS_PER_ELEMENT, SOFTMAX_FLOPS_PER_ELEMENT,
                    einsum_flops)
from .names import (ACTIVATION_MODULES, ADD_NAMES, ATTENTION_RE, COPY_NAMES, FACTORY_NAMES,
                    INPLACE_OPERATOR_NAMES, MATMUL_NAMES, NONDIFF_NAMES, NORM_MODULE_SUFFIXES,
                    REDUCTION_NAMES, SELECT_NAMES, VIEW_NAMES, canonical_name, function_name,
                    layer_of)
from .refs import EMPTY, NEW, Ref, map_struct, replace_new, storage_ptr, tensor_leaves
from .scratch import ScratchTracker

DTYPE_NAMES = {
    torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16",
    torch.float16: "fp16", torch.int8: "int8", torch.uint8: "int8",
}


class Recorder(fx.Interpreter):
    """Runs the traced graph gm of model on the sample inputs (run(*inputs)) and adds the
    forward ops to the Workload wl. dtype_label relabels dtypes ({"bf16": "fp16"}),
    input_labels names placeholders ({"x": "image"}), moe_paths are the sparse MoE blocks
    (moe_block_paths)."""

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
        d = DTYPE_NAMES.get(t.dtype)
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
        scratch = 0
        if n.op in ("call_module", "call_function", "call_method"):
            with ScratchTracker() as tracker:
                result = getattr(self, n.op)(n.target, args, kwargs)
            scratch = tracker.scratch()
        else:
            result = getattr(self, n.op)(n.target, args, kwargs)
        self.refs[n] = self.record(n, args, kwargs, result)
        self.node_ops[n] = list(range(first, len(self.wl.ops)))
        # The node's scratch is its op's workspace (a node split into several ops, as
        # nn.MultiheadAttention is, computes each part apart: none is given one).
        if len(self.node_ops[n]) == 1:
            self.wl.ops[first].workspace = scratch
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
        """(Ref, tensor) of each parameter and buffer of module m at path prefix."""
        pairs = []
        for name, p in list(m.named_parameters()) + list(m.named_buffers()):
            ref = self.weight_ref(p, f"{prefix}.{name}")
            pairs.append((ref, p))
        return pairs

    def record_module(self, n, args, kwargs, result):
        """A leaf module call: one op (nn.MultiheadAttention: five)."""
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

        if isinstance(m, torch_nn.Linear):
            return self.record_linear(n, m, acts, weights, result, mapped)
        if isinstance(m, (torch_nn.Conv1d, torch_nn.Conv2d, torch_nn.Conv3d)):
            return self.record_conv(n, m, acts, weights, result, mapped)
        if isinstance(m, torch_nn.Embedding):
            return self.record_embedding(n, acts, weights, result, mapped)
        if cls.endswith(NORM_MODULE_SUFFIXES):
            return self.finish(n, result, mapped, lambda new: self.emit(
                n, "norm", NORM_FLOPS_PER_ELEMENT * sum(t.numel() for t in new),
                acts + weights, new, {"rule": "generic"}))
        if cls in ACTIVATION_MODULES:
            fname = ACTIVATION_MODULES[cls]
            if acts and isinstance(result, torch.Tensor) and result.numel() > 0 and \
                    storage_ptr(result) == storage_ptr(acts[0][1]):
                # inplace=True (torchvision's ReLU and Hardswish): an update of its input,
                # as the in-place function is, not a view that costs nothing
                return self.record_inplace(n, fname + "_", acts, result)
            return self.finish(n, result, mapped, lambda new: self.elementwise(
                n, fname, acts + weights, new))
        # Dropout and Identity return their input in eval mode (a view, handled by
        # new_results); anything else is an opaque op.
        return self.finish(n, result, mapped, lambda new: self.emit(
            n, "other", sum(t.numel() for t in new if t.is_floating_point()),
            acts + weights, new, {"rule": "generic"}))

    def record_linear(self, n, m, acts, weights, result, mapped):
        """nn.Linear: 2 M K N FLOPs (+ M N with a bias); kind expert or router inside a
        sparse MoE block."""
        path = n.target
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

    def record_conv(self, n, m, acts, weights, result, mapped):
        """nn.Conv1d/2d/3d: 2 FLOPs per multiply-add of the kernel (+ the bias adds)."""
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

    def record_embedding(self, n, acts, weights, result, mapped):
        """nn.Embedding: a gather, no FLOPs."""
        ids = acts[0]
        w = weights[0]
        bw = {"rule": "embedding", "ids": ids[0], "w": w[0]}

        def make(new):
            out_bytes = sum(self.nbytes(t) for t in new)
            # reads the gathered rows and the indices, writes the rows
            nb = self.nbytes(ids[1]) + 2 * out_bytes
            return self.emit(n, "embedding", 0, [ids, w], new, bw, nbytes=nb)
        return self.finish(n, result, mapped, make)

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
        T = N * L
        out = self.mha_ops(path, m, q, x_pair[0], masks, L, N, E)
        real_out = result[0] if isinstance(result, (tuple, list)) else result
        if real_out.numel() != T * E:
            raise InternalError(f"{path}: attention output has {real_out.numel()} elements,"
                                f" expected {T * E}")
        rest = tuple(None for _ in result[1:]) if isinstance(result, (tuple, list)) else ()
        if any(isinstance(x, torch.Tensor) for x in (result[1:] if rest else ())):
            raise ExportError(f"{path}: need_weights=True is not supported")
        return (Ref(tid=out),) + rest if isinstance(result, (tuple, list)) else Ref(tid=out)

    def mha_ops(self, path, m, q, x_ref, masks, L, N, E):
        """The five ops of a self-attention nn.MultiheadAttention at path on the input q
        (x_ref its Ref; masks the (Ref, tensor) of the masks), sequence L, batch N, width
        E. Returns the output tensor id."""
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
        xr = self.resolve(x_ref)
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
        return out

    # -- functions and methods ------------------------------------------------------

    def elementwise(self, n, fname, pairs, new, kind=None, rule="generic"):
        """An elementwise, reduction, copy or factory op, costed by fname."""
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
        """A call_function or call_method node: an in-place update, a view (no op), an
        element of a container result (no op), or one op computing new tensors."""
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
            return self.container_item(n, args)
        return self.record_computed(n, fname, args, pairs, result, result_leaves)

    def container_item(self, n, args):
        """getitem on a tuple, list or dict result: the Refs of that element."""
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

    def record_computed(self, n, fname, args, pairs, result, result_leaves):
        """A function or method that computes new tensors (not a view, not in place):
        one op for them, costed by what fname is."""
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
        elif target.is_floating_point():
            flops = ELEMENTWISE_COST.get(base.lstrip("i"), 1) * target.numel()
            rule = "generic"
        else:
            # Integer and boolean updates (a mask or'ed with another) count no FLOPs, as
            # an op's integer results do not: they are timed by their bytes.
            flops = 0
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

