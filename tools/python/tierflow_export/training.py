"""Training step: the loss, the backward ops derived from the forward ops (not from
autograd), and one AdamW op per parameter. Names follow the C++ generator (traces/):
backward ops end in .dgrad, .wgrad or .bwd, gradients are TENSOR.grad and accumulate in
place, AdamW is adamw.WEIGHT."""

from .flops import ADAMW_FLOPS_PER_ELEMENT, BACKWARD_FACTOR, LOSS_FLOPS_PER_LOGIT
from .workload import dedup


def add_training_step(wl, logits_tids, label_tid, master_weights):
    """Appends the loss, the backward ops (the forward ops in reverse) and one AdamW op per
    parameter to wl, and records what it derived in wl.requires, wl.grad, wl.backward,
    wl.grad_alias and wl.optimizer (see Workload)."""
    step = Backward(wl)
    fwd_ops = list(wl.ops)
    step.mark_requires(fwd_ops)
    step.loss(logits_tids, label_tid)
    for op in reversed(fwd_ops):
        step.backward_of(op)
    add_adamw(wl, step.grad, master_weights)
    wl.requires = step.requires
    wl.grad = step.grad


class Backward:
    """The backward pass being derived: which values need a gradient (requires) and the
    gradient tensor of each value that has one so far (grad). A value is (tensor id,
    number of in-place updates applied), Workload.val."""

    def __init__(self, wl):
        self.wl = wl
        self.requires = {}  # value -> needs a gradient
        self.grad = {}  # value -> its gradient tensor

    def mark_requires(self, fwd_ops):
        """A value needs a gradient if it is a trainable floating-point external tensor or
        a floating-point output of a differentiable op that reads one that does."""
        wl, requires = self.wl, self.requires
        for t in wl.tensors:
            if t.origin == "external":
                requires[(t.id, 0)] = t.trainable and t.floating
        for op in fwd_ops:
            flag = op.bw.get("rule") != "nondiff" and \
                any(requires.get(v, False) for v in op.in_vals)
            for v in op.out_vals:
                requires[v] = flag and wl.tensors[v[0]].floating

    def needs(self, v):
        return v is not None and self.requires.get(v, False)

    def emit(self, name, kind, dtype, flops, inputs, targets, layer, of=None, part="bwd"):
        """A backward op of forward op `of` reading `inputs` and adding to the gradients of
        the values `targets`: the first contribution to a gradient creates it, later ones
        update it."""
        wl, grad = self.wl, self.grad
        outs, updates, new = [], [], []
        targets = dedup(targets)
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
        inputs = dedup(inputs)
        nbytes = wl.bytes_of([i for i in inputs if i not in updates]) + \
            sum(o[3] for o in outs) + 2 * wl.bytes_of(updates)
        bop, tids = wl.add_op(name, kind, dtype, int(flops), nbytes, inputs, outs, updates,
                              layer=layer)
        for v, g in zip(new, tids):
            grad[v] = g
        wl.backward[bop.id] = (of, part, targets)

    def loss(self, logits_tids, label_tid):
        """The loss: cross-entropy of the logits against the labels, which yields the
        logits' gradient directly."""
        wl = self.wl
        numel = sum(wl.tensors[t].numel for t in logits_tids)
        self.emit("loss", "elementwise", "fp32", LOSS_FLOPS_PER_LOGIT * numel,
                  list(logits_tids) + [label_tid], [wl.val(t) for t in logits_tids], -1,
                  part="loss")

    def backward_of(self, op):
        """The backward ops of forward op `op`, by its rule (op.bw), if any of its outputs
        has a gradient and any of its inputs needs one."""
        gouts = [self.grad[v] for v in op.out_vals if v in self.grad]
        if not gouts:
            return
        need = [v for v in dedup(op.in_vals) if self.needs(v)]
        if not need:
            return
        rule = op.bw.get("rule")
        vals = {v[0]: v for v in op.in_vals}
        if rule == "linear":
            self.linear(op, vals, gouts[0])
        elif rule == "matmul":
            self.matmul(op, vals, gouts[0])
        elif rule == "embedding":
            self.embedding(op, vals, gouts)
        elif rule in ("add", "identity"):
            self.passthrough(op, vals, gouts, need)
        elif rule == "copy":
            self.emit(f"{op.name}.bwd", "elementwise", op.dtype, 0, gouts, need, op.layer,
                      op.id)
        else:  # generic: reads the output gradients and the op's inputs, 2x the FLOPs
            saved = [v[0] for v in op.in_vals if v not in op.out_vals]
            self.emit(f"{op.name}.bwd", op.kind, op.dtype, BACKWARD_FACTOR * op.flops,
                      gouts + saved, need, op.layer, op.id)

    def linear(self, op, vals, gy):
        """x W^T (+ b), and convolutions: dgrad for x, wgrad for W and b."""
        bw, needs = op.bw, self.needs
        x, w = vals.get(bw["x"]), vals.get(bw["w"])
        b = vals.get(bw["b"]) if bw["b"] is not None else None
        if needs(x):
            self.emit(f"{op.name}.dgrad", op.kind, op.dtype, 2 * bw["mkn"], [gy, bw["w"]], [x],
                      op.layer, op.id, "dgrad")
        if needs(w) or needs(b):
            flops = (2 * bw["mkn"] if needs(w) else 0) + (bw["mn"] if needs(b) else 0)
            self.emit(f"{op.name}.wgrad", op.kind, op.dtype, flops, [gy, bw["x"]],
                      [v for v in (w, b) if needs(v)], op.layer, op.id, "wgrad")

    def matmul(self, op, vals, gy):
        """A B: dA = dY B^T, dB = A^T dY, each the forward's FLOPs."""
        bw = op.bw
        operands = bw["operands"]
        targets = [vals[t] for t in operands if self.needs(vals.get(t))]
        flops = bw["mm_flops"] * len(targets)
        if bw.get("add") is not None and self.needs(vals.get(bw["add"])):
            targets.append(vals[bw["add"]])
            flops += self.wl.tensors[gy].numel
        self.emit(f"{op.name}.bwd", op.kind, op.dtype, flops, [gy] + operands, targets,
                  op.layer, op.id)

    def embedding(self, op, vals, gouts):
        """A scatter-add of the output gradient's rows."""
        bw = op.bw
        if self.needs(vals.get(bw["w"])):
            self.emit(f"{op.name}.wgrad", "embedding", op.dtype,
                      sum(self.wl.tensors[g].numel for g in gouts), gouts + [bw["ids"]],
                      [vals[bw["w"]]], op.layer, op.id, "wgrad")

    def passthrough(self, op, vals, gouts, need):
        """add and identity: the gradient passes through. An operand without a gradient
        yet takes the output's; one with a gradient, a broadcast one (summed over the
        broadcast dimensions) or a subtracted one (negated) needs an op."""
        wl, grad = self.wl, self.grad
        gy = gouts[0]
        operands = op.bw.get("operands") or [(v[0], wl.tensors[v[0]].numel, False)
                                             for v in need]
        work, flops = [], 0
        for tid, numel, negate in operands:
            v = vals.get(tid)
            if not self.needs(v):
                continue
            if v not in grad and not negate and numel == wl.tensors[gy].numel and \
                    len(gouts) == 1:
                grad[v] = gy
                wl.grad_alias[v] = (op.id, [o for o in op.out_vals if o in grad][0])
            else:
                work.append(v)
                flops += wl.tensors[gy].numel
        if work:
            self.emit(f"{op.name}.bwd", "elementwise", op.dtype, flops, gouts, work, op.layer,
                      op.id)


def add_adamw(wl, grad, master_weights):
    """AdamW, one op per parameter tensor that got a gradient, with its moments (and an
    fp32 master copy with master_weights) as optimizer state."""
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
