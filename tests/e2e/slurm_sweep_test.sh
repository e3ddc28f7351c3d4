#!/usr/bin/env bash
# End-to-end test of a sweep on a real single-node Slurm (ARCHITECTURE §11, docs/sweeps.md).
# MUNGE, slurmctld and slurmd from the Debian packages run as root with a generated
# slurm.conf on free ports, every file of theirs in a temp folder. scripts/sweep-slurm.sbatch
# runs tests/e2e/slurm_sweep.yaml as a job array of three shards, then as the dependent merge
# job; the merged results must equal the unsharded sweep byte for byte, and submitting the
# array again must run nothing. The daemons are stopped by their pids at the end.
# Usage: slurm_sweep_test.sh TIERFLOW_BINARY   (run from the repository root)
# Exits 77 after a line "skipped: WHY" where Slurm cannot run here: not root, a program
# missing (scripts/setup-test.sh installs slurm-wlm and munge), or a daemon that does not
# start (its log's tail follows).
set -u
tf=$(realpath "$1")
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

spec=$PWD/tests/e2e/slurm_sweep.yaml
script=$PWD/scripts/sweep-slurm.sbatch
shards=3
points=8  # of the spec: 2 batch sizes x 2 bandwidths x 2 policies

names=()  # the daemons this test started, in start order; stopped in reverse
pids=()
jobs_submitted=()

skip() {
  echo "skipped: $1"
  shift
  local f
  for f in "$@"; do
    [ -s "$f" ] && { echo "--- last lines of $(basename "$f")"; tail -n 20 "$f"; }
  done
  exit 77
}

alive() {  # every daemon started so far still runs
  local pid
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || return 1; done
}

dead_daemon() {  # the name of the first daemon that no longer runs
  local i
  for i in "${!pids[@]}"; do
    kill -0 "${pids[i]}" 2>/dev/null || { echo "${names[i]}"; return; }
  done
}

wait_until() {  # wait_until SECONDS COMMAND...: 0 once COMMAND succeeds, 1 on timeout, 2 when a daemon died
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    alive || return 2
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.5
  done
}

