#!/usr/bin/env bash
# End-to-end tests of `tierflow sweep`: results in SQLite, byte-identical exports, resume
# after kill -9 at several moments (no lost or duplicate row), shards merged equal to the
# unsharded sweep, failed points recorded and retried only when asked, and databases
# that refuse another spec or shard.
# Usage: sweep_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$1
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
small=tests/e2e/sweep/small.yaml
kill_spec=tests/e2e/sweep/kill.yaml

rows() {  # rows DB: "ROWS DISTINCT_POINTS" of the results table
  python3 -c '
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(*c.execute("SELECT count(*), count(DISTINCT point) FROM results").fetchone())' "$1"
}
same() {  # same NAME FILE1 FILE2: byte-identical
  if cmp -s "$2" "$3"; then passes=$((passes + 1)); else
    echo "FAIL $1: $2 and $3 differ"; diff "$2" "$3" | head -5; fails=$((fails + 1)); fi
}

# A whole sweep, its exports, and a rerun that finds everything recorded.
check dry-run 0 "$tf" sweep "$small" --dry-run --shard 1/3
contains dry-run-count "$tmp/out" "36 points, shard 1/3 holds 12"
contains dry-run-zipped "$tmp/out" "batch (zipped): 1, 8"
# A value twice in an axis would run its points twice: refused at the second, before any
# database; zipped axes are told apart by the whole tuple.
printf 'name: twice\nbase:\n  model: llama-3-8b\n  layers: 1\naxes:\n  - batch: [1, 2, 1]\n' >"$tmp/twice.yaml"
check axis-value-twice 2 "$tf" sweep "$tmp/twice.yaml" -o "$tmp/twice.db"
contains axis-value-twice-msg "$tmp/err" "twice.yaml:6:19: batch=1 appears twice in the axis (first at $tmp/twice.yaml:6:13)"
ok axis-value-twice-no-db test ! -e "$tmp/twice.db"
printf 'name: zip\nbase:\n  model: llama-3-8b\n  layers: 1\naxes:\n  - batch: [1, 1]\n    context: [512, 1024]\n' >"$tmp/zip.yaml"
check axis-zipped-repeat 0 "$tf" sweep "$tmp/zip.yaml" --dry-run
# Rows on standard output are the whole of it: the summary goes to stderr.
check csv-stdout 0 "$tf" sweep "$tmp/zip.yaml" -o "$tmp/zip.db" --quiet --csv -
ok csv-stdout-parses python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2 and rows[0]["point"] == "0", rows[:1]' "$tmp/out"
contains csv-stdout-summary "$tmp/err" "2 points"
check full 0 "$tf" sweep "$small" -o "$tmp/full.db" --jobs 2 --csv "$tmp/full-run.csv" --jsonl "$tmp/full.jsonl"
contains full-summary "$tmp/out" "ran 36 (0 already recorded)"
contains full-outcomes "$tmp/out" "30 ok, 6 infeasible, 0 failed"
ok full-rows test "$(rows "$tmp/full.db")" = "36 36"
check full-export 0 "$tf" sweep export "$tmp/full.db"
cp "$tmp/out" "$tmp/full.csv"
same full-export-equals-run-csv "$tmp/full.csv" "$tmp/full-run.csv"
ok full-csv-lines test "$(wc -l <"$tmp/full.csv")" = 37
ok full-header python3 -c '
import csv, sys
head = next(csv.reader(open(sys.argv[1])))
assert head[:3] == ["point", "links.gpu-pcie.bandwidth", "exit_class"], head[:3]
for c in ("batch", "context", "policy", "makespan_s", "device_peak_gib", "status", "pcie_gib"):
    assert c in head, c' "$tmp/full.csv"
