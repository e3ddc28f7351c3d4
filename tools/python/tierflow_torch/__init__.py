"""tierflow_torch: run a tierflow plan (tierflow.plan/2) on the PyTorch model whose workload
tierflow_export (tools/python/tierflow_export) exported.

    from tierflow_torch import run
    report = run("plan.json", {"hf_config": "config.json", "seq": 16}, check=True)
    report["check"]["ok"], report["device_bytes"]["tracked_peak"]

Weights, inputs and optimizer state start at their home tier (host memory unless it is the
device tier); the program's steps run in order: prefetches copy a tensor to the device,
stores copy it back, detaches free it, compute steps run the fx graph node (or the backward
or AdamW op) of their workload op and may read only tensors the plan has put on the device.
On CPU it is a functional run with the device bytes tracked; on CUDA copies run on side
streams with events. Pure Python: it needs torch (and transformers or torchvision for the
model), not the tierflow C++ module. docs/torch_runtime.md is the reference.
"""

from .errors import InputError, PlanError, UnsupportedError
from .plan import load_plan


def run(plan_path, source, device="cpu", check=False, sim_report=None, tierflow=None,
        profile=False, memory_profile=False):
    """See runner.run."""
    from .runner import run as _run
    return _run(plan_path, source, device=device, check=check, sim_report=sim_report,
                tierflow=tierflow, profile=profile, memory_profile=memory_profile)


__all__ = ["run", "load_plan", "InputError", "PlanError", "UnsupportedError"]
