"""docs/python.md's notebook session runs as written: its ```python blocks, in order, in one
namespace, in a fresh folder; then what it made is checked."""

import json
import os
import re

import tierflow

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "python.md")


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def test_python_doc_runs(tmp_path, monkeypatch, capsys):
    with open(DOC, encoding="utf-8") as f:
        blocks = python_blocks(f.read())
    assert len(blocks) >= 7, "the session lost its code blocks"
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_python"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC} block {i + 1}", "exec"), namespace)
    printed = capsys.readouterr().out

    # What the session says it does.
    assert namespace["plan"].ok and namespace["too_small"].infeasible
    assert namespace["sim"].ok and namespace["sim"].exposed_ps > 0
    assert "traceEvents" in json.loads((tmp_path / "decode-timeline.json").read_text())
    assert tierflow.simulate("decode-plan.json").makespan_ps == namespace["sim"].makespan_ps
    assert namespace["best"]["found"]
    assert len(namespace["table"]) == len(tierflow.policies())
    results = namespace["results"]
    assert len(results) == 4 and (results["status"] == "ok").all()
    # At 4 sequences the plan waits on PCIe: doubling it shortens the step.
    at4 = results[results["batch"] == 4].set_index("links.gpu-pcie.bandwidth")["makespan_s"]
    assert at4["64GB/s"] < at4["32GB/s"]
    assert "did you mean 'bf16'" in printed
