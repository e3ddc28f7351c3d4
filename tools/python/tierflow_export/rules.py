"""The verifier rules of docs/formats.md (tierflow.workload/1) in Python: how an export is
checked where the tierflow module cannot be imported (verify.py), and how trace() checks
the workload it records for callers that write no file (tools/python/tierflow_torch)."""

import math

from .workload import MAX_BYTES


def check_workload(doc):
    """Returns a list of violations of the tierflow.workload/1 verifier rules."""
    errors = []
    tensors, ops = doc.get("tensors", []), doc.get("ops", [])
    names = set()
    producer = {}
    for i, t in enumerate(tensors):
        if t.get("id") != i:
            errors.append(f"tensors[{i}]: id {t.get('id')} is not its index")
        if t["name"] in names:
            errors.append(f"tensors[{i}]: duplicate name {t['name']}")
        names.add(t["name"])
        if not (isinstance(t["bytes"], int) and 1 <= t["bytes"] <= MAX_BYTES):
            errors.append(f"tensors[{i}]: bytes {t['bytes']} out of range")
        if t["origin"] != "external":
            if not (isinstance(t["origin"], int) and 0 <= t["origin"] < len(ops)):
                errors.append(f"tensors[{i}]: origin {t['origin']} is no op")
    names = set()
    for i, op in enumerate(ops):
        if op.get("id") != i:
            errors.append(f"ops[{i}]: id {op.get('id')} is not its index")
        if op["name"] in names:
            errors.append(f"ops[{i}]: duplicate name {op['name']}")
        names.add(op["name"])
        if not (isinstance(op["flops"], (int, float)) and math.isfinite(op["flops"]) and
                op["flops"] >= 0):
            errors.append(f"ops[{i}]: flops {op['flops']}")
        if not (isinstance(op["bytes"], int) and op["bytes"] >= 0):
            errors.append(f"ops[{i}]: bytes {op['bytes']}")
        seen = set()
        for field in ("inputs", "outputs", "updates"):
            for t in op.get(field, []):
                if not (isinstance(t, int) and 0 <= t < len(tensors)):
                    errors.append(f"ops[{i}].{field}: no tensor {t}")
                    continue
                if t in seen:
                    errors.append(f"ops[{i}]: tensor {t} appears twice")
                seen.add(t)
                if field == "outputs":
                    if tensors[t]["origin"] != i:
                        errors.append(f"ops[{i}]: output {t} has origin {tensors[t]['origin']}")
                    if t in producer:
                        errors.append(f"ops[{i}]: tensor {t} already produced by op {producer[t]}")
                    producer[t] = i
                else:
                    o = tensors[t]["origin"]
                    if o != "external" and not (isinstance(o, int) and o < i):
                        errors.append(f"ops[{i}]: reads tensor {t} before op {o} produces it")
    for i, t in enumerate(tensors):
        if t["origin"] != "external" and producer.get(i) != t["origin"]:
            errors.append(f"tensors[{i}]: origin op {t['origin']} does not list it in outputs")
    return errors
