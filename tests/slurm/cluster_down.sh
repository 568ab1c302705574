#!/usr/bin/env bash
# Stops the cluster cluster_up.sh started in $1: cancels its jobs (so no step outlives it), then
# TERMs the daemons named by the PID files in DIR, and KILLs whichever is still alive 10 s later.
# Never stops anything by name. Safe to run twice, or on a half-started cluster.
D=${1:?usage: cluster_down.sh DIR}
alive() {
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null)
  [ -n "$s" ] && [ "${s#Z}" = "$s" ]  # zombies count as gone: init reaps them late here
}
if [ -f "$D/slurm.conf" ] && [ -f "$D/slurmctld.pid" ] && alive "$(cat "$D/slurmctld.pid")"; then
  export SLURM_CONF="$D/slurm.conf"
  mapfile -t jobs < <(squeue -h -o %i 2>/dev/null)
  if [ "${#jobs[@]}" -gt 0 ]; then
    timeout 10 scancel --full --quiet "${jobs[@]}" 2>/dev/null
    for _ in $(seq 100); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
fi
mapfile -t P < <(cat "$D"/slurmd-*.pid "$D/slurmctld.pid" "$D/munge/munged.pid" 2>/dev/null)
[ "${#P[@]}" -gt 0 ] && kill -TERM "${P[@]}" 2>/dev/null
for _ in $(seq 100); do
  a=
  for p in "${P[@]}"; do alive "$p" && a=1; done
  [ -z "$a" ] && break
  sleep 0.1
done
for p in "${P[@]}"; do alive "$p" && kill -KILL "$p"; done
true
