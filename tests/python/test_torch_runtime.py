"""The PyTorch runtime (tools/python/tierflow_torch) on CPU: plans made by the tierflow CLI
for models exported by tools/python/tierflow_export run on those models with the device memory
tracked. Checked against independent sources: the un-offloaded model's outputs (exact
equality, same dtype), the plan file's own order of cache steps, and the device-tier peak
of `tierflow sim --json` on the same plan.

Run by CTest as python/torch_runtime, with TIERFLOW_BIN at the build's CLI; without a CLI
(TIERFLOW_BIN unset and no build/test or build/release in this tree) the tests skip.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, config_path

sys.path.insert(0, os.path.join(ROOT, "tools", "python"))

import tierflow_torch  # noqa: E402
from tierflow_torch.runner import MARK_SAMPLES, find_tierflow, text  # noqa: E402

H100 = os.path.join(ROOT, "configs", "hw", "h100-sxm-8gpu.yaml")
# The exported Llama computes its masks and positions in integer types, which the shipped
# topologies give no rate for (those ops have no FLOPs; the rate only has to exist).
LLAMA = config_path("llama")
SEQ = 8


@pytest.fixture(scope="session")
def tierflow_cli():
    binary = find_tierflow()
    if binary is None:
        pytest.skip("no tierflow CLI: set TIERFLOW_BIN or build build/test/tools/tierflow")

    def run(*args):
        result = subprocess.run([binary] + list(args), capture_output=True, text=True,
                                cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stderr
        return result.stdout

    run.binary = binary
    return run


def make_plan(cli, workload, policy, budget, out, extra=()):
    cli("plan", "--hw", H100, *extra, "--workload", workload, "--devices", "1", "--budget",
        budget, "--policy", policy, "-o", str(out))
    return str(out)


def sim_peak(cli, plan_path):
    """The simulator's device-tier peak (tiers[] of the report, docs/cli.md)."""
    with open(plan_path, encoding="utf-8") as f:
        device_tier = json.load(f)["device_tier"]
    report = json.loads(cli("sim", "--plan", plan_path, "--json"))
    peaks = [t["peak"] for t in report["tiers"] if t["tier"] == device_tier]
    assert peaks, report["tiers"]
    return peaks[0]


def plan_cache_steps(plan_path):
    with open(plan_path, encoding="utf-8") as f:
        steps = json.load(f)["programs"][0]["steps"]
    order = []
    for i, s in enumerate(steps):
        for kind in ("prefetch", "store", "detach"):
            if kind in s:
                order.append([i, kind, s[kind]])
    return order


def weight_bytes(workload):
    with open(workload, encoding="utf-8") as f:
        return sum(t["bytes"] for t in json.load(f)["tensors"] if t["kind"] == "weight")


def check_report(report, plan_path, cli):
    assert report["check"]["ok"], json.dumps(report["check"], indent=1)[:3000]
    for row in report["check"]["outputs"]:
        assert row["equal"], row
    assert report["executed_cache_steps"] == plan_cache_steps(plan_path)
    assert report["cache_steps_in_plan_order"]
    peak = sim_peak(cli, plan_path)
    assert report["device_bytes"]["predicted_peak"] == peak
    assert 0 < report["device_bytes"]["tracked_peak"] <= peak
    assert report["steps"]["executed"] == sum(report["steps"][k] for k in
                                              ("compute", "prefetch", "store", "detach"))


@pytest.fixture(scope="session")
def llama_workload(exports):
    return exports.path("--hf-config", LLAMA, "--seq", str(SEQ))


# Budgets below the weights (185 KiB): layerwise streams every layer's weights and needs
# about 172 KiB; tierflow fits 128 KiB.
@pytest.mark.parametrize("policy, budget", [("layerwise", "180KiB"), ("tierflow", "128KiB")])
def test_llama_prefill(tierflow_cli, llama_workload, tmp_path, policy, budget):
    plan = make_plan(tierflow_cli, llama_workload, policy, budget, tmp_path / "plan.json")
    assert int(budget[:-3]) * 1024 < weight_bytes(llama_workload)
    report = tierflow_torch.run(plan, {"hf_config": LLAMA, "seq": SEQ}, check=True,
                                tierflow=tierflow_cli.binary)
    check_report(report, plan, tierflow_cli)
    assert report["steps"]["prefetch"] > 0  # weights do move
    out = report["check"]["outputs"][0]
    assert out["dtype"] == "bfloat16" and out["shape"] == [1, SEQ, 128]


