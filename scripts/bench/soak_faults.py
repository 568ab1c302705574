"""The fault kinds of the soak (scripts/bench/soak), each injected into a running Job.

inject(job, spec) applies spec["kind"] with its parameters (spec["pick"] chooses the target
among the candidates, sorted, so that a seed replays the same choice) and waits for what the
kind expects: a new round training (its recovery time is measured), or, for the faults a job
must ride out without a restart, the observation window. It returns the fault's result, or
None when the fault does not apply to the job as it stands (too few nodes, no room).

  worker_kill     SIGKILL one worker                                     -> a new round
  two_workers     SIGKILL two workers of two nodes, 50 ms apart          -> a new round
  agent_kill      SIGKILL an agent that hosts nothing                    -> a new round, smaller
  terminate       SIGTERM such an agent (it leaves the job)              -> a new round, smaller
  stop_cont       SIGSTOP such an agent, SIGCONT later: short (0.5 s) rides it out; long (past
                  the lease) drops it, and it exits once continued       -> long: a new round
  late_join       a new agent joins the running job                      -> a new round, bigger
  stall           SIGSTOP one worker for good, under --stall-timeout     -> a new round
  partition       cut a node off the network (netns), heal later: short rides it out; long
                  drops it                                               -> long: a new round
  etcd_host_kill  etcd: SIGKILL the agent of group rank 0 (it hosts the workers' store)
  etcd_member_kill etcd: SIGKILL one etcd member (started again after): no restart
"""
import os
import signal
import time

import soak_job
from soak_job import LEASE_S, RECOVERY_DEADLINE_S, STALL_S, netns, wait_for

SHORT_S = 0.5
LONG_S = LEASE_S + 1.5

# Which kinds each launcher and backend runs. torchrun 1.13 gets the kinds it survives: not
# agent_kill (in the 2026-12-02 soak, 3 of 3 torchrun jobs saw no new round within 90 s of a
# non-host agent's SIGKILL; why was not investigated), nor the kinds that need dtrun's options
# (stall: --stall-timeout) or dtrun's own behaviour to be judged (terminate, stop, partition).
KINDS = {
    ("dtrun", "c10d"): ["worker_kill", "two_workers", "agent_kill", "terminate", "stop_cont",
                        "late_join", "stall", "partition"],
    ("dtrun", "etcd"): ["worker_kill", "two_workers", "agent_kill", "terminate", "stop_cont",
                        "late_join", "stall", "etcd_host_kill", "etcd_member_kill"],
    ("torchrun", "c10d"): ["worker_kill", "two_workers", "late_join"],
}


def _pick(items, spec, key="pick"):
    items = sorted(items, key=lambda x: x["pid"] if isinstance(x, dict) else x.pid)
    return items[min(len(items) - 1, int(spec[key] * len(items)))] if items else None


def _workers(job):
    """The running workers of the group that trains now, from the trainer's own start records
    (every worker writes its pid, rank and round first thing): the same for dtrun's cold and
    warm starts and for torchrun's workers. (fault.workers sees neither a warm worker, whose
    /proc environment is its standby's, nor torchrun's, which do not lead process groups.) A pid
    counts only while its environment still names the job, so a reused pid is never hit."""
    groups = job.records("group")
    if not groups:
        return []
    current = groups[-1]["round"]
    out = []
    for r in job.records("start"):
        if r["round"] != current:
            continue
        st = soak_job.fault._stat(r["pid"])
        env = soak_job.fault._environ(r["pid"]) or {}
        if st is None or st[0] in ("Z", "X", "T", "t") or \
                env.get("TORCHELASTIC_RUN_ID") != job.run_id:
            continue
        out.append({"pid": r["pid"], "agent": st[1], "rank": r["rank"]})
    return out


def _bystanders(job):
    """Live nodes that host nothing the job needs to survive (at least one other must stay)."""
    live = job.live()
    if len(live) < 2:
        return []
    if job.plan["launcher"] == "torchrun" or job.plan["backend"] == "c10d":
        keep = job.nodes[0]  # the store's host: the job ends with it by design
    else:
        keep = job.group_rank0()
    return [n for n in live if n is not keep]


def _kill(pid, signo):
    t = time.time()
    os.kill(pid, signo)
    return t


def _restart(job, spec, t0, variant=""):
    g = wait_for(lambda: job.group_after(t0), RECOVERY_DEADLINE_S + (STALL_S if spec["kind"] ==
                                                                      "stall" else 0),
                 f"a new round after the {spec['kind']} fault")
    # Two end points: the last worker of the new group started (the trainer's first line), and
    # the group training again (its first all-reduce: imports and the process group done).
    result = {"kind": spec["kind"], "variant": variant, "t0": t0, "restarted": True,
              "recovery_s": g["started"] - t0, "resumed_s": g["t"] - t0, "evlog_s": None,
              "world": g["world"]}
    if job.plan["launcher"] == "dtrun":
        ts = wait_for(lambda: job.evlog_start(g["round"]), 10, "the round's worker_started")
        result["evlog_s"] = ts - t0
    return result


