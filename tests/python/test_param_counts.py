"""tests/python/hf_param_counts.json: parameter counts of the shipped architectures as
Hugging Face transformers builds them (written by gen_param_counts.py)."""

import glob
import json
import os
import re
import subprocess
import sys

from conftest import HERE, ROOT

COUNTS = os.path.join(HERE, "hf_param_counts.json")


def load():
    with open(COUNTS, encoding="utf-8") as f:
        return json.load(f)


def test_every_shipped_model_is_listed():
    doc = load()
    listed = {m["shipped"] for m in doc["models"] + doc["skipped"] if m["shipped"]}
    shipped = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "configs",
                                                                        "models", "*.yaml"))}
    assert shipped <= listed
    for m in doc["models"]:
        assert 0 < m["active_params"] <= m["params"]
        assert m["head_params"] == (0 if m["tied_embeddings"] else m["embedding_params"])


def test_counts_match_the_shipped_files_notes():
    """Where a shipped file notes its own count ("Check (tierflow count_params): N"),
    Hugging Face's model has exactly that many parameters (and active ones for MoE)."""
    compared = 0
    for m in load()["models"]:
        if not m["shipped"]:
            continue
        with open(os.path.join(ROOT, m["shipped"]), encoding="utf-8") as f:
            text = f.read()
        note = re.search(r"Check \(tierflow count_params\): ([\d,]+)", text)
        if note:
            assert int(note.group(1).replace(",", "")) == m["params"], m["name"]
            compared += 1
        active = re.search(r"([\d,]+) active", text)
        if active:
            assert int(active.group(1).replace(",", "")) == m["active_params"], m["name"]
    assert compared >= 1


def test_file_is_current():
    """Regenerating gives the committed bytes (the pins or the configs did not change)."""
    result = subprocess.run([sys.executable, os.path.join(HERE, "gen_param_counts.py"),
                             "--check"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
