"""Shared helpers: run the exporter (`python -m tierflow_export`, tools/python) as a command,
once per distinct command line."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOLS_PYTHON = os.path.join(ROOT, "tools", "python")  # holds the tierflow_export package
CONFIGS = os.path.join(HERE, "configs")
FAMILIES = ["llama", "mistral", "mixtral", "qwen2"]

sys.path.insert(0, HERE)


def config_path(family):
    return os.path.join(CONFIGS, f"{family}_tiny.json")


def run_tool(args, env=None, cwd=ROOT):
    """Runs the exporter with this interpreter; returns the CompletedProcess (text).
    tools/python goes last on PYTHONPATH, so that a built tierflow module named before it
    (build/test/python) is the one that checks the written document."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [TOOLS_PYTHON])
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "tierflow_export"] + list(args),
                          capture_output=True, text=True, env=full_env, cwd=cwd, timeout=600)


class Exports:
    """Exports cached by command line for the whole session."""

    def __init__(self, directory):
        self.directory = directory
        self.cache = {}

    def path(self, *args):
        """Runs `python -m tierflow_export ARGS -o FILE` once; returns FILE."""
        key = tuple(args)
        if key not in self.cache:
            out = os.path.join(self.directory, f"export{len(self.cache)}.json")
            result = run_tool(list(args) + ["-o", out])
            assert result.returncode == 0, result.stderr
            assert result.stderr == "", result.stderr
            self.cache[key] = out
        return self.cache[key]

    def doc(self, *args):
        with open(self.path(*args), encoding="utf-8") as f:
            return json.load(f)


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    return Exports(str(tmp_path_factory.mktemp("exports")))


def phase_split(doc):
    """(forward ops, backward ops, optimizer ops) of a --train export: the forward ops come
    before the op named "loss", the optimizer ops are those of kind optimizer."""
    ops = doc["ops"]
    loss = [op["id"] for op in ops if op["name"] == "loss"]
    assert len(loss) == 1
    forward = ops[:loss[0]]
    rest = ops[loss[0] + 1:]
    return (forward, [op for op in rest if op["kind"] != "optimizer"],
            [op for op in rest if op["kind"] == "optimizer"])
