"""Runs tierflow_torch's CUDA path on a machine without a GPU, with torch.cuda's streams,
events and record_stream replaced by stand-ins that log their calls and tensors kept on
the CPU. It checks the path's bookkeeping (which stream waits on what, which event each
copy records), not CUDA: real copies, real asynchrony and measured times need a GPU.

  cuda_stand_in.py PLAN.json SOURCE_JSON TIERFLOW_BIN [profile]   (prints a JSON summary)
"""

import collections
import contextlib
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))

calls = collections.Counter()


class Stream:
    def __init__(self, name):
        self.name = name

    def wait_event(self, event):
        calls[f"{self.name} waits"] += 1


class Event:
    def __init__(self, enable_timing=False):
        self.enable_timing = enable_timing

    def record(self, stream=None):
        calls[f"event on {stream.name}"] += 1

    def elapsed_time(self, other):
        return 0.0


streams = iter(["h2d", "d2h"])
compute = Stream("compute")
torch.cuda.is_available = lambda: True
torch.cuda.set_device = lambda device: None
torch.cuda.current_stream = lambda device=None: compute
torch.cuda.Stream = lambda device=None: Stream(next(streams))
torch.cuda.stream = lambda stream: contextlib.nullcontext()
torch.cuda.Event = Event
torch.cuda.synchronize = lambda device=None: None
torch.cuda.reset_peak_memory_stats = lambda device=None: None
torch.cuda.max_memory_allocated = lambda device=None: 0
torch.cuda.memory_allocated = lambda device=None: 0
torch.Tensor.record_stream = lambda self, stream: calls.update([f"record_stream {stream.name}"])
_empty_strided = torch.empty_strided


def empty_strided(*args, **kwargs):
    kwargs.pop("pin_memory", None)
    kwargs["device"] = "cpu"
    return _empty_strided(*args, **kwargs)


torch.empty_strided = empty_strided

from tierflow_torch import memory  # noqa: E402

_init = memory.CudaBackend.__init__


def init(self, torch_module, index=0):
    _init(self, torch_module, index)
    self.device = torch_module.device("cpu")


memory.CudaBackend.__init__ = init

import tierflow_torch  # noqa: E402

profile = sys.argv[4:] == ["profile"]
report = tierflow_torch.run(sys.argv[1], json.loads(sys.argv[2]), device="cuda", check=True,
                            tierflow=sys.argv[3], profile=profile)
print(json.dumps({"ok": report["ok"], "device": report["device"], "steps": report["steps"],
                  "measured": report["measured"], "calls": dict(calls),
                  "profile": report.get("profile")}))
