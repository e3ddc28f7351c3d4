#!/usr/bin/env bash
# End-to-end tests of `tierflow serve`: a real trace excerpt and a generated one served,
# the per-request CSV, the JSON summary, --cache-only, determinism, and bad input refused
# with exit 2 naming the flag or the file position.
# Usage: serve_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$1
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

trace=tests/data/serve/mooncake_conversation_200.jsonl
base=(--hw h200-sxm-8gpu --model llama-3-70b --tp 8 --quiet)

# The Mooncake excerpt with a DDR tier: the summary, one CSV row per request, the JSON.
check mooncake 0 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:512GiB --slo ttft=2s,tpot=100ms -o "$tmp/req.csv"
contains mooncake-title "$tmp/out" "serve llama-3-70b on h200-sxm-8gpu: 1 replica x TP 8 (h200)"
contains mooncake-pool "$tmp/out" "KV pool"
contains mooncake-goodput "$tmp/out" "goodput (ttft <= 2s, tpot <= 100ms)"
ok mooncake-csv-rows test "$(wc -l <"$tmp/req.csv")" = 201
ok mooncake-csv-header test "$(head -1 "$tmp/req.csv")" = \
  "id,replica,arrival_s,queue_s,ttft_s,tpot_s,e2e_s,prompt_tokens,output_tokens,hit_hbm,hit_ddr,preemptions,counted,rejected"
check mooncake-json 0 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:512GiB --json --summary "$tmp/s1.json"
ok mooncake-json-parses python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "tierflow.serve/1" and d["requests"] == 200 and d["finished"] == 200
assert d["ttft"]["p50_s"] <= d["ttft"]["p90_s"] <= d["ttft"]["p99_s"]
hits = sum(l["hit_tokens"] for l in d["levels"])
assert hits + d["computed_tokens"] == d["prompt_tokens"]
# No --slo: every bound is null (unset), not 0.
assert [d["goodput"][k] for k in ("ttft_s", "tpot_s", "e2e_s")] == [None] * 3, d["goodput"]' "$tmp/s1.json"
# Same inputs, byte-identical outputs.
check mooncake-again 0 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:512GiB --json --summary "$tmp/s2.json"
ok mooncake-deterministic cmp -s "$tmp/s1.json" "$tmp/s2.json"

# The timeline: iterations per replica, level occupancy, KV transfers.
check timeline 0 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:512GiB --set tiers.hbm.capacity=40GB --timeline "$tmp/tl.json"
ok timeline-parses python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
names = {e.get("name") for e in d["traceEvents"]}
assert "iteration" in names and "load" in names and "demotion" in names, names
procs = {e["args"]["name"] for e in d["traceEvents"] if e.get("name") == "process_name"}
assert "KV transfers" in procs and any(p.startswith("replica 0") for p in procs), procs' "$tmp/tl.json"

# The HTML page: well formed, every section, the same bytes twice.
check report 0 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:512GiB --set tiers.hbm.capacity=40GB --report "$tmp/r1.html"
ok report-well-formed python3 -c '
import html.parser, sys
VOID = {"meta", "br", "path", "line", "rect", "i"}
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.stack = []; self.svg = 0
    def handle_starttag(self, t, a):
        self.svg += t == "svg"
        if t not in VOID: self.stack.append(t)
    def handle_endtag(self, t):
        if t in VOID: return
        assert self.stack and self.stack[-1] == t, (t, self.stack[-4:])
        self.stack.pop()
text = open(sys.argv[1]).read()
p = P(); p.feed(text)
assert not p.stack and p.svg == 6, (p.stack, p.svg)
for h in ("Summary", "Latency", "Prompt tokens by where they came from", "Cache levels over time", "Sequences per replica", "Replicas", "Fabric"):
    assert "<h2>" + h in text, h
assert "<td>r0</td>" in text
assert "nan" not in text.lower()' "$tmp/r1.html"
check report-again 0 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:512GiB --set tiers.hbm.capacity=40GB --report "$tmp/r2.html"
ok report-deterministic cmp -s "$tmp/r1.html" "$tmp/r2.html"

# The device level's policy reaches the cache: S3-FIFO evicts other blocks than LRU.
check device-lru 0 "$tf" serve "${base[@]}" --trace "$trace" --set tiers.hbm.capacity=40GB --json --summary "$tmp/lru.json"
check device-s3fifo 0 "$tf" serve "${base[@]}" --trace "$trace" --set tiers.hbm.capacity=40GB --device-policy s3fifo --json --summary "$tmp/s3.json"
ok device-policy-differs python3 -c '
import json, sys
a, b = (json.load(open(f))["levels"][0]["evictions"] for f in sys.argv[1:3])
assert a != b, (a, b)' "$tmp/lru.json" "$tmp/s3.json"
check device-policy-bad 2 "$tf" serve "${base[@]}" --trace "$trace" --device-policy arc

# Cache only: hit ratios, no times.
check cache-only 0 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:512GiB --cache-only
contains cache-only-levels "$tmp/out" "ddr[0,1]"
ok cache-only-no-times test "$(grep -c 'p50' "$tmp/out")" = 0

# Generated requests, two replicas of TP 4, each router.
for router in round-robin least-loaded prefix kv-aware; do
  check "router-$router" 0 "$tf" serve --hw h100-sxm-8gpu --model llama-3-8b --tp 4 --replicas 2 --quiet \
    --arrivals "poisson,rate=4/s,n=100,prompt=lognormal:1500:0.5,output=uniform:16:128,groups=4,system=1024" \
    --router "$router" -o "$tmp/gen.csv"
  ok "router-$router-both" test "$(cut -d, -f2 "$tmp/gen.csv" | sort -u | grep -c '^[01]$')" = 2
done
# kv-aware weighs a replica's cached prefix against its backlog: on the Mooncake trace it
# hits more than least-loaded and meets the SLO for more requests; both are named.
kv=(--hw h200-sxm-8gpu --model llama-3-70b --tp 2 --replicas 4 --trace "$trace" --rate-scale 0.25 --kv-tiers ddr:64GiB --slo ttft=5s,tpot=50ms --quiet)
check router-kv-text 0 "$tf" serve "${kv[@]}" --router kv-aware
contains router-kv-named "$tmp/out" "4 replicas x TP 2 (h200), routed kv-aware, mooncake"
check router-kv 0 "$tf" serve "${kv[@]}" --router kv-aware --json
cp "$tmp/out" "$tmp/kv.json"
check router-load 0 "$tf" serve "${kv[@]}" --router least-loaded --json
ok router-kv-pays python3 -c '
import json, sys
kv, load = (json.load(open(p)) for p in sys.argv[1:3])
assert (kv["router"], load["router"]) == ("kv-aware", "least-loaded")
assert kv["computed_tokens"] < 0.98 * load["computed_tokens"], (kv["computed_tokens"], load["computed_tokens"])
assert kv["goodput"]["requests"] > load["goodput"]["requests"], (kv["goodput"], load["goodput"])' "$tmp/kv.json" "$tmp/out"

# No requests: the error says where they come from, with a generator spec to start from.
check no-requests 2 "$tf" serve --model llama-3-8b
contains no-requests-msg "$tmp/err" "error: --trace: give a request trace (--trace FILE: Mooncake JSON Lines or Azure CSV) or a generator (--arrivals SPEC, e.g. poisson,rate=2/s,n=500,prompt=lognormal:2000:0.6,output=uniform:50:400)"

