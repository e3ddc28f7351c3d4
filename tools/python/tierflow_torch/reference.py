"""The un-offloaded run of the same model on the same inputs: the model's own forward (and,
for a training step, autograd's backward and torch.optim.AdamW), everything on the
device. The runtime's results must equal it exactly."""

from .executor import ADAMW, loss_fn


def model_outputs(model, torch, inputs):
    """The model's output tensors, in the order tierflow_export lists them."""
    out = model.traced.model(*inputs) if not model.args.hf_config else \
        model.traced.model(input_ids=inputs[0], attention_mask=inputs[1])
    if hasattr(out, "logits"):
        out = out.logits
    return [out] if isinstance(out, torch.Tensor) else list(out)


def run_reference(model, device):
    """Returns {"outputs": [tensors]} and, for a training step, "loss", "weights" (tensor
    id -> updated weight) and "states" (tensor id -> AdamW state after the step), on the
    CPU. Uses the model's own parameters: call before Model.release_weights."""
    torch = model.torch
    net = model.traced.model
    net.to(device)
    inputs = [t.to(device) for t in model.traced.inputs]
    result = {}
    if not model.train:
        # nn.MultiheadAttention takes a fused native path when no gradient is recorded; with
        # one recorded it runs torch.nn.functional.multi_head_attention_forward, which is
        # what tierflow_export's five attention ops stand for and what the runtime computes.
        # (On CPU both paths give the same bits; on a GPU they need not.)
        mha = any(isinstance(m, torch.nn.MultiheadAttention) for m in net.modules())
        with torch.enable_grad() if mha else torch.no_grad():
            result["outputs"] = [t.detach().cpu() for t in model_outputs(model, torch, inputs)]
        return result
    params = [model.param_of_tid[t] for t in sorted(model.param_of_tid)]
    for p in params:
        p.grad = None
    with torch.enable_grad():
        outputs = model_outputs(model, torch, inputs)
        loss = loss_fn(torch, outputs[0], model.labels.to(device))
        loss.backward()
    with torch.no_grad():
        optimizer = torch.optim.AdamW(
            [p for p in params if p.grad is not None], lr=ADAMW["lr"],
            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
            weight_decay=ADAMW["weight_decay"], foreach=False)
        optimizer.step()
    result["outputs"] = [t.detach().cpu() for t in outputs]
    result["loss"] = loss.detach().cpu()
    result["weights"] = {tid: p.detach().cpu().clone() for tid, p in model.param_of_tid.items()}
    states = {}
    for aop, (p_tid, state_tids) in model.wl.optimizer.items():
        p = model.param_of_tid[p_tid]
        st = optimizer.state.get(p, {})
        if "exp_avg" in st:
            states[state_tids[0]] = st["exp_avg"].cpu()
            states[state_tids[1]] = st["exp_avg_sq"].cpu()
    result["states"] = states
    for p in params:
        p.grad = None
    return result
