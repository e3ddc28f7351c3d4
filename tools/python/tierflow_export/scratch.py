"""An op's scratch memory: the bytes its kernels allocate and free again before it returns
(an RMSNorm's fp32 copies of its input, a module's intermediate results), which the workload
records as the op's `workspace`.

A dispatch mode sees every aten call while one fx node runs: each result that does not alias
an argument (the schema says which do: views and in-place ops) is a new storage, counted
from its call until the last tensor on it is freed (a finalizer on each tensor; CPython
frees by reference count, so this is deterministic). The node's scratch is the most bytes
live at once less those still live when it returns (its results, or what a module keeps)."""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .refs import untyped_storage


class ScratchTracker(TorchDispatchMode):
    """`with ScratchTracker() as s: ...` then s.scratch(): the peak bytes of the storages the
    block allocated, less those still live at its end."""

    def __init__(self):
        super().__init__()
        self.live = {}  # storage address -> [bytes, tensors on it not yet freed]
        self.current = 0
        self.peak = 0

    def _released(self, key):
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def _track(self, t):
        storage = untyped_storage(t)
        key, size = storage.data_ptr(), storage.nbytes()
        entry = self.live.get(key)
        if entry is None:
            if size == 0:
                return
            self.live[key] = [size, 1]
            self.current += size
            self.peak = max(self.peak, self.current)
        else:
            entry[1] += 1
        weakref.finalize(t, self._released, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        results = func._schema.returns
        flat, _ = tree_flatten(out)
        if len(results) == 1 and len(flat) > 1:  # a list of tensors: one return, no alias
            aliased = [results[0].alias_info is not None] * len(flat)
        else:
            aliased = [r.alias_info is not None for r in results]
        for t, alias in zip(flat, aliased):
            if isinstance(t, torch.Tensor) and not alias and t.layout == torch.strided:
                self._track(t)
        return out

    def scratch(self):
        """The bytes live at the peak less those live now (0 when the peak is at the end)."""
        return max(0, self.peak - self.current)
