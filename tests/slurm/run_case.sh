#!/usr/bin/env bash
# One Slurm integration case on a throw-away local Slurm (cluster_up.sh), always torn down
# (cluster_down.sh from an EXIT trap, also on failure or interruption).
#
#   run_case.sh CASE DTRUN PYTHON SOURCE_DIR [HOSTLIST_PROBE]
#
# CASE is one of
#   single_node     one slurmd; scripts/slurm/single_node.sbatch with --ntasks-per-node=2, so the
#                   job runs `srun dtrun` as two agents, with no --rdzv-endpoint: ranks, output,
#                   the derived options, and COMPLETED in scontrol and in the jobcomp file
#   two_nodes       two slurmd (n1, n2, names only Slurm resolves: NodeAddr=127.0.0.1);
#                   scripts/slurm/multi_node.sbatch with one agent per node: the endpoint comes
#                   from n1's NodeAddr, and the loopback warning fires (two "hosts" on loopback)
#   usr1_requeue    two slurmd; scripts/slurm/elastic.sbatch (--nnodes 1:2, --requeue) is sent
#                   SIGUSR1 (scancel --signal) mid-run: every worker logs it, the job
#                   checkpoints, requeues itself, resumes from that checkpoint, COMPLETES, and
#                   ends with the parameters of an uninterrupted run
#   preempt_requeue two slurmd; the elastic job is requeued from outside (scontrol requeue, as a
#                   preemption with PreemptMode=REQUEUE does): SIGTERM, checkpoint, Slurm
#                   requeues it, it resumes and COMPLETES with the same parameters
#   hostlist_oracle no daemons: dtrun's hostlist expansion (HOSTLIST_PROBE) against
#                   `scontrol show hostnames` for Slurm's syntax
#
# Exits 0 (pass), 1 (fail, with the job output and daemon logs), or 77 after printing why the
# case cannot run here (Slurm or torch missing, daemons refusing): ctest reports SKIP.
set -uo pipefail
CASE=${1:?usage: run_case.sh CASE DTRUN PYTHON SOURCE_DIR [HOSTLIST_PROBE]}
DTRUN=${2:?}
PY=${3:?}
SRC=${4:?}
PROBE=${5:-}
HERE=$(cd "$(dirname "$0")" && pwd)
# Run inside a Slurm job (a CI runner on a cluster), the outer job's variables would leak into
# the jobs of the test cluster through sbatch --export=ALL.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLURM_')
W=$(mktemp -d "${TMPDIR:-/tmp}/dtrun-slurm.XXXXXX")
D=$W/cluster
CLUSTER_STARTED=