# The defaults serve: Llama-3.1-70B on an H100 node, at the least TP that leaves room for KV
# (2: TP 1 leaves none), said in a note; --tp 0 asks for the same; a TP given is kept.
gen=(--quiet --arrivals poisson,rate=2/s,n=50,prompt=lognormal:2000:0.6,output=uniform:50:200)
check defaults 0 "$tf" serve "${gen[@]}" --json
cp "$tmp/out" "$tmp/defaults.json"
contains defaults-note "$tmp/err" "note: --tp not given: TP 2, the least that leaves llama-3.1-70b room for KV (155 blocks of 512 tokens a replica); --tp sets it"
ok defaults-tp python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["tp"] == 2' "$tmp/out"
check defaults-tp0 0 "$tf" serve "${gen[@]}" --tp 0 --json
contains defaults-tp0-note "$tmp/err" "note: --tp not given: TP 2"
check defaults-fits 0 "$tf" serve "${gen[@]}" --model llama-3-8b
ok defaults-fits-quiet bash -c '! grep -q "not given" "$1"' _ "$tmp/err"
check defaults-tp-given 0 "$tf" serve "${gen[@]}" --tp 4 --json
ok defaults-tp-given-kept python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["tp"] == 4' "$tmp/out"
ok defaults-tp-given-fill python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert (j["replicas"], j["devices"], j["class_devices"]) == (2, 8, 8), j' "$tmp/out"
# --replicas not given: as many as the devices hold (TP 2: 4 replicas); given, the devices left
# idle are said.
ok defaults-fill python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert (j["replicas"], j["devices"]) == (4, 8), j' "$tmp/defaults.json"
check defaults-one 0 "$tf" serve "${gen[@]}" --tp 4 --replicas 1 --json
ok defaults-idle-devices python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert (j["devices"], j["class_devices"]) == (4, 8), j' "$tmp/out"
check defaults-too-many 2 "$tf" serve "${gen[@]}" --replicas 8
contains defaults-too-many-msg "$tmp/err" "error: --replicas: 8 replicas of TP 2 need 16 devices; 'h100-sxm-8gpu' has 8 of class 'h100' (TP 2: --tp not given, the least that leaves llama-3.1-70b room for KV)"
# Several nodes: --nodes copies the topology's hosts and devices; replicas fill them (one
# within a node), min-devices says the nodes its answer takes; a supernode is not copied.
check nodes 0 "$tf" serve "${gen[@]}" --model llama-3-8b --nodes 3 --tp 2 --replicas 12 --json
ok nodes-json python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["nodes"] == 3 and j["devices"] == 24 and j["topology"] == "h100-sxm-8gpu", j
assert j["class_devices"] == 24, j
assert len(j["replica_work"]) == 12' "$tmp/out"
check nodes-text 0 "$tf" serve "${gen[@]}" --model llama-3-8b --nodes 3 --tp 2 --replicas 12
contains nodes-text-head "$tmp/out" "serve llama-3-8b on 3 x h100-sxm-8gpu: 12 replicas x TP 2 (h100)"
check nodes-report 0 "$tf" serve "${gen[@]}" --model llama-3-8b --nodes 3 --tp 2 --replicas 12 --report "$tmp/nodes.html"
contains nodes-report-title "$tmp/nodes.html" "<title>tierflow serve: llama-3-8b on 3 x h100-sxm-8gpu</title>"
check nodes-too-many 2 "$tf" serve "${gen[@]}" --model llama-3-8b --nodes 2 --replicas 17
contains nodes-too-many-msg "$tmp/err" "error: --replicas: 17 replicas of TP 1 need 17 devices; '2 x h100-sxm-8gpu' has 16 of class 'h100'"
# TP given over both servers: each all-reduce rings through a server's NVLink and over
# every GPU's NIC (8 x 47 GB/s out of each server).
check nodes-tp-spans 0 "$tf" serve "${gen[@]}" --model llama-3-8b --nodes 2 --tp 16
contains nodes-tp-spans-title "$tmp/out" "on 2 x h100-sxm-8gpu: 1 replica x TP 16 (h100)"
contains nodes-tp-spans-line "$tmp/out" "tensor parallelism across scale-up domains: each TP 16 group spans 2 scale-up domains of 8 devices, 376GB/s out of each"
check nodes-tp-spans-json 0 "$tf" serve "${gen[@]}" --model llama-3-8b --nodes 2 --tp 16 --json
ok nodes-tp-spans-json-fields python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tp"] == 16 and j["tp_domains"] == 2, (j["tp"], j["tp_domains"])
assert abs(j["collective_bytes_per_s"] - 376e9) < 1e3, j["collective_bytes_per_s"]' "$tmp/out"
# Within one server: one domain, no network rate.
check nodes-tp-within-json 0 "$tf" serve "${gen[@]}" --model llama-3-8b --tp 8 --json
ok nodes-tp-within-domains python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tp_domains"] == 1 and "collective_bytes_per_s" not in j' "$tmp/out"
# Disaggregated across the nodes: prefill on the first, decode on the second, the KV over
# each GPU's NIC and the InfiniBand fabric between them.
check nodes-pd 0 "$tf" serve "${gen[@]}" --model llama-3-8b --nodes 2 --tp 2 --prefill-replicas 4 --replicas 4
contains nodes-pd-title "$tmp/out" "on 2 x h100-sxm-8gpu: 4 prefill replicas x TP 2 and 4 decode replicas x TP 2"
contains nodes-pd-nic-out "$tmp/out" "nic[0] rc->ib"
contains nodes-pd-nic-in "$tmp/out" "nic[8] ib->rc"
# MI300X servers: within one the xGMI mesh, between two each GPU's NIC (the mesh is the
# board's); a TP group across them is refused.
check nodes-pd-mi300x 0 "$tf" serve "${gen[@]}" --hw mi300x-8gpu --model llama-3-8b --nodes 2 --tp 2 --prefill-replicas 4 --replicas 4
contains nodes-pd-mi300x-nic "$tmp/out" "nic[8] backend->rc"
ok nodes-pd-mi300x-no-xgmi bash -c '! grep -q "^xgmi" "$1"' _ "$tmp/out"
check nodes-pd-mi300x-mixed 0 "$tf" serve "${gen[@]}" --hw mi300x-8gpu --model llama-3-8b --nodes 2 --tp 2 --prefill-replicas 2 --replicas 6 --decode-router round-robin
contains nodes-pd-mi300x-mixed-xgmi "$tmp/out" "xgmi[0] hbm->hbm"
contains nodes-pd-mi300x-mixed-nic "$tmp/out" "nic[0] rc->backend"
# The xGMI mesh joins one server's GPUs: TP 16 over two all-reduces over their NICs.
check nodes-tp-mi300x 0 "$tf" serve "${gen[@]}" --hw mi300x-8gpu --model llama-3-70b --nodes 2 --tp 16
contains nodes-tp-mi300x-line "$tmp/out" "each TP 16 group spans 2 scale-up domains of 8 devices"
# Copies of a supernode are supernodes of their own: each CloudMatrix384 its UB fabric and
# its memory pool, the RDMA plane between them (refused before 2026-12-01).
check nodes-supernode 0 "$tf" serve "${gen[@]}" --hw cloudmatrix384 --nodes 2 --tp 32 --kv-tiers pool:1TB
contains nodes-supernode-title "$tmp/out" "on 2 x cloudmatrix384: 24 replicas x TP 32 (ascend910c)"
contains nodes-supernode-pool0 "$tmp/out" "pool[0]  "
contains nodes-supernode-pool1 "$tmp/out" "pool[1]  "
check nodes-supernode-pd 0 "$tf" serve "${gen[@]}" --hw cloudmatrix384 --model llama-3-8b --nodes 2 --tp 8 --prefill-replicas 48 --replicas 48
contains nodes-supernode-pd-rdma "$tmp/out" "npu-rdma[384] roce->hbm"
# Two racks of 72: the second TP 64 group takes 8 GPUs of the first rack and 56 of the
# second, which no ring spans evenly.
check nodes-supernode-tp 2 "$tf" serve "${gen[@]}" --hw gb200-nvl72 --model llama-3-70b --nodes 2 --tp 64 --replicas 2
contains nodes-supernode-tp-msg "$tmp/err" "error: --tp: a replica of TP 64: on devices 64 to 127, 8 of its ranks are among the devices one 'nvswitch' joins and 56 among another: a group over several must have as many ranks in each"
check nodes-racks-pd 0 "$tf" serve "${gen[@]}" --hw gb200-nvl72 --model llama-3-70b --nodes 2 --tp 4 --prefill-replicas 18 --replicas 18
contains nodes-racks-pd-nic "$tmp/out" "nic[72] ib->grace"
check nodes-min-devices 0 "$tf" serve --quiet --model llama-3-8b --nodes 4 --arrivals poisson,rate=120/s,n=600,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3 --find min-devices --target p99-tpot=15ms --json
ok nodes-min-devices-json python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["found"] and j["answer"] > 8, j["answer"]
assert j["nodes_used"] == -(-int(j["answer"]) // 8), j' "$tmp/out"
# The upgrade question's candidates run on the same nodes (a topology reloaded for each).
check nodes-upgrade 0 "$tf" serve --quiet --model llama-3-8b --nodes 2 --tp 2 --replicas 5 --arrivals poisson,rate=60/s,n=300,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3 --kv-tiers ddr:100GB --find upgrade --target p99-tpot=12ms --json
ok nodes-upgrade-json python3 -c '
import json, sys
u = {x["what"]: x for x in json.load(open(sys.argv[1]))["upgrades"]}
assert u["tier \x27hbm\x27 capacity (the device memory)"]["value_2x"] > 0, u
assert u["one replica more"]["value_2x"] > 0, u' "$tmp/out"
check nodes-whatif 0 "$tf" whatif --quiet --model llama-3-8b --arrivals poisson,rate=120/s,n=600,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3 --question min-devices --target p99-tpot=15ms --serve nodes=4
contains nodes-whatif-answer "$tmp/out" "of the 4 nodes"
# Each replica's work: a row each (roles when disaggregated), the least, mean and most past
# 16; JSON replica_work adds up to the run; output per device.
check replica-work 0 "$tf" serve "${gen[@]}" --model llama-3-8b --replicas 2 --prefill-replicas 1 --json
ok replica-work-json python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
w = j["replica_work"]
assert [x["role"] for x in w] == ["prefill", "decode", "decode"], w
assert sum(x["iterations"] for x in w) == j["iterations"], w
assert w[0]["requests"] == 50 and sum(x["requests"] for x in w[1:]) == 50, w
assert all(0 < x["compute_s"] <= x["busy_s"] <= j["makespan_s"] for x in w), w
assert j["devices"] == 3
assert abs(j["output_tokens_per_s_per_device"] * 3 - j["output_tokens_per_s"]) < 1e-9 * j["output_tokens_per_s"]' "$tmp/out"
check replica-work-text 0 "$tf" serve "${gen[@]}" --model llama-3-8b --replicas 2 --prefill-replicas 1
contains replica-work-header "$tmp/out" "replica          requests  iterations    busy  compute  prompt tokens  output tokens  preemptions"
contains replica-work-roles "$tmp/out" "decode r2"
contains replica-work-per-device "$tmp/out" "per device of 3)"
check replica-work-many 0 "$tf" serve "${gen[@]}" --model llama-3-8b --hw cloudmatrix384 --replicas 20
contains replica-work-most "$tmp/out" "most"
ok replica-work-many-short bash -c '! grep -q "^r19 " "$1"' _ "$tmp/out"
check defaults-prefill-tp 2 "$tf" serve "${gen[@]}" --prefill-replicas 1 --prefill-tp 1
contains defaults-prefill-tp-msg "$tmp/err" "error: --prefill-tp: the weights of llama-3.1-70b (131GiB)"
check defaults-whatif 0 "$tf" whatif --question max-rate --quiet "${gen[@]:1}" --target p99-ttft=10s
contains defaults-whatif-note "$tmp/err" "note: --tp not given: TP 2"

# Speculative decoding: drafts by n-gram lookup or a draft model, each accepted with a
# probability until the first rejection; the summary and JSON say what the steps yielded.
spec=(--hw h200-sxm-8gpu --model llama-3.1-70b --tp 4 --quiet --arrivals poisson,rate=1/s,n=200,prompt=lognormal:1500:0.6,output=uniform:100:400,seed=3)
check spec-off 0 "$tf" serve "${spec[@]}" --json
cp "$tmp/out" "$tmp/spec-off.json"
check spec-ngram 0 "$tf" serve "${spec[@]}" --spec-tokens 4 --spec-accept 0.7
contains spec-ngram-setup "$tmp/out" "speculative decoding: up to 4 draft tokens a step from n-gram lookup (no model), each accepted with probability 0.7 until the first rejection (2.77 tokens a step expected)"
contains spec-ngram-run "$tmp/out" "speculative decoding: 18237 decode steps drafted 72509 tokens, 31840 accepted (43.9%); 2.75 tokens a drafting step"
check spec-ngram-json 0 "$tf" serve "${spec[@]}" --spec-tokens 4 --spec-accept 0.7 --json
cp "$tmp/out" "$tmp/spec-ngram.json"
check spec-draft 0 "$tf" serve "${spec[@]}" --spec-tokens 4 --spec-accept 0.7 --spec-draft llama-3-8b --json
ok spec-json python3 -c '
import json, sys
off, ngram, draft = (json.load(open(p)) for p in sys.argv[1:4])
assert "spec" not in off
s = ngram["spec"]
assert (s["tokens"], s["accept"], s["draft"], s["draft_weight_bytes"]) == (4, 0.7, None, 0), s
assert abs(s["expected_tokens_per_step"] - 2.7731) < 1e-3 and s["accepted"] < s["drafted"]
d = draft["spec"]
assert d["draft"] == "llama-3-8b" and d["draft_weight_bytes"] > 0 and d["accepted"] == s["accepted"]
assert draft["weight_bytes"] == ngram["weight_bytes"] + d["draft_weight_bytes"]
assert draft["device_pool_blocks"] < ngram["device_pool_blocks"]
# At this load the drafts pay: n-gram (free) most, a draft model (its passes timed) less.
tpot = lambda j: j["tpot"]["p50_s"]
assert tpot(ngram) < tpot(draft) < tpot(off), (tpot(ngram), tpot(draft), tpot(off))' "$tmp/spec-off.json" "$tmp/spec-ngram.json" "$tmp/out"
check spec-report 0 "$tf" serve "${spec[@]}" --spec-tokens 4 --spec-accept 0.7 --report "$tmp/spec.html"
contains spec-report-facts "$tmp/spec.html" "<tr><th>speculative decoding</th><td>speculative decoding: up to 4 draft tokens a step from n-gram lookup"
check spec-accept-alone 2 "$tf" serve "${spec[@]}" --spec-accept 0.5
contains spec-accept-alone-msg "$tmp/err" "error: --spec-accept: an acceptance probability needs --spec-tokens"
check spec-draft-alone 2 "$tf" serve "${spec[@]}" --spec-draft llama-3-8b
contains spec-draft-alone-msg "$tmp/err" "error: --spec-draft: a draft model needs --spec-tokens"
check spec-draft-vocab 2 "$tf" serve "${spec[@]}" --spec-tokens 3 --spec-draft llama-2-7b
contains spec-draft-vocab-msg "$tmp/err" "error: --spec-draft: the draft llama-2-7b has a vocabulary of 32000 tokens and llama-3.1-70b of 128256"
check spec-draft-unknown 2 "$tf" serve "${spec[@]}" --spec-tokens 3 --spec-draft llama-3-9b
contains spec-draft-unknown-msg "$tmp/err" "error: --spec-draft: unknown model 'llama-3-9b'"
check spec-accept-range 2 "$tf" serve "${spec[@]}" --spec-tokens 3 --spec-accept 1.5
contains spec-accept-range-msg "$tmp/err" "error: --spec-accept: expected a probability from 0 to 1, got 1.5"
check spec-tokens-range 2 "$tf" serve "${spec[@]}" --spec-tokens 65
contains spec-tokens-range-msg "$tmp/err" "error: --spec-tokens: expected 0 (off) to 64 draft tokens, got 65"
# Disaggregated: the prefill replicas compute the draft's KV too, and it is handed over.
check spec-pd 0 "$tf" serve --hw h200-sxm-8gpu --model llama-3.1-70b --tp 2 --quiet --arrivals poisson,rate=1/s,n=200,prompt=lognormal:1500:0.6,output=uniform:100:400,seed=3 --spec-tokens 3 --spec-accept 0.7 --spec-draft llama-3-8b --prefill-replicas 2 --replicas 2 --json
ok spec-pd-json python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["spec"]["steps"] > 0 and d["handoffs"] == 200
assert d["prefill_kv_bytes_per_token"] == d["kv_bytes_per_token"] > d["spec"]["draft_kv_bytes_per_token"] > 0' "$tmp/out"
check spec-cache-only 2 "$tf" serve "${spec[@]}" --spec-tokens 3 --cache-only
contains spec-cache-only-msg "$tmp/err" "error: --spec-tokens: has no effect with --cache-only"

# Questions: the fewest replicas and the highest rate for a latency bound (exit 1 when the
# search finds none), each probe printed.
small=(--hw h100-sxm-8gpu --model llama-3-8b --trace "$trace" --quiet)
check find-replicas 0 "$tf" serve "${small[@]}" --find min-replicas --target p90-ttft=10s
contains find-replicas-answer "$tmp/out" "answer: 3 replicas"
ok find-replicas-probes test "$(grep -cE '^ +[0-9]+  p90-ttft .* (pass|fail)$' "$tmp/out")" = 4
# The fewest devices: every tensor parallelism (from --tp, doubling) and the fewest replicas
# at each; with six devices the most replicas they hold (6, not a power of two) is tried.
busy=(--hw h100-sxm-8gpu --model llama-3-8b --quiet --arrivals poisson,rate=40/s,n=600,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3)
check find-devices 0 "$tf" serve "${busy[@]}" --find min-devices --target p99-tpot=15ms
contains find-devices-answer "$tmp/out" "answer: 6 devices: 3 replicas of TP 2 (p99-tpot 0.01077s)"
contains find-devices-probe "$tmp/out" "TP 1 x 6  p99-tpot   0.01345s  pass"
check find-devices-json 0 "$tf" serve "${busy[@]}" --find min-devices --target p99-tpot=15ms --json
ok find-devices-json-answer python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["question"], d["answer"], d["tp"], d["replicas"]) == ("min-devices", 6, 2, 3), d
assert (d["run"]["tp"], d["run"]["replicas"]) == (2, 3)
assert all(p["tp"] * p["knob"] <= 8 for p in d["probes"]) and d["probes"][0]["tp"] == 1' "$tmp/out"
check find-devices-tp 0 "$tf" serve "${busy[@]}" --find min-devices --target p99-tpot=15ms --tp 2
ok find-devices-tp-from test "$(grep -c 'TP 1 x' "$tmp/out")" = 0
check find-devices-whatif 0 "$tf" whatif --hw h100-sxm-8gpu --model llama-3-8b --quiet --arrivals poisson,rate=40/s,n=600,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3 \
  --question min-devices --target p99-tpot=15ms
