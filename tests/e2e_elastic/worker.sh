#!/bin/sh
# The worker of the elastic end-to-end tests (tests/e2e_elastic): records what dtrun gave it and
# then does what the test asked. Environment set by the test (inherited through dtrun):
#   E2E_DIR          the test's directory: one JSON line per worker start is appended to
#                    $E2E_DIR/workers.jsonl; the worker exits 0 once $E2E_DIR/finish exists
#   E2E_FAIL         "round:rank:code ..." - the worker of that round and global rank exits with
#                    that code instead, once the round is whole: every worker of it has
#                    recorded its start, and the agents have recorded starting every one
#                    (worker_started in $E2E_DIR/agent*.events.jsonl, the harness's event logs)
#   E2E_FAIL_ON      "round:rank:code ..." - the same, but the worker exits with that code once
#                    the test creates $E2E_DIR/fail-<round>-<rank> (the test says when)
# One short line per write on an O_APPEND file: lines from concurrent workers never interleave.
set -u
printf '{"rank":%s,"local_rank":%s,"world_size":%s,"group_rank":%s,"group_world_size":%s,"local_world_size":%s,"round":%s,"max_restarts":%s,"run_id":"%s","master":"%s:%s","pid":%s,"agent":%s,"t":%s}\n' \
  "$RANK" "$LOCAL_RANK" "$WORLD_SIZE" "$GROUP_RANK" "$GROUP_WORLD_SIZE" "$LOCAL_WORLD_SIZE" \
  "$TORCHELASTIC_RESTART_COUNT" "$TORCHELASTIC_MAX_RESTARTS" "$TORCHELASTIC_RUN_ID" \
  "$MASTER_ADDR" "$MASTER_PORT" "$$" "$PPID" "$(date +%s.%N)" >>"$E2E_DIR/workers.jsonl"
# The exit code a "round:rank:code ..." list asks of this worker (this round, this rank), or "".
code_for() {
  for spec in $1; do
    round=${spec%%:*}
    rest=${spec#*:}
    if [ "$round" = "$TORCHELASTIC_RESTART_COUNT" ] && [ "${rest%%:*}" = "$RANK" ]; then
      echo "${rest#*:}"
      return
    fi
  done
}
fail() {
  echo "worker rank $RANK of round $TORCHELASTIC_RESTART_COUNT: failing with exit code $1 as asked" >&2
  exit "$1"
}
code=$(code_for "${E2E_FAIL:-}")
if [ -n "$code" ]; then
  round=$TORCHELASTIC_RESTART_COUNT
  # A worker of the round not started yet would be stopped before it could record itself, and
  # the test checks each worker against its agent's worker_started record: both are waited
  # for (polled; ctest's timeout bounds a round that never becomes whole).
  while [ "$(grep -c "\"round\":$round," "$E2E_DIR/workers.jsonl")" -lt "$WORLD_SIZE" ]; do
    sleep 0.01
  done
  while [ "$(cat "$E2E_DIR"/agent*.events.jsonl 2>/dev/null | grep '"event":"worker_started"' |
    grep -cE "\"round\":$round[,}]")" -lt "$WORLD_SIZE" ]; do
    sleep 0.01
  done
  fail "$code"
fi
code=$(code_for "${E2E_FAIL_ON:-}")
if [ -n "$code" ]; then
  trigger="$E2E_DIR/fail-$TORCHELASTIC_RESTART_COUNT-$RANK"
  while [ ! -e "$trigger" ] && [ ! -e "$E2E_DIR/finish" ]; do sleep 0.05; done
  if [ -e "$trigger" ]; then fail "$code"; fi
fi
while [ ! -e "$E2E_DIR/finish" ]; do sleep 0.1; done
exit 0