teardown() {
  [ -n "$CLUSTER_STARTED" ] && "$HERE/cluster_down.sh" "$D"
  [ -n "${WATCHDOG:-}" ] && kill "$WATCHDOG" 2>/dev/null
  rm -rf "$W"
}
trap teardown EXIT
trap 'echo "FAIL ($CASE): interrupted or past the ${LIMIT}s deadline"; exit 1' INT TERM HUP
# Our own deadline, below ctest's TIMEOUT (which kills without a chance to tear down).
LIMIT=${SLURM_CASE_LIMIT:-200}
(sleep "$LIMIT" && kill -TERM $$) >/dev/null 2>&1 </dev/null &
WATCHDOG=$!

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL ($CASE): $*"
  for f in "$W"/*.out; do
    [ -f "$f" ] && { echo "--- $f"; cat "$f"; }
  done
  for f in "$D"/log/*.log; do
    [ -f "$f" ] && { echo "--- $f (tail)"; tail -15 "$f"; }
  done
  exit 1
}
note() { echo "[$CASE] $*"; }

# --- Slurm helpers ----------------------------------------------------------------------------
field() {  # field JOBID NAME: one value of `scontrol show job`
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
# Waits for a final state (a requeued job passes through REQUEUED and PENDING: not final) and
# prints it; fails after $2 seconds.
wait_final() {
  local jid=$1 limit=$2 state i
  for ((i = 0; i < limit * 5; i++)); do
    state=$(field "$jid" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        echo "$state"
        return 0
        ;;
    esac
    sleep 0.2
  done
  scontrol show job "$jid" >&2
  fail "job $jid did not end within $limit s (state ${state:-unknown})"
}
wait_for() {  # wait_for SECONDS WHAT COMMAND...: polls COMMAND until it succeeds
  local limit=$1 what=$2 i
  shift 2
  for ((i = 0; i < limit * 5; i++)); do
    "$@" && return 0
    sleep 0.2
  done
  fail "no $what within $limit s"
}
jobcomp_state() {  # the last line for the job in the jobcomp file
  grep "JobId=$1 " "$D/jobcomp.txt" 2>/dev/null | tail -1 | grep -o 'JobState=[A-Z_]*' | cut -d= -f2
}

# --- checks on the training script's progress.jsonl --------------------------------------------
# check_progress CKPT_DIR PYTHON-EXPRESSIONS: runs the assertions with `events` (the list of
# records) and `ev(name, **match)` in scope; a false assert fails the case with its message.
check_progress() {
  local ckpt=$1
  shift
  "$PY" - "$ckpt/progress.jsonl" "$@" <<'PY' || fail "progress check failed (above)"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
def ev(name, **match):
    return [e for e in events if e["event"] == name and all(e.get(k) == v for k, v in match.items())]
try:
    for check in sys.argv[2:]:
        exec(check)
except AssertionError as e:
    print("assertion failed:", e)
    for e2 in events:
        print(json.dumps(e2))
    sys.exit(1)
PY
}

needs_torch() {
  "$PY" -c 'import torch.distributed' 2>/dev/null || skip "$PY cannot import torch (python3-torch)"
}

up() {  # up NODES
  CLUSTER_STARTED=1
  "$HERE/cluster_up.sh" "$D" "$1"
  local rc=$?
  [ $rc = 77 ] && exit 77
  [ $rc = 0 ] || fail "cluster_up.sh exited $rc"
  # shellcheck disable=SC1091
  source "$D/env.sh"
}

# What every job gets from the environment sbatch copies (--export=ALL, the default).
export DTRUN DTRUN_PYTHON=$PY NPROC=1 TRAIN=$SRC/examples/slurm_train.py

expected_port() { echo $((20000 + ($1 % 1000) * 10)); }

# --- cases -------------------------------------------------------------------------------------
case_single_node() {
  needs_torch
  up 1
  local ckpt=$W/ckpt out=$W/job.out jid state host
  host=$(hostname -s)
  export CKPT_DIR=$ckpt TRAIN_ARGS="--steps 8"
  jid=$(sbatch --parsable --ntasks-per-node=2 -o "$out" "$SRC/scripts/slurm/single_node.sbatch") ||
    fail "sbatch refused the job"
  note "job $jid submitted"
  state=$(wait_final "$jid" 120)
  note "job $jid: $state, exit code $(field "$jid" ExitCode)"
  [ "$state" = COMPLETED ] || fail "job $jid ended $state"
  [ "$(field "$jid" ExitCode)" = 0:0 ] || fail "exit code $(field "$jid" ExitCode)"
  wait_for 10 "jobcomp line" test -n "$(jobcomp_state "$jid")"
  [ "$(jobcomp_state "$jid")" = COMPLETED ] || fail "jobcomp says $(jobcomp_state "$jid")"
  # Both agents derived the same options, from Slurm, and said so.
  local line="Slurm step $jid.0: --nnodes 2 (SLURM_STEP_NUM_TASKS), --rdzv-endpoint"
  line+=" $host:$(expected_port "$jid") (first host of SLURM_STEP_NODELIST=$host),"
  line+=" --rdzv-id $jid.0"
  [ "$(grep -cF "$line" "$out")" = 2 ] || fail "expected 2 lines with '$line'"
  grep -q "rdzv-endpoint" "$SRC/scripts/slurm/single_node.sbatch" &&
    fail "the template names --rdzv-endpoint; the case must run without it"
  grep -qF "[rank 0] finished" "$out" || fail "no '[rank 0] finished' in the output"
  grep -qF "[rank 1] finished" "$out" || fail "no '[rank 1] finished' in the output"
  check_progress "$ckpt" \
    'f = ev("finished"); assert sorted(e["rank"] for e in f) == [0, 1], f' \
    'assert all(e["world_size"] == 2 and e["step"] == 8 for e in f), f' \
    'assert len({e["sha256"] for e in f}) == 1, "ranks disagree"' \
    'assert len({e["pid"] for e in f}) == 2, f' \
    'assert not ev("signal") and not ev("resumed"), events'
  note "ranks 0 and 1 finished with equal parameters; derived: $line"
}

case_two_nodes() {
  needs_torch
  getent hosts n1 >/dev/null && skip "n1 resolves on this machine: the NodeAddr fallback would not be exercised"
  up 2
  local ckpt=$W/ckpt out=$W/job.out jid state
  export CKPT_DIR=$ckpt TRAIN_ARGS="--steps 8"
  jid=$(sbatch --parsable --nodes=2 -o "$out" "$SRC/scripts/slurm/multi_node.sbatch") ||
    fail "sbatch refused the job"
  note "job $jid submitted"
  state=$(wait_final "$jid" 120)
  note "job $jid: $state on $(field "$jid" NodeList)"
  [ "$state" = COMPLETED ] || fail "job $jid ended $state"
  [ "$(field "$jid" NodeList)" = "n[1-2]" ] || fail "NodeList $(field "$jid" NodeList)"
  [ "$(jobcomp_state "$jid")" = COMPLETED ] || fail "jobcomp says $(jobcomp_state "$jid")"
  local line
  line="--rdzv-endpoint 127.0.0.1:$(expected_port "$jid") (NodeAddr of n1, the first host"
  line+=" of SLURM_STEP_NODELIST=n[1-2], whose name does not resolve here)"
  [ "$(grep -cF -- "$line" "$out")" = 2 ] || fail "expected 2 lines with '$line'"
  [ "$(grep -cF "rendezvous host 127.0.0.1 is a loopback address, but this Slurm job spans 2 hosts" "$out")" = 2 ] ||
    fail "expected the loopback warning from both agents"
  check_progress "$ckpt" \
    'f = ev("finished"); assert sorted(e["rank"] for e in f) == [0, 1], f' \
    'assert sorted(e["node"] for e in f) == ["n1", "n2"], f' \
    'assert all(e["world_size"] == 2 for e in f), f' \
    'assert len({e["sha256"] for e in f}) == 1, "ranks disagree"'
  note "one rank on n1, one on n2 (node ranks follow arrival), endpoint from n1's NodeAddr"
}

# The parameters of an uninterrupted run of the same training, without Slurm.
reference_sha() {
  local ref=$W/reference
  "$DTRUN" --standalone --nproc-per-node=2 "$TRAIN" --ckpt-dir "$ref" --steps "$STEPS" \
    >"$W/reference.out" 2>&1 || fail "the reference run failed"
  "$PY" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["sha256"])' \
    "$ref/progress.jsonl"
}

started_twice() {
  [ "$(grep -c '"event": "started"' "$CKPT_DIR/progress.jsonl" 2>/dev/null)" = 2 ]
}

# Submits the elastic template on two nodes and waits until both workers run (their signal
# handlers are in place) and the first periodic checkpoint exists. Sets JID.
start_elastic() {
  export CKPT_DIR=$W/ckpt MIN_NODES=1 TRAIN_ARGS="--steps $STEPS --step-seconds 0.3 --ckpt-every 5"
  export DTRUN_ARGS="--rdzv-conf last_call_timeout=2"
  JID=$(sbatch --parsable --nodes=2 -o "$W/job.out" "$SRC/scripts/slurm/elastic.sbatch") ||
    fail "sbatch refused the job"
  note "job $JID submitted"
  wait_for 90 "two started workers" started_twice
  wait_for 60 "first checkpoint" test -f "$CKPT_DIR/ckpt_5.pt"
  [ -f "$CKPT_DIR/final.pt" ] && fail "the job finished before the test could stop it"
}

STEPS=40

case_usr1_requeue() {
  needs_torch
  up 2
  local ref state
  ref=$(reference_sha)
  start_elastic
  note "sending SIGUSR1 to the job's tasks (scancel --signal=USR1 $JID)"
  scancel --signal=USR1 "$JID" || fail "scancel --signal refused"
  state=$(wait_final "$JID" 150)
  note "job $JID: $state after $(field "$JID" Restarts) restart(s)"
  [ "$state" = COMPLETED ] || fail "job $JID ended $state"
  [ "$(field "$JID" Restarts)" = 1 ] || fail "Restarts=$(field "$JID" Restarts), expected 1"
  [ -f "$CKPT_DIR/PREEMPTED" ] && fail "PREEMPTED left behind"
  grep -q "requeueing job $JID" "$W/job.out" || fail "the batch script did not requeue"
  # Both agents forwarded it (Slurm signals every process of the step, so the workers also get
  # it directly; either way each acts once) and kept running until the workers exited.
  [ "$(grep -c "forwarding signal SIGUSR1 to the workers" "$W/job.out")" -ge 2 ] ||
    fail "expected both dtrun agents to forward SIGUSR1"
  check_progress "$CKPT_DIR" \
    's = ev("signal", slurm_restart_count=0); assert sorted({e["rank"] for e in s}) == [0, 1], s' \
    'assert all(e["signal"] == "SIGUSR1" for e in s), s' \
    'p = ev("preempted", slurm_restart_count=0); assert sorted(e["rank"] for e in p) == [0, 1], p' \
    'k = p[0]["step"]; assert all(e["step"] == k and e["signal"] == "SIGUSR1" for e in p) and 5 <= k < 40, p' \
    'r = ev("resumed", slurm_restart_count=1); assert sorted(e["rank"] for e in r) == [0, 1], r' \
    'assert all(e["step"] == k and e["checkpoint"] == f"ckpt_{k}.pt" for e in r), (k, r)' \
    'f = ev("finished"); assert sorted(e["rank"] for e in f) == [0, 1] and all(e["slurm_restart_count"] == 1 for e in f), f' \
    "assert {e['sha256'] for e in f} == {'$ref'}, ('not the uninterrupted parameters', f)"
  note "every worker got SIGUSR1, checkpointed, the job requeued, resumed and finished like an uninterrupted run"
}

case_preempt_requeue() {
  needs_torch
  up 2
  local ref state
  ref=$(reference_sha)
  start_elastic
  note "requeueing the running job from outside (scontrol requeue $JID)"
  scontrol requeue "$JID" || fail "scontrol requeue refused"
  state=$(wait_final "$JID" 150)
  note "job $JID: $state after $(field "$JID" Restarts) restart(s)"
  [ "$state" = COMPLETED ] || fail "job $JID ended $state"
  [ "$(field "$JID" Restarts)" = 1 ] || fail "Restarts=$(field "$JID" Restarts), expected 1"
  check_progress "$CKPT_DIR" \
    's = ev("signal", slurm_restart_count=0); assert sorted({e["rank"] for e in s}) == [0, 1] and all(e["signal"] == "SIGTERM" for e in s), s' \
    'p = ev("preempted", slurm_restart_count=0); assert sorted(e["rank"] for e in p) == [0, 1], p' \
    'k = p[0]["step"]; r = ev("resumed", slurm_restart_count=1); assert sorted(e["rank"] for e in r) == [0, 1] and all(e["step"] == k for e in r), (k, r)' \
    'f = ev("finished"); assert sorted(e["rank"] for e in f) == [0, 1], f' \
    "assert {e['sha256'] for e in f} == {'$ref'}, ('not the uninterrupted parameters', f)"
  note "SIGTERM reached every worker, which checkpointed; Slurm requeued the job; it resumed and finished like an uninterrupted run"
}

case_hostlist_oracle() {
  command -v scontrol >/dev/null || skip "scontrol not found (slurm-client)"
  [ -x "$PROBE" ] || fail "no hostlist probe at '$PROBE'"
  # scontrol wants a configuration to read, not a running controller.
  mkdir -p "$D"
  printf 'ClusterName=oracle\nSlurmctldHost=%s(127.0.0.1)\nNodeName=%s CPUs=1\nPartitionName=p Nodes=ALL\n' \
    "$(hostname -s)" "$(hostname -s)" >"$D/slurm.conf"
  export SLURM_CONF=$D/slurm.conf
  local same=0 e want got
  local -a exprs=(
    'vm' 'node[01-04,07]' 'rack[1-2]-node[01-02]' 'a[1-2]b[3-4]c[5-6]' 'a[1-2]b[1-2]c[1-2]d[1-2]'
    'n[1-2]x[1-2]' 'n[1-2]-[3-4]' 'n[9-10]' 'n[001-5]' 'n[009-011]' 'n[099-100]' 'n[01-1]'
    'n[1-01]' 'n[0-2]' 'n[00-02]' 'n[7]' 'n[1-]' '[1-2]' 'n[1-3] m[2-3]' 'x,y[1-2],z'
    'n[1-2],' ',,a' 'n[1-2],n[2-3]' 'n1x' 'a]b' 'gpu-a1,gpu-b[10-11]' 'n[1-3,5-6,9]'
    'c[0-1]-g[00-03,07]' 'n[8-9],n[10-11]' 'n[08-09],n[010-011]' 'n[1-1000]' 'r[1-3]n[1-2],x[5]'
    'n[5-3]' 'a[1-3]b' 'a.b[1-2].c' 'n[1-2]]' 'n[]' 'n[a-b]' 'n[1,,2]' 'n[-1]' 'n[1-4:2]'
    'n[1-65537]' 'n[2-1],x'
  )
  for e in "${exprs[@]}"; do
    want=$(scontrol show hostnames "$e" 2>&1)
    got=$("$PROBE" "$e")
    if grep -qE 'Invalid hostlist|error:' <<<"$want"; then
      [[ $got == error:* ]] || fail "'$e': scontrol rejects it ($want), dtrun expanded it to: $got"
    else
      [ "$want" = "$got" ] || fail "'$e': scontrol gives [$(tr '\n' ' ' <<<"$want")], dtrun [$(tr '\n' ' ' <<<"$got")]"
    fi
    same=$((same + 1))
  done
  # Where Slurm misreads malformed brackets, dtrun refuses instead (no node list has them).
  for e in 'n[1-2' 'n[[1-2]' 'n[+1-2]' 'n[1 -2]'; do
    got=$("$PROBE" "$e")
    [[ $got == error:* ]] || fail "'$e': expected a refusal, got $got"
  done
  note "$same expressions expand exactly as scontrol show hostnames ($(scontrol --version))"
}

declare -F "case_$CASE" >/dev/null || fail "no case '$CASE'"
[ -x "$DTRUN" ] || fail "no dtrun at $DTRUN"
"case_$CASE"
