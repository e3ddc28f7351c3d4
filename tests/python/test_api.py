"""The Python API (`import tierflow`, tools/python): one test per function, checked against
the `tierflow` CLI on the same input, and bad input raised as tierflow.InputError with its
file:line:col.

Run by CTest (python/api) with PYTHONPATH at the build tree's python/ folder and
TIERFLOW_BIN at the CLI of the same build.
"""

import csv
import io
import json
import math
import os
import subprocess
import sys
import threading
import time
import warnings

import pandas as pd
import pytest

import tierflow

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
H100 = os.path.join(ROOT, "configs", "hw", "h100-sxm-8gpu.yaml")

# A small decode step: two layers of Llama-3-8B, four sequences, four tokens.
SMALL = {"model": "llama-3-8b", "layers": 2, "batch": 4, "context": 1024, "tokens": 4}
SMALL_FLAGS = ["--model", "llama-3-8b", "--layers", "2", "--batch", "4", "--context", "1024",
               "--tokens", "4"]


@pytest.fixture(scope="session")
def cli():
    """Runs the tierflow CLI of the build the module came from; returns stdout."""
    binary = os.environ.get("TIERFLOW_BIN") or os.path.join(
        os.path.dirname(tierflow.__file__), "..", "..", "tools", "tierflow")
    assert os.access(binary, os.X_OK), f"no tierflow CLI at {binary} (set TIERFLOW_BIN)"

    def run(*args, cwd=ROOT):
        result = subprocess.run([binary] + list(args), capture_output=True, text=True, cwd=cwd,
                                timeout=300)
        assert result.returncode == 0, result.stderr
        return result.stdout

    return run


@pytest.fixture(scope="session")
def small_workload():
    return tierflow.generate(**SMALL)


def expected_error(fixture):
    """(line, col, message) of a fixture's `# expect-error@COL: MESSAGE` marker."""
    marker = "# expect-error@"
    with open(fixture, encoding="utf-8") as f:
        for number, text in enumerate(f, start=1):
            if marker in text:
                col, _, message = text.split(marker, 1)[1].partition(": ")
                return number, int(col), message.rstrip("\n")
    raise AssertionError(f"{fixture} has no {marker} marker")


def test_load_topology(cli):
    t = tierflow.load_topology("h100-sxm-8gpu")
    assert t.name == "h100-sxm-8gpu"
    assert os.path.samefile(t.file, H100)
    assert t.show() == cli("hw", "show", H100)
    assert t.to_dict() == json.loads(cli("hw", "show", H100, "--json"))
    assert [x["id"] for x in t.tiers] == ["hbm", "ddr", "ssd"]
    assert t.devices[0]["count"] == 8 and t.links[0]["id"] == "gpu-pcie"
    # The default, a path and overrides.
    assert tierflow.load_topology().name == "h100-sxm-8gpu"
    cut = tierflow.load_topology(H100, set=["tiers.hbm.capacity=8GB"])
    assert cut.sets == ["tiers.hbm.capacity=8GB"]
    assert cut.tiers[0]["capacity_bytes"] == 8 * 10**9
    assert cut.show() == cli("hw", "show", H100, "--set", "tiers.hbm.capacity=8GB")
    assert "h100-sxm-8gpu" in tierflow.topologies() and "llama-3-8b" in tierflow.models()


@pytest.mark.parametrize("name", ["01-yaml-unclosed-flow-seq", "09-unknown-key-tier", "22-missing-unit",
                                  "39-dangling-endpoint"])
def test_load_topology_errors(name):
    fixture = os.path.join(ROOT, "tests", "errors", name + ".yaml")
    line, col, message = expected_error(fixture)
    with pytest.raises(tierflow.InputError) as caught:
        tierflow.load_topology(fixture)
    e = caught.value
    assert isinstance(e, ValueError)
    assert (e.file, e.line, e.col, e.message) == (fixture, line, col, message)
    assert str(e) == f"{fixture}:{line}:{col}: {message}"


def test_input_errors_of_arguments():
    with pytest.raises(tierflow.InputError) as caught:
        tierflow.load_topology("h100-sxm-8gp")
    e = caught.value
    assert e.file == "path" and e.line is None and e.col is None
    assert "unknown topology 'h100-sxm-8gp'" in e.message and "did you mean 'h100-sxm-8gpu'" in e.message
    assert str(e) == "path: " + e.message
    with pytest.raises(tierflow.InputError, match=r"^set:1:7: 'tiers.hmb.capacity': no tier with id 'hmb'"):
        tierflow.load_topology(H100, set=["tiers.hmb.capacity=8GB"])
    # Its hints name the keyword too, not the CLI's --set.
    with pytest.raises(tierflow.InputError, match=r"lower it \(set=devices.h100.reserved=0B\)"):
        tierflow.load_topology(H100, set=["tiers.hbm.capacity=1GB"])
    # An unknown model names the keyword, as every other setting's error does.
    with pytest.raises(tierflow.InputError, match="^model: unknown model 'llama-3-9b'"):
        tierflow.generate("llama-3-9b")
    with pytest.raises(tierflow.InputError, match="^model: unknown model 'llama-3-9b'"):
        tierflow.serve(model="llama-3-9b", arrivals="poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2")
    with pytest.raises(tierflow.InputError, match="batch: 0 is below 1"):
        tierflow.generate("llama-3-8b", batch=0)
    # Past the field's type: worded as the serving fields and the CLI's flags word it.
    with pytest.raises(tierflow.InputError, match="^layers: '1099511627776' is too large: at most 2147483647$"):
        tierflow.generate("llama-3-8b", layers=2**40)
    with pytest.raises(tierflow.InputError, match="did you mean 'bf16'") as caught:
        tierflow.generate("llama-3-8b", weight_dtype="bf61")
    assert caught.value.file == "weight_dtype"  # the argument, as docs/python.md says
    with pytest.raises(tierflow.InputError, match="^batch: 0 is below 1$"):
        tierflow.compare(batch=0)
    with pytest.raises(tierflow.InputError, match="unknown field 'bacth'.*did you mean 'batch'"):
        tierflow.compare(bacth=4)
    with pytest.raises(tierflow.InputError, match="unknown question 'min-mem'"):
        tierflow.whatif("min-mem")
    with pytest.raises(TypeError):
        tierflow.plan(H100, "w.json", budget=[1])


def test_study_errors_name_keywords(small_workload, tmp_path):
    # devices=0 is every device of the class, as --devices 0 (it was refused as below 1).
    every = tierflow.compare(["resident"], model="llama-3-8b", layers=1, devices=0)
    assert every["status"][0] == "ok"
    assert every["devices"][0] == 8  # the devices it planned, not the 0 that asked for them
    # Errors found once the study runs name the keywords too, not the CLI's flags.
    with pytest.raises(tierflow.InputError,
                       match=r"^devices: 99 programs, .* \(raise it with set=devices\.h100\.count=N\)"):
        tierflow.compare(["resident"], model="llama-3-8b", devices=99)
    with pytest.raises(tierflow.InputError, match="^expert_cache: an expert cache is what"):
        tierflow.compare(["resident"], model="mixtral-8x7b", routing="oracle",
                         expert_cache="lru:8GiB")
    # An override's error is at the argument that gave it.
    with pytest.raises(tierflow.InputError, match=r"^model_set:1:8: bad value for 'layers'"):
        tierflow.compare(["resident"], model="llama-3-8b", model_set=["layers=-1"])
    # A topology override's error is at the keyword set, as the CLI's is at --set.
    with pytest.raises(tierflow.InputError, match=r"^set:1:7: 'tiers.hmb.capacity': no tier"):
        tierflow.compare(["resident"], model="llama-3-8b", layers=1, set=["tiers.hmb.capacity=1GB"])
    with pytest.raises(tierflow.InputError, match=r"^vary: tiers.hbm.capacity: bad value"):
        tierflow.whatif(model="llama-3-8b", vary={"tiers.hbm.capacity": ["80GB", "x"]})
    # One workload source, as --model, --hf-config and --workload exclude each other (the
    # last keyword won).
    with pytest.raises(tierflow.InputError, match="^workload: give one of model, hf_config or workload"):
        tierflow.compare(["resident"], model="llama-3-70b", workload="w.json")
    with pytest.raises(tierflow.InputError, match="^hf_config: give model or hf_config, not both"):
        tierflow.generate(model="llama-3-8b", hf_config="config.json")
    with pytest.raises(tierflow.InputError, match="^routing: 'oracle' is not one of expected, seeded"):
        tierflow.generate("llama-3-8b", routing="oracle")
    # A service question's serving settings may not redo the deployment or the question.
    arrivals = "poisson,rate=2/s,n=5,prompt=fixed:100,output=fixed:10"
    for serve, message in [({"tp": 2}, "^serve: tp: give it as whatif's tp"),
                           ({"timeline": "t.json"}, "^serve: timeline: not a serving setting"),
                           ({"replicsa": 2}, "did you mean 'replicas'"),
                           (["replicas=2"], "^serve: expected a dict")]:
        with pytest.raises(tierflow.InputError, match=message):
            tierflow.whatif("max-rate", model="llama-3-8b", arrivals=arrivals,
                            target="p99-ttft=1s", serve=serve)
    # The remedy named as Python spells it (it said --set).
    with pytest.raises(tierflow.InputError, match=r"raise its capacity \(set=tiers\.hbm\.capacity=\.\.\.\)"):
        tierflow.plan("h100-sxm-8gpu", small_workload, budget="1000TiB")
    # A step question has no target: refused, not ignored.
    with pytest.raises(tierflow.InputError, match="^target: is for a question about a service"):
        tierflow.whatif(model="llama-3-8b", target="p99-ttft=1s")
    # cache_only is read as the CLI reads it: 1 is no boolean (it ran a timed run).
    with pytest.raises(tierflow.InputError, match="cache_only"):
        tierflow.serve(model="llama-3-8b", arrivals=arrivals, cache_only=1)
    # Settings the question overrides are refused, as the CLI refuses them.
    with pytest.raises(tierflow.InputError, match="^budget: min-memory searches the budget .* "
                       "within max_overhead of"):
        tierflow.whatif(model="llama-3-8b", budget="1GiB")
    with pytest.raises(tierflow.InputError, match="^vary: max-batch searches batch"):
        tierflow.whatif("max-batch", model="llama-3-8b", vary={"batch": [1, 2]})
    w = tmp_path / "w.json"
    small_workload.save(w)
    with pytest.raises(tierflow.InputError, match="^question: max-batch regenerates the "
                       "workload: give model or hf_config, not workload$"):
        tierflow.whatif("max-batch", workload=str(w))
    with pytest.raises(tierflow.InputError, match="^prompt: a request is generated from a "
                       "model: give model or hf_config, not a workload file$"):
        tierflow.compare(["resident"], workload=str(w), prompt=16, generate=2)