ok full-jsonl python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 36
assert [r["point"] for r in rows] == list(range(36))
# zipped: batch 1 goes with context 512, batch 8 with 2048
assert {(r["batch"], r["context"]) for r in rows} == {(1, 512), (8, 2048)}
assert all(isinstance(r["makespan_s"], float) for r in rows if r["status"] == "ok")
assert {r["status"] for r in rows if r["policy"] == "resident"} == {"infeasible"}
assert all(r["exit_class"] == (0 if r["status"] == "ok" else 1) for r in rows)' "$tmp/full.jsonl"
check rerun 0 "$tf" sweep "$small" -o "$tmp/full.db" --jobs 2
contains rerun-skips "$tmp/out" "ran 0 (36 already recorded)"
ok rerun-rows test "$(rows "$tmp/full.db")" = "36 36"
# Started from another folder it is the same sweep: it resumes, nothing runs.
check rerun-elsewhere 0 bash -c 'cd tests/e2e && "$1" sweep sweep/small.yaml -o "$2"' _ "$(realpath "$tf")" "$tmp/full.db"
contains rerun-elsewhere-skips "$tmp/out" "ran 0 (36 already recorded)"
# Same inputs, byte-identical results, whatever the number of jobs.
check one-job 0 "$tf" sweep "$small" -o "$tmp/one.db" --jobs 1
check one-job-export 0 "$tf" sweep export "$tmp/one.db" --csv "$tmp/one.csv"
same one-job-equals-two "$tmp/full.csv" "$tmp/one.csv"

