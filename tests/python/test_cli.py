"""The exporter as a command: errors, output, atomic writes."""

import json
import os

import pytest

from conftest import config_path, run_tool

LLAMA = config_path("llama")


@pytest.mark.parametrize("args, message", [
    ([], "one of the arguments --hf-config --torchvision is required"),
    (["--hf-config", LLAMA, "--torchvision", "vit_b_16"], "not allowed with argument"),
    (["--hf-config", LLAMA, "--batch", "0"], "--batch must be at least 1"),
    (["--hf-config", LLAMA, "--seq", "0"], "--seq must be at least 1"),
    (["--hf-config", LLAMA, "--dtype", "fp8"], "invalid choice: 'fp8'"),
    (["--hf-config", LLAMA, "--master-weights"], "--master-weights needs --train"),
    (["--torchvision", "vit_b_16", "--seq", "16"], "--seq applies to --hf-config models"),
    (["--torchvision", "vit_b_17"], "no model 'vit_b_17' in torchvision"),
    (["--hf-config", "no/such/config.json"], "no/such/config.json: No such file or directory"),
    (["--hf-config", LLAMA, "-o", "no/such/dir/out.json"], "does not exist"),
    (["--hf-config", LLAMA, "--seq", "257"],
     "--seq 257 is more than the 256 positions of"),
    # An input no allocator can give (more than the address space): out of memory, exit 2.
    (["--torchvision", "resnet50", "--batch", "1000000000"],
     "out of memory running the model; use a smaller --batch"),
])
def test_bad_input(args, message):
    result = run_tool(args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]


def test_bad_config_files(tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{\n  "model_type": "llama"\n  "hidden_size": 64\n}\n')
    result = run_tool(["--hf-config", str(bad_json)])
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {bad_json}:3:3: Expecting ',' delimiter"

    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"model_type": "lama", "hidden_size": 64}))
    result = run_tool(["--hf-config", str(unknown)])
    assert result.returncode == 2
    assert "model_type 'lama' is not known" in result.stderr
    assert "did you mean 'llama'?" in result.stderr

    no_type = tmp_path / "notype.json"
    no_type.write_text(json.dumps({"hidden_size": 64}))
    result = run_tool(["--hf-config", str(no_type)])
    assert result.returncode == 2 and "with a model_type is expected" in result.stderr


def test_failed_export_keeps_old_output(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old")
    result = run_tool(["--hf-config", LLAMA, "--batch", "0", "-o", str(out)])
    assert result.returncode == 2
    assert out.read_text() == "old"


def test_atomic_write_and_stdout(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old")
    result = run_tool(["--hf-config", LLAMA, "-o", str(out)])
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith(f"{out}: ")
    assert os.listdir(tmp_path) == ["out.json"]  # no temporary file left behind
    written = out.read_text()
    assert json.loads(written)["format"] == "tierflow.workload/1"
    # without -o the workload goes to standard output, the same bytes
    result = run_tool(["--hf-config", LLAMA])
    assert result.returncode == 0 and result.stdout == written


def test_layout(exports):
    """One tensor or op per line, keys in the documented order, integers exact."""
    with open(exports.path("--hf-config", LLAMA, "--seq", "16", "--batch", "2"),
              encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines[0] == "{" and lines[1] == '  "format": "tierflow.workload/1",'
    tensor_lines = [ln for ln in lines if ln.startswith('    {"id": ') and '"origin"' in ln]
    op_lines = [ln for ln in lines if ln.startswith('    {"id": ') and '"flops"' in ln]
    doc = json.loads("\n".join(lines))
    assert len(tensor_lines) == len(doc["tensors"]) and len(op_lines) == len(doc["ops"])
    assert all(isinstance(op["flops"], int) for op in doc["ops"])


def test_memory_floor_refused(tmp_path):
    """A run whose weights and one layer's attention scores alone exceed the memory (and
    swap) available is refused before the weights are made, not killed out of memory."""
    with open(LLAMA, encoding="utf-8") as f:
        config = json.load(f)
    config["max_position_embeddings"] = 1 << 24
    long_context = tmp_path / "long.json"
    long_context.write_text(json.dumps(config))
    result = run_tool(["--hf-config", str(long_context), "--seq", str(1 << 23)])
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: running {long_context} at batch 1, 8388608 tokens "
                                    "takes at least ")
    assert "(its weights and one layer's attention scores)" in result.stderr


def test_output_never_overwrites_the_config(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(open(LLAMA, encoding="utf-8").read())
    before = config.read_text()
    result = run_tool(["--hf-config", str(config), "-o", str(config)])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {config}: refusing to write this output: it is the model's config "
        "(--hf-config); outputs never overwrite inputs, choose another path")
    assert config.read_text() == before