def test_generate(cli, small_workload, tmp_path):
    w = small_workload
    assert w.description == "llama-3-8b decode, batch 4, 4 tokens from a 1024-token context"
    assert w.num_ops > 0 and w.num_tensors > 0
    out = tmp_path / "w.json"
    cli("trace", "gen", *SMALL_FLAGS, "-o", str(out))
    assert w.to_json() == out.read_text()
    assert w.info() == json.loads(cli("trace", "info", str(out), "--json"))
    assert w.info_text(top=3) == cli("trace", "info", str(out), "--top", "3")
    # As --top takes it: -1 listed nothing, 2**70 was pybind11's TypeError.
    for top in (-1, 2**70):
        with pytest.raises(tierflow.InputError, match=r"^top: expected a whole number from 0 to 1000000"):
            w.info(top=top)
    with pytest.raises(TypeError, match="^top: expected an int, not bool$"):
        w.info_text(top=True)
    saved = tmp_path / "saved.json"
    w.save(saved)
    assert saved.read_text() == out.read_text()
    # Generator options and model overrides reach the generator.
    prefill = tierflow.generate("llama-3-8b", phase="prefill", seq=64, layers=2)
    assert prefill.info()["ops"] < w.info()["ops"]
    assert tierflow.generate("llama-3-8b", model_set=["layers=1"]).num_ops < w.num_ops
    # Quantization options: the same workload as the flags give.
    q = tierflow.generate("llama-3-8b", layers=1, weight_dtype="int4", quant_group=64,
                          quant_zeros=True)
    qout = tmp_path / "q.json"
    cli("trace", "gen", "--model", "llama-3-8b", "--layers", "1", "--weight-dtype", "int4",
        "--quant-group", "64", "--quant-zeros", "-o", str(qout))
    assert q.to_json() == qout.read_text()
    f8 = json.loads(tierflow.generate("llama-3-8b", layers=1, weight_dtype="fp8",
                                      compute_dtype="fp8").to_json())
    assert f8["meta"]["compute_dtype"] == "fp8"
    # Errors name the arguments as Python spells them, not as the CLI's flags.
    with pytest.raises(tierflow.InputError, match="^compute_dtype: compute_dtype fp8 is neither"):
        tierflow.generate("llama-3-8b", weight_dtype="int4", compute_dtype="fp8")
    with pytest.raises(tierflow.InputError, match="^context: context 1000000000000 is above the "
                       "largest allowed"):
        tierflow.generate("llama-3-8b", context=10**12)
    with pytest.raises(tierflow.InputError, match="raise kv_block$"):
        tierflow.generate("llama-3-8b", layers=1, kv_block=1, context=10**9)
    # A routing trace: the same workload as the flag gives.
    trace = tmp_path / "routing.jsonl"
    trace.write_text("".join(
        json.dumps({"pass": p, "layer": 0, "token": 0, "experts": [p % 8, (p + 3) % 8]}) + "\n"
        for p in range(3)))
    r = tierflow.generate("mixtral-8x7b", layers=1, tokens=3, routing="seeded",
                          routing_trace=str(trace))
    rout = tmp_path / "r.json"
    cli("trace", "gen", "--model", "mixtral-8x7b", "--layers", "1", "--tokens", "3",
        "--routing-trace", str(trace), "-o", str(rout))
    assert r.to_json() == rout.read_text()


def test_generate_refuses_what_the_step_would_ignore():
    # As trace gen refuses the flags: a step's own argument given to a step that does not
    # read it would be ignored.
    for kw, name in ((dict(seq=4096), "seq"), (dict(phase="prefill", context=8192), "context"),
                     (dict(phase="train", tokens=3), "tokens"), (dict(checkpoint=True), "checkpoint")):
        with pytest.raises(tierflow.InputError, match=f"^{name}: a .* step does not read it"):
            tierflow.generate("llama-3-8b", layers=1, **kw)
    train = tierflow.generate("llama-3-8b", layers=1, phase="train", seq=64, checkpoint=True)
    assert "64 tokens, checkpointed" in repr(train)