# kill -9 at several moments: before the first row, and after about a quarter, half and
# three quarters of the rows; each rerun resumes. No row is lost or duplicated and the
# results equal an uninterrupted sweep's.
check kill-reference 0 "$tf" sweep "$kill_spec" -o "$tmp/kill-ref.db" --jobs 2
check kill-reference-export 0 "$tf" sweep export "$tmp/kill-ref.db" --csv "$tmp/kill-ref.csv"
killed=0
for at in 0 12 24 36; do
  "$tf" sweep "$kill_spec" -o "$tmp/kill.db" --jobs 2 --quiet >"$tmp/kill-out" 2>&1 &
  pid=$!
  if [ "$at" -gt 0 ]; then
    # Wait (bounded) until the database holds at least $at rows.
    for _ in $(seq 1 3000); do
      n=$(python3 -c '
import sqlite3, sys
try:
    print(sqlite3.connect(sys.argv[1], timeout=5).execute("SELECT count(*) FROM results").fetchone()[0])
except sqlite3.Error:
    print(0)' "$tmp/kill.db" 2>/dev/null || echo 0)
      [ "${n:-0}" -ge "$at" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.01
    done
  fi
  if kill -9 "$pid" 2>/dev/null; then killed=$((killed + 1)); fi
  wait "$pid" 2>/dev/null
  if [ -e "$tmp/kill.db" ]; then
    ok "kill-at-$at-integrity" test "$(python3 -c '
import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("PRAGMA integrity_check").fetchone()[0])' "$tmp/kill.db")" = ok
    read -r n distinct <<<"$(rows "$tmp/kill.db")"
    ok "kill-at-$at-no-duplicate" test "$n" = "$distinct"
    echo "killed at >= $at rows: $n rows recorded"
  fi
done
ok kill-happened test "$killed" -ge 3
check kill-resume 0 "$tf" sweep "$kill_spec" -o "$tmp/kill.db" --jobs 2
ok kill-resume-rows test "$(rows "$tmp/kill.db")" = "48 48"
check kill-export 0 "$tf" sweep export "$tmp/kill.db" --csv "$tmp/kill.csv"
same kill-equals-uninterrupted "$tmp/kill-ref.csv" "$tmp/kill.csv"

# Shards: each runs its own points; merged they equal the unsharded sweep row for row.
for i in 0 1 2; do
  check "shard-$i" 0 "$tf" sweep "$small" --shard "$i/3" -o "$tmp/shard-$i.db" --jobs 1
  contains "shard-$i-count" "$tmp/out" "12 points in shard $i/3 of 36"
done
check merge 0 "$tf" sweep merge -o "$tmp/merged.db" "$tmp/shard-2.db" "$tmp/shard-0.db" "$tmp/shard-1.db"
contains merge-summary "$tmp/out" "36 of 36 points"
check merge-export 0 "$tf" sweep export "$tmp/merged.db" --csv "$tmp/merged.csv"
same merged-equals-unsharded "$tmp/full.csv" "$tmp/merged.csv"
# Merging two of three shards works and says what is missing.
check merge-partial 0 "$tf" sweep merge -o "$tmp/partial.db" "$tmp/shard-0.db" "$tmp/shard-1.db"
contains merge-partial-warns "$tmp/err" "12 points are missing"
# A merged database resumes as the whole sweep: the missing shard's points run.
check merge-partial-resume 0 "$tf" sweep "$small" -o "$tmp/partial.db" --jobs 2
contains merge-partial-resume-ran "$tmp/out" "ran 12 (24 already recorded)"
# Refusals: another spec's shard, a shard run into another shard's database, another spec.
check other-spec 2 "$tf" sweep tests/e2e/sweep/failing.yaml -o "$tmp/other.db" --quiet
check merge-other-spec 2 "$tf" sweep merge -o "$tmp/bad.db" "$tmp/shard-0.db" "$tmp/other.db"
contains merge-other-spec-why "$tmp/err" "is a shard of another sweep ('e2e-failing'"
ok merge-other-spec-no-output test ! -e "$tmp/bad.db"
check wrong-shard 2 "$tf" sweep "$small" --shard 1/3 -o "$tmp/shard-0.db"
contains wrong-shard-why "$tmp/err" "holds shard 0/3 of this sweep, not 1/3"
check wrong-spec 2 "$tf" sweep "$small" -o "$tmp/other.db"
contains wrong-spec-why "$tmp/err" "holds the results of another sweep"
# A sweep killed before its first commit leaves an empty file: it starts over. A file that
# is not a sweep database is left alone.
: >"$tmp/empty.db"
check empty-file-starts 0 "$tf" sweep "$small" -o "$tmp/empty.db" --jobs 2
contains empty-file-ran "$tmp/out" "ran 36 (0 already recorded)"
echo "my notes" >"$tmp/notes.db"
check not-a-db 2 "$tf" sweep "$small" -o "$tmp/notes.db"
contains not-a-db-why "$tmp/err" "not a tierflow sweep database"
ok not-a-db-untouched test "$(cat "$tmp/notes.db")" = "my notes"
check bad-shard 2 "$tf" sweep "$small" --shard 3/3 -o "$tmp/x.db"
contains bad-shard-why "$tmp/err" "a shard is I/N with 0 <= I < N"
check export-not-a-db 2 "$tf" sweep export "$small"
contains export-not-a-db-why "$tmp/err" "not a tierflow sweep database"
# merge -o replaces only a database of the same sweep, keeping its rows; another sweep's
# database, a user's SQLite file or text, or a database a sweep is writing are refused.
check merge-again 0 "$tf" sweep merge -o "$tmp/partial.db" "$tmp/shard-0.db"
contains merge-again-keeps "$tmp/out" "with the rows already in the output: 36 of 36 points"
cp "$tmp/other.db" "$tmp/other-keep.db"
check merge-over-other-sweep 2 "$tf" sweep merge -o "$tmp/other.db" "$tmp/shard-0.db"
contains merge-over-other-sweep-why "$tmp/err" "exists and holds the results of another sweep"
same merge-over-other-sweep-untouched "$tmp/other.db" "$tmp/other-keep.db"
python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("CREATE TABLE mine(x)")' "$tmp/mine.db"
cp "$tmp/mine.db" "$tmp/mine-keep.db"
check merge-over-user-db 2 "$tf" sweep merge -o "$tmp/mine.db" "$tmp/shard-0.db"
contains merge-over-user-db-why "$tmp/err" "not a tierflow sweep database"
same merge-over-user-db-untouched "$tmp/mine.db" "$tmp/mine-keep.db"
check merge-over-notes 2 "$tf" sweep merge -o "$tmp/notes.db" "$tmp/shard-0.db"
ok merge-over-notes-untouched test "$(cat "$tmp/notes.db")" = "my notes"
python3 -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); open(sys.argv[2], "w").close()
time.sleep(30)' "$tmp/merged.db" "$tmp/locked" &
locker=$!
for _ in $(seq 100); do [ -e "$tmp/locked" ] && break; sleep 0.1; done
check merge-over-running-sweep 2 "$tf" sweep merge -o "$tmp/merged.db" "$tmp/shard-0.db"
contains merge-over-running-sweep-why "$tmp/err" "is in use by a running sweep"
kill "$locker"; wait "$locker" 2>/dev/null
# A database edited by hand is refused, not trusted: a point count that is no number, an
# exit class tierflow has not, a point beyond the sweep.
cp "$tmp/shard-0.db" "$tmp/edited.db"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE meta SET value = ? WHERE key = ?", ("99999999999999999999", "points")); c.commit()' "$tmp/edited.db"
check merge-edited-points 2 "$tf" sweep merge -o "$tmp/edited-merged.db" "$tmp/edited.db"
contains merge-edited-points-why "$tmp/err" "its meta 'points' is '99999999999999999999', not a point count"
ok merge-edited-points-no-output test ! -e "$tmp/edited-merged.db"
cp "$tmp/shard-0.db" "$tmp/edited.db"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE results SET exit_class = 99"); c.commit()' "$tmp/edited.db"
check resume-edited-exit-class 2 "$tf" sweep "$small" --shard 0/3 -o "$tmp/edited.db"
contains resume-edited-exit-class-why "$tmp/err" "has exit class '99', which is none of tierflow's"
cp "$tmp/shard-0.db" "$tmp/edited.db"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1])
c.execute("INSERT INTO results(point, exit_class) VALUES (1000, 0)"); c.commit()' "$tmp/edited.db"
check export-edited-point 2 "$tf" sweep export "$tmp/edited.db"
contains export-edited-point-why "$tmp/err" "holds point 1000, but its sweep has 36 points"
check export-directory 2 "$tf" sweep export "$tmp"
contains export-directory-why "$tmp/err" "is a directory, not a results database"

