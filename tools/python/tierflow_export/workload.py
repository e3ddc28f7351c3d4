"""The workload being built (tensors and ops of one step) and its tierflow.workload/1
document (docs/formats.md): the deterministic rendering and the atomic write."""

import json
import os
import sys
import tempfile

from .errors import ExportError, InternalError

FORMAT = "tierflow.workload/1"
MAX_BYTES = 1 << 50


class Tensor:
    """A tensor of the workload, and what the training step needs to know of it."""
    __slots__ = ("id", "name", "kind", "dtype", "bytes", "origin", "layer", "floating",
                 "trainable", "numel")

    def __init__(self, tid, name, kind, dtype, nbytes, origin, layer, floating, numel,
                 trainable=False):
        self.id, self.name, self.kind, self.dtype = tid, name, kind, dtype
        self.bytes, self.origin, self.layer = nbytes, origin, layer
        self.floating, self.numel, self.trainable = floating, numel, trainable


class Op:
    """An op of the workload; bw says how its backward ops are derived (training.py),
    in_vals and out_vals are the tensor values it reads and writes (Workload.val)."""
    __slots__ = ("id", "name", "kind", "dtype", "flops", "bytes", "inputs", "outputs",
                 "updates", "layer", "bw", "in_vals", "out_vals", "workspace")

    def __init__(self, oid, name, kind, dtype, flops, nbytes, inputs, outputs, updates, layer,
                 bw, in_vals, out_vals):
        self.id, self.name, self.kind, self.dtype = oid, name, kind, dtype
        self.flops, self.bytes = flops, nbytes
        self.inputs, self.outputs, self.updates, self.layer = inputs, outputs, updates, layer
        self.bw, self.in_vals, self.out_vals = bw, in_vals, out_vals
        self.workspace = 0  # scratch bytes live only while it runs (scratch.py)


class Workload:
    """The tensors and ops of one step, in the order they are added (ids are indices)."""

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
        inputs = dedup(inputs)
        updates = dedup(updates)
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
        return sum(self.tensors[t].bytes for t in dedup(tids))


def dedup(seq):
    """The items of seq, each once, in their first order."""
    seen, out = set(), []
    for x in seq:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def to_document(wl, name, meta):
    """The tierflow.workload/1 document of wl, as plain data."""
    tensors = [{"id": t.id, "name": t.name, "kind": t.kind, "dtype": t.dtype, "bytes": t.bytes,
                "origin": t.origin, "layer": t.layer} for t in wl.tensors]
    ops = [{"id": o.id, "name": o.name, "kind": o.kind, "dtype": o.dtype, "flops": o.flops,
            "bytes": o.bytes, "inputs": o.inputs, "outputs": o.outputs, "updates": o.updates,
            "workspace": o.workspace, "layer": o.layer, "collective_bytes": 0} for o in wl.ops]
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


def check_output(path, inputs):
    """ExportError unless `path` can take an output, checked before the work that makes it:
    its directory exists, and it is none of `inputs` ((role, path) pairs, e.g. ("the model's
    config", "config.json")), the same file by device and inode through any name."""
    if path is None or path == "-":
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ExportError(f"{path}: directory {directory} does not exist")
    try:
        out = os.stat(path)
    except OSError:
        return
    for role, source in inputs:
        try:
            st = os.stat(source)
        except (OSError, TypeError):
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            same = "" if source == path else f" ('{source}' is the same file)"
            raise ExportError(f"{path}: refusing to write this output: it is {role}{same}; "
                              "outputs never overwrite inputs, choose another path")


def write_atomic(path, text, verify=None):
    """Writes text to path ("-": standard output) through a temporary file beside it that
    replaces path only when complete. verify(file), when given, checks the temporary file
    before it replaces path (for "-", a temporary file in the system's temporary folder
    before anything is printed); what it raises leaves path as it was."""
    if path == "-":
        if verify is not None:
            _write_verified_copy(tempfile.gettempdir(), "workload.json", text, verify)
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
        if verify is not None:
            verify(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_verified_copy(directory, basename, text, verify):
    fd, tmp = tempfile.mkstemp(prefix=basename + ".tmp.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        verify(tmp)
    finally:
        os.unlink(tmp)
