#!/usr/bin/env bash
# The worker_runtime tests under the real launcher:
#   dtrun --standalone --nproc-per-node N --no-python <worker>
# They rely on the agent's documented behaviour: torchrun's worker environment with
# TORCHELASTIC_USE_AGENT_STORE=True and MASTER_ADDR/MASTER_PORT = dtrun's own store, workers'
# stdout reaching dtrun's stdout, the abort key dtrun/abort/<round> set before a round's workers
# are stopped, TORCHELASTIC_RESTART_COUNT counting restarts, and torchrun's failure report.
#
# usage: under_dtrun.sh CASE
#   CASE: store_example | probe_store | nccl_id | restart_abort | error_file | c_api
# env:   DTRUN_BIN, WORKER_PROBE, STORE_EXAMPLE, HAS_NCCL (ON/OFF)
# exit:  0 passed, 1 failed, 77 skipped (ctest SKIP_RETURN_CODE), with the reason printed.
set -u

case_name=${1:?usage: under_dtrun.sh CASE}
: "${DTRUN_BIN:?}" "${WORKER_PROBE:?}" "${STORE_EXAMPLE:?}"

skip() { echo "SKIPPED: $*"; exit 77; }
# dtrun is built with these tests: its absence is a failure, not a reason to skip.
if [ ! -x "$DTRUN_BIN" ]; then
  echo "FAILED: no dtrun binary at $DTRUN_BIN"
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrun-under-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out.txt
rc=0

fail() {
  echo "FAILED ($case_name): $*"
  echo "--- dtrun exit code: $rc; output:"
  cat "$out"
  exit 1
}

# launch NPROC [dtrun options...] -- WORKER [args...]: runs dtrun, output in $out, status in $rc.
launch() {
  local nproc=$1
  shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  echo "$ dtrun --standalone --nproc-per-node $nproc ${opts[*]} --no-python $*"
  timeout -k 10 240 "$DTRUN_BIN" --standalone --nproc-per-node "$nproc" \
    --log-dir "$tmp/logs" "${opts[@]}" --no-python "$@" >"$out" 2>&1
  rc=$?
}

expect_rc() { [ "$rc" -eq "$1" ] || fail "expected exit code $1"; }
expect_line() { grep -qF -- "$1" "$out" || fail "no line containing '$1'"; }
count_lines() { grep -cF -- "$1" "$out"; }

# The 128-byte id as 256 hex digits, one per rank, for lines "TAG rank R ... HEX".
ids_of() { grep -oE "$1 rank [0-9]+ .*[0-9a-f]{256}" "$out" | grep -oE '[0-9a-f]{256}'; }

case "$case_name" in
  store_example)
    launch 8 -- "$STORE_EXAMPLE"
    expect_rc 0
    for r in 0 1 2 3 4 5 6 7; do
      expect_line "rank $r/8: barrier and broadcast ok: hello from rank 0 of 8 (round 0)"
      expect_line "rank $r: "
    done
    ;;
  probe_store)
    launch 8 -- "$WORKER_PROBE" env
    expect_rc 0
    for r in 0 1 2 3 4 5 6 7; do
      expect_line "env rank=$r local_rank=$r world=8 local_world=8 group=0 restart=0 agent_store=True prefix=/worker/attempt_0"
    done
    launch 8 -- "$WORKER_PROBE" store 6
    expect_rc 0
    for r in 0 1 2 3 4 5 6 7; do
      expect_line "store ok rank $r world 8 prefix /worker/attempt_0"
    done
    ;;
  nccl_id)
    [ "${HAS_NCCL:-OFF}" = ON ] || skip "dtrun_worker was built without NCCL"
    launch 8 -- "$WORKER_PROBE" nccl-id
    expect_rc 0
    [ "$(ids_of nccl-id | wc -l)" -eq 8 ] || fail "expected 8 ids"
    [ "$(ids_of nccl-id | sort -u | wc -l)" -eq 1 ] || fail "the ranks hold different ids"
    ;;
  restart_abort)
    # Round 0: all exchange a token, rank 7 exits 1, the agent sets dtrun/abort/0, stops the
    # others (they trap SIGTERM, as checkpointing workers do) and restarts; ranks 0-6 must see
    # the abort. Round 1: a fresh token under /worker/attempt_1, and success.
    launch 8 --max-restarts 1 -- "$WORKER_PROBE" restart-demo
    expect_rc 0
    t0=$(grep -oE 'attempt 0 rank [0-9]+ token [^ ]+' "$out" | awk '{print $6}')
    t1=$(grep -oE 'attempt 1 rank [0-9]+ token [^ ]+' "$out" | awk '{print $6}')
    [ "$(echo "$t0" | grep -c .)" -eq 8 ] || fail "expected 8 round-0 tokens"
    [ "$(echo "$t1" | grep -c .)" -eq 8 ] || fail "expected 8 round-1 tokens"
    [ "$(echo "$t0" | sort -u | wc -l)" -eq 1 ] || fail "round 0 ranks disagree"
    [ "$(echo "$t1" | sort -u | wc -l)" -eq 1 ] || fail "round 1 ranks disagree"
    [ "$(echo "$t0" | head -1)" != "$(echo "$t1" | head -1)" ] ||
      fail "round 1 reused round 0's token: no fresh namespace"
    expect_line "attempt 0 rank 7 failing on purpose"
    [ "$(grep -cE 'attempt 0 rank [0-6] aborted: .+' "$out")" -eq 7 ] ||
      fail "expected ranks 0-6 of round 0 to see the agent's abort"
    [ "$(count_lines 'never aborted')" -eq 0 ] || fail "a rank never saw the abort"
    ;;
  error_file)
    message="native failure from worker_probe 4242"
    launch 2 -- "$WORKER_PROBE" record-error "$message"
    [ "$rc" -ne 0 ] || fail "dtrun succeeded although every worker exited 1"
    expect_line "record-error written"
    expect_line "$message"
    expect_line "error_file:"
    ;;
  c_api)
    launch 4 -- "$WORKER_PROBE" c-api
    expect_rc 0
    for r in 0 1 2 3; do expect_line "c-api rank $r world 4 local $r group 0"; done
    ;;
  *)
    echo "unknown case '$case_name'"
    exit 2
    ;;
esac
echo "PASSED ($case_name)"
cat "$out"
