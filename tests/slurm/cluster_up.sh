#!/usr/bin/env bash
# Starts a throw-away local Slurm cluster (munged, slurmctld, one slurmd per node) under $1, with
# no systemd (docs/slurm.md, "Testing it locally"). Everything it writes (config, state,
# logs, key, sockets, PID files) stays in that directory; cluster_down.sh stops it by PID file.
#
#   cluster_up.sh DIR [NODES]     NODES=1: one node named after this host; NODES>1: n1..nNODES,
#                                 several slurmd on this host (NodeAddr=127.0.0.1, names that
#                                 resolve only through Slurm)
#
# Ports are picked free at run time (above the Linux ephemeral range), and each cluster starts
# its job ids at a random block, so clusters can run side by side. On success it writes
# DIR/env.sh (source it: SLURM_CONF) and exits 0. It exits 77 after printing why when Slurm is
# not installed or the daemons do not come up: the caller then skips, it does not fail.
set -euo pipefail
D=${1:?usage: cluster_up.sh DIR [NODES]}
NODES=${2:-1}
CPUS=${CLUSTER_CPUS:-4}  # more than this machine may have: SlurmdParameters=config_overrides

skip() {
  echo "SKIP: $*"
  exit 77
}

for tool in munged mungekey slurmctld slurmd scontrol sinfo sbatch srun python3; do
  command -v "$tool" >/dev/null || skip "$tool not found (install slurmctld slurmd slurm-client munge)"
done

# slurmd starts every task as the job's user and slurmstepd must be able to switch to it; the
# set-up (docs/slurm.md, "Testing it locally") was checked as root only.
[ "$(id -u)" = 0 ] || skip "a local slurmd needs root (running as $(id -un))"
H=$(hostname -s)
mkdir -p "$D"/{state,log,munge}
chmod 700 "$D/munge"

# NODES+2 consecutive free TCP ports in [61000, 65000): slurmctld, slurmd (single node), and one
# slurmd port per node for several slurmd on one host. Checked by binding them.
read -r PORT0 < <(python3 - "$((NODES + 2))" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(61000, 65000 - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            s.bind(("0.0.0.0", p))
            socks.append(s)
        print(base)
        sys.exit(0)
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
sys.exit("no free port block")
PY
) || skip "no block of free ports"
CTLD_PORT=$PORT0
SLURMD_PORT=$((PORT0 + 1))
# Jobs of this cluster get ids JOB0, JOB0+1, ...: dtrun derives its rendezvous port from the job
# id modulo 1000, so clusters running side by side start at different multiples of 10 there.
JOB0=$((100000 + (PORT0 % 100) * 10))

mungekey --create --keyfile="$D/munge/munge.key" --force 2>"$D/log/mungekey.log" ||
  skip "mungekey failed: $(cat "$D/log/mungekey.log")"
munged --force --socket="$D/munge/munge.sock" --key-file="$D/munge/munge.key" \
  --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" \
  --seed-file="$D/munge/munged.seed" || skip "munged did not start: $(tail -5 "$D/munge/munged.log")"

if [ "$NODES" = 1 ]; then
  NODELINE="NodeName=$H NodeAddr=127.0.0.1 CPUs=$CPUS"
  NAMES=$H
else
  NODELINE="NodeName=n[1-$NODES] NodeHostname=$H NodeAddr=127.0.0.1 Port=$((PORT0 + 2))-$((PORT0 + 1 + NODES)) CPUs=$CPUS"
  NAMES=$(seq -f 'n%g' 1 "$NODES")
fi
cat >"$D/slurm.conf" <<CONF
ClusterName=dtrun$PORT0
SlurmctldHost=$H(127.0.0.1)
SlurmUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.sock,cred_expire=5
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmdParameters=config_overrides
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
SchedulerParameters=batch_sched_delay=0,sched_interval=1
MinJobAge=600
FirstJobId=$JOB0
JobRequeue=1
$NODELINE State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
echo "export SLURM_CONF=$D/slurm.conf" >"$D/env.sh"
export SLURM_CONF="$D/slurm.conf"

slurmctld -f "$SLURM_CONF" || skip "slurmctld did not start: $(tail -5 "$D/log/slurmctld.log")"
for n in $NAMES; do
  mkdir -p "$D/spool/$n"
  slurmd -f "$SLURM_CONF" -N "$n" || skip "slurmd -N $n did not start: $(tail -5 "$D/log/slurmd-$n.log")"
done
for _ in $(seq 150); do
  [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" = "$NODES" ] && {
    echo "cluster up in $D: nodes ${NAMES//$'\n'/ }, slurmctld port $CTLD_PORT, first job id $JOB0"
    exit 0
  }
  sleep 0.2
done
echo "--- sinfo"; sinfo -N 2>&1 || true
echo "--- slurmctld.log"; tail -20 "$D/log/slurmctld.log" 2>/dev/null || true
skip "the nodes did not become idle within 30 s (logs above)"