def test_generate_warns_past_the_declared_context():
    """A context past the model's declared maximum (max_context) is a UserWarning."""
    with pytest.warns(UserWarning, match="more than the 8192 that llama-3-8b declares"):
        tierflow.generate("llama-3-8b", phase="decode", context=9000, tokens=1, layers=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tierflow.generate("llama-3-8b", phase="decode", context=8000, tokens=1, layers=1)


def test_command_defaults_as_the_cli(cli):
    """whatif and compare start from the CLI's defaults (one definition, in C++), with the
    default model named once; a default context past the model's maximum is cut to it,
    and said, as the CLI does; a context given is kept."""
    assert tierflow.DEFAULT_MODEL == "llama-3.1-70b"
    d = tierflow.whatif(question="max-batch", layers=2)
    assert d["workload"] == ("llama-3.1-70b decode, batch searched from 16, 8 tokens from a "
                             "32768-token context")
    d = tierflow.whatif(question="max-batch", model="llama-2-7b", layers=2)
    assert "4088-token context" in d["workload"]
    assert "context 4088 tokens: the default 32768 cut to the 4096 positions that llama-2-7b " \
           "declares (max_context) with 8 generated; give context= to go past it" \
           in d["answers"][0]["note"]
    out = cli("whatif", "--question", "max-batch", "--model", "llama-2-7b", "--layers", "2",
              "--json")
    assert json.loads(out)["workload"] == d["workload"]
    with pytest.warns(UserWarning, match="the default 4096 cut to the 2048 positions that opt-30b"):
        frame = tierflow.compare(model="opt-30b", layers=2, policies=["tierflow"])
    assert frame["context"].tolist() == [2040] and frame["batch"].tolist() == [1]
    # A shipped topology by its name: the same row on every checkout.
    assert frame["hw"].tolist() == ["h100-sxm-8gpu"]
    with pytest.warns(UserWarning, match="more than the 2048 that opt-30b declares"):
        frame = tierflow.compare(model="opt-30b", layers=2, context=4096, policies=["tierflow"])
    assert frame["context"].tolist() == [4096]


def test_generate_default_context_and_checkpoint_dtype():
    """generate() without a context cuts the default to the model's positions, with a
    UserWarning, as trace gen does; weights wider than the checkpoint's are a UserWarning."""
    with pytest.warns(UserWarning, match="the default 4096 cut to the 4096 positions that llama-2-7b"):
        w = tierflow.generate("llama-2-7b", layers=1)
    assert w.description == "llama-2-7b decode, batch 1, 1 token from a 4095-token context"
    with pytest.warns(UserWarning, match="deepseek-v3's checkpoint holds fp8 weights .*weight_dtype='fp8'"):
        tierflow.generate("deepseek-v3", layers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tierflow.generate("deepseek-v3", layers=4, weight_dtype="fp8")
        tierflow.generate("llama-3.1-70b", layers=1, weight_dtype="int4")  # narrower: a choice


def test_plan_on_host_as_the_cli(cli, tmp_path):
    """plan(on_host=...) moves the ops the host CPU runs, as plan --on-host: the same plan
    file; a kind that is no op kind is an InputError at on_host."""
    w = tierflow.generate("opt-175b", layers=2, context=512, tokens=2, batch=8, kv_block=8,
                          weight_dtype="fp16", act_dtype="fp16")
    path = tmp_path / "opt.json"
    w.save(path)
    p = tierflow.plan("t4-flexgen", w, policy="layerwise", pins=["weight=ddr", "kv=ddr"],
                      on_host="attention")
    assert p.ok and '"on_host": "attention"' in p.to_json(str(tmp_path / "p.json"))
    p.save(tmp_path / "p.json")
    cli("plan", "--hw", "t4-flexgen", "--workload", str(path), "--pin", "weight=ddr", "--pin",
        "kv=ddr", "--policy", "layerwise", "--on-host", "attention", "-o", str(tmp_path / "c.json"))
    mine = json.loads((tmp_path / "p.json").read_text())
    theirs = json.loads((tmp_path / "c.json").read_text())
    mine.pop("workload"), theirs.pop("workload")  # inline against a file
    assert mine == theirs
    with pytest.raises(tierflow.InputError, match="^on_host: 'atention' is not an op kind"):
        tierflow.plan("t4-flexgen", w, on_host="atention")


def test_lenient_hf_import(tmp_path):
    """lenient=True, as --lenient: an unknown config.json field that changes no count is a
    UserWarning; without it, the error says how to pass it."""
    config = json.loads(open(os.path.join(ROOT, "tests", "fixtures", "hf", "released",
                                          "mistral-7b-v0.1.json")).read())
    config["my_serving_note"] = "fast"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(tierflow.InputError, match=r"lenient=True skips those"):
        tierflow.generate(hf_config=str(path), layers=1)
    with pytest.warns(UserWarning, match="unknown field 'my_serving_note'.*lenient=True"):
        w = tierflow.generate(hf_config=str(path), layers=1, lenient=True)
    assert w.num_ops > 0
    with pytest.raises(tierflow.InputError, match="^lenient: applies to an hf_config import"):
        tierflow.generate("llama-3-8b", lenient=True)
    with pytest.warns(UserWarning, match="unknown field 'my_serving_note'"):
        tierflow.compare(["resident"], hf_config=str(path), layers=1, lenient=True)
    with pytest.warns(UserWarning, match="unknown field 'my_serving_note'"):
        d = tierflow.whatif(hf_config=str(path), layers=1, tokens=1, context=512, batch=1,
                            lenient=True)
    assert d["answers"][0]["found"]
    # Set where it changes nothing it is refused, not ignored: every command, as --lenient
    # needs --hf-config.
    with pytest.raises(tierflow.InputError,
                       match="^lenient: applies to an hf_config import, not to model 'llama-3-8b'"):
        tierflow.compare(["resident"], model="llama-3-8b", layers=1, lenient=True)
    with pytest.raises(tierflow.InputError, match="^lenient: applies to an hf_config import"):
        tierflow.whatif(model="llama-3-8b", layers=1, lenient=True)


def test_whatif_plan_out_as_the_cli(cli, tmp_path):
    """whatif(plan_out=...) writes the answer's plan as --plan-out does, byte for byte;
    with no answer it is an InputError at plan_out, and a service question refuses it."""
    args = dict(model="llama-3-8b", layers=2, batch=2, context=1024, tokens=2,
                policy="hyperoffload", threads=1)
    mine = tmp_path / "mine.json"
    d = tierflow.whatif(max_overhead="5%", plan_out=mine, **args)
    assert d["answers"][0]["found"]
    theirs = tmp_path / "theirs.json"
    cli("whatif", "--model", "llama-3-8b", "--layers", "2", "--batch", "2", "--context", "1024",
        "--tokens", "2", "--policy", "hyperoffload", "--threads", "1", "--max-overhead", "5%",
        "--plan-out", str(theirs))
    assert mine.read_bytes() == theirs.read_bytes()
    cli("sim", "--plan", str(mine))
    with pytest.raises(tierflow.InputError, match="^plan_out: no plan to write"):
        tierflow.whatif(question="max-batch", min_throughput=1e12, plan_out=tmp_path / "none.json",
                        **args)
    # Never over an input: the topology it reads stays as it was.
    hw = tmp_path / "hw.yaml"
    hw.write_text(open(H100).read())
    with pytest.raises(tierflow.InputError, match="it is an input of this command"):
        tierflow.whatif(hw=str(hw), plan_out=hw, **args)
    assert hw.read_text() == open(H100).read()
    with pytest.raises(tierflow.InputError, match="^lenient: 'maybe' is not true or false"):
        tierflow.compare(["resident"], model="llama-3-8b", layers=1, lenient="maybe")
    with pytest.raises(tierflow.InputError, match="^plan_out: describes a step"):
        tierflow.whatif(question="max-rate", arrivals="poisson,rate=1/s,n=10,prompt=100,output=10",
                        target="p99-ttft=2s", plan_out=tmp_path / "x.json")


def test_load_workload(small_workload, tmp_path):
    path = tmp_path / "w.json"
    small_workload.save(path)
    w = tierflow.load_workload(path)
    assert w.to_json() == small_workload.to_json()
    assert w.description == str(path)
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "format": "tierflow.workload/1",\n  "tensors": 7\n}\n')
    with pytest.raises(tierflow.InputError) as caught:
        tierflow.load_workload(bad)
    assert caught.value.file == str(bad) and caught.value.line == 3


def test_plan(cli, small_workload, tmp_path):
    t = tierflow.load_topology("h100-sxm-8gpu")
    p = tierflow.plan(t, small_workload, budget="2GiB")
    assert p.ok and not p.infeasible and p.reason == ""
    assert p.budget == 2 * 2**30
    assert p.bounds["residency"] <= p.simulated["device_peak"] <= p.budget
    assert p.bounds["makespan_ps"] <= p.simulated["makespan_ps"]
    assert p.num_programs == 1 and p.num_steps > small_workload.num_ops
    assert p.offloads and p.offloads[0]["tier"] == "ddr"
    # The tierflow policy's portfolio as tried (what --explain prints), one of them the best.
    assert p.portfolio and [x["best"] for x in p.portfolio].count(True) == 1
    assert all(x["pipeline"] and x["tries"] and x["result"] for x in p.portfolio)
    assert any(x["pipeline"] == p.pipeline.replace(",refine,", ",") for x in p.portfolio if x["best"])
    assert p.workload.description == small_workload.description and p.topology.name == t.name
    lines = p.text().splitlines()
    assert len([x for x in lines if not x.startswith("home ")]) == p.num_steps
    assert "home L0.wqkv ddr" in lines
    # A pipeline replaces the policy's passes: both given is an error, not the policy dropped.
    with pytest.raises(tierflow.InputError, match="^pipeline: pipeline replaces the policy's passes"):
        tierflow.plan(t, small_workload, policy="layerwise", pipeline="place,liveness,insert,verify")
    # A program out of range, or not an int, names the argument (not pybind11's TypeError).
    with pytest.raises(tierflow.InputError, match=r"^program: expected a whole number from 0 to 0, got -1$"):
        p.text(program=-1)
    with pytest.raises(TypeError, match="^program: expected an int, not float$"):
        p.text(program=0.5)
    # Bytes as an int, a topology by name, a workload by path: the same plan.
    wfile = tmp_path / "w.json"
    small_workload.save(wfile)
    same = tierflow.plan("h100-sxm-8gpu", str(wfile), budget=2 * 2**30)
    assert same.to_json() == p.to_json()
    # Saved, the plan is one the CLI verifies and simulates to the same score.
    path = tmp_path / "plan.json"
    p.save(path)
    assert cli("plan", "verify", str(path)).startswith("ok: ")
    report = json.loads(cli("sim", "--plan", str(path), "--json"))
    assert report["makespan_ps"] == p.simulated["makespan_ps"]
    # The CLI's plan of the same workload file and budget is the same plan.
    cli_plan = tmp_path / "cli_plan.json"
    cli("plan", "--hw", H100, "--workload", str(wfile), "--budget", "2GiB", "--devices", "1",
        "-o", str(cli_plan))
    assert json.loads(cli_plan.read_text())["programs"] == json.loads(path.read_text())["programs"]
    # Other policies, pins and the max-overhead mode.
    resident = tierflow.plan(t, small_workload, policy="resident")
    assert resident.ok and resident.offloads == [] and resident.portfolio == []
    pinned = tierflow.plan(t, small_workload, pins=["weight=ddr"])
    assert pinned.ok and all(o["tier"] == "ddr" for o in pinned.offloads)
    lean = tierflow.plan(t, small_workload, max_overhead="5%")
    assert lean.ok and lean.simulated["makespan_ps"] <= 1.05 * resident.simulated["makespan_ps"] + 1
    with pytest.raises(tierflow.InputError, match="budget and max_overhead exclude each other"):
        tierflow.plan(t, small_workload, budget="2GiB", max_overhead=0.01)
    # As --max-overhead: a bare number above 1 is ambiguous (10% or 1000%?), in plan and whatif.
    with pytest.raises(tierflow.InputError, match="max_overhead: '10' is ambiguous"):
        tierflow.plan(t, small_workload, max_overhead=10)
    with pytest.raises(tierflow.InputError, match="max_overhead: '10' is ambiguous"):
        tierflow.whatif(max_overhead=10, **SMALL)
    with pytest.raises(tierflow.InputError, match="unknown policy 'tierflo'"):
        tierflow.plan(t, small_workload, policy="tierflo")


def test_plan_infeasible(small_workload):
    p = tierflow.plan("h100-sxm-8gpu", small_workload, budget="64MiB")
    assert not p.ok and p.infeasible and p.reason
    assert p.num_programs == 0
    with pytest.raises(tierflow.InputError, match="no plan was made"):
        tierflow.simulate(p)
    with pytest.raises(tierflow.InputError, match="no plan to write"):
        p.to_json()


def test_simulate(cli, small_workload, tmp_path):
    p = tierflow.plan("h100-sxm-8gpu", small_workload, budget="2GiB")
    timeline = tmp_path / "timeline.json"
    s = tierflow.simulate(p, timeline=timeline)
    assert s.ok and s.error is None
    assert s.makespan_ps == p.simulated["makespan_ps"]
    assert s.makespan_s == pytest.approx(s.makespan_ps * 1e-12)
    assert s.device_peak == p.simulated["device_peak"] == s.tier_peaks["hbm"]
    assert 0 < s.exposed_ps < s.makespan_ps and s.exposed_s == pytest.approx(s.exposed_ps * 1e-12)
    assert s.link_bytes["gpu-pcie rc->hbm"] > 0 and s.moved_bytes > 0
    assert s.busiest_link.startswith("gpu-pcie") and s.binding
    assert "traceEvents" in json.loads(timeline.read_text())
    # The report is the CLI's on the same plan file.
    path = tmp_path / "plan.json"
    p.save(path)
    from_file = tierflow.simulate(str(path))
    assert from_file.report(transfers=True) == json.loads(cli("sim", "--plan", str(path), "--json"))
    assert from_file.report_text() == cli("sim", "--plan", str(path))
    assert from_file.makespan_ps == s.makespan_ps
    # Another topology: twice the PCIe bandwidth moves the same bytes sooner.
    faster = tierflow.simulate(p, set=["links.gpu-pcie.bandwidth=128GB/s"])
    assert faster.makespan_ps < s.makespan_ps and faster.moved_bytes == s.moved_bytes
    assert tierflow.simulate(str(path), set=["links.gpu-pcie.bandwidth=128GB/s"]).makespan_ps == faster.makespan_ps
    # A plan that does not fit the tier it runs on is a result, not an exception.
    small = tierflow.simulate(p, set=["tiers.hbm.capacity=1GB", "devices.h100.reserved=0B"])
    assert not small.ok and small.error_kind == "capacity" and small.makespan_s is None
    with pytest.raises(tierflow.InputError, match="on_full"):
        tierflow.simulate(p, on_full="stall")
    # On another topology a plan keeps its own overrides, first, as sim --hw does with a file
    # (a Plan object lost them: a plan made on 16 GB/s ran at the named topology's 64 GB/s).
    slow = tierflow.load_topology("h100-sxm-8gpu", set=["links.gpu-pcie.bandwidth=16GB/s"])
    q = tierflow.plan(slow, small_workload, budget="2GiB")
    q.save(tmp_path / "q.json")
    on_named = tierflow.simulate(q, topology="h100-sxm-8gpu").makespan_ps
    assert on_named == tierflow.simulate(str(tmp_path / "q.json"), topology="h100-sxm-8gpu").makespan_ps
    assert on_named == json.loads(cli("sim", "--plan", str(tmp_path / "q.json"), "--hw", "h100-sxm-8gpu",
                                      "--json"))["makespan_ps"]
    assert on_named == tierflow.simulate(q).makespan_ps


def test_replay(cli, small_workload, tmp_path):
    p = tierflow.plan("h100-sxm-8gpu", small_workload, budget="2GiB")
    path = tmp_path / "plan.json"
    p.save(path)
    timeline = tmp_path / "measured.json"
    r = tierflow.replay(p, timeline=timeline)
    assert r.ok and r.ran and r.error is None and r.error_kind is None
    assert "traceEvents" in json.loads(timeline.read_text())
    # The document is the CLI's `replay --json`: the same fields, the same plan facts and
    # simulated numbers (measured ones differ from run to run).
    doc = r.document
    cli_doc = json.loads(cli("replay", "--plan", str(path), "--json"))
    assert list(doc) == list(cli_doc)
    for key in ("format", "plan", "topology", "backend", "time_scale", "size_shift", "steps"):
        assert doc[key] == cli_doc[key], key
    assert doc["makespan_ps"]["simulated"] == cli_doc["makespan_ps"]["simulated"]
    assert doc["exposed_wait"]["simulated_ps"] == cli_doc["exposed_wait"]["simulated_ps"]
    assert r.simulated_s == pytest.approx(p.simulated["makespan_ps"] * 1e-12)
    # How close the CPU replay comes is the replay tests' matter (and depends on the load
    # of the machine): here, that the error is the one the measured and simulated times give.
    assert r.measured_s > 0
    assert r.makespan_error == pytest.approx((r.measured_s - r.simulated_s) / r.simulated_s, rel=1e-6)
    assert len(r.steps()) == doc["steps"] and list(r.steps().columns)[:2] == ["program", "step"]
    assert r.table.startswith("replay ") and "makespan" in r.table
    # From the file, as `tierflow replay --plan` reads it.
    assert tierflow.replay(str(path)).document["makespan_ps"]["simulated"] == \
        doc["makespan_ps"]["simulated"]
    # A plan the topology cannot hold is refused, as a result.
    refused = tierflow.replay(p, topology="rtx4090-workstation")
    assert not refused.ok and not refused.ran and refused.document is None
    assert refused.error_kind == "topology" and "hbm" in refused.error
    # Bad settings raise, naming the argument.
    with pytest.raises(tierflow.InputError, match="time_scale"):
        tierflow.replay(p, time_scale="fast")
    with pytest.raises(tierflow.InputError, match="backend"):
        tierflow.replay(p, backend="tpu")
    with pytest.raises(tierflow.InputError, match="time_scale"):
        tierflow.replay(p, copy="native", time_scale=8)
    with pytest.raises(tierflow.InputError, match="device"):
        tierflow.replay(p, device=1)
    # measured: the recorded run scored again, nothing run: the CLI's --measured, and the
    # same measured steps and makespan back on the same topology.
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(doc))
    again = tierflow.replay(p, measured=recorded)
    assert again.ok and again.document["measured_steps"] == doc["measured_steps"]
    assert again.document["makespan_ps"] == doc["makespan_ps"]
    assert again.document["time_scale"] == doc["time_scale"] and doc["time_scale"] > 1
    assert again.document == json.loads(cli("replay", "--plan", str(path), "--measured",
                                            str(recorded), "--json"))
    faster = tierflow.replay(str(path), measured=recorded, set=["links.gpu-pcie.bandwidth=128GB/s"])
    assert faster.simulated_s < again.simulated_s and faster.measured_s == again.measured_s
    with pytest.raises(tierflow.InputError, match="^backend: runs a replay; measured scores"):
        tierflow.replay(p, measured=recorded, backend="cuda")
    with pytest.raises(tierflow.InputError, match="a replay of plan 'another', not of"):
        other = dict(doc, plan="another")
        (tmp_path / "other.json").write_text(json.dumps(other))
        tierflow.replay(p, measured=tmp_path / "other.json")
    with pytest.raises(tierflow.InputError, match="it is the recorded replay it scores"):
        tierflow.replay(p, measured=recorded, timeline=recorded)
    assert json.loads(recorded.read_text()) == doc