contains find-devices-whatif-answer "$tmp/out" "answer: 6 devices: 3 replicas of TP 2"
check find-devices-why 0 "$tf" serve --hw h100-sxm-8gpu --model llama-3-70b --tp 1 --quiet --arrivals poisson,rate=2/s,n=60,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3 \
  --find min-devices --target p99-ttft=10s
contains find-devices-why-msg "$tmp/out" "TP 1 x 1  p99-ttft          -  fail  (the weights of llama-3-70b (131GiB) and the workspace of an iteration of 8192 tokens (1.5GiB) leave no room for a KV block"
check find-devices-pd 2 "$tf" serve "${busy[@]}" --prefill-replicas 1 --find min-devices --target p99-tpot=15ms
contains find-devices-pd-msg "$tmp/err" "error: --find: min-devices counts replicas that prefill and decode; with --prefill-replicas ask split"
# Two TP-1 replicas of Llama-3-70B meet the goodput target while turning away the requests
# whose KV does not fit their pool: the answer says so; at two devices TP 2 serves all, with
# the better goodput, and min-devices takes it.
check find-rejects 0 "$tf" serve --hw h200-sxm-8gpu --model llama-3-70b --trace "$trace" --slo ttft=30s --rate-scale 0.1 --quiet --find min-replicas --target goodput=45%
contains find-rejects-note "$tmp/out" "note: at the answer 36 of the 200 requests are rejected (their KV is larger than a replica's device pool): they count as missing the SLO"
check find-rejects-devices 0 "$tf" serve --hw h200-sxm-8gpu --model llama-3-70b --trace "$trace" --slo ttft=30s --rate-scale 0.1 --quiet --find min-devices --target goodput=45%
contains find-rejects-devices-answer "$tmp/out" "answer: 2 devices: 1 replica of TP 2 (goodput 89.00%)"
check find-replicas-six 0 "$tf" serve "${busy[@]}" --set devices.h100.count=6 --find min-replicas --target p99-ttft=170ms
contains find-replicas-six-answer "$tmp/out" "answer: 6 replicas"
check find-rate 0 "$tf" serve "${small[@]}" --replicas 4 --find max-rate --target p90-ttft=10s --json --summary "$tmp/a.json"
ok find-rate-json python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "tierflow.serve-answer/1" and d["question"] == "max-rate" and d["found"]
passing = [p["knob"] for p in d["probes"] if p["pass"]]
failing = [p["knob"] for p in d["probes"] if not p["pass"]]
assert d["answer"] == max(passing) and (not failing or min(failing) > d["answer"])
assert d["run"]["ttft"]["p90_s"] <= 10 and d["requests_per_s"] > 0' "$tmp/a.json"
check find-none 1 "$tf" serve "${small[@]}" --find min-capacity:ddr --kv-tiers ddr --target hit=90%
contains find-none-msg "$tmp/out" "answer: none within the search"
# The timeline and the report are the answer's run, written once after the search; with no
# answer, neither is written, and a note says so.
check find-report 0 "$tf" serve "${small[@]}" --find min-replicas --target p90-ttft=10s \
  --timeline "$tmp/find-tl.json" --report "$tmp/find.html"