def _ride_out(job, spec, t0, variant):
    """The fault must not restart the job: watch for twice the lease past it."""
    until = t0 + 2 * LEASE_S + 1
    while time.time() < until:
        time.sleep(0.1)  # the observation window itself
    g = job.group_after(t0)
    return {"kind": spec["kind"], "variant": variant, "t0": t0, "restarted": g is not None,
            "recovery_s": (g["started"] - t0) if g else None,
            "resumed_s": (g["t"] - t0) if g else None, "evlog_s": None,
            "world": g["world"] if g else None}


def worker_kill(job, spec):
    w = _pick(_workers(job), spec)
    if not w:
        return None
    return _restart(job, spec, _kill(w["pid"], signal.SIGKILL))


def two_workers(job, spec):
    ws = _workers(job)
    first = _pick(ws, spec)
    others = [w for w in ws if first and w["agent"] != first["agent"]]
    second = _pick(others, spec, "pick2")
    if not first or not second:
        return None
    t0 = _kill(first["pid"], signal.SIGKILL)
    time.sleep(0.05)  # "close together": the fault's own spacing
    try:
        _kill(second["pid"], signal.SIGKILL)
    except ProcessLookupError:
        pass  # it already ended of the first one's loss (its peer left the collective)
    return _restart(job, spec, t0)


def _agent_signal(job, spec, signo, fate):
    n = _pick(_bystanders(job), spec)
    if not n:
        return None
    n.fate = fate
    return _restart(job, spec, _kill(n.pid, signo))


def agent_kill(job, spec):
    return _agent_signal(job, spec, signal.SIGKILL, "killed")


def etcd_host_kill(job, spec):
    n = job.group_rank0()
    if n is None or len(job.live()) < 2:
        return None
    n.fate = "killed"
    return _restart(job, spec, _kill(n.pid, signal.SIGKILL))


def terminate(job, spec):
    return _agent_signal(job, spec, signal.SIGTERM, "terminated")


def stop_cont(job, spec):
    n = _pick(_bystanders(job), spec)
    if not n:
        return None
    long = spec["long"]
    t0 = _kill(n.pid, signal.SIGSTOP)
    if long:
        n.fate = "dropped"
    while time.time() < t0 + (LONG_S if long else SHORT_S):
        time.sleep(0.02)  # the stop's length
    os.kill(n.pid, signal.SIGCONT)
    if long:
        return _restart(job, spec, t0, "long")
    return _ride_out(job, spec, t0, "short")


def late_join(job, spec):
    if len(job.live()) >= job.plan["max_nodes"] or len(job.nodes) >= job.plan["max_nodes"] + 4:
        return None
    if job.netns and len(job.nodes) >= job.plan["max_nodes"]:
        return None  # every namespace of the job is used
    t0 = time.time()
    job.start_node()
    return _restart(job, spec, t0)


def stall(job, spec):
    w = _pick(_workers(job), spec)
    if not w:
        return None
    return _restart(job, spec, _kill(w["pid"], signal.SIGSTOP))


def partition(job, spec):
    if not job.netns:
        return None
    n = _pick(_bystanders(job), spec)
    if not n:
        return None
    long = spec["long"]
    t0 = time.time()
    netns.set_link(job.netns, n.index, False)
    if long:
        n.fate = "dropped"
    while time.time() < t0 + (LONG_S + 0.5 if long else SHORT_S):
        time.sleep(0.02)  # the cut's length
    netns.set_link(job.netns, n.index, True)
    if long:
        return _restart(job, spec, t0, "long")
    return _ride_out(job, spec, t0, "short")


def etcd_member_kill(job, spec):
    cluster = job.soak.etcd
    if cluster is None or job.soak.etcd_down is not None:
        return None
    i = min(len(cluster.procs) - 1, int(spec["pick"] * len(cluster.procs)))
    t0 = time.time()
    cluster.kill(i)
    job.soak.etcd_down = i
    result = _ride_out(job, spec, t0, "")
    cluster.start(i)
    cluster.wait_healthy(60)
    job.soak.etcd_down = None
    return result


def inject(job, spec):
    try:
        return globals()[spec["kind"]](job, spec)
    except ProcessLookupError:
        return None  # the target ended between being chosen and the signal: nothing injected
