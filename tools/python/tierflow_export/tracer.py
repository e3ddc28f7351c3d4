"""The torch.fx tracers: every node stamped with the path of the module it was traced in;
for Hugging Face models, a tracer that learns every value's metadata by running the model
on the sample input alongside the trace. And the Python 3.11 fix of torch 1.13's fx."""

import inspect
import sys

from .errors import one_line
from .names import function_name

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


def hf_real_value_tracer(hf_fx, fx, model, sample):
    """An HFTracer subclass for `model` that traces with the real `sample` inputs (a dict
    by input name) and computes each proxy's metadata from real values, and the list it
    fills with the first error of that eager run (to explain a failed trace).

    HFTracer resolves shape-dependent Python control flow from metadata it computes on
    the meta device, which torch 1.13 cannot do for everything (torch.where on an expert
    mask yields garbage indices, so tracing a Mixtral fails at random). This tracer
    computes the metadata from real values instead: it runs the model eagerly on the
    sample input alongside the trace, which also makes RMSNorm leaves (one norm op each)
    work with their real weights."""
    base = scoped_tracer(hf_fx.HFTracer, model, leaf_suffixes=("RMSNorm",))
    failures = []  # the first error of the eager run that goes with the trace

    def real_value(v):
        if isinstance(v, fx.Proxy):
            return object.__getattribute__(v, "_metadata")
        return v

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
                if kind == "placeholder" and target not in sample and \
                        target not in self.meta_args:
                    return proxy
                value = self.real_result(kind, target, a, k)
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

        def real_result(self, kind, target, a, k):
            """The value of one node computed eagerly from its arguments' real values."""
            if kind == "placeholder":
                return sample[target] if target in sample else self.meta_args[target]
            if kind == "get_attr":
                value = self.root
                for atom in target.split("."):
                    value = getattr(value, atom)
                return value
            if kind == "call_function":
                return target(*a, **k)
            if kind == "call_method":
                return getattr(a[0], target)(*a[1:], **k)
            return self.orig_forward(*a, **k)  # call_module

    return Tracer, failures