stop_daemons() {
  local i pid n
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid=${pids[i]}
    kill -TERM "$pid" 2>/dev/null
    for ((n = 0; n < 50; n++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "note: ${names[i]} (pid $pid) still runs 10 s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  done
  pids=()
}

cleanup() {
  # Jobs first, so that no job step outlives its slurmd.
  if [ ${#jobs_submitted[@]} -gt 0 ] && alive; then
    scancel "${jobs_submitted[@]}" 2>/dev/null
    wait_until 20 test -z "$(squeue -h -o %i 2>/dev/null)" ||
      echo "note: jobs still listed at the end: $(squeue -h -o '%i %T' 2>/dev/null | tr '\n' ' ')"
  fi
  stop_daemons
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- What Slurm needs here ---------------------------------------------------------------
[ "$(id -u)" = 0 ] || skip "not root: slurmd runs each job as its submitter and must be root"
export PATH=$PATH:/usr/sbin:/sbin
for prog in munged munge unmunge slurmctld slurmd sbatch sinfo squeue scancel python3; do
  command -v "$prog" >/dev/null || skip "no '$prog' on PATH (scripts/setup-test.sh installs slurm-wlm and munge)"
done
node=$(hostname -s)
cpus=$(nproc)
mem=$(free -m | awk '/^Mem:/ { print int($2 * 0.9) }')
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("", 0))
print(*[x.getsockname()[1] for x in s])')
[ -n "${slurmd_port:-}" ] || skip "no free TCP ports"

# --- MUNGE: a fresh key and its own socket ------------------------------------------------
m=$tmp/munge
s=$tmp/slurm
mkdir -m 0700 "$m" "$s" "$s/state" "$s/spool"
sock=$m/munge.socket
[ ${#sock} -lt 100 ] || skip "temp folder path too long for a socket: $sock"
dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
chmod 0400 "$m/munge.key"
# --force: munged refuses to run as root without it.
munged --foreground --force --socket="$sock" --key-file="$m/munge.key" --pid-file="$m/munged.pid" \
  --log-file="$m/munged.log" --seed-file="$m/munged.seed" >"$m/munged.out" 2>&1 &
names+=(munged) pids+=($!)
munge_answers() { munge -n --socket="$sock" 2>/dev/null | unmunge --socket="$sock" >/dev/null 2>&1; }
wait_until 20 munge_answers ||
  skip "munged did not start (or does not answer on $sock)" "$m/munged.out" "$m/munged.log"

# --- Slurm: one node, one partition, free ports, no accounting, no cgroups ----------------
conf=$s/slurm.conf
: >"$s/plugstack.conf"
cat >"$conf" <<EOF
ClusterName=tierflow-e2e
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$s/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$conf
slurmctld -D -f "$conf" >"$s/slurmctld.out" 2>&1 &
names+=(slurmctld) pids+=($!)
slurmd -D -f "$conf" >"$s/slurmd.out" 2>&1 &
names+=(slurmd) pids+=($!)
node_idle() { [ "$(sinfo -h -n "$node" -o %T 2>/dev/null)" = idle ]; }
wait_until 60 node_idle
case $? in
  1) skip "node '$node' not idle 60 s after slurmctld and slurmd started (sinfo: $(sinfo -h -N -o '%N %T' 2>&1 | head -1))" \
       "$s/slurmctld.out" "$s/slurmctld.log" "$s/slurmd.out" "$s/slurmd.log" ;;
  2) d=$(dead_daemon)
     skip "$d exited while starting" "$s/$d.out" "$s/$d.log" "$m/munged.log" ;;
esac
echo "slurm: node $node idle ($cpus CPUs), slurmctld on port $ctld_port, slurmd on $slurmd_port"

# --- The sweep: whole here, then sharded by the job array, merged by a dependent job ------
show_jobs() {  # what the jobs and daemons said, after a failure
  local f
  for f in "$tmp"/jobs/*.out "$s/slurmctld.log" "$s/slurmd.log"; do
    [ -s "$f" ] && { echo "--- $(basename "$f")"; tail -n 15 "$f"; }
  done
}
check sweep-whole 0 "$tf" sweep "$spec" -o "$tmp/whole.db" --quiet
mkdir "$tmp/jobs"
export TIERFLOW=$tf
submit=(sbatch --parsable --chdir="$tmp/jobs" --cpus-per-task=1)
check submit-array 0 "${submit[@]}" --array=0-$((shards - 1)) "$script" "$spec" "$tmp/shards"
array=$(cut -d';' -f1 "$tmp/out")
jobs_submitted+=("$array")
# The merge job waits for every array task; --wait returns its exit code (no accounting needed).
check merge-job 0 timeout 150 "${submit[@]}" --wait --dependency=afterok:"$array" "$script" --merge "$tmp/shards"
merge=$(head -1 "$tmp/out" | cut -d';' -f1)
jobs_submitted+=("$merge")
contains merge-job-output "$tmp/jobs/slurm-$merge.out" "$points of $points points"

for ((i = 0; i < shards; i++)); do
  contains "shard-$i-names-its-shard" "$tmp/jobs/slurm-${array}_$i.out" "shard $i/$shards of $spec"
  ok "shard-$i-db" test -s "$tmp/shards/shard-$i.db"
  check "shard-$i-export" 0 "$tf" sweep export "$tmp/shards/shard-$i.db"
  # Shard i holds the points whose number is i modulo 3: 3, 3 and 2 rows behind the header.
  ok "shard-$i-rows" test "$(($(wc -l <"$tmp/out") - 1))" = "$(((points - i + shards - 1) / shards))"
done

check export-whole 0 "$tf" sweep export "$tmp/whole.db" --csv "$tmp/whole.csv"
check export-merged 0 "$tf" sweep export "$tmp/shards/merged.db" --csv "$tmp/merged.csv"
ok whole-rows test "$(($(wc -l <"$tmp/whole.csv") - 1))" = "$points"
ok merged-equals-whole cmp "$tmp/whole.csv" "$tmp/merged.csv"

# Submitting the array again resumes: every shard is already done.
check resubmit-array 0 timeout 90 "${submit[@]}" --wait --array=0-$((shards - 1)) "$script" "$spec" "$tmp/shards"
again=$(head -1 "$tmp/out" | cut -d';' -f1)
jobs_submitted+=("$again")
for ((i = 0; i < shards; i++)); do
  contains "resubmit-$i-runs-nothing" "$tmp/jobs/slurm-${again}_$i.out" "ran 0 ("
done

[ "$fails" = 0 ] || show_jobs
finish