def test_replay_host_steps(cli):
    """A plan that computes on the host (tierflow.plan/3) replays its host step beside the
    device, as the CLI does."""
    path = os.path.join(ROOT, "tests", "fixtures", "plans", "host_attention.json")
    r = tierflow.replay(path)
    assert r.ok and r.ran
    host = r.document["host_compute"]
    assert host["steps"] == 1 and host["simulated_ps"] == 300_000
    assert host["measured_ps"] >= 300_000
    cli_doc = json.loads(cli("replay", "--plan", path, "--json"))
    assert cli_doc["host_compute"]["simulated_ps"] == host["simulated_ps"]
    assert "host CPU             1 host step: measured" in r.table


def test_serve(cli, tmp_path):
    trace = os.path.join(ROOT, "tests", "data", "serve", "mooncake_conversation_200.jsonl")
    args = dict(hw="h200-sxm-8gpu", model="llama-3-70b", tp=8, kv_tiers="ddr:512GiB",
                slo="ttft=2s,tpot=100ms")
    r = tierflow.serve(trace=trace, **args)
    # The CLI's summary and rows, from the same study layer.
    flags = ["--hw", "h200-sxm-8gpu", "--model", "llama-3-70b", "--tp", "8", "--kv-tiers",
             "ddr:512GiB", "--slo", "ttft=2s,tpot=100ms", "--quiet", "--trace", trace]
    assert r.summary == json.loads(cli("serve", *flags, "--json"))
    cli("serve", *flags, "-o", str(tmp_path / "req.csv"))
    assert r.requests.equals(pd.read_csv(tmp_path / "req.csv"))
    assert len(r.requests) == 200 and r.summary["finished"] == 200
    assert list(r.levels["name"]) == ["hbm[r0]", "ddr[0,1]"]
    # Each replica's work: one here, every request and iteration its own.
    assert list(r.replicas["role"]) == ["colocated"]
    assert r.replicas["requests"].sum() == 200 and r.replicas["iterations"].sum() == r.summary["iterations"]
    assert (r.replicas["compute_s"] <= r.replicas["busy_s"]).all()
    assert r.levels["hit_tokens"].sum() + r.summary["computed_tokens"] == r.summary["prompt_tokens"]
    # Generated requests against the cache alone: no rows, the levels' hits.
    c = tierflow.serve(arrivals="poisson,rate=2/s,n=50,prompt=fixed:1000,output=fixed:10,groups=2,system=2048",
                       model="llama-3-8b", cache_only=True)
    assert c.summary["cache_only"] and c.requests.empty and c.levels["hit_tokens"].sum() > 0
    assert c.replicas.empty
    # KV tiers listed slower first: taken as written, and noted as the CLI notes it.
    small = "poisson,rate=2/s,n=4,prompt=fixed:64,output=fixed:2"
    for find in (None, "max-rate"):
        extra = {} if find is None else {"find": find, "target": "p99-ttft=10s"}
        k = tierflow.serve(arrivals=small, model="llama-3-8b", kv_tiers="ssd:1%,ddr:1%", **extra)
        assert [n for n in k.notes if "comes before" in n] == [
            "kv_tiers: 'ssd' comes before 'ddr', whose blocks reach the device faster (53.76GB/s "
            "after 6.1us, against 53.76GB/s after 66.5us): levels are nearest first, so demotions "
            "fill 'ssd' first; list 'ddr' first unless that is meant"], k.notes
    assert tierflow.serve(arrivals=small, model="llama-3-8b", kv_tiers="ddr:1%,ssd:1%").notes == []
    # tp not given: the least that leaves room for KV, said as the CLI says it.
    wide = tierflow.serve(arrivals=small, model="llama-3-70b", hw="h100-sxm-8gpu")
    assert wide.summary["tp"] == 2
    assert wide.notes == ["tp not given: TP 2, the least that leaves llama-3-70b room for KV (155 "
                          "blocks of 512 tokens a replica); tp sets it"], wide.notes
    assert tierflow.serve(arrivals=small, model="llama-3-70b", hw="h100-sxm-8gpu", tp=4).notes == []
    # replicas not given (or 0): as many as the devices hold, the CLI's default too.
    assert wide.summary["replicas"] == 4 and wide.summary["devices"] == 8
    assert tierflow.serve(arrivals=small, model="llama-3-70b", hw="h100-sxm-8gpu",
                          replicas=0).summary == wide.summary
    # Requests past the model's max_context and weights wider than its checkpoint: named as
    # Python names the settings.
    long = tierflow.serve(arrivals="poisson,rate=2/s,n=4,prompt=fixed:4000,output=fixed:200",
                          model="llama-2-7b", weight_dtype="fp32")
    assert long.notes == [
        "4 of the 4 requests span more positions (prompt and output) than the 4096 that "
        "llama-2-7b declares (max_context, source CTX-L2), the longest 4200; results past it "
        "assume the model runs that far",
        "llama-2-7b's checkpoint holds fp16 weights (checkpoint_dtype); these are fp32, 2x its "
        "bytes: weight_dtype='fp16' plans them as shipped"], long.notes
    # Swap preemption: the CLI's summary.
    arrivals = "poisson,rate=20/s,n=100,prompt=uniform:512:4096,output=uniform:64:512,seed=9"
    w = tierflow.serve(arrivals=arrivals, hw="h100-sxm-8gpu", model="llama-3-8b",
                       set=["tiers.hbm.capacity=19GiB"], preemption="swap", swap_space="2GiB")
    assert w.summary["preemption"] == "swap" and w.summary["swap_blocks"] == 32
    assert w.summary == json.loads(cli("serve", "--arrivals", arrivals, "--hw", "h100-sxm-8gpu",
                                       "--model", "llama-3-8b", "--set", "tiers.hbm.capacity=19GiB",
                                       "--preemption", "swap", "--swap-space", "2GiB", "--quiet",
                                       "--json"))
    # A question: the CLI's answer.
    f = tierflow.serve(trace=trace, hw="h100-sxm-8gpu", model="llama-3-8b", find="min-replicas",
                       target="p90-ttft=10s")
    assert f.answer == json.loads(cli("serve", "--hw", "h100-sxm-8gpu", "--model", "llama-3-8b",
                                      "--trace", trace, "--find", "min-replicas", "--target",
                                      "p90-ttft=10s", "--json", "--quiet"))
    assert f.answer["found"] and f.summary["replicas"] == f.answer["answer"] == 3
    # The fewest devices over every tensor parallelism: the CLI's answer, whatif's too.
    dev = tierflow.serve(trace=trace, hw="h100-sxm-8gpu", model="llama-3-8b", find="min-devices",
                         target="p90-ttft=10s")
    assert dev.answer == json.loads(cli("serve", "--hw", "h100-sxm-8gpu", "--model", "llama-3-8b",
                                        "--trace", trace, "--find", "min-devices", "--target",
                                        "p90-ttft=10s", "--json", "--quiet"))
    with pytest.warns(UserWarning, match="span more positions"):  # serve()'s notes, warned
        assert dev.answer == tierflow.whatif("min-devices", hw="h100-sxm-8gpu", model="llama-3-8b",
                                             trace=trace, target="p90-ttft=10s")
    assert dev.answer["answer"] == dev.answer["tp"] * dev.answer["replicas"] <= 3
    assert (dev.summary["tp"], dev.summary["replicas"]) == (dev.answer["tp"],
                                                            dev.answer["replicas"])
    # One replica: the devices hold more, so one replica more is among the upgrades.
    up = tierflow.serve(trace=trace, hw="h100-sxm-8gpu", model="llama-3-8b", replicas=1,
                        find="upgrade", target="p90-ttft=10s")
    assert up.answer == json.loads(cli("serve", "--hw", "h100-sxm-8gpu", "--model", "llama-3-8b",
                                       "--replicas", "1",
                                       "--trace", trace, "--find", "upgrade", "--target",
                                       "p90-ttft=10s", "--json", "--quiet"))
    assert up.answer["question"] == "upgrade" and up.answer["answer"] == up.answer["upgrades"][0]["what"]
    # Bad arguments raise, named as Python's.
    with pytest.raises(tierflow.InputError, match="^find: needs target"):
        tierflow.serve(trace=trace, model="llama-3-8b", find="max-rate")
    with pytest.raises(tierflow.InputError, match="^target: needs find"):
        tierflow.serve(trace=trace, model="llama-3-8b", target="p99-ttft=2s")
    with pytest.raises(tierflow.InputError, match="^find: tier 'ddr' is not among kv_tiers"):
        tierflow.serve(trace=trace, model="llama-3-8b", find="min-capacity:ddr", target="hit=1%")
    with pytest.raises(tierflow.InputError, match="token_budget"):
        tierflow.serve(trace=trace, model="llama-3-8b", token_budget=0)
    with pytest.raises(tierflow.InputError, match="kv_tiers"):
        tierflow.serve(trace=trace, model="llama-3-8b", kv_tiers="ddr:fast")
    with pytest.raises(TypeError, match="arrivals"):
        tierflow.serve(model="llama-3-8b", arrival="poisson")
    with pytest.raises(tierflow.InputError, match="^trace: give a request trace .* or a generator "
                                                  r"\(arrivals SPEC, e.g. poisson,"):
        tierflow.serve(model="llama-3-8b")
    with pytest.raises(tierflow.InputError, match="^trace: give trace or arrivals, not both"):
        tierflow.serve(trace=trace, arrivals="poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2",
                       model="llama-3-8b")
    with pytest.raises(tierflow.InputError, match="^hf_config: give model or hf_config, not both"):
        tierflow.serve(trace=trace, model="llama-3-8b",
                       hf_config=os.path.join(ROOT, "tests", "fixtures", "hf", "llama.json"))