ok find-report-html grep -q "<html" "$tmp/find.html"
ok find-timeline python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["traceEvents"]' "$tmp/find-tl.json"
check find-none-report 1 "$tf" serve "${small[@]}" --find min-capacity:ddr --kv-tiers ddr \
  --target hit=90% --report "$tmp/none.html"
contains find-none-report-note "$tmp/err" "no answer, so no run at it"
ok find-none-no-report test ! -e "$tmp/none.html"
# Per-request rows as JSON Lines (-o FILE.jsonl): the CSV's rows, typed.
check requests-jsonl 0 "$tf" serve "${small[@]}" -o "$tmp/req.jsonl"
check requests-csv 0 "$tf" serve "${small[@]}" -o "$tmp/req.csv"
ok requests-jsonl-equals-csv python3 -c '
import csv, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
table = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == len(table) == 200, (len(rows), len(table))
assert list(rows[0]) == list(table[0]), (list(rows[0]), list(table[0]))
for j, c in zip(rows, table):
    for k, v in c.items():
        if k in ("counted", "rejected"):
            assert j[k] == (v == "1"), (k, j[k], v)
        elif v == "":
            assert j[k] is None, (k, j[k])
        elif k.endswith("_s"):
            assert abs(j[k] - float(v)) <= 5e-10, (k, j[k], v)
        else:
            assert j[k] == int(v), (k, j[k], v)' "$tmp/req.jsonl" "$tmp/req.csv"

# Which single upgrade helps most: every candidate ranked by the metric at 2x; the base's
# value is the plain run's, and the top upgrade applied by hand gives the value it reported.
check find-upgrade 0 "$tf" serve "${small[@]}" --replicas 1 --find upgrade --target p90-ttft=10s --json --summary "$tmp/up.json"
check plain-for-upgrade 0 "$tf" serve "${small[@]}" --replicas 1 --json --summary "$tmp/plain.json"
ok find-upgrade-json python3 -c '
import json, subprocess, sys
a, plain, tf, trace = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
assert a["question"] == "upgrade" and a["found"], a
assert a["base"]["value"] == plain["ttft"]["p90_s"] and not a["base"]["pass"], a["base"]
gains = [u["gain_2x"] for u in a["upgrades"]]
assert gains == sorted(gains, reverse=True), gains
whats = [u["what"] for u in a["upgrades"]]
assert "one replica more" in whats and "tier '"'"'hbm'"'"' capacity (the device memory)" in whats, whats
top = a["upgrades"][0]
assert a["answer"] == top["what"] and top["gain_2x"] > 0.005, top
flag = ["--replicas", "2"] if top["set"] == "replicas=2" else ["--replicas", "1", "--set", top["set"]]
out = subprocess.run([tf, "serve", "--hw", "h100-sxm-8gpu", "--model", "llama-3-8b", "--trace", trace,
                      "--quiet", "--json"] + flag, check=True, capture_output=True, text=True).stdout
assert json.loads(out)["ttft"]["p90_s"] == top["value_2x"], (out, top)
assert a["run"]["ttft"]["p90_s"] == top["value_2x"]' "$tmp/up.json" "$tmp/plain.json" "$tf" "$trace"
# With a timeline the answer's run is made again: the same run, the same document.
check find-upgrade-timeline 0 "$tf" serve "${small[@]}" --replicas 1 --find upgrade --target p90-ttft=10s --json --summary "$tmp/up-tl.json" --timeline "$tmp/up-tl.pftrace.json"
ok find-upgrade-timeline-same cmp "$tmp/up.json" "$tmp/up-tl.json"
ok find-upgrade-timeline-written test -s "$tmp/up-tl.pftrace.json"
check find-upgrade-text 0 "$tf" serve "${small[@]}" --replicas 1 --find upgrade --target p90-ttft=10s
contains find-upgrade-table "$tmp/out" "upgrade"
contains find-upgrade-answer "$tmp/out" "answer: "
check find-no-target 2 "$tf" serve "${small[@]}" --find max-rate
contains find-no-target-msg "$tmp/err" "--find: needs --target"
check target-without-find 2 "$tf" serve "${small[@]}" --target p99-ttft=1s
contains target-without-find-msg "$tmp/err" "--target: needs --find"
check find-bad-question 2 "$tf" serve "${small[@]}" --find max-rates --target p99-ttft=1s
contains find-bad-question-msg "$tmp/err" "did you mean 'max-rate'"
check find-bad-metric 2 "$tf" serve "${small[@]}" --find max-rate --target p99-ttfb=1s
contains find-bad-metric-msg "$tmp/err" "did you mean 'p99-ttft'"
check find-tier-not-given 2 "$tf" serve "${small[@]}" --find min-capacity:ddr --target hit=10%
check find-goodput-without-slo 2 "$tf" serve "${small[@]}" --find max-rate --target goodput=90%

# Swap preemption: a pool tight enough to preempt; the victims swap to DDR and back, and
# nothing is computed twice.
tight=(--hw h100-sxm-8gpu --model llama-3-8b --set tiers.hbm.capacity=19GiB --quiet
  --arrivals "poisson,rate=20/s,n=200,prompt=uniform:512:4096,output=uniform:64:512,seed=9")
check swap 0 "$tf" serve "${tight[@]}" --preemption swap --json --summary "$tmp/swap.json" --timeline "$tmp/swap-tl.json"
ok swap-json python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["preemption"] == "swap" and d["swap_tier"] == "ddr", d
assert d["swap_outs"] > 0 and d["swap_outs"] + d["swap_fallbacks"] == d["preemptions"], d
assert d["recomputed_tokens"] == 0 and d["finished"] == 200, d
names = {e.get("name") for e in json.load(open(sys.argv[2]))["traceEvents"]}
assert "swap out" in names and "swap in" in names, names' "$tmp/swap.json" "$tmp/swap-tl.json"
check swap-text 0 "$tf" serve "${tight[@]}" --preemption swap --swap-space 1GiB --report "$tmp/swap.html"
contains swap-report-row "$tmp/swap.html" "<th>preemption</th><td>preemption by swap to &#39;ddr&#39; (16 blocks"
contains swap-text-line "$tmp/out" "preemption by swap to 'ddr' (16 blocks of swap space per replica)"
check recompute-text 0 "$tf" serve "${tight[@]}"
contains recompute-text-line "$tmp/out" "preemption by recompute: "
check swap-bad-mode 2 "$tf" serve "${tight[@]}" --preemption swapp
contains swap-bad-mode-msg "$tmp/err" "error: --preemption: expected one of recompute, swap, got 'swapp'; did you mean 'swap'"
check swap-space-without-swap 2 "$tf" serve "${tight[@]}" --swap-space 8GiB
contains swap-space-without-swap-msg "$tmp/err" "error: --swap-space: a swap space is only used by swap preemption"
check swap-space-zero 2 "$tf" serve "${tight[@]}" --preemption swap --swap-space 0B
contains swap-space-zero-msg "$tmp/err" "error: --swap-space: expected a size above 0"
check swap-space-huge 2 "$tf" serve "${tight[@]}" --preemption swap --swap-space 1PiB
contains swap-space-huge-msg "$tmp/err" "error: --swap-space: the swap space (1PiB per device, 1 device on 'ddr' instance 0) does not fit"
check swap-tier-unknown 2 "$tf" serve "${tight[@]}" --preemption swap --swap-tier dr
contains swap-tier-unknown-msg "$tmp/err" "error: --swap-tier: no tier 'dr' in 'h100-sxm-8gpu'; did you mean 'ddr'"

