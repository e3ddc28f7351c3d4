"""Runs a plan's program on a traced model, step by step, in program order.

Glossary:
  op node     an fx node that emitted workload ops when tierflow_export recorded the graph
              (one op; nn.MultiheadAttention emits five: in_proj, qk, softmax, av,
              out_proj, which run as five compute steps here)
  alias node  an fx node that emitted no op: a view, an element of a tuple, a module that
              returns its input. It is run again, from the current device copies, each
              time a compute step needs its value, so that it never holds on to a copy the
              plan has freed. Nodes with no tensor result (sizes, dtypes) keep the value
              recorded when the model was traced.
  skeleton    an op node's result with each tensor replaced by ("new", T) (the op created
              tensor T: its device copy is the value) or ("alias", T, size, stride, offset)
              (a view of T's device copy)
  island      (training) the autograd graph of one forward op: its inputs are fresh leaves
              made from their device copies, so a backward op can run that op's backward
              alone, when the plan says, with torch.autograd.grad
  saved       a tensor autograd keeps for an island's backward. A pack hook replaces each
              by a reference to the plan tensor it is a view of (or, when it is an
              intermediate no plan tensor holds, by its position): at the backward op it is
              rebuilt from the current device copy, which must then be resident, or
              recomputed from the forward op's inputs, which must be.

Every tensor a compute step reads goes through Memory.device_copy: a tensor the plan has
not put on the device is a PlanError naming the step, never a silent fetch. A compute step
reads only the tensors the workload lists for its op (anything else is an internal error).
"""

import math
import operator
import time

from .errors import InputError, PlanError, UnsupportedError
from .memory import storage_key

ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2}


class InternalError(RuntimeError):
    """A bug in the runtime (an invariant between the graph and the workload broke)."""


def loss_fn(torch, logits, labels):
    """The training step's loss: cross-entropy of the logits against one label per row
    (per image; per token for a causal LM), as tierflow_export's `loss` op stands for."""
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             labels.reshape(-1))


class Saved:
    """What an island's pack hook keeps for one saved tensor."""
    __slots__ = ("island", "index", "tensor", "tid", "size", "stride", "delta", "dtype")

    def __init__(self, island, index, tensor):
        self.island, self.index, self.tensor = island, index, tensor
        self.tid = self.size = self.stride = self.delta = None
        self.dtype = tensor.dtype


class Island:
    """The autograd graph of one forward op (training only)."""

    def __init__(self, op, node, sub):
        self.op = op  # the forward op (tierflow_export's Op)
        self.node, self.sub = node, sub
        self.leaves = {}  # tensor id -> leaf tensor the op read
        self.roots = {}  # tensor id -> output tensor with its grad_fn
        self.saved = []  # Saved, in pack order
        self.recorded = None  # (backward step index, recomputed saved tensors)


class Ctx:
    """One compute step's reads: the tensors it may read, values of fx nodes computed so
    far, and (training) the island being recorded."""

    def __init__(self, step, allowed, island=None, recompute=False):
        self.step = step
        self.allowed = allowed
        self.island = island
        self.recompute = recompute
        self.memo = {}