@pytest.mark.parametrize("key, value", [
    ("replicas", -1), ("tp", 5000), ("token_budget", 0), ("max_seqs", "2Mi"),
    ("block_tokens", 0), ("rate_scale", 0), ("rate_scale", "nan"), ("router", "fastest"),
    ("device_policy", "arc"), ("load", "after"), ("kv_dtype", "bf17"), ("warmup", "soon"),
    ("preemption", "evict"), ("swap_space", "8GiB"), ("swap_tier", "ddr"),
    ("rate_scale", "abc"), ("spec_tokens", 65), ("spec_accept", "abc"),
    # The engine's own refusals: more devices than the topology has, a tier it lacks.
    ("replicas", 100), ("kv_tiers", "cxl"),
    ("nodes", 0), ("nodes", 2000),
])
def test_serve_errors_are_the_cli_s(key, value):
    """A bad value is refused in one place, the study layer, for Python and the CLI alike:
    the same message, naming the keyword where the CLI names the flag."""
    trace = os.path.join(ROOT, "tests", "data", "serve", "mooncake_conversation_200.jsonl")
    with pytest.raises(tierflow.InputError) as raised:
        tierflow.serve(trace=trace, model="llama-3-8b", **{key: value})
    assert raised.value.file == key
    flag = "--" + key.replace("_", "-")
    binary = os.environ.get("TIERFLOW_BIN") or os.path.join(
        os.path.dirname(tierflow.__file__), "..", "..", "tools", "tierflow")
    result = subprocess.run([binary, "serve", "--model", "llama-3-8b", "--trace", trace, "--quiet",
                             flag, str(value)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    # The trace's requests pass llama-3-8b's max_context: a note comes before the error.
    errors = [line for line in result.stderr.splitlines() if not line.startswith("note: ")]
    assert errors[0] == f"error: {flag}: {raised.value.message}"


def test_whatif_service(cli):
    """A question about a service: the same answer as the CLI's whatif and serve(find=...)."""
    trace = os.path.join(ROOT, "tests", "data", "serve", "mooncake_conversation_200.jsonl")
    with pytest.warns(UserWarning, match="^109 of the 200 requests span more positions"):
        a = tierflow.whatif("max-rate", hw="h100-sxm-8gpu", model="llama-3-8b", trace=trace,
                            target="p90-ttft=10s", serve={"replicas": 2})
    assert a == json.loads(cli("whatif", "--question", "max-rate", "--hw", "h100-sxm-8gpu",
                               "--model", "llama-3-8b", "--trace", trace, "--target",
                               "p90-ttft=10s", "--serve", "replicas=2", "--json", "--quiet"))
    assert a["format"] == "tierflow.serve-answer/1" and a["found"]
    with pytest.raises(tierflow.InputError, match="^batch: describes a step"):
        tierflow.whatif("max-rate", model="llama-3-8b", trace=trace, target="p90-ttft=10s", batch=4)
    with pytest.raises(tierflow.InputError, match="^target: a service question needs"):
        tierflow.whatif("max-rate", model="llama-3-8b", trace=trace)
    # What the CLI notes on its standard error comes as a UserWarning: the TP it chose.
    with pytest.warns(UserWarning, match="^tp not given: TP 2, the least that leaves llama-3-70b room"):
        wide = tierflow.whatif("max-rate", hw="h100-sxm-8gpu", model="llama-3-70b",
                               arrivals="poisson,rate=2/s,n=20,prompt=fixed:512,output=fixed:8",
                               target="p99-ttft=10s")
    assert wide["run"]["tp"] == 2


def test_whatif(cli):
    answer = tierflow.whatif(**SMALL)
    assert answer["format"] == "tierflow.whatif/1" and answer["question"] == "min-memory"
    assert answer == json.loads(cli("whatif", "--json", *SMALL_FLAGS))
    (a,) = answer["answers"]
    assert a["found"] and a["plan"]["status"] == "ok" and a["probes"]
    grid = tierflow.whatif("max-batch", vary={"links.gpu-pcie.bandwidth": ["32GB/s", "64GB/s"]},
                           max_tpot=2.0, **SMALL)
    assert grid == json.loads(cli("whatif", "--json", "--question", "max-batch", "--max-tpot", "2",
                                  "--vary", "links.gpu-pcie.bandwidth=32GB/s,64GB/s", *SMALL_FLAGS))
    assert [x["vary"] for x in grid["answers"]] == [{"links.gpu-pcie.bandwidth": "32GB/s"},
                                                    {"links.gpu-pcie.bandwidth": "64GB/s"}]
    # A partial pin's tiers as pins= writes them (a comma): the CLI's '+' (it was split).
    pins = tierflow.whatif(vary={"pins": ["weight=hbm:0.5,ddr:0.5", "weight=ddr"]}, **SMALL)
    assert pins == json.loads(cli("whatif", "--json", "--vary", "pins=weight=hbm:0.5+ddr:0.5,weight=ddr",
                                  *SMALL_FLAGS))


def test_compare(cli):
    fields = dict(SMALL, budget="2GiB")
    frame = tierflow.compare(**fields)
    names = [p["name"] for p in tierflow.policies()]
    assert list(frame["policy"]) == names
    assert list(frame.columns) == list(tierflow.columns()["name"])
    assert str(frame["batch"].dtype) == "Int64" and str(frame["makespan_s"].dtype) == "float64"
    assert str(frame["decode_extrapolated"].dtype) == "boolean" and frame["policy"].dtype == object
    # Cell for cell the CLI's study rows.
    text = cli("compare", "--csv", *SMALL_FLAGS, "--budget", "2GiB")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(frame)
    for i, row in enumerate(rows):
        for name, value in row.items():
            cell = frame[name].iloc[i]
            if value == "":  # None where the cell is null, "" where the text is empty
                assert pd.isna(cell) or cell == "", (name, cell)
            elif frame[name].dtype == object:
                assert cell == value, name
            else:
                assert float(cell) == float(value) if value not in ("true", "false") else \
                    bool(cell) == (value == "true"), name
    assert frame.attrs["best"] == json.loads(
        cli("compare", "--json", *SMALL_FLAGS, "--budget", "2GiB"))["best"]
    assert frame.attrs["resident_reference_s"] > 0
    # MoE with the default realistic routing: both give each policy a realistic and an oracle
    # row, the same rows.
    moe = ["--model", "mixtral-8x7b", "--layers", "2", "--context", "512", "--tokens", "4",
           "--set", "tiers.hbm.capacity=4GB", "--policies", "reactive,tierflow"]
    frame = tierflow.compare(["reactive", "tierflow"], model="mixtral-8x7b", layers=2, context=512,
                             tokens=4, set=["tiers.hbm.capacity=4GB"])
    assert list(frame["routing"]) == ["realistic", "oracle", "realistic", "oracle"]
    rows = list(csv.DictReader(io.StringIO(cli("compare", "--csv", *moe))))
    assert [r["policy"] for r in rows] == list(frame["policy"])
    assert [r["routing"] for r in rows] == list(frame["routing"])
    assert [float(r["makespan_s"]) for r in rows] == [float(x) for x in frame["makespan_s"]]
    assert frame.attrs["best"] == json.loads(cli("compare", "--json", *moe))["best"]
    # The expert cache as a keyword: the CLI's rows, the counts typed.
    cached = tierflow.compare(["tierflow"], model="mixtral-8x7b", layers=2, context=512, tokens=4,
                              set=["tiers.hbm.capacity=4GB"], expert_cache="lru:2GiB")
    rows = list(csv.DictReader(io.StringIO(
        cli("compare", "--csv", *moe[:-2], "--policies", "tierflow", "--expert-cache", "lru:2GiB"))))
    assert list(cached["expert_cache"]) == ["lru:2GiB", "none"] == [r["expert_cache"] for r in rows]
    assert int(cached["routing_hits"][0]) == int(rows[0]["routing_hits"])
    assert int(cached["routing_hits"][0]) + int(cached["routing_misses"][0]) == 2 * 4 * 2
    with pytest.raises(tierflow.InputError, match="expert_cache: 'lru': the cache needs its size"):
        tierflow.compare(["tierflow"], model="mixtral-8x7b", layers=2, expert_cache="lru")
    # Attention on the host CPU as a keyword: the CLI's makespans.
    opt = ["--hw", "t4-flexgen", "--model", "opt-175b", "--layers", "2", "--context", "512",
           "--tokens", "2", "--batch", "8", "--kv-block", "8", "--weight-dtype", "fp16",
           "--act-dtype", "fp16", "--pin", "weight=ddr", "--pin", "kv=ddr", "--policies",
           "layerwise", "--on-host", "attention"]
    host = tierflow.compare(["layerwise"], hw="t4-flexgen", model="opt-175b", layers=2, context=512,
                            tokens=2, batch=8, kv_block=8, weight_dtype="fp16", act_dtype="fp16",
                            pins=["weight=ddr", "kv=ddr"], on_host="attention")
    rows = list(csv.DictReader(io.StringIO(cli("compare", "--csv", *opt))))
    assert [float(r["makespan_s"]) for r in rows] == [float(x) for x in host["makespan_s"]]
    device = tierflow.compare(["layerwise"], hw="t4-flexgen", model="opt-175b", layers=2,
                              context=512, tokens=2, batch=8, kv_block=8, weight_dtype="fp16",
                              act_dtype="fp16", pins=["weight=ddr", "kv=ddr"])
    assert float(host["makespan_s"][0]) < float(device["makespan_s"][0])
    with pytest.raises(tierflow.InputError, match="on_host: 'atention' is not an op kind"):
        tierflow.compare(["layerwise"], hw="t4-flexgen", model="opt-175b", layers=2, on_host="atention")
    # Selected policies and a request.
    two = tierflow.compare(["resident", "tierflow"], model="llama-3-8b", layers=2, prompt=64, generate=3)
    assert list(two["policy"]) == ["resident", "tierflow"]
    assert list(two["phase"]) == ["request", "request"] and two["ttft_ms"].notna().all()


SPEC = {
    "name": "api-test",
    "base": {"hw": "h100-sxm-8gpu", "model": "llama-3-8b", "layers": 2, "phase": "decode",
             "context": 1024, "tokens": 4, "tiers.hbm.capacity": "2GB", "devices.h100.reserved": "0B"},
    "axes": [{"batch": [1, 4]}, {"links.gpu-pcie.bandwidth": ["32GB/s", "64GB/s"]}],
}


def test_sweep(cli, tmp_path):
    frame = tierflow.sweep(SPEC, jobs=2)
    assert list(frame.columns[:3]) == ["point", "links.gpu-pcie.bandwidth", "exit_class"]
    assert list(frame.columns[3:]) == list(tierflow.columns()["name"])
    assert list(frame["point"]) == [0, 1, 2, 3]
    assert list(frame["batch"]) == [1, 1, 4, 4]
    assert list(frame["links.gpu-pcie.bandwidth"]) == ["32GB/s", "64GB/s"] * 2
    assert (frame["status"] == "ok").all() and (frame["exit_class"] == 0).all()
    summary = frame.attrs["sweep"]
    assert (summary["name"], summary["points"], summary["ran"], summary["ok"]) == ("api-test", 4, 4, 4)
    assert summary["noted"] == 0 and (frame["notes"] == "").all()
    # The same spec as a file through the CLI gives the same rows.
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(json.dumps(SPEC, indent=2))
    db = tmp_path / "cli.db"
    cli("sweep", str(spec_file), "-o", str(db), "--jobs", "2", "--quiet")
    lines = cli("sweep", "export", str(db), "--jsonl", "-").splitlines()
    expected = [json.loads(line) for line in lines]
    got = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
           for r in frame.astype(object).where(frame.notna(), None).to_dict("records")]
    assert got == expected
    # Recorded into a database, a rerun resumes: nothing runs again, the table is the same.
    path = tmp_path / "api.db"
    first = tierflow.sweep(str(spec_file), db=path, jobs=2)
    again = tierflow.sweep(spec_file, db=path)
    assert again.attrs["sweep"]["ran"] == 0 and again.attrs["sweep"]["skipped"] == 4
    pd.testing.assert_frame_equal(first, again)
    # YAML text, and one shard of two.
    text = "base: {model: llama-3-8b, layers: 2, tokens: 2, context: 512}\naxes:\n  - batch: [1, 2, 3]\n"
    half = tierflow.sweep(text, shard=(1, 2), jobs=1)
    # A context past the model's max_context is noted in its row.
    past = tierflow.sweep("base: {model: llama-2-7b, layers: 2, tokens: 2}\naxes:\n  - context: [1024, 8192]\n")
    assert past.attrs["sweep"]["noted"] == 1 and past["notes"][0] == ""
    assert "more than the 4096 that llama-2-7b declares" in past["notes"][1]
    assert list(half["point"]) == [1] and list(half["batch"]) == [2]


def test_serving_sweep(cli, tmp_path):
    """A serving sweep (kind: serve): its rows are the serving columns, typed, and equal
    the CLI's export of the same spec."""
    spec = {"name": "serve-api", "kind": "serve",
            "base": {"model": "llama-3-8b", "tiers.hbm.capacity": "19GiB", "slo": "ttft=2s",
                     "arrivals": "poisson,rate=20/s,n=40,prompt=uniform:512:4096,"
                                 "output=uniform:16:64,seed=5"},
            "axes": [{"preemption": ["recompute", "swap"]}, {"rate_scale": [0.5, 1]}]}
    frame = tierflow.sweep(spec, jobs=2)
    assert list(frame.columns[:2]) == ["point", "exit_class"]
    assert list(frame["preemption"]) == ["recompute", "recompute", "swap", "swap"]
    assert list(frame["rate_scale"]) == [0.5, 1.0, 0.5, 1.0]
    assert (frame["status"] == "ok").all()
    assert str(frame["requests"].dtype) == "Int64" and str(frame["ttft_p99_s"].dtype) == "float64"
    assert str(frame["cache_only"].dtype) == "boolean"
    assert (frame["requests"] == 40).all()
    # One point against tierflow.serve() with the same settings.
    one = tierflow.serve(arrivals=spec["base"]["arrivals"], model="llama-3-8b",
                         set=["tiers.hbm.capacity=19GiB"], slo="ttft=2s", preemption="swap",
                         rate_scale=1)
    assert frame["ttft_p99_s"][3] == pytest.approx(one.summary["ttft"]["p99_s"], rel=1e-9)
    spec_file = tmp_path / "serve.yaml"
    spec_file.write_text(json.dumps(spec, indent=2))
    db = tmp_path / "serve.db"
    cli("sweep", str(spec_file), "-o", str(db), "--quiet")
    lines = cli("sweep", "export", str(db), "--jsonl", "-").splitlines()
    expected = [json.loads(line) for line in lines]
    got = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
           for r in frame.astype(object).where(frame.notna(), None).to_dict("records")]
    assert got == expected