# Bad input: exit 2, the flag or position named, nothing written.
check no-source 2 "$tf" serve "${base[@]}"
contains no-source-msg "$tmp/err" "--trace"
check both-sources 2 "$tf" serve "${base[@]}" --trace "$trace" --arrivals "poisson,rate=1/s,n=1,prompt=fixed:1,output=fixed:1"
check unknown-tier 2 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddrr
contains unknown-tier-msg "$tmp/err" "did you mean 'ddr'"
check device-tier 2 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers hbm
check bad-tier-field 2 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:fast
contains bad-tier-field-msg "$tmp/err" "'fast' is neither a capacity"
check bad-slo 2 "$tf" serve "${base[@]}" --trace "$trace" --slo ttfb=2s
contains bad-slo-msg "$tmp/err" "did you mean 'ttft'"
check model-and-hf-config 2 "$tf" serve "${base[@]}" --trace "$trace" --hf-config tests/fixtures/hf/llama.json
contains model-and-hf-config-msg "$tmp/err" "error: --hf-config: give --model or --hf-config, not both"
check too-many-devices 2 "$tf" serve "${base[@]}" --trace "$trace" --replicas 2
contains too-many-devices-msg "$tmp/err" "need 16 devices"
check weights-do-not-fit 2 "$tf" serve --hw h100-sxm-8gpu --model llama-3-70b --tp 1 --quiet --trace "$trace"
contains weights-msg "$tmp/err" "error: --tp: the weights"
contains weights-advice "$tmp/err" "raise the tensor parallelism (tp: 2 is the least that leaves room, for 155 blocks of 512 tokens)"
# Advice that can help, what takes the most first: the iteration's workspace, then a wider
# tensor parallelism; where none up to the class's devices leaves room, narrower weights.
tiny=(--quiet --arrivals poisson,rate=1/s,n=4,prompt=fixed:512,output=fixed:8)
check workspace-do-not-fit 2 "$tf" serve "${tiny[@]}" --model llama-3-8b --tp 1 --token-budget 2M
contains workspace-advice "$tmp/err" "per device: lower the token budget, or raise the tensor parallelism (tp: 4 is the least that leaves room"
check nothing-fits 2 "$tf" serve "${tiny[@]}" --model llama-3.1-405b --hw l40s-server
contains nothing-fits-advice "$tmp/err" "per device: no tensor parallelism up to the 1 device of class 'l40s' leaves room: narrower weights (weight_dtype) or larger devices might"
check bad-trace 2 "$tf" serve "${base[@]}" --trace tests/errors/requests/m03-too-many-hash-ids.jsonl -o "$tmp/never.csv"
grep -qE '^error: tests/errors/requests/m03-too-many-hash-ids.jsonl:[0-9]+:[0-9]+: ' "$tmp/err" && passes=$((passes + 1)) ||
  { echo "FAIL bad-trace: no file:line:col"; cat "$tmp/err"; fails=$((fails + 1)); }
ok bad-trace-nothing-written test ! -e "$tmp/never.csv"
# The trace given again as the output is refused, the trace untouched.
cp "$trace" "$tmp/t.jsonl"
sum=$(sha256sum <"$tmp/t.jsonl")
check output-over-input 2 "$tf" serve "${base[@]}" --trace "$tmp/t.jsonl" -o "$tmp/t.jsonl"
ok output-over-input-untouched test "$(sha256sum <"$tmp/t.jsonl")" = "$sum"

# Settings that contradict each other, or would be ignored, are refused (exit 2), naming one.
check cache-only-find-latency 2 "$tf" serve "${base[@]}" --trace "$trace" --cache-only --find max-rate --target p99-ttft=1s
contains cache-only-find-latency-why "$tmp/err" "error: --target: --cache-only runs no time, so it has no p99-ttft"
check cache-only-timeline 2 "$tf" serve "${base[@]}" --trace "$trace" --cache-only --timeline "$tmp/never.json"
contains cache-only-timeline-why "$tmp/err" "error: --timeline: has no effect with --cache-only"
ok cache-only-timeline-nothing-written test ! -e "$tmp/never.json"
check cache-only-rows 2 "$tf" serve "${base[@]}" --trace "$trace" --cache-only -o "$tmp/never.csv"
contains cache-only-rows-why "$tmp/err" "--cache-only times no request: it has no rows to write"
# The routers other than round-robin read each replica's load and cache as a request
# arrives, which a replay without time does not have: it sent requests in turn regardless.
check cache-only-router 2 "$tf" serve --hw h200-sxm-8gpu --model llama-3-70b --quiet --trace "$trace" --tp 4 --replicas 2 --cache-only --router prefix
contains cache-only-router-why "$tmp/err" "error: --router: 'prefix' routes by what each replica holds and runs when a request arrives, which --cache-only does not have"
check slo-twice 2 "$tf" serve "${base[@]}" --trace "$trace" --slo ttft=2s,ttft=300ms
contains slo-twice-why "$tmp/err" "'ttft=300ms': ttft is bounded twice"
check kv-tier-two-write-modes 2 "$tf" serve "${base[@]}" --trace "$trace" --kv-tiers ddr:back:through
contains kv-tier-two-write-modes-why "$tmp/err" "tier 'ddr' has two write modes, 'back' and 'through'"
check whatif-serve-twice 2 "$tf" whatif --trace "$trace" --question max-rate --target p99-ttft=2s --serve replicas=1 --serve replicas=2
contains whatif-serve-twice-why "$tmp/err" "--serve replicas: given twice"
# max-rate: a trace whose requests all arrive at once has no rate to scale; a search that
# passes every probe answers a lower bound.
printf '%s\n' '{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}' \
  '{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [2]}' >"$tmp/once.jsonl"
check max-rate-at-once 2 "$tf" serve "${base[@]}" --trace "$tmp/once.jsonl" --find max-rate --target p99-ttft=10s
contains max-rate-at-once-why "$tmp/err" "all 2 requests of $tmp/once.jsonl arrive at once: there is no rate to scale"
printf '%s\n' '{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}' \
  '{"timestamp": 50, "input_length": 100, "output_length": 2, "hash_ids": [2]}' >"$tmp/spread.jsonl"
check max-rate-at-limit 0 "$tf" serve "${base[@]}" --trace "$tmp/spread.jsonl" --find max-rate --target p99-ttft=10s --json
ok max-rate-at-limit-json python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))
assert a["found"] and a["at_limit"] and a["answer"] == 1024, a["answer"]' "$tmp/out"

# A TPOT target on one-token outputs: no request has a TPOT, refused (every probe failed).
check find-tpot-one-token 2 "$tf" serve --hw h100-sxm-8gpu --model llama-3-8b --quiet \
  --arrivals "poisson,rate=5/s,n=20,prompt=fixed:100,output=fixed:1" --find max-rate --target p99-tpot=1ms
contains find-tpot-one-token-msg "$tmp/err" "--target: p99-tpot: no request of --arrivals generates more than one token"
# A rejected request (its KV larger than the device pool) is counted and meets no SLO.
printf '%s\n' '{"timestamp": 0, "input_length": 100, "output_length": 16777216, "hash_ids": [7]}' >>"$tmp/spread.jsonl"
check rejected-counted 0 "$tf" serve --hw h100-sxm-8gpu --model llama-3-8b --quiet --trace "$tmp/spread.jsonl" --slo ttft=10s
contains rejected-counted-requests "$tmp/out" "requests 3 counted, 2 finished, 1 rejected"
contains rejected-counted-goodput "$tmp/out" "2 of 3 requests (66.7%)"
# Its prompt meets no cache and is never computed: tokens of the two served alone.
contains rejected-not-computed "$tmp/out" "prompt tokens 200, computed 200 (0.0% hit)"
# The span starts at the first counted arrival, a rejected one included: here the rejected
# request arrives first (at 0), the served ones at 1 s and 1.05 s.
printf '%s\n' '{"timestamp": 0, "input_length": 100, "output_length": 16777216, "hash_ids": [7]}' \
  '{"timestamp": 1000, "input_length": 100, "output_length": 2, "hash_ids": [1]}' \
  '{"timestamp": 1050, "input_length": 100, "output_length": 2, "hash_ids": [2]}' >"$tmp/late.jsonl"
