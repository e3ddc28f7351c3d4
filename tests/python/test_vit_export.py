"""torchvision ViT-B/16 (random weights, 224 x 224): forward FLOPs against the published
figure, and a training step.

torchvision's model table gives vit_b_16 17.56 "GFLOPS", counting one multiply-add as one
operation. The exporter counts a multiply-add as 2 FLOPs, so the reference here is
2 x 17.56e9 = 35.12e9, and the export must be within 2% of it (it also counts the norms,
softmax, GELU, biases and residual adds, which the published figure leaves out).
"""

import pytest

from conftest import phase_split
from workload_rules import violations

PUBLISHED_GMACS = 17.56
REFERENCE_FLOPS = 2 * PUBLISHED_GMACS * 1e9
VIT_B_16_PARAMS = 86_567_656
PARAM_TENSORS = 152  # len(list(vit_b_16().parameters()))


def products(ops):
    return sum(op["flops"] for op in ops if op["kind"] in ("matmul", "attention"))


def test_forward_flops(exports):
    doc = exports.doc("--torchvision", "vit_b_16", "--batch", "1")
    assert violations(doc) == []
    total = sum(op["flops"] for op in doc["ops"])
    assert abs(total / REFERENCE_FLOPS - 1) < 0.02, total
    # the matrix products alone are the published multiply-adds, exactly counted:
    # patch embedding, 12 x (QKV, QK^T, AV, out, 2 MLP), head
    tokens, dim = 197, 768
    macs = 768 * 3 * 16 * 16 * 196 + 12 * (
        tokens * dim * 3 * dim + 2 * tokens * tokens * dim + tokens * dim * dim
        + 2 * tokens * dim * 4 * dim) + dim * 1000
    biases = 768 * 196 + 12 * tokens * (3 * dim + dim + 4 * dim + dim) + 1000
    assert products(doc["ops"]) == 2 * macs + biases
    assert abs(2 * macs / REFERENCE_FLOPS - 1) < 0.005


def test_forward_structure(exports):
    doc = exports.doc("--torchvision", "vit_b_16", "--batch", "1")
    ops, tensors = doc["ops"], doc["tensors"]
    assert {op["layer"] for op in ops} == set(range(12)) | {-1}
    for layer in range(12):
        kinds = [op["kind"] for op in ops if op["layer"] == layer]
        assert kinds.count("attention") == 2 and kinds.count("norm") == 2
        assert kinds.count("matmul") == 4  # in_proj, out_proj, mlp.0, mlp.3
    weights = [t for t in tensors if t["kind"] == "weight"]
    assert len(weights) == PARAM_TENSORS
    assert sum(t["bytes"] for t in weights) == 4 * VIT_B_16_PARAMS  # fp32
    assert [t["name"] for t in tensors if t["kind"] == "input"] == ["image"]
    assert [t["name"] for t in tensors if t["kind"] == "output"] == ["heads.head"]
    conv = [op for op in ops if op["name"] == "conv_proj"][0]
    assert conv["kind"] == "matmul"
    assert conv["flops"] == 2 * 768 * 3 * 16 * 16 * 14 * 14 + 768 * 196


@pytest.mark.parametrize("batch", [2])
def test_training_step(exports, batch):
    doc = exports.doc("--torchvision", "vit_b_16", "--batch", str(batch), "--train")
    assert violations(doc) == []
    forward_ops, backward_ops, optimizer_ops = phase_split(doc)
    fwd, bwd = products(forward_ops), products(backward_ops)
    # grad-input and grad-weight per product; only the patch embedding needs no
    # grad-input (the image needs no gradient), hence a little under 2
    assert 1.98 <= bwd / fwd <= 2.0, bwd / fwd
    ratio = sum(op["flops"] for op in backward_ops) / sum(op["flops"] for op in forward_ops)
    assert 1.9 <= ratio <= 2.1, ratio
    tensors = doc["tensors"]
    weights = [t for t in tensors if t["kind"] == "weight"]
    assert len(optimizer_ops) == len(weights) == PARAM_TENSORS
    for op in optimizer_ops:
        updated = [tensors[t] for t in op["updates"]]
        assert [t["kind"] for t in updated] == ["weight", "optimizer_state", "optimizer_state"]
        assert updated[1]["bytes"] == updated[2]["bytes"] == updated[0]["bytes"]  # fp32
        assert [tensors[t]["kind"] for t in op["inputs"]] == ["grad"]
    grads = {tensors[op["inputs"][0]]["name"] for op in optimizer_ops}
    assert grads == {f"{t['name']}.grad" for t in weights}
    assert all(op["name"].endswith((".dgrad", ".wgrad", ".bwd")) for op in backward_ops)
    # the patch embedding needs no gradient for the image
    names = {op["name"] for op in backward_ops}
    assert "conv_proj.wgrad" in names and "conv_proj.dgrad" not in names
    # backward runs the layers in reverse
    layers = [op["layer"] for op in backward_ops if op["layer"] >= 0]
    assert layers == sorted(layers, reverse=True)