class Executor:
    def __init__(self, model, plan, memory, backend):
        self.model = model
        self.torch = model.torch
        self.plan = plan
        self.mem = memory
        self.backend = backend
        self.wl = model.wl
        self.rec = model.rec
        self.workload = plan.workload
        self.skeleton = {}
        self.mha_dims = {}
        self.version = {}
        self.islands = {}
        self.remaining_bwd = {}
        for bop, (of, part, _) in self.wl.backward.items():
            if of is not None:
                self.remaining_bwd.setdefault(of, set()).add(bop)
        self.alias_ops = {x for x, _ in self.wl.grad_alias.values()}
        self.loss = None
        self.executed = []  # (step index, kind, target) in execution order
        self.notes = []
        # How backward ops got autograd's saved tensors: rebuilt from a resident plan
        # tensor, a meta stand-in for a product's operand the op does not read, or
        # recomputed from the forward op's inputs (counted once per op and backward step).
        self.saved_stats = {"from_plan_tensors": 0, "meta_operands": 0, "recomputed_ops": 0}
        self._packing = None
        self._bstep = None
        self._bdeclared = set()
        self._hook_error = None
        self._compute_marks = (None, None)  # the latest compute step's (begin, end) marks
        import torch.fx as fx
        self.fx = fx
        # Worked out here, before the clock starts, rather than on the steps' time:
        # the recorded values of nodes with no tensor result, mapped by const;
        self._consts = {node: fx.node.map_aggregate(v, self.const)
                        for node, v in self.rec.consts.items()}
        self._forms = {}  # node -> its arguments, constants mapped and fx nodes marked
        self._modules = {}  # call_module node -> its module
        self._slots = {}  # call_module node with plan tensors -> where each is set, or None
        self._elements = {}  # node -> (node, index or key): an element of another's result
        for node in self.model.gm.graph.nodes:
            if node.op == "call_function" and node.target is operator.getitem and \
                    len(node.args) == 2 and isinstance(node.args[0], fx.Node) and \
                    isinstance(node.args[1], (int, str)):
                self._elements[node] = node.args
            if node.op in ("call_function", "call_method", "call_module"):
                self._forms[node] = self.form(node)
            if node.op == "call_module":
                module = self._modules[node] = self.model.gm.get_submodule(node.target)
                names = self.model.params.get(node)
                if names:
                    self._slots[node] = self.module_slots(module, names)
        # op id -> the tensors its step may read (its inputs, updates and outputs)
        self._allowed = {op.id: set(op.inputs) | set(op.updates) | set(op.outputs)
                         for op in self.wl.ops}
        if self.model.train:
            self.refuse_graded_updates()

    def refuse_graded_updates(self):
        """UnsupportedError, before any step runs, for a forward op of a training step that
        updates in place a value needing a gradient (an MoE block adding each expert's output
        into one buffer with index_add_): its island reads that value as a leaf that requires
        a gradient, which autograd does not let an in-place op change, and the backward of
        an in-place update's earlier value is not run."""
        for op in self.wl.ops:
            if op.id in self.wl.backward or op.id in self.wl.optimizer or not op.updates:
                continue
            before = dict(op.in_vals)
            for tid in op.updates:
                if self.wl.requires.get((tid, before.get(tid, 0)), False):
                    raise UnsupportedError(
                        f"'{op.name}' updates '{self.wl.tensors[tid].name}' in place, and its "
                        "value needs a gradient: a training step with in-place updates of "
                        "values that need gradients (as MoE blocks accumulate their experts' "
                        "outputs) does not run on this runtime")

    # -- the program ----------------------------------------------------------------------

    def run(self, profile=None, memory=None):
        """Executes the program. With a list `profile`, each step appends (index, kind,
        target, host begin ns, host end ns, backend begin mark, backend end mark): the marks
        are the CUDA backend's timing events around the step's work on its stream, after
        its waits (a compute step's kernels, a copy), None on the CPU backend and for
        detaches. With a list `memory`, each step appends (index, kind, target, tracked
        bytes before it, tracked bytes after it, allocated bytes after it, the most allocated
        while it was issued): the last two the CUDA caching allocator's, None on the CPU.

        A forward step records no autograd graph: for one the whole program runs under
        no_grad, entered once; a training step's forward ops record their islands."""
        if self.model.train:
            self._run(profile, memory)
        else:
            with self.torch.no_grad():
                self._run(profile, memory)

    def _run(self, profile, memory):
        mem = self.mem
        clock = time.perf_counter_ns
        for step in self.plan.steps:
            if memory is not None:
                self.backend.memory_begin()
                before = mem.current
            t0 = clock() if profile is not None else 0
            begin = end = None
            if step.kind == "compute":
                self.compute(step, profile is not None)
                begin, end = self._compute_marks
            elif step.kind == "prefetch":
                mem.prefetch(step)
            elif step.kind == "store":
                mem.store(step)
            else:
                mem.detach(step)
            if profile is not None:
                if step.kind in ("prefetch", "store"):
                    begin = self.backend.copy_begin if self.backend.name == "cuda" else None
                    end = mem.events[step.event][0] if step.event is not None else None
                profile.append((step.index, step.kind, step.target, t0, clock(), begin, end))
            if memory is not None:
                memory.append((step.index, step.kind, step.target, before, mem.current,
                               *self.backend.memory_now()))
            self.executed.append((step.index, step.kind, step.target))
        computed = {s.target for s in self.plan.steps if s.kind == "compute"}
        missing = [o.name for o in self.wl.ops if o.id not in computed]
        if missing:
            raise PlanError(None, f"the program never computes {len(missing)} ops of the "
                            f"workload, the first '{missing[0]}'")

    def compute(self, step, marks=False):
        torch = self.torch
        op = self.wl.ops[step.target]
        waits = self.mem.wait(step)
        self.backend.compute_waits(waits)
        begin = self.backend.profile_mark("compute") if marks else None
        for tid in op.inputs + op.updates:
            self.mem.device_copy(tid, step, why=f" (an input of '{op.name}')")
        if op.id in self.wl.backward:
            self.backward_op(step, op)
        elif op.id in self.wl.optimizer:
            with torch.no_grad():
                self.adamw(step, op)
        else:
            self.forward_op(step, op)
        for tid in op.updates:
            self.mem.updated(tid)
            self.version[tid] = self.version.get(tid, 0) + 1
        self._compute_marks = (begin, self.backend.after_compute(marks))

    # -- reading values -------------------------------------------------------------------

    def read(self, ctx, tid):
        """The device copy of tensor tid for this step (a leaf of the island when one is
        being recorded)."""
        if ctx.allowed is not None and tid not in ctx.allowed:
            raise InternalError(f"step {ctx.step.index}: '{self.wl.ops[ctx.step.target].name}'"
                                f" reads '{self.wl.tensors[tid].name}', which its workload op "
                                "does not list")
        t = self.mem.device_copy(tid, ctx.step)
        island = ctx.island
        if island is None:
            return t
        leaf = island.leaves.get(tid)
        if leaf is None:
            requires = self.wl.requires.get((tid, self.version.get(tid, 0)), False)
            leaf = t.detach().requires_grad_(bool(requires and t.is_floating_point()))
            island.leaves[tid] = leaf
        return leaf

    def const(self, value):
        torch = self.torch
        if isinstance(value, torch.device) and value.type != self.backend.device.type:
            return self.backend.device
        return value

    def value(self, node, ctx):
        """The value of an fx node for this step."""
        if node in ctx.memo:
            return ctx.memo[node]
        if node in self._consts:
            v = self._consts[node]
        elif node.op == "placeholder":
            v = self.read(ctx, self.rec.refs[node].tid)
        elif node.op == "get_attr":
            v = self.from_refs(self.rec.refs[node], ctx)
        elif self.rec.node_ops.get(node):
            if node not in self.skeleton:
                raise InternalError(f"'{node.name}' is read before its ops ran")
            v = self.rebuild(self.skeleton[node], ctx)
        else:
            part = self.element_skeleton(node)
            v = self.call(node, ctx) if part is None else self.rebuild(part, ctx)
        ctx.memo[node] = v
        return v

    def element_skeleton(self, node):
        """The skeleton of the element an alias node takes from an op's structured result
        (`topk(...)[0]`, a chain of such), or None. An element is rebuilt alone: rebuilding
        the whole result would read every tensor of it, and a step may read only those its
        op lists (sum(topk(x)[0]) reads the values, not the indices)."""
        found = self._elements.get(node)
        if found is None:
            return None
        source, key = found
        whole = self.skeleton.get(source)
        if whole is None:
            whole = self.element_skeleton(source)
        if isinstance(whole, list) and isinstance(key, int) and -len(whole) <= key < len(whole):
            return whole[key]
        if isinstance(whole, dict) and key in whole:
            return whole[key]
        return None

    def from_refs(self, refs, ctx):
        if isinstance(refs, tuple):
            return tuple(self.from_refs(r, ctx) for r in refs)
        if isinstance(refs, dict):
            return {k: self.from_refs(r, ctx) for k, r in refs.items()}
        if refs is None or getattr(refs, "tid", None) is None:
            raise InternalError("a parameter read by no op is read")
        return self.read(ctx, refs.tid)

    def rebuild(self, skel, ctx):
        if isinstance(skel, list):
            return tuple(self.rebuild(s, ctx) for s in skel)
        if isinstance(skel, dict):
            return {k: self.rebuild(s, ctx) for k, s in skel.items()}
        kind = skel[0]
        if kind == "const":
            return skel[1]
        base = self.read(ctx, skel[1])
        if kind == "new":
            return base
        _, _, size, stride, delta = skel
        return base.as_strided(size, stride, base.storage_offset() + delta)

    # An argument of an fx node, as its form holds it: a constant (already mapped by const),
    # an fx node (its value), or a structure with fx nodes inside (mapped whole).
    CONST, NODE, NESTED = 0, 1, 2

    def form(self, node):
        """The node's (args, kwargs) as (kind, item) pairs, made once: walking the structure
        of every argument again on every call costs more than most kernels take to launch."""
        fx = self.fx

        def slot(a):
            if isinstance(a, fx.Node):
                return (self.NODE, a)
            inner = []
            fx.node.map_arg(a, inner.append)
            if inner:
                return (self.NESTED, a)
            return (self.CONST, fx.node.map_aggregate(a, self.const))
        return (tuple(slot(a) for a in node.args),
                tuple((k, slot(a)) for k, a in node.kwargs.items()))

    def arg(self, item, ctx):
        kind, a = item
        if kind == self.CONST:
            return a
        fx = self.fx
        if kind == self.NODE:
            v = self.value(a, ctx)
            # A tensor maps to itself; anything else as the whole structure would.
            return v if isinstance(v, self.torch.Tensor) else \
                fx.node.map_aggregate(v, self.const)
        return fx.node.map_aggregate(fx.node.map_arg(a, lambda n: self.value(n, ctx)),
                                     self.const)

    def args_of(self, node, ctx):
        args, kwargs = self._forms[node]
        return (tuple(self.arg(a, ctx) for a in args),
                {k: self.arg(a, ctx) for k, a in kwargs})

    def module_slots(self, module, names):
        """Where each of the module's parameters and buffers that a plan tensor holds is
        kept: (table, key) per name, the table being the owning module's _parameters or
        _buffers; None when the module is parametrized (torch.nn.utils.parametrize), whose
        tensors only functional_call sets correctly."""
        from torch.nn.utils import parametrize
        slots = []
        for name in names:
            path, _, key = name.rpartition(".")
            owner = module.get_submodule(path) if path else module
            if parametrize.is_parametrized(owner):
                slots = None
                break
            table = owner._parameters if key in owner._parameters else owner._buffers
            if key not in table:
                slots = None
                break
            slots.append((table, key))
        return slots

    def call_module(self, node, module, names, ctx, args, kwargs):
        """The module run with the plan's device copies of its parameters and buffers in
        place of its own (which release_weights moved to the meta device), and its own put
        back after: what functional_call does, without the module's class swapped and its
        tensors walked by name on every call."""
        tensors = [self.read(ctx, tid) for tid in names.values()]
        slots = self._slots[node]
        if slots is None:
            from torch.nn.utils.stateless import functional_call
            return functional_call(module, dict(zip(names, tensors)), args, kwargs)
        originals = [table[key] for table, key in slots]
        try:
            for (table, key), t in zip(slots, tensors):
                table[key] = t
            return module(*args, **kwargs)
        finally:
            for (table, key), t in zip(slots, originals):
                table[key] = t

    def call(self, node, ctx):
        """Runs one fx node on the current values of its arguments."""
        args, kwargs = self.args_of(node, ctx)
        if node.op == "call_module":
            module = self._modules[node]
            names = self.model.params.get(node)
            if names:
                return self.call_module(node, module, names, ctx, args, kwargs)
            return module(*args, **kwargs)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        raise InternalError(f"cannot run fx node '{node.name}' ({node.op})")

    # -- forward ops ----------------------------------------------------------------------

    def forward_op(self, step, op):
        torch = self.torch
        node, sub = self.model.node_of_op[op.id]
        allowed = self._allowed[op.id]
        island = Island(op, node, sub) if self.model.train else None
        ctx = Ctx(step, allowed, island)
        if island is None:  # run() turned gradients off
            produced = self.forward_compute(node, sub, ctx)
        else:
            self._packing = island
            try:
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(
                        self._pack, self._unpack):
                    produced = self.forward_compute(node, sub, ctx)
            finally:
                self._packing = None
        for tid in op.outputs:
            if tid not in produced:
                raise InternalError(f"'{op.name}' did not produce '{self.wl.tensors[tid].name}'")
        if island is not None:
            self.resolve_saved(island, produced)
            for tid in op.outputs:
                if produced[tid].grad_fn is not None:
                    island.roots[tid] = produced[tid]
            if island.roots:
                self.islands[op.id] = island
        for tid in op.outputs:
            self.produce(tid, produced[tid].detach(), step)

    def produce(self, tid, tensor, step):
        """An output onto the device; its real size must be the workload's, which is what
        the tracked bytes count."""
        real = tensor.numel() * tensor.element_size()
        if real != self.wl.tensors[tid].bytes:
            raise InternalError(f"'{self.wl.tensors[tid].name}' has {real} bytes, the "
                                f"workload says {self.wl.tensors[tid].bytes}")
        self.mem.produce(tid, tensor, step)

    def forward_compute(self, node, sub, ctx):
        """Runs forward op `sub` of fx node `node`; returns {tensor id: tensor} of the
        tensors it creates (and records the node's skeleton)."""
        module = self._modules.get(node)
        if module is not None and isinstance(module, self.torch.nn.MultiheadAttention):
            return self.mha(node, module, sub, ctx)
        if len(self.rec.node_ops[node]) != 1:
            raise InternalError(f"fx node '{node.name}' emitted "
                                f"{len(self.rec.node_ops[node])} ops")
        result = self.call(node, ctx)
        produced = {}
        skel = self.skeletonize(node, result, self.rec.refs.get(node), produced, ctx)
        if not ctx.recompute:
            self.skeleton[node] = skel
        return produced

    def skeletonize(self, node, x, ref, produced, ctx):
        torch = self.torch
        if isinstance(x, torch.Tensor):
            tid = getattr(ref, "tid", None)
            if tid is None:
                raise UnsupportedError(f"'{node.name}': a tensor result with no workload "
                                       "tensor (an empty tensor: MoE experts that get no "
                                       "tokens are not supported)")
            if tid in self.model.new_tids[node] and tid not in produced:
                produced[tid] = x
                return ("new", tid)
            base = produced[tid] if tid in produced else self.read(ctx, tid)
            if storage_key(base) != storage_key(x):
                raise InternalError(f"'{node.name}': result aliases "
                                    f"'{self.wl.tensors[tid].name}' but not its memory")
            return ("alias", tid, tuple(x.size()), tuple(x.stride()),
                    x.storage_offset() - base.storage_offset())
        if isinstance(x, (list, tuple)):
            refs = ref if isinstance(ref, tuple) else (None,) * len(x)
            return [self.skeletonize(node, a, r, produced, ctx) for a, r in zip(x, refs)]
        if isinstance(x, dict):
            refs = ref if isinstance(ref, dict) else {}
            return {k: self.skeletonize(node, x[k], refs.get(k), produced, ctx) for k in x}
        return ("const", x)

    def mha(self, node, m, sub, ctx):
        """nn.MultiheadAttention as tierflow_export splits it: in_proj, qk, softmax, av and
        out_proj, each computed the way torch.nn.functional.multi_head_attention_forward
        computes that part (self-attention, packed projection, no mask, no dropout)."""
        torch = self.torch
        F = torch.nn.functional
        ops = self.rec.node_ops[node]
        outs = [self.wl.ops[o].outputs[0] for o in ops]
        names = self.model.params[node]
        if sub == 0:
            import inspect
            call = inspect.signature(m.forward).bind(*node.args, **node.kwargs)
            call.apply_defaults()
            a = call.arguments
            if a["key_padding_mask"] is not None or a["attn_mask"] is not None or \
                    a["need_weights"] or (m.dropout and m.training) or \
                    not (a["query"] is a["key"] is a["value"]):
                raise UnsupportedError(f"'{node.target}': nn.MultiheadAttention other than "
                                       "self-attention without masks, attention weights or "
                                       "dropout")
            x = self.value(a["query"], ctx)
            q = x.transpose(1, 0) if m.batch_first else x
            y = F.linear(q, self.read(ctx, names["in_proj_weight"]),
                         self.read(ctx, names["in_proj_bias"]) if "in_proj_bias" in names
                         else None)
            L, N, E3 = y.shape
            self.mha_dims[node] = (L, N, E3 // 3, m.num_heads)
            return {outs[0]: y}
        L, N, E, H = self.mha_dims[node]
        Dh = E // H
        if sub == 1:
            q, k, _ = self.read(ctx, outs[0]).chunk(3, dim=-1)
            q = q.contiguous().view(L, N * H, Dh).transpose(0, 1)
            k = k.contiguous().view(L, N * H, Dh).transpose(0, 1)
            return {outs[1]: torch.bmm(q / math.sqrt(Dh), k.transpose(-2, -1))}
        if sub == 2:
            return {outs[2]: F.softmax(self.read(ctx, outs[1]), dim=-1)}
        if sub == 3:
            probs = self.read(ctx, outs[2])
            v = self.read(ctx, outs[0]).chunk(3, dim=-1)[2]
            v = v.contiguous().view(L, N * H, Dh).transpose(0, 1)
            a = torch.bmm(probs, v)
            return {outs[3]: a.transpose(0, 1).contiguous().view(L * N, E)}
        o = F.linear(self.read(ctx, outs[3]), self.read(ctx, names["out_proj.weight"]),
                     self.read(ctx, names["out_proj.bias"]) if "out_proj.bias" in names
                     else None).view(L, N, E)
        y = o.transpose(1, 0) if m.batch_first else o
        if not ctx.recompute:
            self.skeleton[node] = [("new", outs[4]), ("const", None)]
        return {outs[4]: y}

    # -- saved tensors (training) ---------------------------------------------------------

    def _pack(self, t):
        island = self._packing
        if island is None:  # recomputing: keep the tensor as it is
            return t
        saved = Saved(island, len(island.saved), t)
        island.saved.append(saved)
        return saved

    def resolve_saved(self, island, produced):
        """After the forward op: each saved tensor becomes a view of a plan tensor (one the
        op read or created) or a position to recompute; no tensor is kept."""
        bases = list(island.leaves.items()) + list(produced.items())
        keys = [(tid, storage_key(t), t) for tid, t in bases]
        for saved in island.saved:
            t = saved.tensor
            key = storage_key(t) if t.numel() > 0 else None
            for tid, k, base in keys:
                if k == key:
                    saved.tid = tid
                    saved.size, saved.stride = tuple(t.size()), tuple(t.stride())
                    saved.delta = t.storage_offset() - base.storage_offset()
                    break
            saved.tensor = None

    def _unpack(self, saved):
        if not isinstance(saved, Saved):
            return saved
        try:
            return self.unpack(saved)
        except Exception as e:  # noqa: BLE001 - autograd wraps it; re-raised by the caller
            self._hook_error = e
            raise

    def unpack(self, saved):
        torch = self.torch
        island, step = saved.island, self._bstep
        tid = saved.tid
        rule = island.op.bw.get("rule")
        declared = tid in self._bdeclared
        if tid is not None and not declared and \
                (rule == "linear" or rule == "embedding" and tid == island.op.bw.get("w")):
            # A product's backward reads the other operand and only the sizes of this one:
            # dgrad reads W, not x; wgrad reads x, not W (the workload's ops say so). An
            # embedding's wgrad reads the indices and only the table's size. Autograd unpacks
            # what it saved; one not read is a meta tensor of the same layout, which fails
            # loudly if a kernel ever reads it.
            self.saved_stats["meta_operands"] += 1
            return torch.empty_strided(saved.size, saved.stride, dtype=saved.dtype,
                                       device="meta")
        if tid is not None and (declared or self.mem.readable(tid)):
            self.saved_stats["from_plan_tensors"] += 1
            base = self.mem.device_copy(tid, step, why=f" (saved by '{island.op.name}')")
            return base.as_strided(saved.size, saved.stride, base.storage_offset() + saved.delta)
        return self.recompute(island, step)[saved.index]

    def recompute(self, island, step):
        """Runs the island's forward op again from its inputs' device copies and returns
        the tensors autograd saves, in order (the same kernels on the same values give the
        same bits)."""
        torch = self.torch
        if island.recorded is not None and island.recorded[0] == step.index:
            return island.recorded[1]
        ctx = Ctx(step, None, Island(island.op, island.node, island.sub), recompute=True)
        declared = self._bdeclared
        for tid in island.op.inputs + island.op.updates:
            if tid not in declared:
                self.note(f"step {step.index} ('{self.wl.ops[step.target].name}') recomputes "
                          f"'{island.op.name}', reading '{self.wl.tensors[tid].name}', which "
                          "the backward op does not list")
        recorded = []

        def keep(t):
            recorded.append(t)
            return t

        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            self.forward_compute(island.node, island.sub, ctx)
        if len(recorded) != len(island.saved):
            raise InternalError(f"recomputing '{island.op.name}' saved {len(recorded)} "
                                f"tensors, the forward {len(island.saved)}")
        island.recorded = (step.index, recorded)
        self.saved_stats["recomputed_ops"] += 1
        return recorded

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    # -- backward ops ---------------------------------------------------------------------

    def autograd(self, outputs, inputs, grads, retain):
        self._hook_error = None
        try:
            return self.torch.autograd.grad(outputs, inputs, grads, retain_graph=retain,
                                            allow_unused=True)
        except Exception:
            if self._hook_error is not None:
                raise self._hook_error from None
            raise

    def grad_value(self, v, ctx, for_update=False):
        """The gradient of value v (tensor id, version): its gradient tensor's device copy,
        or, when v took its consumer's gradient tensor without an op (an add or a copy
        passes the gradient through), what that consumer's backward makes of it: a view
        of the same memory."""
        g = self.wl.grad[v]
        t = self.read(ctx, g)
        alias = self.wl.grad_alias.get(v)
        if alias is None:
            return t
        x, out = alias
        island = self.islands.get(x)
        if island is None or v[0] not in island.leaves or out[0] not in island.roots:
            raise InternalError(f"no graph for the gradient of '{self.wl.tensors[v[0]].name}'")
        gy = self.grad_value(out, ctx)
        (r,) = self.autograd([island.roots[out[0]]], [island.leaves[v[0]]], [gy], True)
        if r is None:
            raise InternalError(f"'{self.wl.ops[x].name}' passes no gradient to "
                                f"'{self.wl.tensors[v[0]].name}'")
        if for_update and storage_key(r) != storage_key(t):
            raise UnsupportedError(f"the gradient of '{self.wl.tensors[v[0]].name}' passes "
                                   f"through '{self.wl.ops[x].name}' as a copy, and a later "
                                   "op adds to it in place")
        return r

    def backward_op(self, step, op):
        torch = self.torch
        of, part, targets = self.wl.backward[op.id]
        ctx = Ctx(step, self._allowed[op.id])
        if part == "loss":
            return self.loss_op(step, op, targets, ctx)
        island = self.islands.get(of)
        if island is None:
            raise InternalError(f"no graph recorded for '{self.wl.ops[of].name}'")
        self._bstep, self._bdeclared = step, set(op.inputs) | set(op.updates)
        roots, grads = [], []
        for tid in self.wl.ops[of].outputs:
            if (tid, 0) in self.wl.grad and tid in island.roots:
                roots.append(island.roots[tid])
                grads.append(self.grad_value((tid, 0), ctx))
        leaves = []
        for v in targets:
            if v[1] != 0 or v[0] not in island.leaves:
                raise UnsupportedError(f"'{op.name}': the gradient of an in-place update's "
                                       "earlier value")
            leaves.append(island.leaves[v[0]])
        remaining = self.remaining_bwd.get(of, set())
        remaining.discard(op.id)
        retain = bool(remaining) or of in self.alias_ops
        try:
            contributions = self.autograd(roots, leaves, grads, retain)
        finally:
            self._bstep, self._bdeclared = None, set()
        with torch.no_grad():
            for v, c in zip(targets, contributions):
                if c is None:
                    raise InternalError(f"'{op.name}' gives no gradient to "
                                        f"'{self.wl.tensors[v[0]].name}'")
                g = self.wl.grad[v]
                if g in op.outputs:
                    self.produce(g, c, step)
                else:
                    self.grad_value(v, ctx, for_update=True).add_(c)
        if not retain:
            island.saved = []
            self.islands.pop(of, None)

    def loss_op(self, step, op, targets, ctx):
        torch = self.torch
        (logits_tid,) = [v[0] for v in targets]
        labels_tid = [t for t in op.inputs if t != logits_tid][0]
        leaf = self.read(ctx, logits_tid).detach().requires_grad_(True)
        labels = self.read(ctx, labels_tid)
        with torch.enable_grad():
            loss = loss_fn(torch, leaf, labels)
            (g,) = torch.autograd.grad(loss, [leaf])
        self.produce(self.wl.grad[targets[0]], g, step)
        self.loss = loss.detach()

    # -- the optimizer --------------------------------------------------------------------

    def adamw(self, step, op):
        torch = self.torch
        from torch.optim.adamw import adamw
        p_tid, states = self.wl.optimizer[op.id]
        if len(states) != 2:
            raise UnsupportedError("AdamW with fp32 master weights")
        ctx = Ctx(step, set(op.inputs) | set(op.updates))
        p = self.read(ctx, p_tid)
        m, v = self.read(ctx, states[0]), self.read(ctx, states[1])
        g = self.grad_value((p_tid, 0), ctx)
        # One parameter at a time, as torch.optim.AdamW's single-tensor path steps each.
        adamw([p], [g], [m], [v], [], [torch.tensor(0.)], foreach=False, capturable=False,
              amsgrad=False, beta1=ADAMW["beta1"], beta2=ADAMW["beta2"], lr=ADAMW["lr"],
              weight_decay=ADAMW["weight_decay"], eps=ADAMW["eps"], maximize=False)


__all__ = ["Executor", "InternalError", "InputError", "loss_fn", "ADAMW"]