# The other families the exporter knows: Mistral's sliding-window mask (or'ed in place on
# booleans), Qwen2's biases, Mixtral's router and experts (an element of topk's result read
# alone: its values, not its indices). Budgets at three quarters of the weights.
@pytest.mark.parametrize("family", ["mistral", "qwen2", "mixtral"])
def test_other_families_prefill(tierflow_cli, exports, tmp_path, family):
    workload = exports.path("--hf-config", config_path(family), "--seq", str(SEQ))
    budget = f"{weight_bytes(workload) * 3 // 4 // 1024}KiB"
    plan = make_plan(tierflow_cli, workload, "tierflow", budget, tmp_path / "plan.json")
    report = tierflow_torch.run(plan, {"hf_config": config_path(family), "seq": SEQ},
                                check=True, tierflow=tierflow_cli.binary)
    check_report(report, plan, tierflow_cli)
    assert report["steps"]["prefetch"] > 0


# Training steps whose weights, gradients and AdamW states move. In the Llama and Mistral
# plans the embedding table is fetched back for its AdamW step before the embedding's wgrad
# runs, which autograd (torch 1.13) hands the table for its size alone, and which does not
# wait for that fetch: the runtime gives it a meta stand-in instead of recomputing the
# forward from a table the plan has not waited for.
@pytest.mark.parametrize("family, budget", [("llama", "512KiB"), ("mistral", "600KiB"),
                                            ("qwen2", "600KiB")])
def test_training_steps(tierflow_cli, exports, tmp_path, family, budget):
    workload = exports.path("--hf-config", config_path(family), "--seq", "16", "--train")
    plan = make_plan(tierflow_cli, workload, "tierflow", budget, tmp_path / "plan.json")
    report = tierflow_torch.run(plan, {"hf_config": config_path(family), "seq": 16},
                                check=True, tierflow=tierflow_cli.binary)
    check_report(report, plan, tierflow_cli)
    assert report["steps"]["prefetch"] > 0 and report["steps"]["store"] > 0
    assert report["check"]["loss"]["equal"]
    assert report["saved_tensors"]["meta_operands"] > 0