check rejected-first-span 0 "$tf" serve --hw h100-sxm-8gpu --model llama-3-8b --quiet --trace "$tmp/late.jsonl" \
  --json --summary "$tmp/late.json" -o "$tmp/late.csv"
ok rejected-first-span-json python3 -c '
import csv, json, sys
d = json.load(open(sys.argv[1]))
last = max(float(r["arrival_s"]) + float(r["e2e_s"]) for r in csv.DictReader(open(sys.argv[2]))
           if r["rejected"] == "0")
assert abs(d["requests_per_s"] - 2 / last) < 1e-7 * d["requests_per_s"], (d["requests_per_s"], 2 / last)' \
  "$tmp/late.json" "$tmp/late.csv"
# A generator's groups cost only those its requests draw: 131,072 groups of a 1M-token
# system prompt and one request (the spec's blocks, counted up front, were over the limit).
check many-groups-one-request 0 "$tf" serve --hw h100-sxm-8gpu --model llama-3-8b --quiet --cache-only \
  --arrivals poisson,rate=5/s,n=1,prompt=fixed:10,output=fixed:1,groups=131072,system=1048576
contains many-groups-one-request-prompt "$tmp/out" "prompt tokens 1048586"
# The setting at fault is named: one replica too wide is --tp's; a workspace larger than
# the weights is --token-budget's.
check one-replica-too-wide 2 "$tf" serve --hw h100-sxm-8gpu --model llama-3-8b --quiet --arrivals poisson,rate=5/s,n=3,prompt=fixed:100,output=fixed:4 --tp 16
contains one-replica-too-wide-names-tp "$tmp/err" "error: --tp: 1 replica of TP 16 needs 16 devices"
check token-budget-too-large 2 "$tf" serve --hw h100-sxm-8gpu --model llama-3-8b --quiet --arrivals poisson,rate=5/s,n=3,prompt=fixed:100,output=fixed:4 --token-budget 10000000
contains token-budget-too-large-names-it "$tmp/err" "error: --token-budget: the weights"
# -o - puts the rows on standard output, alone: the summary goes to standard error (it
# came first on standard output, which made the CSV unreadable); --summary FILE keeps it.
arr=(--arrivals "poisson,rate=2/s,n=3,prompt=fixed:64,output=fixed:2")
check rows-on-stdout 0 "$tf" serve --model llama-3-8b --quiet -o - "${arr[@]}"
ok rows-on-stdout-csv-only python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 3 and rows[0]["id"] == "0", rows' "$tmp/out"
contains rows-on-stdout-summary-on-stderr "$tmp/err" "serve llama-3-8b on h100-sxm-8gpu"
check rows-on-stdout-summary-file 0 "$tf" serve --model llama-3-8b --quiet -o - --summary "$tmp/sum.txt" "${arr[@]}"
contains rows-on-stdout-summary-file-written "$tmp/sum.txt" "serve llama-3-8b on h100-sxm-8gpu"
# KV tiers listed slower first are taken as written, with a note naming both (on a search
# too, and through whatif's service questions); nearest first, no note.
check kv-order-slower-first 0 "$tf" serve --model llama-3-8b --quiet --kv-tiers ssd:1%,ddr:1% "${arr[@]}"
contains kv-order-note "$tmp/err" "note: --kv-tiers: 'ssd' comes before 'ddr', whose blocks reach the device faster (53.76GB/s after 6.1us, against 53.76GB/s after 66.5us)"
check kv-order-nearest-first 0 "$tf" serve --model llama-3-8b --quiet --kv-tiers ddr:1%,ssd:1% "${arr[@]}"
if grep -q "note:" "$tmp/err"; then echo "FAIL kv-order-nearest-first: $(cat "$tmp/err")"; fails=$((fails + 1)); else passes=$((passes + 1)); fi
check kv-order-find 0 "$tf" serve --model llama-3-8b --quiet --kv-tiers ssd:1%,ddr:1% "${arr[@]}" \
  --find max-rate --target p99-ttft=10s
contains kv-order-find-note "$tmp/err" "note: --kv-tiers: 'ssd' comes before 'ddr'"
check kv-order-whatif 0 "$tf" whatif --model llama-3-8b --quiet "${arr[@]}" --question max-rate \
  --target p99-ttft=10s --serve kv_tiers=ssd:1%,ddr:1%
contains kv-order-whatif-note "$tmp/err" "note: --serve kv_tiers: 'ssd' comes before 'ddr'"
# Requests longer than the model's max_context are served, with a note that counts them (as
# compare and whatif warn of a step past it); weights wider than the checkpoint, the same.
check past-context 0 "$tf" serve --model llama-2-7b --quiet --weight-dtype fp32 \
  --arrivals poisson,rate=2/s,n=4,prompt=fixed:4000,output=fixed:200,groups=2,system=512
contains past-context-note "$tmp/err" "note: 4 of the 4 requests span more positions (prompt and output) than the 4096 that llama-2-7b declares (max_context, source CTX-L2), the longest 4712; results past it assume the model runs that far"
contains past-context-weights-note "$tmp/err" "note: llama-2-7b's checkpoint holds fp16 weights (checkpoint_dtype); these are fp32, 2x its bytes: --weight-dtype fp16 plans them as shipped"
check within-context 0 "$tf" serve --model llama-2-7b --quiet "${arr[@]}"
if grep -q "note:" "$tmp/err"; then echo "FAIL within-context: $(cat "$tmp/err")"; fails=$((fails + 1)); else passes=$((passes + 1)); fi
# --warmup says what is wrong with the duration, as every duration does.
check warmup-overflow 2 "$tf" serve --model llama-3-8b --quiet "${arr[@]}" --warmup 1e300s
contains warmup-overflow-msg "$tmp/err" "error: --warmup: '1e300s' is too large: it overflows the 64-bit picosecond count"
check warmup-minutes 2 "$tf" serve --model llama-3-8b --quiet "${arr[@]}" --warmup 5min
contains warmup-minutes-msg "$tmp/err" "(write minutes in seconds, e.g. 60s for 1min)"
# An error of the setup comes alone: no note about the requests it would have served.
check notes-not-before-error 2 "$tf" serve --model llama-2-7b --quiet --kv-tiers nvme \
  --arrivals poisson,rate=2/s,n=4,prompt=fixed:4000,output=fixed:200
ok notes-not-before-error-alone test "$(cat "$tmp/err")" = "error: --kv-tiers: no tier 'nvme' in 'h100-sxm-8gpu' (its tiers: hbm, ddr, ssd)"
# So in a search, whose first probe refuses the setup (serve --find, whatif of a service);
# a search that runs tells the notes.
long=(--model llama-2-7b --quiet --arrivals poisson,rate=2/s,n=4,prompt=fixed:4000,output=fixed:200)
check find-notes-not-before-error 2 "$tf" serve "${long[@]}" --kv-tiers nvme --find max-rate --target p99-ttft=2s
ok find-notes-not-before-error-alone test "$(cat "$tmp/err")" = "error: --kv-tiers: no tier 'nvme' in 'h100-sxm-8gpu' (its tiers: hbm, ddr, ssd)"
check whatif-notes-not-before-error 2 "$tf" whatif "${long[@]}" --question max-rate --target p99-ttft=2s --serve kv_tiers=nvme
ok whatif-notes-not-before-error-alone test "$(cat "$tmp/err")" = "error: --serve kv_tiers: no tier 'nvme' in 'h100-sxm-8gpu' (its tiers: hbm, ddr, ssd)"
check whatif-notes-of-a-search 0 "$tf" whatif "${long[@]}" --question max-rate --target p99-ttft=2s
contains whatif-notes-of-a-search-told "$tmp/err" "note: 4 of the 4 requests span more positions"
check rows-and-summary-on-stdout 2 "$tf" serve --model llama-3-8b --quiet -o - --summary - "${arr[@]}"
contains rows-and-summary-on-stdout-refused "$tmp/err" "--summary and -o both write to standard output"

