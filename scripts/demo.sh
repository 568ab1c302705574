#!/usr/bin/env bash
# The dtrun demo: builds dtrun (./scripts/setup.sh demo: the packages the build and the demo
# need, and the dtrun target alone), then runs a 2-worker job under
# `dtrun --standalone` in which rank 1 fails once mid-run; dtrun stops the other worker,
# restarts both, they resume from the last checkpoint and finish.
#
#   with torch (/usr/bin/python3 imports it): examples/ddp_train.py, gloo DDP, 20 steps,
#     a checkpoint every 5, rank 1 fails at step 12 -> resume from step 10
#   without torch, or with --native: a shell worker that "trains" 8 steps, checkpoints every
#     2, rank 1 fails at step 5 -> resume from step 4
#
# usage: scripts/demo.sh [--native]     (DTRUN_SKIP_INSTALL=1 skips package installs,
#                                         DTRUN_BUILD_DIR picks the build directory)
# The run's files (checkpoints, logs, event log) are kept in a temporary directory it names.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

native=0
case "${1:-}" in
  --native) native=1 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "demo: unknown argument $1" >&2; exit 2 ;;
esac

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "building dtrun (scripts/setup.sh demo)"
./scripts/setup.sh demo | tail -n 1
dtrun="$repo/${DTRUN_BUILD_DIR:-build}/bin/dtrun"
python=${DTRUN_SYSTEM_PYTHON:-/usr/bin/python3}
if [[ $native == 0 ]] && ! "$python" -c 'import torch' 2>/dev/null; then
  echo "demo: $python cannot import torch; running the native example instead"
  native=1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dtrun-demo-XXXXXX")
# Chosen here, so dtrun need not print torchrun's "Setting OMP_NUM_THREADS" notice.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
events="$work/events.jsonl"
# stdout of every worker on the console with torchrun's [default<rank>]: prefix; stderr (the
# failing rank's traceback) into the log files only, to keep this short.
common=(--standalone --nproc-per-node=2 --max-restarts=1 --redirects=2 --tee=1
        --log-dir "$work/logs" --event-log "$events")

if [[ $native == 0 ]]; then
  say "2-worker DDP training (torch $("$python" -c 'import torch; print(torch.__version__)'), gloo), rank 1 fails at step 12"
  cmd=("$dtrun" "${common[@]}" --python "$python" examples/ddp_train.py
       --ckpt-dir "$work/ckpt" --steps 20 --ckpt-every 5 --fail-at-step 12)
else
  say "2-worker native job (a shell worker), rank 1 fails at step 5"
  cat > "$work/worker.sh" <<'EOF'
#!/bin/sh
# A pretend training loop: one step per 50 ms, a checkpoint (the step number) every 2 steps,
# resume from it on start; rank 1 fails at step 5 in the first attempt only.
ckpt="$CKPT_DIR/step"
step=0
if [ -f "$ckpt" ]; then
  step=$(cat "$ckpt")
  echo "rank $RANK: restart $TORCHELASTIC_RESTART_COUNT, resuming from step $step"
else
  echo "rank $RANK: starting (world size $WORLD_SIZE, store $MASTER_ADDR:$MASTER_PORT)"
fi
while [ "$step" -lt 8 ]; do
  if [ "$step" = 5 ] && [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
    echo "rank $RANK: simulated crash at step $step" >&2
    exit 1
  fi
  sleep 0.05
  step=$((step + 1))
  if [ "$RANK" = 0 ] && [ $((step % 2)) = 0 ]; then
    echo "$step" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"
    echo "rank 0: step $step, checkpoint saved"
  fi
done
echo "rank $RANK: finished at step $step"
EOF
  chmod +x "$work/worker.sh"
  mkdir -p "$work/ckpt"
  cmd=(env CKPT_DIR="$work/ckpt" "$dtrun" "${common[@]}" --no-python "$work/worker.sh")
fi

echo "\$ ${cmd[*]#"$repo/"}"
set +e
"${cmd[@]}"
code=$?
set -e

say "what dtrun did (from --event-log)"
python3 - "$events" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    t = e["time"][11:23]
    kind = e["event"]
    if kind == "rendezvous_done":
        print(f"{t}  round {e['round']}: rendezvous done, world size {e['world_size']}")
    elif kind == "worker_started":
        print(f"{t}  round {e['round']}: rank {e['rank']} started (pid {e['pid']})")
    elif kind == "worker_exited":
        how = f"exit code {e['exit_code']}" if e["signal"] is None else f"signal {e['signal']}"
        print(f"{t}  round {e['round']}: rank {e['rank']} exited ({how})")
    elif kind == "restart_decided" and "next_round" not in e:
        # The failing node's own report, before the job moved on (docs/logs-and-reports.md).
        print(f"{t}  round {e['round']}: failure reported ({e.get('reason', '?')})")
    elif kind == "restart_decided":
        print(f"{t}  round {e['round']}: restart decided ({e.get('reason', 'new round')}), "
              f"next round {e['next_round']}")
    elif kind == "shutdown":
        print(f"{t}  shutdown: {e['reason']}")
EOF
tb=$(find "$work/logs" -path '*attempt_0/1/stderr.log' | head -n 1)
if [[ -n $tb ]]; then
  echo "rank 1's last words (${tb#"$work/"}): $(tail -n 1 "$tb")"
fi

say "result"
echo "dtrun exit code: $code (0 = every worker finished)"
if [[ $native == 0 && -f $work/ckpt/progress.jsonl ]]; then
  python3 - "$work/ckpt/progress.jsonl" <<'EOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
for e in events:
    if e["event"] == "resumed":
        print(f"rank {e['rank']} resumed from {e['checkpoint']} (TORCHELASTIC_RESTART_COUNT={e['restart_count']})")
done = {e["rank"]: e["sha256"][:16] for e in events if e["event"] == "finished"}
print(f"final parameters (sha256): {done}")
EOF
fi
if [[ $native == 1 && -f $work/ckpt/step ]]; then
  echo "last checkpoint: step $(cat "$work/ckpt/step") of 8"
fi
echo "files kept in $work"
exit "$code"
