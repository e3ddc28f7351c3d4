"""The model a plan was made for: built, traced and recorded by tierflow_export (the
same code that wrote the plan's workload, so op and tensor ids and names match), checked
against the plan's workload, and its initial tensors."""

import tierflow_export as te

from .errors import InputError, UnsupportedError
from .memory import storage_of
from .plan import first_difference


def exporter_args(source, workload_meta):
    """tierflow_export's parsed arguments for `source` (a dict: hf_config or torchvision,
    and optionally batch, seq, image_size, dtype, train, seed); what it leaves out is
    taken from the plan's workload meta (batch, seq, image_size, dtype, phase)."""
    meta = workload_meta or {}
    argv = []
    if source.get("hf_config"):
        argv += ["--hf-config", source["hf_config"]]
        seq = source.get("seq") or meta.get("seq")
        if seq:
            argv += ["--seq", str(seq)]
    elif source.get("torchvision"):
        argv += ["--torchvision", source["torchvision"]]
        size = source.get("image_size") or meta.get("image_size")
        if size:
            argv += ["--image-size", str(size)]
    else:
        raise InputError("a model is needed: --hf-config CONFIG.json or --torchvision NAME")
    batch = source.get("batch") or meta.get("batch")
    if batch:
        argv += ["--batch", str(batch)]
    dtype = source.get("dtype") or meta.get("dtype")
    if dtype:
        argv += ["--dtype", str(dtype)]
    train = source.get("train")
    if train is None:
        train = meta.get("phase") == "train"
    if train:
        argv.append("--train")
        if str(meta.get("optimizer", "")).endswith("+fp32-master"):
            raise UnsupportedError("the plan's workload has fp32 master weights "
                                   "(--master-weights): the runtime does not run them")
    argv += ["--seed", str(source.get("seed", 0))]
    try:
        return te.parse_args(argv)
    except te.ExportError as e:
        raise InputError(str(e)) from None


class Model:
    """A traced model and its maps:
    traced      tierflow_export.Traced (model, gm, inputs, recorder, wl, doc, ...)
    node_of_op  op id -> (fx node, position among the node's ops)
    new_tids    fx node -> ids of the tensors its ops create
    params      call_module node -> {parameter or buffer name: tensor id}
    values      tensor id -> initial value of every external tensor but optimizer state
    labels      the labels of a training step (None otherwise)
    """

    def __init__(self, traced, args):
        self.traced = traced
        self.args = args
        self.torch = traced.torch
        self.gm = traced.gm
        self.rec = traced.recorder
        self.wl = traced.wl
        self.doc = traced.doc
        self.train = bool(args.train)
        self.node_of_op = {}
        self.new_tids = {}
        for node, ops in self.rec.node_ops.items():
            self.new_tids[node] = set()
            for k, op in enumerate(ops):
                self.node_of_op[op] = (node, k)
                self.new_tids[node].update(self.wl.ops[op].outputs)
        self.params = {}
        self.module_of_tid = {}
        for node in self.gm.graph.nodes:
            if node.op == "call_module" and self.rec.node_ops.get(node):
                module = self.gm.get_submodule(node.target)
                names = {}
                for name, p in list(module.named_parameters()) + list(module.named_buffers()):
                    tid = self.rec.weight_tid.get(id(p))
                    if tid is not None:
                        names[name] = tid
                self.params[node] = names
        self.values = {}
        self.param_of_tid = {}
        gm_tensors = list(self.gm.named_parameters()) + list(self.gm.named_buffers())
        for _, p in gm_tensors:
            tid = self.rec.weight_tid.get(id(p))
            if tid is not None:
                self.values[tid] = p.detach()
                if isinstance(p, self.torch.nn.Parameter):
                    self.param_of_tid[tid] = p
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, traced.inputs):
            ref = self.rec.refs.get(node)
            if ref is not None and getattr(ref, "tid", None) is not None:
                self.values[ref.tid] = value
        self.labels = None
        if traced.label_tid is not None:
            count = self.wl.tensors[traced.label_tid].numel
            out = self.wl.tensors[traced.output_tids[0]]
            classes = out.numel // count
            gen = self.torch.Generator().manual_seed(args.seed + 1)
            self.labels = self.torch.randint(0, classes, (count,), generator=gen)
            self.values[traced.label_tid] = self.labels
        for t in self.wl.tensors:
            if t.origin == "external" and t.id not in self.values and \
                    t.kind != "optimizer_state":
                raise UnsupportedError(f"no value for the external tensor '{t.name}'")

    def check_against(self, plan):
        """InputError unless the plan's workload is the one this model exports."""
        diff = first_difference(self.doc, plan.workload)
        if diff is not None:
            raise InputError(f"{plan.path}: the plan's workload is not this model's export "
                             f"({diff}); give the model options the workload was exported "
                             "with")

    def release_weights(self):
        """Moves the model's own parameters and buffers to the meta device and frees their
        memory: from here on the runtime's copies are the only ones, and a read that
        bypasses them fails."""
        torch = self.torch
        originals = []
        for m in list(self.gm.modules()) + list(self.traced.model.modules()):
            for table in (m._parameters, m._buffers):
                for k, t in list(table.items()):
                    if t is None or t.device.type == "meta":
                        continue
                    originals.append(t)
                    meta = t.detach().to("meta")
                    table[k] = torch.nn.Parameter(meta, requires_grad=t.requires_grad) \
                        if isinstance(t, torch.nn.Parameter) else meta
        # Other references to the originals (the recorder's, the reference run's) keep the
        # objects, not the memory.
        for t in originals:
            if t.numel() > 0:
                storage_of(t).resize_(0)
        self.values = None
        self.param_of_tid = {}


def load_model(source, workload_meta=None):
    """Builds and traces the model as tierflow_export does; InputError on bad input."""
    args = exporter_args(source, workload_meta)
    try:
        traced = te.trace(args)
    except te.ExportError as e:
        raise InputError(str(e)) from None
    return Model(traced, args)