# Disaggregated prefill and decode: prompts on a prefill replica, their KV handed to the
# decode replicas over NVLink; every request decodes on a decode replica; the hand-over in
# the summary, the JSON, the rows and the timeline; a search and whatif take the field too.
pd=(--model llama-3-8b --quiet --arrivals poisson,rate=2/s,n=60,prompt=uniform:2048:6144,output=uniform:16:128,seed=4)
check pd 0 "$tf" serve "${pd[@]}" --prefill-replicas 1 --replicas 2 -o "$tmp/pd.csv" --timeline "$tmp/pd-tl.json"
contains pd-title "$tmp/out" "serve llama-3-8b on h100-sxm-8gpu: 1 prefill replica x TP 1 and 2 decode replicas x TP 1 (3 of the 8 h100)"
contains pd-handoff "$tmp/out" "disaggregated: 60 requests handed from prefill to decode replicas"
contains pd-nvlink "$tmp/out" "nvlink[0] hbm->nvswitch"
ok pd-rows python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 60
assert list(rows[0])[:5] == ["id", "replica", "decode_replica", "handoff_s", "handoff_wait_s"], list(rows[0])
assert all(0 <= float(r["handoff_wait_s"]) <= float(r["handoff_s"]) for r in rows)
assert {r["replica"] for r in rows} == {"0"} and {r["decode_replica"] for r in rows} == {"1", "2"}
assert all(0 < float(r["handoff_s"]) < 0.01 for r in rows)' "$tmp/pd.csv"
ok pd-timeline python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
procs = {e["args"]["name"] for e in d["traceEvents"] if e.get("name") == "process_name"}
assert "prefill replica 0 (devices 0-0)" in procs and "decode replica 2 (devices 2-2)" in procs, procs
assert any(e.get("name") == "handoff" for e in d["traceEvents"])' "$tmp/pd-tl.json"
check pd-report 0 "$tf" serve "${pd[@]}" --prefill-replicas 1 --replicas 2 --report "$tmp/pd.html"
contains pd-report-title "$tmp/pd.html" "1 prefill replica x TP 1 and 2 decode replicas x TP 1 (h100)"
contains pd-report-handoff-cdf "$tmp/pd.html" "hand-over (ms)"
contains pd-report-facts "$tmp/pd.html" "<tr><th>hand-over</th><td>disaggregated: 60 requests handed"
contains pd-report-replicas "$tmp/pd.html" "<h4>decode replica 2</h4>"
check pd-json 0 "$tf" serve "${pd[@]}" --prefill-replicas 1 --replicas 2 --json
ok pd-json-fields python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["prefill_replicas"] == 1 and d["replicas"] == 2 and d["handoffs"] == 60, d
assert 0 < d["handoff"]["p50_s"] <= d["handoff"]["p99_s"] < 0.01, d["handoff"]
assert 0 <= d["handoff_wait"]["p99_s"] <= d["handoff"]["p99_s"], d["handoff_wait"]' "$tmp/out"
check pd-colocated-json 0 "$tf" serve "${pd[@]}" --replicas 3 --json
ok pd-colocated-no-handoff python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["prefill_replicas"] == 0 and "handoff" not in d and "handoffs" not in d' "$tmp/out"
check pd-upgrade 0 "$tf" serve "${pd[@]}" --prefill-replicas 1 --replicas 1 --find upgrade --target p99-ttft=1s
contains pd-upgrade-prefill "$tmp/out" "one prefill replica more"
contains pd-upgrade-decode "$tmp/out" "one decode replica more"
check pd-whatif 0 "$tf" whatif --model llama-3-8b --quiet --arrivals poisson,rate=2/s,n=60,prompt=uniform:2048:6144,output=uniform:16:128,seed=4 \
  --question min-replicas --target p99-tpot=50ms --serve prefill_replicas=1
contains pd-whatif-answer "$tmp/out" "answer: 1 decode replicas (beside 1 prefill)"
check pd-too-many 2 "$tf" serve "${pd[@]}" --prefill-replicas 5 --replicas 4
contains pd-too-many-msg "$tmp/err" "error: --prefill-replicas: 5 prefill and 4 decode replicas of TP 1 need 9 devices; 'h100-sxm-8gpu' has 8 of class 'h100'"
# Two nodes of a topology that models no network: what would join them is said.
check pd-no-network 2 "$tf" serve "${pd[@]}" --hw ascend-910b-8npu --nodes 2 --tp 1 --prefill-replicas 8 --replicas 8
contains pd-no-network-msg "$tmp/err" "has none from device 0 to device 8 (they are on different hosts, and its 'hccs' links join the devices of one); it models no scale-out network to join them: a switch \`per: cluster\` that each device reaches over a link of its own (docs/hardware.md)"
check pd-no-peer-route 2 "$tf" serve "${pd[@]}" --hw a100-nvme-bounce --prefill-replicas 1
contains pd-no-peer-route-msg "$tmp/err" "error: --prefill-replicas: disaggregated prefill hands each request's KV cache from a prefill replica's devices to a decode replica's over the peer route of 'hbm' (or a wider one: a scale-out network), and 'a100-nvme-bounce' has none"
# Prefill at one tensor parallelism, decode at another: each decode device's shard comes
# from the prefill devices holding its part of the KV heads.
pd70=(--hw h200-sxm-8gpu --model llama-3-70b --quiet --arrivals poisson,rate=1/s,n=20,prompt=fixed:4096,output=fixed:16)
check pd-tp 0 "$tf" serve "${pd70[@]}" --tp 2 --replicas 2 --prefill-replicas 1 --prefill-tp 4 --json
ok pd-tp-json python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["tp"], d["prefill_tp"], d["handoffs"]) == (2, 4, 20), d
assert d["prefill_weight_bytes"] * 2 < d["weight_bytes"] * 1.01, d' "$tmp/out"
check pd-tp-text 0 "$tf" serve "${pd70[@]}" --tp 2 --replicas 2 --prefill-replicas 1 --prefill-tp 4
contains pd-tp-title "$tmp/out" "serve llama-3-70b on h200-sxm-8gpu: 1 prefill replica x TP 4 and 2 decode replicas x TP 2 (h200)"
contains pd-tp-memory "$tmp/out" "device memory per device (prefill): weights 32.9GiB"
check pd-tp-alone 2 "$tf" serve "${pd70[@]}" --tp 2 --prefill-tp 4
contains pd-tp-alone-msg "$tmp/err" "error: --prefill-tp: the prefill replicas' tensor parallelism needs --prefill-replicas (without prefill replicas it would be ignored)"
check pd-tp-heads 2 "$tf" serve "${pd70[@]}" --tp 2 --prefill-replicas 1 --prefill-tp 3
contains pd-tp-heads-msg "$tmp/err" "error: --prefill-tp: tp 3 does not divide the 64 attention heads of llama-3-70b"
check pd-tp-devices 2 "$tf" serve "${pd70[@]}" --tp 2 --prefill-replicas 2 --prefill-tp 4
contains pd-tp-devices-msg "$tmp/err" "error: --prefill-replicas: 2 prefill replicas of TP 4 and 1 decode replica of TP 2 need 10 devices; 'h200-sxm-8gpu' has 8 of class 'h200'"
check pd-negative 2 "$tf" serve "${pd[@]}" --prefill-replicas -1
contains pd-negative-msg "$tmp/err" "--prefill-replicas"
# The decode router: least-loaded by default; in turn, each decode replica takes every
# other request; by prefix, a session's next turn goes to the replica holding the last one,
# so fewer blocks are copied.
turns=(--model llama-3-8b --quiet --arrivals poisson,rate=4/s,n=200,turns=2,think=5s,prompt=fixed:2048,output=fixed:300,seed=3 --prefill-replicas 1 --replicas 2 --json)
check pd-decode-load 0 "$tf" serve "${turns[@]}"
cp "$tmp/out" "$tmp/pd-load.json"
check pd-decode-prefix 0 "$tf" serve "${turns[@]}" --decode-router prefix
cp "$tmp/out" "$tmp/pd-prefix.json"
check pd-decode-turn 0 "$tf" serve "${turns[@]}" --decode-router round-robin -o "$tmp/pd-turn.csv"
ok pd-decode-router-json python3 -c '
import csv, json, sys
load, prefix = (json.load(open(p)) for p in sys.argv[1:3])
assert (load["decode_router"], prefix["decode_router"]) == ("least-loaded", "prefix")
assert load["handoffs"] == prefix["handoffs"] == 200
assert prefix["handoff_blocks"] < 0.85 * load["handoff_blocks"], (prefix["handoff_blocks"], load["handoff_blocks"])
rows = list(csv.DictReader(open(sys.argv[3])))
assert sorted(r["decode_replica"] for r in rows).count("1") == 100, rows' "$tmp/pd-load.json" "$tmp/pd-prefix.json" "$tmp/pd-turn.csv"
check pd-decode-router-alone 2 "$tf" serve "${pd[@]}" --decode-router prefix
contains pd-decode-router-alone-msg "$tmp/err" "error: --decode-router: how a decode replica is chosen needs --prefill-replicas (without prefill replicas it would be ignored)"
check pd-decode-router-kv 2 "$tf" serve "${pd[@]}" --prefill-replicas 1 --decode-router kv-aware
contains pd-decode-router-kv-msg "$tmp/err" "error: --decode-router: kv-aware weighs the prompt tokens a replica would compute, and a decode replica computes none"
check pd-decode-router-bad 2 "$tf" serve "${pd[@]}" --prefill-replicas 1 --decode-router prefixes
contains pd-decode-router-bad-msg "$tmp/err" "error: --decode-router:"
contains pd-decode-router-bad-hint "$tmp/err" "did you mean 'prefix'?"
# How to split: every division of the replicas between prefill and decode, colocated too;
# the answer meets the target best. A division the devices cannot hold fails alone.
split=(--hw h200-sxm-8gpu --model llama-3-70b --tp 2 --quiet --arrivals poisson,rate=1.5/s,n=300,prompt=lognormal:6000:0.8,output=uniform:100:400,seed=4)
check split 0 "$tf" serve "${split[@]}" --replicas 4 --find split --target p99-tpot=40ms
contains split-colocated "$tmp/out" "   4 colocated  p99-tpot"
contains split-division "$tmp/out" "           3:1  p99-tpot"
contains split-answer "$tmp/out" "answer: 1 prefill and 3 decode replicas (p99-tpot"
contains split-run "$tmp/out" "serve llama-3-70b on h200-sxm-8gpu: 1 prefill replica x TP 2 and 3 decode replicas x TP 2 (h200)"
check split-json 0 "$tf" serve "${split[@]}" --replicas 4 --find split --target p99-tpot=40ms --json
ok split-json-best python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["question"] == "split" and d["replicas"] == 4 and d["found"], d
assert [p["knob"] for p in d["probes"]] == [0, 1, 2, 3]
best = min((p["value"], p["knob"]) for p in d["probes"] if p["pass"])
assert d["answer"] == best[1] == d["run"]["prefill_replicas"] and d["run"]["replicas"] == 4 - best[1], d' "$tmp/out"
check split-whatif 0 "$tf" whatif --hw h200-sxm-8gpu --model llama-3-70b --tp 2 --quiet --arrivals poisson,rate=1.5/s,n=300,prompt=lognormal:6000:0.8,output=uniform:100:400,seed=4 \
  --question split --target p99-tpot=40ms --serve replicas=4
