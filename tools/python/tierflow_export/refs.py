"""A node's value as the recorder sees it: Refs to workload tensors in the structure of the
node's result (tuples for lists, dicts), EMPTY for tensors without elements, NEW for
tensors that need a new workload tensor; and walks over nested results."""

import torch


class Ref:
    """A node's tensor value: a workload tensor id, or a parameter/buffer not yet used."""
    __slots__ = ("tid", "weight", "weight_name")

    def __init__(self, tid=None, weight=None, weight_name=None):
        self.tid, self.weight, self.weight_name = tid, weight, weight_name


EMPTY = object()  # a tensor with no elements: no workload tensor, dropped from op inputs
NEW = object()  # marks a result tensor that needs a new workload tensor


def untyped_storage(t):
    """t's storage, untyped: Tensor.untyped_storage (torch 2.0 and later) or _storage (1.13),
    which make no TypedStorage wrapper in Python (and run no deprecation check) on every call
    as Tensor.storage does."""
    untyped = getattr(t, "untyped_storage", None) or getattr(t, "_storage", None)
    return untyped() if untyped is not None else t.storage()


def storage_ptr(t):
    """The address of a tensor's storage (None if it has no elements or no storage)."""
    try:
        return untyped_storage(t).data_ptr() if t.numel() > 0 else None
    except Exception:  # noqa: BLE001 - tensors without storage (sparse, ...)
        return None


def tensor_leaves(x, out):
    """Appends the tensors in x (nested lists, tuples, dicts) to out; returns out."""
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
    """x (a map_struct result) with each NEW replaced by the next item of it."""
    if isinstance(x, tuple):
        return tuple(replace_new(y, it) for y in x)
    if isinstance(x, dict):
        return {k: replace_new(x[k], it) for k in x}
    return next(it) if x is NEW else x