def test_sweep_errors(tmp_path):
    fixture = os.path.join(ROOT, "tests", "errors", "sweep", "02-unknown-field.yaml")
    line, col, message = expected_error(fixture)
    with pytest.raises(tierflow.InputError) as caught:
        tierflow.sweep(fixture)
    assert (caught.value.file, caught.value.line, caught.value.col) == (fixture, line, col)
    assert str(caught.value) == f"{fixture}:{line}:{col}: {message}"
    with pytest.raises(tierflow.InputError) as caught:
        tierflow.sweep("base: {model: llama-3-8b}\naxes:\n  - batch: [1, two]\n")
    assert (caught.value.file, caught.value.line, caught.value.col) == ("<spec>", 3, 16)
    with pytest.raises(tierflow.InputError, match="shard"):
        tierflow.sweep(SPEC, shard="2/2")


def test_long_calls_release_the_interpreter():
    """While plan() runs on another thread, this one keeps running Python."""
    topology = tierflow.load_topology("h100-sxm-8gpu")
    workload = tierflow.generate("llama-3.1-70b", batch=16, context=8192, tokens=8)
    spans = []

    def work():
        for _ in range(3):
            start = time.monotonic()
            tierflow.plan(topology, workload, budget="40GiB")
            spans.append((start, time.monotonic()))

    thread = threading.Thread(target=work)
    ticks = []
    thread.start()
    while thread.is_alive():
        ticks.append(time.monotonic())
    thread.join()
    assert sum(end - start for start, end in spans) > 0.2, "the calls are too short to tell"
    # A call that held the lock would leave no tick inside its span (the margins cover the
    # moments the worker runs Python around the call).
    inside = [t for t in ticks if any(start + 0.01 < t < end - 0.01 for start, end in spans)]
    assert len(inside) > 100


