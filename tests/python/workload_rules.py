"""The rules of docs/formats.md, "Workload: tierflow.workload/1", as a small checker.

Written from the document, independently of tools/python/tierflow_export (which checks its
own output with the tierflow module's reader, or its own rules where that module cannot be
imported), so that a test failure here means the exporter and the format disagree.
"""

import math

TOP_KEYS = ["format", "name", "meta", "tensors", "ops"]
TENSOR_KEYS = ["id", "name", "kind", "dtype", "bytes", "origin", "layer"]
OP_KEYS = ["id", "name", "kind", "dtype", "flops", "bytes", "inputs", "outputs", "updates",
           "workspace", "layer", "collective_bytes"]
TENSOR_KINDS = {"weight", "activation", "kv", "grad", "optimizer_state", "input", "output"}
OP_KINDS = {"matmul", "attention", "norm", "elementwise", "embedding", "router", "expert",
            "collective", "optimizer", "other"}
DTYPES = {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4"}
MAX_BYTES = 2 ** 50


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def violations(doc):
    """Every violation of the documented rules, as readable strings (empty when valid).
    Checks the keys present and their order as the exporter writes them all."""
    out = []
    if list(doc) != TOP_KEYS:
        out.append(f"top-level keys {list(doc)}, expected {TOP_KEYS}")
    if doc.get("format") != "tierflow.workload/1":
        out.append(f"format {doc.get('format')!r}")
    if not isinstance(doc.get("name"), str) or not doc.get("name"):
        out.append("name must be a non-empty string")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        out.append("meta must be an object")
    else:
        for k, v in meta.items():
            if not isinstance(v, (str, int, float, bool)):
                out.append(f"meta.{k}: {type(v).__name__} is not a string, number or boolean")
    tensors, ops = doc.get("tensors", []), doc.get("ops", [])

    names = set()
    for i, t in enumerate(tensors):
        where = f"tensors[{i}]"
        if list(t) != TENSOR_KEYS:
            out.append(f"{where}: keys {list(t)}")
            continue
        if t["id"] != i:
            out.append(f"{where}: id {t['id']}")
        if not isinstance(t["name"], str) or t["name"] in names:
            out.append(f"{where}: name {t['name']!r} not unique")
        names.add(t["name"])
        if t["kind"] not in TENSOR_KINDS:
            out.append(f"{where}: kind {t['kind']!r}")
        if t["dtype"] not in DTYPES:
            out.append(f"{where}: dtype {t['dtype']!r}")
        if not _is_int(t["bytes"]) or not 1 <= t["bytes"] <= MAX_BYTES:
            out.append(f"{where}: bytes {t['bytes']!r}")
        o = t["origin"]
        if o != "external" and not (_is_int(o) and 0 <= o < len(ops)):
            out.append(f"{where}: origin {o!r}")
        if not _is_int(t["layer"]) or t["layer"] < -1:
            out.append(f"{where}: layer {t['layer']!r}")

    names = set()
    produced_by = {}
    for i, op in enumerate(ops):
        where = f"ops[{i}]"
        if list(op) != OP_KEYS:
            out.append(f"{where}: keys {list(op)}")
            continue
        if op["id"] != i:
            out.append(f"{where}: id {op['id']}")
        if not isinstance(op["name"], str) or op["name"] in names:
            out.append(f"{where}: name {op['name']!r} not unique")
        names.add(op["name"])
        if op["kind"] not in OP_KINDS:
            out.append(f"{where}: kind {op['kind']!r}")
        if op["dtype"] not in DTYPES:
            out.append(f"{where}: dtype {op['dtype']!r}")
        f = op["flops"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f < 0:
            out.append(f"{where}: flops {f!r}")
        for key in ("bytes", "workspace", "collective_bytes"):
            if not _is_int(op[key]) or op[key] < 0:
                out.append(f"{where}: {key} {op[key]!r}")
        if not _is_int(op["layer"]) or op["layer"] < -1:
            out.append(f"{where}: layer {op['layer']!r}")
        seen = set()
        for key in ("inputs", "outputs", "updates"):
            for tid in op[key]:
                if not _is_int(tid) or not 0 <= tid < len(tensors):
                    out.append(f"{where}.{key}: no tensor {tid!r}")
                    continue
                if tid in seen:
                    out.append(f"{where}: tensor {tid} appears more than once")
                seen.add(tid)
                origin = tensors[tid].get("origin")
                if key == "outputs":
                    if origin == "external":
                        out.append(f"{where}: external tensor {tid} in outputs")
                    elif origin != i:
                        out.append(f"{where}: output {tid} has origin {origin}")
                    if tid in produced_by:
                        out.append(f"{where}: tensor {tid} already an output of op "
                                   f"{produced_by[tid]}")
                    produced_by[tid] = i
                elif origin != "external" and not (_is_int(origin) and origin < i):
                    out.append(f"{where}: reads tensor {tid} before its op {origin} runs")
    for i, t in enumerate(tensors):
        if isinstance(t, dict) and _is_int(t.get("origin")) and produced_by.get(i) != t["origin"]:
            out.append(f"tensors[{i}]: op {t['origin']} does not list it in outputs")
    return out
