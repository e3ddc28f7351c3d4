"""Exports of tiny Llama, Mistral, Mixtral and Qwen2 models (tests/python/configs), checked
against the format rules and against counts taken independently from the model's modules."""

import json
import os
import re

import pytest

from conftest import FAMILIES, TOOLS_PYTHON, config_path, phase_split, run_tool
from workload_rules import violations

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEQ, BATCH = 16, 2
TOKENS = SEQ * BATCH


def build(family):
    """The model of a tiny config, built the way the exporter builds it (shapes only)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    transformers.logging.set_verbosity_error()
    with open(config_path(family), encoding="utf-8") as f:
        config = json.load(f)
    hf_config = AutoConfig.for_model(config.pop("model_type"), **config)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(hf_config), hf_config


def forward(exports, family, *extra):
    return exports.doc("--hf-config", config_path(family), "--seq", str(SEQ), "--batch",
                       str(BATCH), *extra)


@pytest.mark.parametrize("family", FAMILIES)
def test_valid_workload(exports, family):
    doc = forward(exports, family)
    assert violations(doc) == []
    assert doc["meta"]["phase"] == "prefill"
    assert doc["meta"]["family"] == family
    kinds = {t["kind"] for t in doc["tensors"]}
    assert {"input", "weight", "activation", "output"} <= kinds
    outputs = [t for t in doc["tensors"] if t["kind"] == "output"]
    assert [t["name"] for t in outputs] == ["lm_head"]
    model, _ = build(family)
    params = dict(model.named_parameters())
    assert all(t["dtype"] == "bf16" for t in doc["tensors"] if t["name"] in params)


@pytest.mark.parametrize("family", FAMILIES)
def test_linear_flops(exports, family):
    """FLOPs of the ops of nn.Linear modules = 2 x tokens x weights (+ tokens x biases);
    routed experts see top-k x tokens in all, however the router spreads them."""
    import torch
    doc = forward(exports, family)
    model, config = build(family)
    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    expected = 0
    expert_paths = set()
    for name, block in model.named_modules():
        experts = getattr(block, "experts", None)
        if isinstance(experts, torch.nn.ModuleList):
            top_k = config.num_experts_per_tok
            per_expert = []
            for i, expert in enumerate(experts):
                flops = 0
                for sub, m in expert.named_modules():
                    if isinstance(m, torch.nn.Linear):
                        expert_paths.add(f"{name}.experts.{i}.{sub}")
                        flops += 2 * m.weight.numel() + (m.bias.numel() if m.bias is not None else 0)
                per_expert.append(flops)
            assert len(set(per_expert)) == 1
            expected += top_k * TOKENS * per_expert[0]
    for name, m in linears.items():
        if name not in expert_paths:
            expected += 2 * TOKENS * m.weight.numel() + \
                (TOKENS * m.bias.numel() if m.bias is not None else 0)
    if family in ("llama", "mistral"):  # no biases: exactly 2 x tokens x linear weights
        assert expected == 2 * TOKENS * sum(m.weight.numel() for m in linears.values())
    actual = sum(op["flops"] for op in doc["ops"] if op["name"] in linears)
    assert actual == expected
    kinds = {op["kind"] for op in doc["ops"] if op["name"] in linears}
    assert kinds == ({"matmul", "router", "expert"} if family == "mixtral" else {"matmul"})


@pytest.mark.parametrize("family", FAMILIES)
def test_integer_ops_count_no_flops(exports, family):
    """Ops on integer and boolean tensors (positions, masks; Mistral's sliding window is
    or'ed in place) count no FLOPs, out of place or in place: they are timed by their bytes,
    and a topology needs no integer peak rate to plan the export."""
    doc = forward(exports, family)
    integer = [o for o in doc["ops"] if o["dtype"] == "int8"]
    assert integer, "the export has no integer op to check"
    assert [(o["name"], o["flops"]) for o in integer if o["flops"] > 0] == []


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_workspace(exports, family):
    """An op's workspace is the scratch its kernels allocate and free before it returns.
    The RMSNorms of these models (transformers 4.47.1, pinned) hold, at their peak, the input
    in fp32 and its normalized product (4 bytes per element each) and the variance and its
    rsqrt (4 bytes per token each), and return a bf16 result: 6 bytes per element and 8 per
    token of scratch. A linear layer allocates its result alone; backward and AdamW ops are
    derived, not run, and have none."""
    doc = forward(exports, family)
    _, config = build(family)
    elements, tokens = TOKENS * config.hidden_size, TOKENS
    ops = {op["name"]: op for op in doc["ops"]}
    norms = [op for name, op in ops.items() if name.endswith("layernorm") or name == "model.norm"]
    assert len(norms) == 2 * config.num_hidden_layers + 1
    assert all(op["workspace"] == 6 * elements + 8 * tokens for op in norms), \
        [(op["name"], op["workspace"]) for op in norms]
    assert all(op["workspace"] == 0 for op in doc["ops"] if op["kind"] == "matmul")
    train = exports.doc("--hf-config", config_path(family), "--seq", str(SEQ), "--batch",
                        str(BATCH), "--train")
    _, backward, optimizer = phase_split(train)
    assert all(op["workspace"] == 0 for op in backward + optimizer)


def test_scratch_tracker():
    """The tracker counts storages allocated inside the block from their call to their
    last tensor's release; views and in-place results are not allocations."""
    import torch
    from tierflow_export.scratch import ScratchTracker
    x = torch.ones(16, 8, dtype=torch.bfloat16)
    n = x.numel()

    def upcast_twice(x):
        y = x.float()  # 4n, live until return
        z = y * 2  # 4n, live until return
        return z.to(torch.bfloat16)  # 2n: the result

    with ScratchTracker() as t:
        out = upcast_twice(x)
    assert (t.peak, t.current, t.scratch()) == (10 * n, 2 * n, 8 * n)
    del out
    assert t.current == 0  # its result freed after the block: released all the same

    def views_and_in_place(x):
        v = x.view(-1)[2:]
        v.mul_(2)
        return x.transpose(0, 1)

    with ScratchTracker() as t:
        views_and_in_place(x)
    assert (t.peak, t.scratch()) == (0, 0)


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_are_the_parameters(exports, family):
    """Weight tensors: every parameter once (tied ones once), bf16 sizes; buffers besides."""
    doc = forward(exports, family)
    model, config = build(family)
    params = dict(model.named_parameters())  # tied parameters appear once
    buffers = dict(model.named_buffers())
    weights = {t["name"]: t for t in doc["tensors"] if t["kind"] == "weight"}
    assert set(params) <= set(weights)
    assert set(weights) - set(params) <= set(buffers)
    for name, p in params.items():
        assert weights[name]["bytes"] == 2 * p.numel(), name
        assert weights[name]["origin"] == "external"
    total = sum(weights[name]["bytes"] for name in params)
    assert total == 2 * sum(p.numel() for p in model.parameters())
    if config.tie_word_embeddings:
        assert "lm_head.weight" not in weights
        head = [op for op in doc["ops"] if op["name"] == "lm_head"][0]
        embed = [t["id"] for t in doc["tensors"] if t["name"] == "model.embed_tokens.weight"]
        assert embed[0] in head["inputs"]
    inputs = {t["name"]: t for t in doc["tensors"] if t["kind"] == "input"}
    assert inputs["input_ids"]["bytes"] == 8 * TOKENS  # int64 token ids


@pytest.mark.parametrize("family", FAMILIES)
def test_layers(exports, family):
    doc = forward(exports, family)
    _, config = build(family)
    layers = config.num_hidden_layers
    for item in doc["tensors"] + doc["ops"]:
        m = re.search(r"(?:^|\.)layers\.(\d+)\.", item["name"])
        assert item["layer"] == (int(m.group(1)) if m else -1), item["name"]
    assert {op["layer"] for op in doc["ops"]} == set(range(layers)) | {-1}
    for layer in range(layers):
        ops = [op for op in doc["ops"] if op["layer"] == layer]
        assert sum(op["kind"] == "attention" for op in ops) == 2  # QK^T and AV
        assert sum(op["kind"] == "norm" for op in ops) == 2
    assert sum(op["kind"] == "embedding" for op in doc["ops"]) == 1
    assert sum(op["kind"] == "norm" and op["layer"] == -1 for op in doc["ops"]) == 1


def test_mixtral_routing(exports):
    doc = forward(exports, "mixtral")
    _, config = build("mixtral")
    routers = [op for op in doc["ops"] if op["kind"] == "router"]
    experts = [op for op in doc["ops"] if op["kind"] == "expert"]
    assert {op["layer"] for op in routers} == set(range(config.num_hidden_layers))
    assert all(".block_sparse_moe.gate" in op["name"] or ".block_sparse_moe." in op["name"]
               for op in routers)
    assert experts and all(".experts." in op["name"] for op in experts)
    # the experts' combine step updates the layer output in place (index_add_)
    assert any(op["updates"] for op in doc["ops"] if ".block_sparse_moe." in op["name"])


@pytest.mark.parametrize("family", FAMILIES)
def test_deterministic(exports, family, tmp_path):
    """The same command gives the same bytes, whatever the hash seed of the process."""
    first = exports.path("--hf-config", config_path(family), "--seq", str(SEQ), "--batch",
                         str(BATCH))
    again = tmp_path / "again.json"
    result = run_tool(["--hf-config", config_path(family), "--seq", str(SEQ), "--batch",
                       str(BATCH), "-o", str(again)], env={"PYTHONHASHSEED": "12345"})
    assert result.returncode == 0, result.stderr
    with open(first, "rb") as f:
        assert f.read() == again.read_bytes()


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_training_step(exports, family):
    doc = exports.doc("--hf-config", config_path(family), "--seq", str(SEQ), "--batch",
                      str(BATCH), "--train", "--master-weights")
    assert violations(doc) == []
    assert doc["meta"]["phase"] == "train"
    forward_ops, backward_ops, optimizer_ops = phase_split(doc)
    products = ("matmul", "attention", "expert", "router")
    fwd = sum(op["flops"] for op in forward_ops if op["kind"] in products)
    bwd = sum(op["flops"] for op in backward_ops if op["kind"] in products)
    assert 1.98 <= bwd / fwd <= 2.0
    model, _ = build(family)
    params = dict(model.named_parameters())
    tensors = doc["tensors"]
    assert sorted(op["name"] for op in optimizer_ops) == sorted(f"adamw.{n}" for n in params)
    for op in optimizer_ops:
        name = op["name"][len("adamw."):]
        weight, m, v, master = (tensors[t] for t in op["updates"])
        assert weight["name"] == name and weight["kind"] == "weight"
        for state, suffix in ((m, "adam_m"), (v, "adam_v"), (master, "master")):
            assert state["name"] == f"{name}.{suffix}"
            assert state["kind"] == "optimizer_state" and state["dtype"] == "fp32"
            assert state["bytes"] == 4 * params[name].numel()
            assert state["origin"] == "external"
        (grad,) = (tensors[t] for t in op["inputs"])
        assert grad["name"] == f"{name}.grad"
        assert grad["kind"] == "grad" and grad["bytes"] == 2 * params[name].numel()
    # the logits stay the forward's output; the loss op yields their gradient
    assert [t["name"] for t in tensors if t["kind"] == "output"] == ["lm_head"]
    (loss,) = [op for op in doc["ops"] if op["name"] == "loss"]
    assert [tensors[t]["name"] for t in loss["inputs"]] == ["lm_head", "labels"]
    assert [tensors[t]["name"] for t in loss["outputs"]] == ["lm_head.grad"]
    # backward ops are named as the C++ generator names them, and write only gradients
    assert all(op["name"].endswith((".dgrad", ".wgrad", ".bwd")) for op in backward_ops)
    assert all(tensors[t]["kind"] == "grad" for op in backward_ops
               for t in op["outputs"] + op["updates"])


def test_transformers_without_fx_tracer(tmp_path):
    """transformers 5 has no transformers.utils.fx: the exporter says what it needs, at
    once (exit 2, before building the model), not an internal ImportError."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['transformers.utils.fx'] = None  # as transformers 5\n")
    path = os.pathsep.join([str(tmp_path)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [TOOLS_PYTHON])
    out = tmp_path / "w.json"
    result = run_tool(["--hf-config", config_path(FAMILIES[0]), "--seq", "16", "-o", str(out)],
                      env={"PYTHONPATH": path})
    assert result.returncode == 2, result.stderr
    assert "has no torch.fx tracer (transformers.utils.fx, removed in 5.0)" in result.stderr
    assert "transformers==4.47.1" not in result.stderr and "pins 4.47.1" in result.stderr
    assert not out.exists()