def test_import_without_pandas_names_what_to_install():
    """A Python without pandas fails at `import tierflow`, saying what to install, not at the
    first table with a bare ModuleNotFoundError."""
    code = ("import sys\n"
            "sys.modules['pandas'] = None  # as if it were not installed\n"
            "import tierflow\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ), timeout=120)
    assert r.returncode != 0
    assert "ImportError: tierflow needs pandas for its tables" in r.stderr, r.stderr
    assert "apt install python3-pandas" in r.stderr, r.stderr


def test_topology_is_what_was_read(cli, small_workload, tmp_path, monkeypatch):
    """A Topology is the machine its file held when it was read: after os.chdir it is the
    same file; after the file is edited, a call that would read it again refuses, and a plan
    saved from it names the hash of what was read (so the CLI refuses it as stale)."""
    binary = os.path.abspath(os.environ.get("TIERFLOW_BIN") or os.path.join(
        os.path.dirname(tierflow.__file__), "..", "..", "tools", "tierflow"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with open(H100) as f:
        text = f.read()
    (tmp_path / "a" / "t.yaml").write_text(text)
    (tmp_path / "b" / "t.yaml").write_text(text.replace("name: h100-sxm-8gpu", "name: other"))
    monkeypatch.chdir(tmp_path / "a")
    topo = tierflow.load_topology("t.yaml")
    p = tierflow.plan(topo, small_workload, budget="2GiB")
    monkeypatch.chdir(tmp_path / "b")
    assert topo.file == str(tmp_path / "a" / "t.yaml")
    rows = tierflow.compare(hw=topo, policies=["reactive"], **SMALL)
    assert list(rows["topology"]) == ["h100-sxm-8gpu"]
    with open(topo.file, "a") as f:
        f.write("# edited\n")
    with pytest.raises(tierflow.InputError, match="changed since load_topology read it"):
        tierflow.simulate(p, set=["description=x"])
    with pytest.raises(tierflow.InputError, match="changed since load_topology read it"):
        tierflow.compare(hw=topo, policies=["reactive"], **SMALL)
    p.save(tmp_path / "stale.json")
    r = subprocess.run([binary, "sim", "--plan", str(tmp_path / "stale.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "has changed since the plan was made" in r.stderr, r.stderr


def test_outputs_never_replace_inputs(small_workload, tmp_path):
    """No call writes over a file it reads, or the plan's own topology; an empty output path
    is refused; saves from several threads at once all land."""
    topo_file = tmp_path / "t.yaml"
    with open(H100) as f:
        topo_file.write_text(f.read())
    p = tierflow.plan(tierflow.load_topology(str(topo_file)), small_workload, budget="2GiB")
    plan_file = tmp_path / "p.json"
    p.save(plan_file)
    before = plan_file.read_bytes()
    for call in (lambda: tierflow.simulate(str(plan_file), timeline=str(plan_file)),
                 lambda: tierflow.replay(str(plan_file), timeline=str(plan_file)),
                 lambda: tierflow.simulate(p, timeline=str(topo_file)),
                 lambda: p.save(topo_file)):
        with pytest.raises(tierflow.InputError, match="refusing to write this output"):
            call()
    assert plan_file.read_bytes() == before
    with pytest.raises(tierflow.InputError, match="an empty path"):
        p.save("")
    with pytest.raises(tierflow.InputError, match="timeline: an empty path"):
        tierflow.simulate(p, timeline="")
    errors = []

    def save():
        try:
            for _ in range(10):
                p.save(tmp_path / "same.json")
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=save) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(os.listdir(tmp_path)) == ["p.json", "same.json", "t.yaml"]


def test_whatif_limits_are_the_cli_s(cli):
    """A limit the question does not use, or one that is not a finite number above 0, is
    refused as the CLI refuses it; max_tpot takes a duration as --max-tpot does."""
    for kw, message in [
            (dict(question="max-batch", max_tpot=0), "max_tpot: must be a finite number above 0"),
            (dict(question="max-batch", max_tpot=float("nan")), "max_tpot: must be a finite"),
            (dict(question="max-batch", min_throughput=0), "min_throughput: must be a finite"),
            (dict(question="max-batch", max_overhead="5%"), "max_overhead: applies to question min-memory"),
            (dict(max_tpot=50), "max_tpot: applies to question max-batch and max-context only"),
            (dict(question="max-batch", max_tpot="50 parsecs"), "max_tpot: "),
            (dict(pins=["weight=ddr;kv=ddr"]), "holds ';'"),
            (dict(vary={"batch": "1,4"}), "give its values as a list")]:
        with pytest.raises(tierflow.InputError, match=message.replace("(", r"\(")):
            tierflow.whatif(model="llama-3-8b", layers=2, **kw)
    # Read as --max-tpot reads it, by the same parser ("0.05s" is 50 ms).
    assert tierflow.whatif(question="max-batch", max_tpot="0.05s", **SMALL)["answers"] == \
        tierflow.whatif(question="max-batch", max_tpot=50, **SMALL)["answers"]
    got = tierflow.whatif(question="max-batch", max_tpot="50ms", **SMALL)
    want = json.loads(cli("whatif", "--question", "max-batch", "--max-tpot", "50ms", "--json",
                          *SMALL_FLAGS))
    assert got["answers"] == want["answers"]


def test_errors_name_the_arguments(small_workload):
    """Errors of plan() name its arguments, not the CLI's flags; a service question with the
    step question's default says which to give."""
    with pytest.raises(tierflow.InputError, match=r"^devices: 100 programs.*set=devices\.h100"):
        tierflow.plan("h100-sxm-8gpu", small_workload, devices=100)
    with pytest.raises(tierflow.InputError, match=r"^pins: 'weight=nosuch': no tier 'nosuch'"):
        tierflow.plan("h100-sxm-8gpu", small_workload, pins=["weight=nosuch"])
    with pytest.raises(tierflow.InputError, match="^question: a question about a service"):
        tierflow.whatif(arrivals="poisson,rate=5/s,n=3,prompt=fixed:10,output=fixed:2",
                        target="p99-ttft=1s")


def test_counts_out_of_range_are_input_errors(small_workload):
    """A count out of range is an InputError naming the argument, not pybind11's TypeError."""
    for kw in (dict(devices=-1), dict(devices=2**70), dict(threads=-1)):
        name = next(iter(kw))
        with pytest.raises(tierflow.InputError, match=f"^{name}: expected a whole number"):
            tierflow.plan("h100-sxm-8gpu", small_workload, **kw)
    with pytest.raises(tierflow.InputError, match="^jobs: expected a whole number"):
        tierflow.sweep(SPEC, jobs=-1)


def test_report_and_export_as_the_cli(cli, small_workload, tmp_path):
    """report() and export() are `tierflow report` and `tierflow export`: the same bytes on a
    plan file; a Plan gives the page and the formats without saving it first."""
    p = tierflow.plan("h100-sxm-8gpu", small_workload, budget="2GiB")
    path = tmp_path / "plan.json"
    p.save(path)
    page = tierflow.report(str(path), output=tmp_path / "mine.html")
    cli("report", str(path), "-o", str(tmp_path / "theirs.html"))
    assert page == (tmp_path / "mine.html").read_text()
    assert (tmp_path / "mine.html").read_bytes() == (tmp_path / "theirs.html").read_bytes()
    assert "<svg" in tierflow.report(p) and "<svg" in tierflow.report([p, str(path)])
    # Each format, from the file and from the Plan: the CLI's bytes.
    names = [f[0] for f in tierflow.export_formats()]
    assert "chakra" in names and "plan-json" in names and ("chakra", "folder") == tierflow.export_formats()[names.index("chakra")][:2]
    for fmt, kind, _ in tierflow.export_formats():
        if kind != "file":
            continue
        tierflow.export(str(path), fmt, tmp_path / f"mine.{fmt}")
        cli("export", "--plan", str(path), "--format", fmt, "-o", str(tmp_path / f"theirs.{fmt}"))
        assert (tmp_path / f"mine.{fmt}").read_bytes() == (tmp_path / f"theirs.{fmt}").read_bytes()
        if fmt != "plan-json":
            tierflow.export(p, fmt, tmp_path / f"obj.{fmt}")
            assert (tmp_path / f"obj.{fmt}").stat().st_size > 0
    # From a Plan, the same simulation as from its file.
    assert (json.loads((tmp_path / "obj.report-json").read_text())["makespan_ps"] ==
            json.loads((tmp_path / "mine.report-json").read_text())["makespan_ps"])
    tierflow.export(p, "chakra", tmp_path / "et", stem="step")
    assert sorted(os.listdir(tmp_path / "et")) == ["step.0.et"]
    # Another export's traces of the same stem beyond this plan's programs: kept, and named
    # in a warning as the CLI's note names them.
    for name in ("step.1.et", "step.2.et", "step.01.et", "other.1.et"):
        (tmp_path / "et" / name).write_text("an earlier trace")
    with pytest.warns(UserWarning, match=r"also holds step\.1\.et, step\.2\.et from another export: "
                      r"this plan has 1 program, and ASTRA-sim run on more NPUs would read them"):
        tierflow.export(p, "chakra", tmp_path / "et", stem="step")
    assert (tmp_path / "et" / "step.2.et").read_text() == "an earlier trace"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tierflow.export(p, "chakra", tmp_path / "et3", stem="step")  # an empty folder: none
    with pytest.raises(tierflow.InputError, match="^format: unknown format 'chakr'.*did you mean 'chakra'"):
        tierflow.export(p, "chakr", tmp_path / "x")
    with pytest.raises(tierflow.InputError, match="^format: 'plan-json' of a Plan is what Plan.save"):
        tierflow.export(p, "plan-json", tmp_path / "x.json")
    with pytest.raises(tierflow.InputError, match="^stem: 'a/b' is not a file name stem"):
        tierflow.export(p, "chakra", tmp_path / "et2", stem="a/b")
    # Never over an input: the plan file stays as it was.
    before = path.read_bytes()
    with pytest.raises(tierflow.InputError, match="input"):
        tierflow.export(str(path), "csv", path)
    with pytest.raises(tierflow.InputError, match="input"):
        tierflow.report(str(path), output=path)
    assert path.read_bytes() == before
    # A run that stops: the page draws it and warns; export writes nothing and raises.
    small = ["tiers.hbm.capacity=1GB", "devices.h100.reserved=0B"]
    with pytest.warns(UserWarning, match="capacity|full|does not fit|hbm"):
        assert "<svg" in tierflow.report(p, set=small)
    with pytest.raises(tierflow.SimulationError):
        tierflow.export(p, "csv", tmp_path / "none.csv", set=small)
    assert not (tmp_path / "none.csv").exists()
    with pytest.raises(tierflow.InputError, match="^plans: no plan"):
        tierflow.report([])


def test_serve_nodes(cli):
    """nodes= as --nodes: copies of the topology's host serving together."""
    arrivals = "poisson,rate=20/s,n=60,prompt=uniform:1024:4096,output=uniform:8:64,seed=9"
    r = tierflow.serve(arrivals=arrivals, model="llama-3-8b", nodes=2, tp=2, replicas=8)
    assert r.summary == json.loads(cli("serve", "--model", "llama-3-8b", "--nodes", "2", "--tp",
                                       "2", "--replicas", "8", "--quiet", "--arrivals", arrivals,
                                       "--json"))
    assert r.summary["nodes"] == 2 and r.summary["devices"] == 16
    assert len(r.replicas) == 8
    # Copies of a supernode are supernodes of their own (each CloudMatrix384 its pool).
    c = tierflow.serve(arrivals=arrivals, model="llama-3-8b", hw="cloudmatrix384", nodes=2,
                       tp=32, kv_tiers="pool:1TB")
    assert c.summary["nodes"] == 2 and c.summary["class_devices"] == 768
    assert [n for n in c.levels["name"] if n.startswith("pool")] == ["pool[0]", "pool[1]"]
    # Two supernodes that do not take the hosts evenly: named as Python names the settings.
    with pytest.raises(tierflow.InputError, match="system: 48 hosts do not divide evenly over 5 supernodes"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", hw="cloudmatrix384",
                       set=["system.supernodes=5"])


def test_serve_pipeline(cli):
    """pp= as --pp: pipeline stages; neither tp nor pp given, the least stages that fit."""
    arrivals = "poisson,rate=1/s,n=30,prompt=uniform:1024:4096,output=uniform:8:64,seed=9"
    r = tierflow.serve(arrivals=arrivals, model="llama-3.1-405b", nodes=2)
    assert r.summary == json.loads(cli("serve", "--model", "llama-3.1-405b", "--nodes", "2",
                                       "--quiet", "--arrivals", arrivals, "--json"))
    assert (r.summary["tp"], r.summary["pp"], r.summary["devices"]) == (8, 2, 16)
    assert any("2 pipeline stages of TP 8" in n for n in r.notes)
    g = tierflow.serve(arrivals=arrivals, model="llama-3-8b", tp=2, pp=2)
    assert (g.summary["pp"], g.summary["replicas"]) == (2, 2)
    assert tierflow.serve(arrivals=arrivals, model="llama-3-8b", tp=2, pp=0).summary["pp"] == 1
    with pytest.raises(tierflow.InputError, match="^pp: pipeline parallelism is modelled without speculative"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", tp=2, pp=2, spec_tokens=2,
                       spec_accept=0.5)
    # One node holds no TP of it: the error says how many nodes would, as Python names them.
    with pytest.raises(tierflow.InputError, match=r"or 2 nodes \(nodes=2\) serve it in 2 pipeline stages of TP 8"):
        tierflow.serve(arrivals=arrivals, model="llama-3.1-405b")
    with pytest.raises(tierflow.InputError, match="pp: '2.5' is not a whole number"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", pp=2.5)


def test_serve_tp_across_nodes(cli):
    """tp= wider than a node: the group spans both, its all-reduces over their network."""
    arrivals = "poisson,rate=2/s,n=20,prompt=uniform:1024:4096,output=uniform:8:64,seed=9"
    r = tierflow.serve(arrivals=arrivals, model="llama-3.1-405b", nodes=2, tp=16)
    assert r.summary == json.loads(cli("serve", "--model", "llama-3.1-405b", "--nodes", "2",
                                       "--tp", "16", "--quiet", "--arrivals", arrivals, "--json"))
    assert (r.summary["tp"], r.summary["tp_domains"], r.summary["pp"]) == (16, 2, 1)
    assert r.summary["collective_bytes_per_s"] == pytest.approx(8 * 47e9)
    # Not given, the TP chosen stays within a node and stages go across.
    auto = tierflow.serve(arrivals=arrivals, model="llama-3.1-405b", nodes=2)
    assert (auto.summary["tp"], auto.summary["tp_domains"], auto.summary["pp"]) == (8, 1, 2)


def test_serve_disaggregated_across_nodes(cli):
    """Prefill on one node, decode on the other: the KV crosses the GPUs' NICs, as the CLI's."""
    arrivals = "poisson,rate=10/s,n=40,prompt=uniform:1024:4096,output=uniform:8:64,seed=9"
    args = dict(arrivals=arrivals, model="llama-3-8b", tp=2, prefill_replicas=4, replicas=4)
    r = tierflow.serve(nodes=2, **args)
    assert r.summary == json.loads(cli("serve", "--model", "llama-3-8b", "--nodes", "2", "--tp",
                                       "2", "--prefill-replicas", "4", "--replicas", "4",
                                       "--quiet", "--arrivals", arrivals, "--json"))
    assert r.summary["handoffs"] == 40
    over = {e["name"]: e["bytes"] for e in r.summary["resources"]}
    assert over["nic[0] rc->ib"] > 0 and over["nic[8] ib->rc"] > 0
    assert not any(name.startswith("nvlink") for name in over)
    # The same 16 GPUs behind one NVSwitch hand over faster.
    one = tierflow.serve(set=["devices.h100.count=16"], **args)
    assert (r.requests["handoff_s"].median() > 4 * one.requests["handoff_s"].median())


def test_serve_disaggregated(cli, tmp_path):
    arrivals = "poisson,rate=2/s,n=40,prompt=uniform:1024:4096,output=uniform:8:64,seed=9"
    r = tierflow.serve(arrivals=arrivals, model="llama-3-8b", prefill_replicas=1, replicas=2)
    flags = ["--model", "llama-3-8b", "--prefill-replicas", "1", "--replicas", "2", "--quiet",
             "--arrivals", arrivals]
    assert r.summary == json.loads(cli("serve", *flags, "--json"))
    cli("serve", *flags, "-o", str(tmp_path / "req.csv"))
    assert r.requests.equals(pd.read_csv(tmp_path / "req.csv"))
    assert r.summary["handoffs"] == 40 and set(r.requests["decode_replica"]) == {1, 2}
    assert (r.requests["handoff_s"] > 0).all()
    wide = tierflow.serve(arrivals=arrivals, model="llama-3-8b", prefill_replicas=1, prefill_tp=2)
    assert (wide.summary["prefill_tp"], wide.summary["tp"]) == (2, 1)
    with pytest.raises(tierflow.InputError, match="prefill_tp: the prefill replicas' tensor"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", prefill_tp=2)
    with pytest.raises(tierflow.InputError, match="prefill_replicas: 5 prefill and 4 decode"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", prefill_replicas=5, replicas=4)
    # The decode router, as --decode-router: in turn, the 40 hand-overs alternate.
    turn = tierflow.serve(arrivals=arrivals, model="llama-3-8b", prefill_replicas=1, replicas=2,
                          decode_router="round-robin")
    assert r.summary["decode_router"] == "least-loaded"
    assert turn.summary["decode_router"] == "round-robin"
    assert (turn.requests["decode_replica"].value_counts() == 20).all()
    with pytest.raises(tierflow.InputError, match="decode_router: how a decode replica"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", decode_router="prefix")
    with pytest.raises(tierflow.InputError, match="decode_router: kv-aware weighs the prompt"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", prefill_replicas=1,
                       decode_router="kv-aware")
    # Speculative decoding, as --spec-tokens, --spec-accept and --spec-draft.
    spec = tierflow.serve(arrivals=arrivals, model="llama-3-8b", spec_tokens=3, spec_accept=0.6,
                          spec_draft="llama-3-8b")
    assert spec.summary == json.loads(cli("serve", "--model", "llama-3-8b", "--quiet", "--arrivals",
                                          arrivals, "--spec-tokens", "3", "--spec-accept", "0.6",
                                          "--spec-draft", "llama-3-8b", "--json"))
    assert spec.summary["spec"]["draft"] == "llama-3-8b" and spec.summary["spec"]["steps"] > 0
    with pytest.raises(tierflow.InputError, match="^spec_accept: an acceptance probability needs"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", spec_accept=0.6)
    # The request router, named in the summary as the CLI's JSON names it.
    assert r.summary["router"] == "round-robin"
    kv = tierflow.serve(arrivals=arrivals, model="llama-3-8b", replicas=2, router="kv-aware")
    assert kv.summary["router"] == "kv-aware"
    assert kv.summary == json.loads(cli("serve", "--model", "llama-3-8b", "--quiet", "--arrivals",
                                        arrivals, "--replicas", "2", "--router", "kv-aware",
                                        "--json"))
    # How to split three replicas, as serve --find split and whatif answer it.
    split = tierflow.serve(arrivals=arrivals, model="llama-3-8b", replicas=3, find="split",
                           target="p99-tpot=1s")
    assert split.answer["question"] == "split" and split.answer["replicas"] == 3
    assert [p["knob"] for p in split.answer["probes"]] == [0, 1, 2]
    assert split.answer == tierflow.whatif(question="split", arrivals=arrivals, model="llama-3-8b",
                                           target="p99-tpot=1s", serve={"replicas": 3})
    assert split.answer == json.loads(cli("serve", "--model", "llama-3-8b", "--quiet", "--arrivals",
                                          arrivals, "--replicas", "3", "--find", "split",
                                          "--target", "p99-tpot=1s", "--json"))


def test_serve_report_as_the_cli(cli, tmp_path):
    """serve(report=...) writes the page `serve --report` writes, byte for byte."""
    arrivals = "poisson,rate=2/s,n=20,prompt=fixed:512,output=fixed:8,seed=3"
    tierflow.serve(arrivals=arrivals, model="llama-3-8b", report=tmp_path / "mine.html")
    cli("serve", "--arrivals", arrivals, "--model", "llama-3-8b", "--quiet",
        "--report", str(tmp_path / "theirs.html"))
    assert (tmp_path / "mine.html").read_bytes() == (tmp_path / "theirs.html").read_bytes()
    assert "<svg" in (tmp_path / "mine.html").read_text()
    with pytest.raises(tierflow.InputError, match="^report: an empty path"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", report="")
    with pytest.raises(tierflow.InputError, match="names the same file"):
        tierflow.serve(arrivals=arrivals, model="llama-3-8b", report=tmp_path / "a.html",
                       timeline=tmp_path / "a.html")