# A point that fails is recorded with its error and exit class, not retried silently.
check failing 2 "$tf" sweep tests/e2e/sweep/failing.yaml -o "$tmp/failing.db" --jobs 2
contains failing-summary "$tmp/out" "1 ok, 0 infeasible, 1 failed"
contains failing-error "$tmp/err" "1 point failed"
check failing-export 0 "$tf" sweep export "$tmp/failing.db" --jsonl -
ok failing-row python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r for r in rows if r["status"] == "failed"]
assert len(bad) == 1 and bad[0]["exit_class"] == 2 and bad[0]["tp"] == 3, bad
assert "does not divide" in bad[0]["reason"], bad[0]["reason"]' "$tmp/out"
check failing-rerun 2 "$tf" sweep tests/e2e/sweep/failing.yaml -o "$tmp/failing.db"
contains failing-rerun-skips "$tmp/out" "ran 0 (2 already recorded)"
check failing-retry 2 "$tf" sweep tests/e2e/sweep/failing.yaml -o "$tmp/failing.db" --retry-failed
contains failing-retry-ran "$tmp/out" "ran 1 (1 already recorded)"
ok failing-retry-rows test "$(rows "$tmp/failing.db")" = "2 2"

# A serving sweep (kind: serve): its rows, an infeasible point, resume, shards merged.
serve_spec=tests/e2e/sweep/serve.yaml
check serve 0 "$tf" sweep "$serve_spec" -o "$tmp/serve.db" --jobs 2 --quiet
contains serve-outcomes "$tmp/out" "4 ok, 2 infeasible, 0 failed"
check serve-export 0 "$tf" sweep export "$tmp/serve.db" --jsonl -
ok serve-rows python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 6, len(rows)
assert list(rows[0])[:3] == ["point", "tiers.hbm.capacity", "exit_class"], list(rows[0])[:3]
for r in rows:
    if r["tiers.hbm.capacity"] == "15GiB":
        assert r["status"] == "infeasible" and r["exit_class"] == 1, r
        assert r["reason"].startswith("tp: the weights"), r["reason"]
        assert r["ttft_p99_s"] is None
    else:
        assert r["status"] == "ok" and r["requests"] == 120 and r["finished"] == 120, r
        assert r["ttft_p50_s"] <= r["ttft_p99_s"] and 0 <= r["goodput_share"] <= 1, r
        assert abs(r["hit_hbm_share"] + r["hit_ddr_share"] - r["hit_share"]) < 1e-12, r
        assert r["kv_tiers"] == "ddr:16GiB" or r["hit_ddr_share"] == 0, r
