#!/usr/bin/env python3
"""`tierflow export --format chakra` decoded with Python protobuf and checked node by node
against the plan it came from.

Usage: chakra_decode_test.py TIERFLOW_BINARY MODULE_DIR   (from the repository root)
MODULE_DIR holds chakra_et_pb2.py, generated from tools/export/chakra/chakra_et.proto at
build time. Exits 77 (skipped) with the reason when Python's protobuf is missing.

Plans checked: the hand-written tests/fixtures/plans/tiny.json and host_attention.json (a
host step: is_cpu_op), and a generated two-layer
Llama-2-7B decode at tensor-parallel degree 2 (its all-reduces become COMM_COLL_NODEs) on
two devices, planned under a budget that forces prefetches and stores.

What must hold, per program (docs/formats.md "Chakra execution traces"):
- one file STEM.PROGRAM.et per program, a GlobalMetadata of version 1.0.0 first (what
  upstream's producers write for this schema);
- one node per compute, prefetch and store step, id = the step's index; none for detach;
- compute -> COMP_NODE (COMM_COLL_NODE for a collective op), prefetch -> MEM_LOAD_NODE,
  store -> MEM_STORE_NODE; tensor_size = the op's bytes or the tensor's size (at least 1);
  num_ops = the op's FLOPs, at least 1 (so that a roofline never divides 0 by 0);
- data_deps = the steps completing the events it waits on, plus, for a prefetch or store,
  those a detach of the same tensor since its previous cache step waited on, plus program
  order: the previous compute step (compute) or the anchor (prefetch, store); a host step
  (is_cpu_op true, its event as an attribute) on the previous host step and its anchor, and
  it is neither the next compute step's predecessor nor an anchor; ctrl_deps
  empty (upstream's convention: MLCommons' current feeder resolves data_deps only);
- `inputs` / `outputs` attributes on every node: string lists alternating tensor name and
  byte count (ASTRA-sim's local-memory tracking).
And the wire format uses the field numbers of Chakra's schema, checked without the schema.
"""
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77

try:
    import google.protobuf  # noqa: F401
except ImportError as e:
    print(f"skipped: Python protobuf is not installed ({e}); Debian: apt install python3-protobuf")
    sys.exit(SKIP)