contains split-whatif-answer "$tmp/out" "answer: 1 prefill and 3 decode replicas"
check split-devices 0 "$tf" serve "${split[@]}" --prefill-replicas 1 --prefill-tp 4 --replicas 2 --find split --target p99-tpot=1s --json
ok split-devices-alone python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
p = {q["knob"]: q for q in d["probes"]}
assert d["replicas"] == 3 and p[2]["value"] is None and not p[2]["pass"], d["probes"]
assert p[0]["pass"] and p[1]["pass"], d["probes"]' "$tmp/out"
check split-one-replica 2 "$tf" serve "${split[@]}" --replicas 1 --find split --target p99-tpot=40ms
contains split-one-replica-msg "$tmp/err" "error: --find: split divides the replicas between prefill and decode: give at least 2 (--replicas and --prefill-replicas together; now 1)"
check split-cache-only 2 "$tf" serve "${split[@]}" --replicas 4 --cache-only --find split --target hit=10%
contains split-cache-only-msg "$tmp/err" "error: --find: split compares prefill and decode, which --cache-only does not run"

# Pipeline parallelism: a model no node holds (Llama-3.1-405B in bf16 on H100s) is served
# across two in stages; --tp and --pp not given, the least stages at which one fits.
check pp-nodes 0 "$tf" serve "${gen[@]}" --model llama-3.1-405b --nodes 2
contains pp-nodes-title "$tmp/out" "serve llama-3.1-405b on 2 x h100-sxm-8gpu: 1 replica x TP 8 x PP 2 (h100)"
contains pp-nodes-note "$tmp/err" "note: --tp and --pp not given: no TP leaves llama-3.1-405b room for KV on one host's devices; 2 pipeline stages of TP 8 are the least that do"
contains pp-nodes-memory "$tmp/out" "device memory per device (of the pipeline stage holding the most): weights 47.3GiB"
check pp-nodes-json 0 "$tf" serve "${gen[@]}" --model llama-3.1-405b --nodes 4 --json
ok pp-nodes-json-fields python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert (j["tp"], j["pp"], j["replicas"], j["devices"]) == (8, 2, 2, 32), j' "$tmp/out"
check pp-one-node 2 "$tf" serve "${gen[@]}" --model llama-3.1-405b
contains pp-one-node-msg "$tmp/err" "no tensor parallelism up to the 8 devices of class 'h100' leaves room: narrower weights (weight_dtype) or larger devices might; or 2 nodes (--nodes 2) serve it in 2 pipeline stages of TP 8 (1992 blocks of 512 tokens a replica)"
# Stages where no route carries the activations are not offered (nor refused as --pp).
check pp-no-route 2 "$tf" serve "${gen[@]}" --model llama-3.1-405b --hw a100-nvme-bounce
contains pp-no-route-msg "$tmp/err" "no tensor parallelism up to the 4 devices of class 'a100' leaves room: narrower weights (weight_dtype) or larger devices might"
ok pp-no-route-no-pp python3 -c 'import sys; t = open(sys.argv[1]).read(); assert "--pp" not in t and "nodes" not in t, t' "$tmp/err"
check pp-tp-given 2 "$tf" serve "${gen[@]}" --model llama-3.1-405b --nodes 2 --tp 8
contains pp-tp-given-msg "$tmp/err" "split the layers into pipeline stages (pp: 2 stages of TP 8 are the least that leave room, for 1992 blocks of 512 tokens)"
check pp-tp4-given 2 "$tf" serve "${gen[@]}" --model llama-3.1-405b --nodes 2 --tp 4
contains pp-tp4-given-msg "$tmp/err" "(pp: 3 stages of TP 4 are the least that leave room, for 702 blocks of 512 tokens)"
# Given: replicas fill the devices by TP x PP; the timeline has a track per batch in flight.
check pp-given 0 "$tf" serve "${gen[@]}" --model llama-3-8b --tp 2 --pp 2 --timeline "$tmp/pp-tl.json"
contains pp-given-title "$tmp/out" "2 replicas x TP 2 x PP 2 (h100)"
ok pp-given-timeline python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
names = {e["args"]["name"] for e in d["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name"}
assert {"batch 0", "batch 1"} <= names, names' "$tmp/pp-tl.json"
check pp-again 0 "$tf" serve "${gen[@]}" --model llama-3-8b --tp 2 --pp 2 --timeline "$tmp/pp-tl2.json"
ok pp-deterministic cmp -s "$tmp/pp-tl.json" "$tmp/pp-tl2.json"
# Disaggregated with stages: 405B prefill on two servers, decode on the other two; each
# decode device's KV shard from its stage's prefill device, over the NICs.
check pp-pd 0 "$tf" serve "${gen[@]}" --model llama-3.1-405b --nodes 4 --prefill-replicas 1 --replicas 1
contains pp-pd-title "$tmp/out" "1 prefill replica x TP 8 x PP 2 and 1 decode replica x TP 8 x PP 2 (h100)"
contains pp-pd-nic "$tmp/out" "nic[0] rc->ib"
contains pp-pd-nic-in "$tmp/out" "nic[16] ib->rc"
check pp-pd-json 0 "$tf" serve "${gen[@]}" --model llama-3.1-405b --nodes 4 --prefill-replicas 1 --replicas 1 --json
ok pp-pd-json-fields python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert (j["pp"], j["devices"], j["handoffs"], j["finished"]) == (2, 32, 50, 50), j
over = {e["name"]: e["bytes"] for e in j["resources"]}
# Stage 0 rank 0 to stage 0 rank 0 (device 0 to 16), stage 1 to stage 1 (8 to 24), alike.
assert over["nic[0] rc->ib"] == over["nic[8] rc->ib"] > 0, over' "$tmp/out"
check pp-spec 2 "$tf" serve "${gen[@]}" --model llama-3-8b --tp 2 --pp 2 --spec-tokens 2 --spec-accept 0.6
contains pp-spec-msg "$tmp/err" "error: --pp: pipeline parallelism is modelled without speculative decoding (the draft's passes and stages are not)"
check pp-no-network 2 "$tf" serve "${gen[@]}" --hw ascend-910b-8npu --model llama-3-70b --nodes 2 --tp 8 --pp 2
contains pp-no-network-msg "$tmp/err" "error: --pp: pipeline stage 0 sends its activations to stage 1 over the peer route of 'hbm' (or a wider one: a scale-out network), and '2 x ascend-910b-8npu' has none from device 0 to device 8"
check pp-min-devices 0 "$tf" serve --quiet --model llama-3-70b --tp 2 --pp 2 --arrivals poisson,rate=4/s,n=200,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3 --find min-devices --target p99-tpot=60ms --json
ok pp-min-devices-json python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["found"] and j["pp"] == 2 and j["answer"] == j["replicas"] * j["tp"] * j["pp"], j
assert j["run"]["pp"] == 2, j["run"]["pp"]' "$tmp/out"

# Stages chosen, not given: min-devices tries each TP with the least stages that fit it.
check pp-min-devices-search 0 "$tf" serve --quiet --model llama-3.1-405b --nodes 2 --arrivals poisson,rate=0.5/s,n=200,prompt=lognormal:2000:0.6,output=lognormal:300:0.6,seed=3 --find min-devices --target p99-tpot=200ms --json
ok pp-min-devices-search-json python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert (j["answer"], j["tp"], j["pp"], j["replicas"]) == (12, 4, 3, 1), j
assert [(p["tp"], p["pp"]) for p in j["probes"]] == [(1, 11), (2, 6), (4, 3)], j["probes"]' "$tmp/out"
check pp-min-devices-search-text 0 "$tf" serve --quiet --model llama-3.1-405b --nodes 2 --arrivals poisson,rate=0.5/s,n=200,prompt=lognormal:2000:0.6,output=lognormal:300:0.6,seed=3 --find min-devices --target p99-tpot=200ms
contains pp-min-devices-search-answer "$tmp/out" "answer: 12 devices: 1 replica of TP 4 x PP 3 on 2 of the 2 nodes"

finish