def test_moe_training_refused(tierflow_cli, exports, tmp_path):
    """Mixtral's training step adds each expert's output into one buffer in place, a value
    that needs a gradient: refused before any step runs (exit 2, naming the op), never a
    traceback."""
    workload = exports.path("--hf-config", config_path("mixtral"), "--seq", str(SEQ),
                            "--train")
    plan = make_plan(tierflow_cli, workload, "tierflow", "2MiB", tmp_path / "plan.json")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools", "python"),
               TIERFLOW_BIN=tierflow_cli.binary)
    result = subprocess.run([sys.executable, "-m", "tierflow_torch", "run", "--plan", plan,
                             "--hf-config", config_path("mixtral"), "--check"],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: 'model.layers.0.block_sparse_moe.index_add_")
    assert "updates 'model.layers.0.block_sparse_moe.zeros' in place" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_json(tierflow_cli, llama_workload, tmp_path):
    plan = make_plan(tierflow_cli, llama_workload, "tierflow", "128KiB", tmp_path / "plan.json")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools", "python"),
               TIERFLOW_BIN=tierflow_cli.binary)
    result = subprocess.run([sys.executable, "-m", "tierflow_torch", "run", "--plan", plan,
                             "--hf-config", LLAMA, "--check", "--json"], capture_output=True,
                            text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == "tierflow.torch_run/1" and report["ok"]
    assert report["device"] == "cpu" and report["policy"] == "tierflow"
    check_report(report, plan, tierflow_cli)
    text = subprocess.run([sys.executable, "-m", "tierflow_torch", "run", "--plan", plan,
                           "--hf-config", LLAMA, "--check"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert text.returncode == 0, text.stderr
    assert "cache steps in plan order: yes" in text.stdout
    assert "within the prediction" in text.stdout and "check        ok" in text.stdout


def test_vit_training_step(tierflow_cli, exports, tmp_path):
    """ViT-B/16 (224 x 224, batch 1) training step planned into 64 MiB: weights, gradients,
    optimizer state and saved activations all move. Loss, every updated weight and every
    AdamW state must equal the un-offloaded step's (autograd + torch.optim.AdamW)."""
    workload = exports.path("--torchvision", "vit_b_16", "--batch", "1", "--train")
    plan = make_plan(tierflow_cli, workload, "tierflow", "64MiB", tmp_path / "plan.json")
    with open(workload, encoding="utf-8") as f:
        kinds = [t["kind"] for t in json.load(f)["tensors"]]
    moved = {kinds[s[2]] for s in plan_cache_steps(plan) if s[1] == "prefetch"}
    assert {"weight", "activation", "optimizer_state"} <= moved, moved
    report = tierflow_torch.run(plan, {"torchvision": "vit_b_16"}, check=True,
                                tierflow=tierflow_cli.binary)
    check_report(report, plan, tierflow_cli)
    check = report["check"]
    assert check["loss"]["equal"]
    assert check["weights"]["equal"] == check["weights"]["of"] == 152
    assert check["optimizer_states"]["equal"] == check["optimizer_states"]["of"] == 304
    assert report["phase"] == "train"


# -- errors -------------------------------------------------------------------------------

def broken_plan(plan_path, out, edit):
    with open(plan_path, encoding="utf-8") as f:
        doc = json.load(f)
    with open(doc["workload"]["file"] if os.path.isabs(doc["workload"]["file"]) else
              os.path.join(os.path.dirname(plan_path), doc["workload"]["file"]),
              encoding="utf-8") as f:
        workload = json.load(f)
    doc["workload"] = {"inline": workload}  # the hand edit changes no workload byte
    message = edit(doc["programs"][0]["steps"], workload)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return str(out), message


def test_input_detached_before_use(tierflow_cli, llama_workload, tmp_path):
    plan = make_plan(tierflow_cli, llama_workload, "layerwise", "180KiB",
                     tmp_path / "plan.json")

    def edit(steps, workload):
        # Detach q_proj's input (the normed activation) just before q_proj computes.
        op = [o for o in workload["ops"] if o["name"] == "model.layers.0.self_attn.q_proj"][0]
        i = [k for k, s in enumerate(steps) if s.get("compute") == op["id"]][0]
        steps.insert(i, {"detach": op["inputs"][0]})
        return (f"step {i + 1} (compute 'model.layers.0.self_attn.q_proj'): "
                f"'model.layers.0.input_layernorm' (an input of "
                f"'model.layers.0.self_attn.q_proj') is not on the device; step {i} "
                "detached it")

    bad, message = broken_plan(plan, tmp_path / "bad.json", edit)
    with pytest.raises(tierflow_torch.PlanError) as e:
        tierflow_torch.run(bad, {"hf_config": LLAMA, "seq": SEQ}, tierflow=tierflow_cli.binary)
    assert str(e.value) == message
    # The CLI: exit 2 and the same message on one line.
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools", "python"))
    result = subprocess.run([sys.executable, "-m", "tierflow_torch", "run", "--plan", bad,
                             "--hf-config", LLAMA], capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=600)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {message}"


def test_prefetch_not_waited(tierflow_cli, llama_workload, tmp_path):
    plan = make_plan(tierflow_cli, llama_workload, "layerwise", "180KiB",
                     tmp_path / "plan.json")

    def edit(steps, workload):
        # The first compute step that waits on a prefetch no longer waits.
        i = [k for k, s in enumerate(steps) if "compute" in s and s.get("wait")][0]
        event = steps[i]["wait"][0]
        del steps[i]["wait"]
        j = [k for k, s in enumerate(steps) if s.get("event") == event][0]
        name = workload["ops"][steps[i]["compute"]]["name"]
        tensor = workload["tensors"][steps[j]["prefetch"]]["name"]
        return (f"step {i} (compute '{name}'): reads '{tensor}' before waiting on the event "
                f"of step {j} that prefetches it")

    bad, message = broken_plan(plan, tmp_path / "bad.json", edit)
    with pytest.raises(tierflow_torch.PlanError) as e:
        tierflow_torch.run(bad, {"hf_config": LLAMA, "seq": SEQ}, tierflow=tierflow_cli.binary)
    assert str(e.value) == message


def test_model_must_match_workload(tierflow_cli, llama_workload, tmp_path):
    plan = make_plan(tierflow_cli, llama_workload, "tierflow", "128KiB", tmp_path / "plan.json")
    with pytest.raises(tierflow_torch.InputError, match="the plan's workload is not this "
                       "model's export"):
        tierflow_torch.run(plan, {"hf_config": LLAMA, "seq": SEQ + 1},
                           tierflow=tierflow_cli.binary)


def test_host_steps_refused(tmp_path):
    """A plan that computes on the host (tierflow.plan/3) is refused before anything loads."""
    plan = tmp_path / "host.json"
    plan.write_text(json.dumps({"format": "tierflow.plan/3"}))
    with pytest.raises(tierflow_torch.InputError, match=r"computes on the host \(tierflow"
                       r"\.plan/3\), which this runtime does not run yet"):
        tierflow_torch.plan.load_plan(str(plan))


def anchors(plan):
    """The anchor events a plain run records on the compute stream: one before each copy
    that follows compute steps no earlier copy followed (a run of compute steps with no copy
    between them needs only its last one's)."""
    count, stale = 0, False
    for step in tierflow_torch.plan.load_plan(str(plan)).steps:
        if step.kind == "compute":
            stale = True
        elif step.kind in ("prefetch", "store") and stale:
            count, stale = count + 1, False
    return count


def test_cuda_profile_marks(tierflow_cli, exports, tmp_path):
    """--profile on the CUDA path (the stand-in): one timing mark before each compute step's
    kernels and each copy, on the step's own stream, and an anchor event after every compute
    step (its end mark; a plain run records one only where a copy follows); every executed
    step has its host interval, and every compute step, prefetch and store its stream
    interval."""
    plan = make_plan(tierflow_cli, exports.path("--hf-config", LLAMA, "--seq", str(SEQ)),
                     "tierflow", "128KiB", tmp_path / "plan.json")
    script = os.path.join(ROOT, "tests", "python", "cuda_stand_in.py")

    def stand_in(*extra):
        result = subprocess.run([sys.executable, script, plan, json.dumps({"hf_config": LLAMA}),
                                 tierflow_cli.binary, *extra], capture_output=True, text=True,
                                cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    plain, profiled = stand_in(), stand_in("profile")
    assert plain["profile"] is None and profiled["ok"]
    steps, before, after = profiled["steps"], plain["calls"], profiled["calls"]
    # After the run, MARK_SAMPLES more on the compute stream time one mark's host cost.
    ends = profiled["steps"]["compute"] - anchors(plan)
    for stream, kind, extra in (("compute", "compute", MARK_SAMPLES + ends),
                                ("h2d", "prefetch", 0), ("d2h", "store", 0)):
        key = f"event on {stream}"
        assert after.get(key, 0) == before.get(key, 0) + steps[kind] + extra, key
    assert steps["prefetch"] > 0
    rows = profiled["profile"]["steps"]
    assert len(rows) == steps["executed"]
    for r in rows:
        assert 0 <= r["host_begin_us"] <= r["host_end_us"]
        timed = r["kind"] in ("compute", "prefetch", "store")
        assert (r["stream_begin_us"] is not None) == timed, r
    totals = profiled["profile"]["totals"]
    assert {k: t["steps"] for k, t in totals.items()} == \
        {k: steps[k] for k in ("compute", "prefetch", "store", "detach") if steps[k]}


def test_cpu_profile(tierflow_cli, llama_workload, tmp_path):
    """--profile on the CPU: host intervals in step order, no stream intervals."""
    plan = make_plan(tierflow_cli, llama_workload, "tierflow", "128KiB", tmp_path / "plan.json")
    report = tierflow_torch.run(plan, {"hf_config": LLAMA, "seq": SEQ}, check=True,
                                tierflow=tierflow_cli.binary, profile=True)
    assert report["ok"]
    rows = report["profile"]["steps"]
    assert len(rows) == report["steps"]["executed"]
    assert [r["step"] for r in rows] == sorted({r["step"] for r in rows})
    ends = [r["host_end_us"] for r in rows]
    assert ends == sorted(ends) and all(r["stream_begin_us"] is None for r in rows)
    assert "profile      compute:" in text(report)


def test_cuda_path_bookkeeping(tierflow_cli, exports, tmp_path):
    """The CUDA path's bookkeeping on a stand-in for torch.cuda (cuda_stand_in.py: streams
    and events that count their calls, tensors on the CPU). Not a GPU test: it checks that
    every prefetch records its event on the host-to-device stream and marks its tensor for
    the compute stream, every store the same on the device-to-host stream, the compute
    stream records an anchor event before each copy that follows compute steps (no more),
    and the results still equal the un-offloaded run."""
    workload = exports.path("--hf-config", LLAMA, "--seq", str(SEQ), "--train")
    plan = make_plan(tierflow_cli, workload, "tierflow", "600KiB", tmp_path / "plan.json")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "python",
                                                          "cuda_stand_in.py"),
                             plan, json.dumps({"hf_config": LLAMA}), tierflow_cli.binary],
                            capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    steps, calls = summary["steps"], summary["calls"]
    assert summary["ok"] and summary["device"] == "cuda"
    assert steps["prefetch"] > 0 and steps["store"] > 0
    assert calls["event on h2d"] == calls["record_stream compute"] == steps["prefetch"]
    assert calls["event on d2h"] == calls["record_stream d2h"] == steps["store"]
    assert 0 < anchors(plan) < steps["compute"]
    assert calls["event on compute"] == anchors(plan) + 2  # and the start and the end
    assert calls["h2d waits"] >= steps["prefetch"]  # each at least on its anchor
    assert calls["d2h waits"] >= steps["store"]


def test_calibrate_dispatch(tmp_path):
    """`calibrate` turns a profiled run into the topology's dispatch fields: the mean host
    time per kind of step, less one profile mark for compute steps and copies."""
    report = {"format": "tierflow.torch_run/1", "device": "cuda", "plan": "p",
              "profile": {"mark_host_us": 10.0, "steps": [], "totals": {
                  "compute": {"steps": 4, "host_us": 840.0, "stream_us": 700.0},
                  "prefetch": {"steps": 1, "host_us": 250.0, "stream_us": 50.0},
                  "store": {"steps": 1, "host_us": 290.0, "stream_us": 50.0},
                  "detach": {"steps": 5, "host_us": 100.0, "stream_us": 0.0}}}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(report))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools", "python"))
    out = subprocess.run([sys.executable, "-m", "tierflow_torch", "calibrate", "--profile",
                          str(path), "--device", "gpu", "--json"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["sets"] == ["devices.gpu.dispatch_compute=200000ns",
                              "devices.gpu.dispatch_copy=260000ns",
                              "devices.gpu.dispatch_detach=20000ns"]
    text = subprocess.run([sys.executable, "-m", "tierflow_torch", "calibrate", "--profile",
                           str(path)], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)
    assert "--set devices.dev.dispatch_compute=200000ns" in text.stdout
    # A run without --profile, or not a run report at all: exit 2 naming the file.
    del report["profile"]
    path.write_text(json.dumps(report))
    bad = subprocess.run([sys.executable, "-m", "tierflow_torch", "calibrate", "--profile",
                          str(path)], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=60)
    assert bad.returncode == 2 and "was not profiled" in bad.stderr
    path.write_text("{")
    bad = subprocess.run([sys.executable, "-m", "tierflow_torch", "calibrate", "--profile",
                          str(path)], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=60)
    assert bad.returncode == 2 and f"{path}:1:2:" in bad.stderr


def test_dispatch_predicts_a_host_bound_run(tierflow_cli, llama_workload, tmp_path):
    """On the CPU the runtime computes on its host thread: a plan simulated with the dispatch
    calibrated from a profiled run of it predicts that run's host time within 25% (a
    functional check of the loop profile -> calibrate -> plan; the GPU's numbers are in
    docs/validation.md)."""
    plan = make_plan(tierflow_cli, llama_workload, "tierflow", "128KiB", tmp_path / "plan.json")
    report = tierflow_torch.run(plan, {"hf_config": LLAMA, "seq": SEQ}, check=True,
                                tierflow=tierflow_cli.binary, profile=True)
    (tmp_path / "run.json").write_text(json.dumps(report))
    from tierflow_torch import calibrate
    result = calibrate.calibrate(str(tmp_path / "run.json"), device="h100")
    sets = [a for s in result["sets"] for a in ("--set", s)]
    sim = subprocess.run([tierflow_cli.binary, "sim", "--plan", plan, *sets, "--json"],
                         capture_output=True, text=True, timeout=600)
    assert sim.returncode == 0, sim.stderr
    predicted = json.loads(sim.stdout)["makespan_ps"] / 1e6
    host = report["profile"]["steps"][-1]["host_end_us"]
    assert predicted == pytest.approx(host, rel=0.25)


def test_host_time_bench(tierflow_cli):
    """bench/torch_runtime_bench.py (run on demand) still runs: its plan checks equal to the
    un-offloaded model and it reports a host time for every kind of step the plan has."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "torch_runtime_bench.py"),
                             "--layers", "2", "--reps", "2", "--budget", "256KiB", "--tierflow",
                             tierflow_cli.binary, "--json"], capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    steps = report["steps"]
    kinds = {k for k in ("compute", "prefetch", "store", "detach") if steps[k]}
    assert {"compute", "prefetch", "detach"} <= kinds
    assert set(report["host_us_per_step"]) == kinds
    assert all(v > 0 for v in report["host_us_per_step"].values())
    assert report["reference_us_per_op"] > 0 and report["ops"] == steps["compute"]
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "torch_runtime_bench.py"),
                          "--reps", "0"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "--reps must be at least 1, got 0" in bad.stderr


def test_module_slots():
    """A module runs with the plan's tensors set in its own parameter and buffer tables
    (owner's table and key per name, nested names included); a parametrized module has no
    such slots and takes functional_call."""
    import torch
    from torch.nn.utils import parametrize
    from tierflow_torch.executor import Executor
    slots = Executor.module_slots.__get__(object.__new__(Executor))
    block = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    found = slots(block, {"0.weight": 1, "1.running_mean": 2})
    assert [(id(table), key) for table, key in found] == \
        [(id(block[0]._parameters), "weight"), (id(block[1]._buffers), "running_mean")]
    assert slots(block, {"0.missing": 1}) is None

    class Double(torch.nn.Module):
        def forward(self, w):
            return 2 * w
    linear = torch.nn.Linear(2, 2)
    parametrize.register_parametrization(linear, "weight", Double())
    assert slots(linear, {"bias": 1}) is None


def test_unexpected_error_exits_3(monkeypatch, capsys):
    """An exception the runtime did not expect is an internal error: exit 3 with its
    traceback and `error: internal: ...`, never 1, which means a check failed."""
    from tierflow_torch import __main__ as cli, runner

    def broken(*args, **kwargs):
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    monkeypatch.setattr(runner, "run", broken)
    code = cli.main(["run", "--plan", "plan.json", "--hf-config", LLAMA])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INTERNAL == 3
    assert "Traceback" in err
    assert err.rstrip().endswith("error: internal: RuntimeError: a leaf Variable that requires "
                                 "grad is being used in an in-place operation.")


def test_outputs_never_overwrite_inputs(tmp_path, capsys):
    """-o naming an input (the plan, the config, the simulator's report, a profile; by any
    name of the same file) or a missing directory is refused before the run, exit 2, and the
    input is left as it was."""
    from tierflow_torch import __main__ as cli
    plan, config, report = tmp_path / "plan.json", tmp_path / "config.json", tmp_path / "s.json"
    for f in (plan, config, report):
        f.write_text("{}\n")
    (tmp_path / "link.json").symlink_to(plan)
    cases = [
        (["run", "--plan", str(plan), "--hf-config", str(config), "-o", str(plan)],
         "it is the plan (--plan)"),
        (["run", "--plan", str(plan), "--hf-config", str(config), "-o", str(config)],
         "it is the model's config (--hf-config)"),
        (["run", "--plan", str(plan), "--hf-config", str(config), "--sim-report", str(report),
          "-o", str(report)], "it is the simulator's report (--sim-report)"),
        (["run", "--plan", str(plan), "--hf-config", str(config), "-o",
          str(tmp_path / "link.json")], f"it is the plan (--plan) ('{plan}' is the same file)"),
        (["calibrate", "--profile", str(report), "-o", str(report)],
         "it is the profiled run (--profile)"),
        (["run", "--plan", str(plan), "--hf-config", str(config), "-o",
          str(tmp_path / "no" / "out.json")], "does not exist"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err, err
    assert all(f.read_text() == "{}\n" for f in (plan, config, report))


def test_memory_report():
    """What the runtime holds beyond the plan: the allocator's most while a step is issued,
    less the more of the tracked bytes before and after it (a detach's peak is before it
    frees) and the running op's workspace."""
    from types import SimpleNamespace
    from tierflow_torch.runner import memory_report
    wl = SimpleNamespace(ops=[SimpleNamespace(workspace=0), SimpleNamespace(workspace=300)])
    records = [(0, "prefetch", 7, 0, 1000, 1100, 1100),      # 100 beyond
               (1, "compute", 1, 1000, 1500, 1600, 2050),     # 2050 - 1500 - 300 = 250
               (2, "detach", 7, 1500, 500, 600, 1600),        # 1600 - 1500 = 100
               (3, "compute", 0, 500, 700, 800, 820)]         # 120
    m = memory_report(records, wl)
    assert m["extra"] == {"bytes": 250, "step": 1, "kind": "compute", "target": 1}
    assert m["tracked_peak"] == 1500 and m["allocated_peak"] == 2050
    assert [r["workspace"] for r in m["steps"]] == [0, 300, 0, 0]
    cpu = memory_report([(r[0], r[1], r[2], r[3], r[4], None, None) for r in records], wl)
    assert cpu["extra"] is None and cpu["allocated_peak"] is None


def test_memory_profile(tierflow_cli, llama_workload, tmp_path):
    """--memory-profile on the CPU: every step's tracked bytes before and after it, which
    add up to the run's tracked peak; no allocator figures; calibrate has nothing to read
    from it alone, and from a CUDA run's reads the extra as the device's reserved bytes."""
    plan = make_plan(tierflow_cli, llama_workload, "tierflow", "128KiB", tmp_path / "plan.json")
    report = tierflow_torch.run(plan, {"hf_config": LLAMA, "seq": SEQ},
                                tierflow=tierflow_cli.binary, memory_profile=True)
    m = report["memory_profile"]
    rows = m["steps"]
    assert len(rows) == report["steps"]["executed"]
    assert all(a["tracked_after"] == b["tracked_before"] for a, b in zip(rows, rows[1:]))
    assert m["tracked_peak"] == report["device_bytes"]["tracked_peak"]
    assert m["extra"] is None and all(r["allocated"] is None for r in rows)
    assert any(r["workspace"] > 0 for r in rows if r["kind"] == "compute")
    assert "memory       tracked peak" in text(report)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(report))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools", "python"))
    cal = [sys.executable, "-m", "tierflow_torch", "calibrate", "--profile", str(path)]
    bad = subprocess.run(cal, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "has no allocator statistics" in bad.stderr
    m["extra"] = {"bytes": 65536, "step": 3, "kind": "compute", "target": 1}
    report["device"] = "cuda"
    path.write_text(json.dumps(report))
    out = subprocess.run(cal + ["--json"], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sets"] == ["devices.dev.reserved=65536B"]


def test_inplace_activations(tierflow_cli, exports, tmp_path):
    """torchvision's in-place activation modules (ReLU, Hardswish with inplace=True) are ops
    that update their input, run once: MobileNetV3's Hardswish, read twice by its
    squeeze-excitation block, was left out of the workload and run again at each read
    (hardswish of hardswish: outputs differed). A training step through them is refused."""
    workload = exports.path("--torchvision", "mobilenet_v3_small", "--batch", "1",
                            "--image-size", "64")
    with open(workload, encoding="utf-8") as f:
        doc = json.load(f)
    names = {t["id"]: t["name"] for t in doc["tensors"]}
    (act,) = [op for op in doc["ops"] if op["name"] == "features.4.block.1.2"]
    assert act["kind"] == "elementwise" and act["flops"] > 0 and act["outputs"] == []
    assert [names[t] for t in act["updates"]] == ["features.4.block.1.1"]
    plan = make_plan(tierflow_cli, workload, "tierflow", f"{weight_bytes(workload) // 2048}KiB",
                     tmp_path / "plan.json")
    report = tierflow_torch.run(plan, {"torchvision": "mobilenet_v3_small", "image_size": 64,
                                       "batch": 1}, check=True, tierflow=tierflow_cli.binary)
    check_report(report, plan, tierflow_cli)
    train = exports.path("--torchvision", "resnet18", "--batch", "1", "--image-size", "32",
                         "--train")
    plan = make_plan(tierflow_cli, train, "tierflow", "1GiB", tmp_path / "train.json")
    with pytest.raises(tierflow_torch.UnsupportedError, match="^'relu' updates 'bn1' in place"):
        tierflow_torch.run(plan, {"torchvision": "resnet18", "image_size": 32, "batch": 1,
                                  "train": True}, tierflow=tierflow_cli.binary)