# The small pool (19 GiB of HBM) finds prefixes in the DDR tier.
assert any(r["hit_ddr_share"] > 0 for r in rows if r["tiers.hbm.capacity"] == "19GiB"), rows' "$tmp/out"
check serve-resume 0 "$tf" sweep "$serve_spec" -o "$tmp/serve.db" --quiet
contains serve-resume-skips "$tmp/out" "ran 0 (6 already recorded)"
for i in 0 1; do
  check "serve-shard-$i" 0 "$tf" sweep "$serve_spec" -o "$tmp/serve-$i.db" --shard "$i/2" --quiet
done
check serve-merge 0 "$tf" sweep merge -o "$tmp/serve-merged.db" "$tmp/serve-0.db" "$tmp/serve-1.db"
"$tf" sweep export "$tmp/serve.db" >"$tmp/serve.csv"
"$tf" sweep export "$tmp/serve-merged.db" >"$tmp/serve-merged.csv"
same serve-merged-equals-whole "$tmp/serve.csv" "$tmp/serve-merged.csv"
check serve-bad-kind 2 "$tf" sweep tests/errors/sweep/14-unknown-kind.yaml -o "$tmp/kind.db"
contains serve-bad-kind-why "$tmp/err" "did you mean 'serve'?"
ok serve-bad-kind-no-db test ! -e "$tmp/kind.db"

# Rows name the spec's own files as it wrote them, a shipped topology by its name: the same
# sweep in two folders (two machines, two checkouts) gives the same rows, step and serve.
for where in a b/deeper; do
  mkdir -p "$tmp/moved/$where/data"
  cp configs/hw/h100-sxm-8gpu.yaml "$tmp/moved/$where/data/my-hw.yaml"
  head -n 30 tests/data/serve/mooncake_conversation_200.jsonl >"$tmp/moved/$where/data/tr.jsonl"
  printf 'name: moved\nbase: {hw: data/my-hw.yaml, model: llama-3-8b, layers: 1, tokens: 1, context: 128}\naxes:\n  - batch: [1, 2]\n' \
    >"$tmp/moved/$where/step.yaml"
  printf 'name: moved-serve\nkind: serve\nbase: {model: llama-3-8b, trace: data/tr.jsonl}\naxes:\n  - hw: [h100-sxm-8gpu, data/my-hw.yaml]\n' \
    >"$tmp/moved/$where/serve.yaml"
  for kind in step serve; do
    check "moved-$kind-${where%%/*}" 0 "$tf" sweep "$tmp/moved/$where/$kind.yaml" \
      -o "$tmp/moved/$where/$kind.db" --quiet --csv "$tmp/moved/$where/$kind.csv"
  done
done
same moved-step-rows "$tmp/moved/a/step.csv" "$tmp/moved/b/deeper/step.csv"
same moved-serve-rows "$tmp/moved/a/serve.csv" "$tmp/moved/b/deeper/serve.csv"
contains moved-step-hw "$tmp/moved/a/step.csv" ",h100-sxm-8gpu,data/my-hw.yaml,"
contains moved-serve-names "$tmp/moved/a/serve.csv" ",h100-sxm-8gpu,h100-sxm-8gpu,,llama-3-8b,,data/tr.jsonl,"
contains moved-serve-file "$tmp/moved/a/serve.csv" ",h100-sxm-8gpu,data/my-hw.yaml,,llama-3-8b,,data/tr.jsonl,"

# The shipped example specs are valid.
for spec in configs/sweeps/*.yaml; do
  check "example-$(basename "$spec" .yaml)" 0 "$tf" sweep "$spec" --dry-run
done
finish