tf, module_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, module_dir)
import chakra_et_pb2 as pb  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(*args):
    r = subprocess.run([tf, *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: tierflow {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
        sys.exit(1)


def varint(data, pos):
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def frames(data):
    """The messages of a length-delimited stream, as bytes."""
    pos = 0
    while pos < len(data):
        n, pos = varint(data, pos)
        yield data[pos:pos + n]
        pos += n


def fields(msg):
    """(field number, wire type, value) of a message, without a schema."""
    pos = 0
    while pos < len(msg):
        key, pos = varint(msg, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(msg, pos)
        elif wire == 2:
            n, pos = varint(msg, pos)
            value, pos = msg[pos:pos + n], pos + n
        elif wire == 1:
            value, pos = msg[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = msg[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, value


def check_wire(data, where):
    """Field numbers of the Chakra ET schema: GlobalMetadata.version = 1; Node.id = 1, name = 2,
    type = 3, ctrl_deps = 4 and data_deps = 5 (packed), start_time_micros = 6,
    duration_micros = 7, attr = 10; AttributeProto.name = 1, int64_val = 9,
    uint64_val = 13, bool_val = 27, string_val = 29, string_list = 30."""
    msgs = list(frames(data))
    meta = {num: value for num, _, value in fields(msgs[0])}
    check(meta.get(1) == b"1.0.0", f"{where}: GlobalMetadata field 1 is not the version")
    seen_attr_values = set()
    for raw in msgs[1:]:
        got = {}
        for num, wire, value in fields(raw):
            got.setdefault(num, []).append((wire, value))
        check(set(got) <= {1, 2, 3, 4, 5, 6, 7, 10}, f"{where}: unexpected Node fields {sorted(got)}")
        # proto3 leaves out zero values: node 0 has no id field.
        check(all(w == 0 for n in (1, 3, 6, 7) for w, _ in got.get(n, [])),
              f"{where}: id/type/times not varints")
        check(3 in got and got[2][0][0] == 2, f"{where}: no type, or name not length-delimited")
        for num in (4, 5):
            for wire, _ in got.get(num, []):
                check(wire == 2, f"{where}: deps field {num} not packed")
        for _, attr in got.get(10, []):
            a = {n: (w, v) for n, w, v in fields(attr)}
            check(1 in a and a[1][0] == 2, f"{where}: AttributeProto.name is not field 1")
            seen_attr_values.update(n for n in a if n != 1)
    check({9, 13, 27, 29, 30} <= seen_attr_values,
          f"{where}: attribute value fields {sorted(seen_attr_values)} miss int64/uint64/bool/string/string_list")


def decode(path):
    with open(path, "rb") as f:
        data = f.read()
    msgs = list(frames(data))
    meta = pb.GlobalMetadata()
    meta.ParseFromString(msgs[0])
    nodes = []
    for raw in msgs[1:]:
        n = pb.Node()
        n.ParseFromString(raw)
        nodes.append(n)
    return data, meta, nodes


def attr(node, name):
    for a in node.attr:
        if a.name == name:
            which = a.WhichOneof("value")
            return None if which is None else getattr(a, which)
    return None


def operands(node, name):
    """An `inputs`/`outputs` attribute as (tensor name, bytes) pairs; None when missing."""
    for a in node.attr:
        if a.name == name:
            values = list(a.string_list.values)
            check(len(values) % 2 == 0, f"node {node.id}: odd {name} list")
            return [(values[i], int(values[i + 1])) for i in range(0, len(values), 2)]
    return None


def check_plan(plan_path, out_dir, stem, extra):
    run("export", "--plan", plan_path, "--format", "chakra", "-o", out_dir, "--stem", stem, *extra)
    with open(plan_path) as f:
        plan = json.load(f)
    wl = plan["workload"].get("inline")
    if wl is None:
        with open(os.path.join(os.path.dirname(plan_path), plan["workload"]["file"])) as f:
            wl = json.load(f)
    tensors, ops = wl["tensors"], wl["ops"]
    programs = plan["programs"]
    names = sorted(os.listdir(out_dir))
    check(names == sorted(f"{stem}.{p}.et" for p in range(len(programs))),
          f"{plan_path}: files {names}")

    producer = {}
    for p, prog in enumerate(programs):
        for i, s in enumerate(prog["steps"]):
            if "event" in s:
                producer[s["event"]] = (p, i)

    totals = {"compute": 0, "prefetch": 0, "store": 0, "collective": 0, "folded": 0, "no_flops": 0,
              "host": 0}

    def pairs(ids):
        return [(tensors[t]["name"], tensors[t]["bytes"]) for t in ids]
    for p, prog in enumerate(programs):
        where = f"{plan_path} program {p}"
        data, meta, nodes = decode(os.path.join(out_dir, f"{stem}.{p}.et"))
        check_wire(data, where)
        check(meta.version == "1.0.0", f"{where}: version {meta.version}")
        by_id = {n.id: n for n in nodes}
        check(len(by_id) == len(nodes), f"{where}: duplicate node ids")
        steps = prog["steps"]
        want = {"compute": 0, "prefetch": 0, "store": 0}
        got = {pb.COMP_NODE: 0, pb.COMM_COLL_NODE: 0, pb.MEM_LOAD_NODE: 0, pb.MEM_STORE_NODE: 0}
        anchor, last_compute, last_host = None, None, None
        carried = {}  # tensor -> data deps a detach leaves to the next cache step of it
        for i, s in enumerate(steps):
            kind = next(k for k in ("compute", "prefetch", "store", "detach") if k in s)
            target = s[kind]
            waits = {producer[e][1] for e in s.get("wait", []) if producer[e][0] == p}
            if kind == "detach":
                check(i not in by_id, f"{where}: detach step {i} has a node")
                carried.setdefault(target, set()).update(waits)
                continue
            want[kind] += 1
            n = by_id.get(i)
            check(n is not None, f"{where}: step {i} ({kind}) has no node")
            if n is None:
                continue
            got[n.type] = got.get(n.type, 0) + 1
            ctrl, data_deps = set(n.ctrl_deps), set(n.data_deps)
            if kind == "compute":
                op = ops[target]
                coll = op["kind"] == "collective"
                check(n.type == (pb.COMM_COLL_NODE if coll else pb.COMP_NODE),
                      f"{where}: step {i} type {n.type}")
                check(n.name == op["name"], f"{where}: step {i} name {n.name}")
                check(attr(n, "tensor_size") == max(1, op["bytes"]), f"{where}: step {i} tensor_size")
                check(attr(n, "num_ops") == max(1, round(op["flops"])), f"{where}: step {i} num_ops")
                totals["no_flops"] += op["flops"] < 1
                updates = op.get("updates", [])
                check(operands(n, "inputs") == pairs(op.get("inputs", []) + updates),
                      f"{where}: step {i} inputs {operands(n, 'inputs')}")
                check(operands(n, "outputs") == pairs(op.get("outputs", []) + updates),
                      f"{where}: step {i} outputs {operands(n, 'outputs')}")
                if coll:
                    totals["collective"] += 1
                    size = sum(tensors[t]["bytes"] for t in op["inputs"])
                    check(attr(n, "comm_size") == size, f"{where}: step {i} comm_size")
                    check(attr(n, "comm_type") == pb.ALL_REDUCE, f"{where}: step {i} comm_type")
                host = s.get("on") == "host"
                check(attr(n, "is_cpu_op") == host, f"{where}: step {i} is_cpu_op {attr(n, 'is_cpu_op')}")
                if host:
                    totals["host"] += 1
                    check(attr(n, "event") == s["event"], f"{where}: step {i} event {attr(n, 'event')}")
                    order = {d for d in (last_host, anchor) if d is not None}
                else:
                    order = {last_compute} if last_compute is not None else set()
                check(not ctrl, f"{where}: step {i} ctrl_deps {sorted(ctrl)}")
                check(data_deps == waits | order,
                      f"{where}: step {i} data_deps {sorted(data_deps)} != waits {sorted(waits)} + order {order}")
                if host:
                    last_host = i
                else:
                    last_compute = anchor = i
            else:
                t = tensors[target]
                check(n.type == (pb.MEM_LOAD_NODE if kind == "prefetch" else pb.MEM_STORE_NODE),
                      f"{where}: step {i} type {n.type}")
                check(attr(n, "tensor_size") == t["bytes"], f"{where}: step {i} tensor_size")
                check(attr(n, "tensor_name") == t["name"], f"{where}: step {i} tensor_name")
                tier = s["from"] if kind == "prefetch" else s["to"]
                src, dst = (tier, plan["device_tier"]) if kind == "prefetch" else (plan["device_tier"], tier)
                check(attr(n, "src_tier") == src and attr(n, "dst_tier") == dst,
                      f"{where}: step {i} tiers {attr(n, 'src_tier')} -> {attr(n, 'dst_tier')}")
                check(bool(attr(n, "route")), f"{where}: step {i} has no route")
                check(not ctrl, f"{where}: step {i} ctrl_deps {sorted(ctrl)}")
                moved = pairs([target])
                check(operands(n, "inputs") == ([] if kind == "prefetch" else moved),
                      f"{where}: step {i} inputs {operands(n, 'inputs')}")
                check(operands(n, "outputs") == (moved if kind == "prefetch" else []),
                      f"{where}: step {i} outputs {operands(n, 'outputs')}")
                folded = carried.pop(target, set())
                totals["folded"] += bool(folded - waits - ({anchor} if anchor is not None else set()))
                expect = waits | folded | ({anchor} if anchor is not None else set())
                check(data_deps == expect, f"{where}: step {i} data_deps {sorted(data_deps)} != {sorted(expect)}")
            for d in ctrl | data_deps:
                check(d in by_id and d < i, f"{where}: step {i} depends on {d}, not an earlier node")
            check(attr(n, "duration_ps") is not None, f"{where}: step {i} has no simulated duration")
        check(len(nodes) == sum(want.values()), f"{where}: {len(nodes)} nodes for {want}")
        check(got[pb.COMP_NODE] + got[pb.COMM_COLL_NODE] == want["compute"], f"{where}: compute nodes {got}")
        check(got[pb.MEM_LOAD_NODE] == want["prefetch"], f"{where}: load nodes {got}")
        check(got[pb.MEM_STORE_NODE] == want["store"], f"{where}: store nodes {got}")
        for k in want:
            totals[k] += want[k]
    return totals


with tempfile.TemporaryDirectory() as tmp:
    tiny = check_plan("tests/fixtures/plans/tiny.json", os.path.join(tmp, "tiny"), "tiny",
                      ["--set", "tiers.hbm.capacity=4KiB"])
    check(tiny == {"compute": 2, "prefetch": 2, "store": 1, "collective": 0, "folded": 0, "no_flops": 0,
                   "host": 0},
          f"tiny: {tiny}")
    host = check_plan("tests/fixtures/plans/host_attention.json", os.path.join(tmp, "host"), "host", [])
    check(host == {"compute": 4, "prefetch": 1, "store": 1, "collective": 0, "folded": 0, "no_flops": 0,
                   "host": 1},
          f"host_attention: {host}")

    w, p = os.path.join(tmp, "w.json"), os.path.join(tmp, "p.json")
    run("trace", "gen", "--model", "llama-2-7b", "--phase", "decode", "--context", "512",
        "--tokens", "2", "--layers", "2", "--tp", "2", "-o", w)
    run("plan", "--hw", "configs/hw/h100-sxm-8gpu.yaml", "--workload", w, "--devices", "2",
        "--budget", "200MiB", "--policy", "hyperoffload", "-o", p)
    big = check_plan(p, os.path.join(tmp, "llama"), "llama", [])
    check(big["prefetch"] > 0 and big["store"] > 0 and big["collective"] > 0 and big["folded"] > 0
          and big["no_flops"] > 0,
          f"the generated plan exercises too little: {big}")
    print(f"tiny: {tiny}; host_attention: {host}; llama-2-7b tp2 x2: {big}")

for f in failures:
    print("FAIL:", f)
print(f"{'FAILED' if failures else 'ok'}: {len(failures)} failures")
sys.exit(1 if failures else 0)
