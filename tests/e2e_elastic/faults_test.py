#!/usr/bin/env python3
"""The faults a real cluster has, end to end: the quiet ones. Real agents, real workers.

  faults_test.py --dtrun build/bin/dtrun --case NAME      (exit 0 pass, 1 fail, 77 skip)

Stops that cannot wait on a worker that cannot act:
  stopped_worker_next_round_at_once   --standalone, /bin/sleep workers: worker 0 SIGSTOPped,
                      worker 1 SIGKILLed. The stop sends SIGCONT with SIGTERM, so worker 0 exits
                      of the SIGTERM and round 1 starts long before the 600 s grace could end.
  frozen_worker_given_up              the same with worker 0 frozen by a cgroup v1 freezer
                      (state D: even SIGKILL waits): the stop gives up on it after the grace
                      twice over, says so, and round 1 starts; thawed, it dies and is reaped.
Every node's exit code and last line agree with the job (the store's host keeps the outcome):
  missed_rounds_job_succeeded  node B (agent and workers) stopped past its lease; A goes on
                      alone and succeeds, and, hosting the store, waits for B. B continued: it
                      stops its workers and exits 0, "the job finished without this node".
  missed_rounds_job_failed     the same, but A's round fails for good: B prints the job's
                      failure report and exits 1 (not "lost the rendezvous store").
  late_node_after_success      a node started after the job succeeded: 0, and it says so.
  host_leaves_after_close_timeout  B never comes back: A, the host, leaves after close_timeout
                      saying who it waited for; B continued later cannot learn the outcome and
                      exits 1 naming the store.
  etcd_missed_rounds_job_succeeded  the first case on etcd: the last agent leaves the outcome
                      on a lease of close_timeout, from which B learns it.
Partitions (network namespaces and veth pairs the test creates; scripts/fault/netns.py):
  partition_short_heals        a node cut off for less than the heartbeat deadline and healed:
                      nothing restarts, the job ends with exit 0 everywhere.
  partition_dropped_then_heals  cut for longer than the store's lease, healed before the node's
                      own heartbeat gives up: the others go on; the node exits 1 with one line
                      saying the store dropped it.
  partition_store_host         the store's host cut off from the others: every node ends with
                      one clear line (the others: the store does not answer; the host: its
                      round cannot form), none hangs.
  etcd_partition_short_heals   etcd members in the namespaces: a node (agent and member) cut off
                      for less than the lease TTL and healed: nothing restarts.
  etcd_partition_node          the same node cut off for longer: the others go on in round 1;
                      the cut-off agent, its member without quorum, exits 1 with one line.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import harness
from dtrun_testing import Failed, Skip, check, free_port, log, pid_alive, poll  # noqa: E402
from harness import check_round  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "etcd"))

EXIT_BOUND_S = 30.0
FREEZER = Path("/sys/fs/cgroup/freezer")


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _never(cond, seconds, what):
    """Fails if `cond` turns true within `seconds` (a negative check: the deadline is the point)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check(not cond(), what)
        time.sleep(0.05)


def _without_node(line, round_):
    """The summary line (the last) of a node the job succeeded without, in round `round_`."""
    return (" finished without this node after " in line and
            f"round {round_} succeeded on the other nodes" in line)


def _last_line(agent):
    lines = [l for l in agent.stderr().splitlines() if l.strip()]
    return lines[-1] if lines else ""


def _standalone(job, program, extra=()):
    argv = [job.dtrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
            "--log-dir", str(job.dir / "logs"),
            "--event-log", str(job.dir / "agent0.events.jsonl"), *extra,
            "--no-python", *program]
    agent = harness.Agent(job, 0, argv, dict(os.environ))
    job.agents.append(agent)
    return agent


def _started(agent, round_, n=2):
    return poll(lambda: (lambda es: es if len(es) >= n else None)(
        [e for e in agent.events("worker_started") if e["round"] == round_]), EXIT_BOUND_S,
        f"{n} workers started in round {round_}")


def _exit_of(agent, pid):
    return agent.wait_event("worker_exited", EXIT_BOUND_S, lambda e: e["pid"] == pid,
                            f"the exit of worker pid {pid}")


def stopped_worker_next_round_at_once(job):
    # The grace is longer than any deadline here: the next round can only start in time if the
    # stopped worker acts on the SIGTERM, which needs the SIGCONT.
    agent = _standalone(job, ["/bin/sleep", "600"], extra=["--shutdown-timeout", "600"])
    w = {e["local_rank"]: e["pid"] for e in _started(agent, 0)}
    os.kill(w[0], signal.SIGSTOP)
    poll(lambda: _state(w[0]) == "T", 10, "worker 0 to be stopped")
    t0 = time.time()
    os.kill(w[1], signal.SIGKILL)
    _started(agent, 1)
    log(f"MEASURED SIGKILL of worker 1 -> round 1 started: "
        f"{(max(e['ts'] for e in agent.events('worker_started') if e['round'] == 1) - t0):.2f} s "
        f"(the grace is 600 s; the report of the issue measured 30.1 s with a 30 s grace)")
    check(_exit_of(agent, w[0])["signal"] == signal.SIGTERM,
          "the stopped worker was not ended by the SIGTERM")
    check("sending SIGKILL" not in agent.stderr(), "the stop escalated to SIGKILL")
    agent.signal(signal.SIGTERM)
    agent.wait(EXIT_BOUND_S)
    round1 = [e["pid"] for e in agent.events("worker_started") if e["round"] == 1]
    check(not any(pid_alive(p) for p in round1), "workers outlived dtrun")


class _Freezer:
    """A cgroup v1 freezer group of the test's own; thawed and removed on close()."""

    def __init__(self, name):
        self.dir = FREEZER / name
        try:
            self.dir.mkdir(exist_ok=True)
        except OSError as e:
            raise Skip(f"no writable cgroup v1 freezer at {FREEZER}: {e}")
        if not (self.dir / "freezer.state").exists():
            raise Skip(f"{FREEZER} is not a cgroup v1 freezer hierarchy")

    def add(self, pid):
        (self.dir / "tasks").write_text(str(pid))

    def set(self, state):
        (self.dir / "freezer.state").write_text(state)

    def close(self):
        self.set("THAWED")
        poll(lambda: not (self.dir / "tasks").read_text().split(), 20, "the freezer to empty")
        self.dir.rmdir()


def frozen_worker_given_up(job):
    freezer = _Freezer(f"dtrun-e2e-{os.getpid()}")
    try:
        agent = _standalone(job, ["/bin/sleep", "600"], extra=["--shutdown-timeout", "2"])
        w = {e["local_rank"]: e["pid"] for e in _started(agent, 0)}
        freezer.add(w[0])
        freezer.set("FROZEN")
        poll(lambda: _state(w[0]) == "D", 10, "worker 0 in state D")
        os.kill(w[1], signal.SIGKILL)
        _started(agent, 1)
        err = agent.stderr()
        check(f"(pid {w[0]}, uninterruptible" in err and "sending SIGKILL" in err,
              f"no line about the SIGKILL of the frozen worker:\n{err[-3000:]}")
        check("after SIGKILL; going on without it" in err,
              f"no line about giving up on the frozen worker:\n{err[-3000:]}")
        check(pid_alive(w[0]), "the frozen worker is gone: the test froze nothing")
        freezer.set("THAWED")
        poll(lambda: _state(w[0]) is None, 20, "the thawed worker to die and be reaped")
        agent.signal(signal.SIGTERM)
        agent.wait(EXIT_BOUND_S)
    finally:
        freezer.close()


# --- the job's outcome for nodes that were not there at its end ----------------------------

def _host_and_b(job, conf=None, extra=(), env_a=None):
    """A (hosting the store on a free port) and B, --nnodes 1:2, 2 workers each, round 0."""
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    conf = dict({"close_timeout": 60}, **(conf or {}))
    a = job.start_agent("1:2", endpoint=endpoint, conf=conf, extra=extra, env=env_a)

    def bound():
        import socket
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    poll(bound, 20, f"A to serve the store on {endpoint}")
    b = job.start_agent("1:2", endpoint=endpoint, conf=conf, extra=extra, env=env_a)
    check_round(job, job.wait_round(0, 4), 0, nodes=2, world=4)
    return a, b, endpoint


def _freeze_node(job, agent, signo):
    """signo (SIGSTOP/SIGCONT) to an agent and every worker it started; workers first on
    SIGSTOP, last on SIGCONT (so the continued agent finds its workers still stopped)."""
    workers = [r["pid"] for r in job.records() if r["agent"] == agent.pid and pid_alive(r["pid"])]
    if signo == signal.SIGSTOP:
        for p in workers:
            os.kill(p, signo)
        agent.signal(signo)
    else:
        agent.signal(signo)
    return workers


def _b_misses_round_1(job, a, b):
    """B (agent and workers) stopped; A goes on alone in round 1. Returns B's workers."""
    workers = _freeze_node(job, b, signal.SIGSTOP)
    check_round(job, job.wait_round(1, 2), 1, nodes=1, world=2)
    return workers


def missed_rounds_job_succeeded(job):
    a, b, _ = _host_and_b(job)
    b_workers = _b_misses_round_1(job, a, b)
    job.finish()
    a.wait_event("shutdown", EXIT_BOUND_S, lambda e: e.get("reason") == "succeeded",
                 "A's success")
    check(a.running(), "A, the store's host, left while B was still attached")
    t = time.time()
    _freeze_node(job, b, signal.SIGCONT)
    rc = b.wait(EXIT_BOUND_S)
    log(f"MEASURED B continued -> exit {rc} after {time.time() - t:.2f} s: {_last_line(b)}")
    check(rc == 0, f"B exited {rc} for a job that succeeded:\n{b.stderr()[-2000:]}")
    check(_without_node(_last_line(b), 1),
          f"B's last line does not say the job finished without it: {_last_line(b)!r}")
    check([e for e in b.events("shutdown") if e.get("reason") == "finished_without_node"],
          "B recorded no finished_without_node shutdown")
    check(not any(pid_alive(p) for p in b_workers), "B's stopped workers outlived it")
    check(a.wait(EXIT_BOUND_S) == 0, "A did not exit 0")
    check(not job.records(2), "a round 2 ran")


def missed_rounds_job_failed(job):
    # Round 1 (A alone) fails and --max-restarts 0 makes it final (B's leaving was a membership
    # change, not counted).
    a, b, _ = _host_and_b(job, extra=["--max-restarts", "0"],
                          env_a={"E2E_FAIL": "1:0:3", "E2E_FAIL_DELAY": "0"})
    _b_misses_round_1(job, a, b)
    a.wait_event("shutdown", EXIT_BOUND_S, lambda e: e.get("reason") == "failed", "A's failure")
    check(a.running(), "A, the store's host, left while B was still attached")
    _freeze_node(job, b, signal.SIGCONT)
    rc = b.wait(EXIT_BOUND_S)
    err = b.stderr()
    check(rc == 1, f"B exited {rc} for a job that failed:\n{err[-2000:]}")
    check("error: agent: lost the rendezvous" not in err,
          f"B blamed the store for a failed job:\n{err[-2000:]}")
    # B learns it one of two ways, by the race between its resumed heartbeat and the store
    # dropping it: from the job's state ("failed for good ... without this node") or, dropped,
    # from the job's record; either way its summary line names the outcome and the round.
    last = _last_line(b)
    check("the job failed for good (round 1) without this node" in err
          or ("failed_on_another_node" in last and "round 1:" in last),
          f"B did not say the job failed without it:\n{err[-2000:]}")
    check("exitcode" in err and ": 3" in err, f"B printed no failure report:\n{err[-3000:]}")
    shut = [e for e in b.events("shutdown")]
    check(shut and shut[-1].get("reason") == "failed", f"B's shutdown records: {shut}")
    check(a.wait(EXIT_BOUND_S) == 1, "A did not exit 1")


def late_node_after_success(job):
    job.start_store()
    a = job.start_agent("1:2")
    job.wait_round(0, 2)
    job.finish()
    check(a.wait(EXIT_BOUND_S) == 0, "the job's only node failed")
    late = job.start_agent("1:2")
    rc = late.wait(EXIT_BOUND_S)
    check(rc == 0, f"the late node exited {rc}:\n{late.stderr()[-2000:]}")
    check(_without_node(_last_line(late), 0)
          and "never joined" in _last_line(late), f"late node's last line: {_last_line(late)!r}")


def host_leaves_after_close_timeout(job):
    a, b, endpoint = _host_and_b(job, conf={"close_timeout": 3})
    _b_misses_round_1(job, a, b)
    job.finish()
    rc = a.wait(EXIT_BOUND_S)
    check(rc == 0, f"A exited {rc}")
    check("1 other agent(s) of the job still attached after close_timeout (3 s)" in a.stderr(),
          f"A did not say whom it waited for:\n{a.stderr()[-2000:]}")
    _freeze_node(job, b, signal.SIGCONT)
    rc = b.wait(EXIT_BOUND_S)
    check(rc == 1, f"B exited {rc} without any way to know the outcome")
    check(f"lost the rendezvous store at {endpoint}" in b.stderr(),
          f"B's error does not name the store:\n{b.stderr()[-2000:]}")


def _etcd(job, directory=None, **kw):
    from etcd_fixture import EtcdCluster
    try:
        return EtcdCluster(directory or job.dir / "etcd", **kw)
    except FileNotFoundError as e:
        raise Skip(str(e))


def etcd_missed_rounds_job_succeeded(job):
    cluster = _etcd(job, members=1)
    try:
        conf = {"close_timeout": 60, "quorum_timeout": 30}
        ags = [job.start_agent("1:2", endpoint=cluster.endpoints, conf=conf,
                               extra=["--rdzv-backend", "etcd"]) for _ in range(2)]
        groups = check_round(job, job.wait_round(0, 4), 0, nodes=2, world=4)
        b = next(x for x in ags if x.pid == groups[1])
        a = next(x for x in ags if x is not b)
        _b_misses_round_1(job, a, b)
        job.finish()
        check(a.wait(EXIT_BOUND_S) == 0, "A did not exit 0")
        prefix = f"dtrun/{job.run_id}/"
        check(cluster.keys(prefix) == 1, f"{cluster.keys(prefix)} keys left: expected the outcome")
        _freeze_node(job, b, signal.SIGCONT)
        rc = b.wait(EXIT_BOUND_S)
        check(rc == 0, f"B exited {rc} for a job that succeeded:\n{b.stderr()[-2000:]}")
        check(_without_node(_last_line(b), 1),
              f"B's last line: {_last_line(b)!r}")
    finally:
        cluster.close()


# --- partitions -------------------------------------------------------------------------------

SUBNET = "10.213.0"


def _netns(job, nodes):
    r = subprocess.run([sys.executable, str(harness.NETNS), "check"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise Skip(f"cannot build network namespaces here: {r.stdout.strip()} {r.stderr.strip()}")
    job.netns_name = f"dtf{os.getpid()}"
    r = subprocess.run([sys.executable, str(harness.NETNS), "setup", "--name", job.netns_name,
                        "--nodes", str(nodes), "--subnet", SUBNET], capture_output=True, text=True)
    check(r.returncode == 0, f"netns setup failed: {r.stderr}")


def _link(job, node, up):
    r = subprocess.run([sys.executable, str(harness.NETNS), "heal" if up else "cut", "--name",
                        job.netns_name, "--node", str(node)], capture_output=True, text=True)
    check(r.returncode == 0, f"netns {'heal' if up else 'cut'} failed: {r.stderr}")
    log(f"node {node} {'healed' if up else 'cut off'}")
    return time.time()


def _listening(job, node, port):
    return str(port) in subprocess.run(
        ["ip", "netns", "exec", f"{job.netns_name}-{node}", "ss", "-ltn"], capture_output=True,
        text=True).stdout


def _netns_c10d(job, conf, extra=("--max-restarts", "0")):
    """3 nodes in namespaces, node 0 hosting the store on its own address; round 0 running."""
    _netns(job, 3)
    endpoint = f"{SUBNET}.1:29400"  # node 0's address: only these namespaces see it
    nodes = [job.start_agent("2:3", endpoint=endpoint, conf=conf, netns_node=0, extra=extra)]
    poll(lambda: _listening(job, 0, 29400), 20, "node 0 to serve the store")
    nodes += [job.start_agent("2:3", endpoint=endpoint, conf=conf, netns_node=i, extra=extra)
              for i in (1, 2)]
    groups = check_round(job, job.wait_round(0, 6), 0, nodes=3, world=6)
    check(groups[0] == nodes[0].pid, f"node 0 is not group rank 0: {groups}")
    return nodes, endpoint


# Steady heartbeats: a lease of 1 s x 5, answers within 4 s.
STEADY = {"keep_alive_interval": 1, "keep_alive_max_attempt": 5, "heartbeat_timeout": 4}


def partition_short_heals(job):
    nodes, _ = _netns_c10d(job, STEADY)
    # The users' command: scripts/fault/fault.py partition, healing after 1 s.
    cut = job.fault("partition", "--pid", str(nodes[2].pid), "--for", "1")
    check(cut["netns"] == f"{job.netns_name}-2" and cut["healed_ts"] - cut["ts"] >= 1.0,
          f"fault.py partition: {cut}")
    # Twice the lease after the cut: a node dropped for it would have restarted the round.
    _never(lambda: job.records(1), 10, "a round 1 started after a cut shorter than the lease")
    job.finish()
    for a in nodes:
        check(a.wait(EXIT_BOUND_S) == 0, f"node {a.index} exited non-zero:\n{a.stderr()[-2000:]}")
    check([e["round"] for e in nodes[2].events("rendezvous_done")] == [0],
          "the cut node went through more than round 0")


def partition_dropped_then_heals(job):
    # The store drops a silent node after 0.3 s x 3; the node's own heartbeat waits 10 s for an
    # answer, so the cut (3 s) heals before it gives up: the retransmitted heartbeat finds its
    # connection closed by the store.
    nodes, endpoint = _netns_c10d(job, {"keep_alive_interval": 0.3, "keep_alive_max_attempt": 3,
                                        "heartbeat_timeout": 10})
    t = _link(job, 2, False)
    check_round(job, job.wait_round(1, 4), 1, nodes=2, world=4)
    poll(lambda: time.time() - t >= 3.0, 10, "a 3 s cut")
    check(nodes[2].running(), "the cut node gave up before the heal: its heartbeat_timeout is 10 s")
    job.fault("heal", "--pid", str(nodes[2].pid))  # the users' command
    rc = nodes[2].wait(EXIT_BOUND_S)
    line = _last_line(nodes[2])
    log(f"MEASURED the dropped node exited {rc}: {line}")
    check(rc == 1, f"the dropped node exited {rc}")
    check("the store dropped this agent" in line and f"store at {endpoint}" in line,
          f"the dropped node's last line: {line!r}")
    job.finish()
    for a in nodes[:2]:
        check(a.wait(EXIT_BOUND_S) == 0, f"node {a.index} exited non-zero")


def partition_store_host(job):
    conf = {"keep_alive_interval": 0.3, "keep_alive_max_attempt": 3, "heartbeat_timeout": 2,
            "join_timeout": 5}
    nodes, endpoint = _netns_c10d(job, conf)
    # The users' command, finding the node by the job's run id and group rank.
    t = job.fault("partition", "--run-id", job.run_id, "--group-rank", "0")["ts"]
    try:
        for a in nodes[1:]:
            rc = a.wait(EXIT_BOUND_S)
            line = _last_line(a)
            log(f"MEASURED node {a.index} exited {rc} after {time.time() - t:.1f} s: {line}")
            check(rc == 1, f"node {a.index} exited {rc}")
            check(f"lost the rendezvous store at {endpoint}" in line and "does not answer" in line,
                  f"node {a.index}'s last line: {line!r}")
        rc = nodes[0].wait(EXIT_BOUND_S + 10)
        line = _last_line(nodes[0])
        log(f"MEASURED the store's host exited {rc} after {time.time() - t:.1f} s: {line}")
        check(rc == 1, f"the store's host exited {rc}")
        check("timed out after 5 s with 1 node(s) of min 2" in line,
              f"the host's last line: {line!r}")
    finally:
        _link(job, 0, True)
    workers = [r["pid"] for r in job.records()]
    poll(lambda: not any(pid_alive(p) for p in workers), 10, "every worker to end")


def _netns_etcd(job, ttl_conf):
    """3 namespace nodes, each with an etcd member on its own address and an agent using all
    three; round 0 running. Returns (cluster, agents)."""
    _netns(job, 3)
    hosts = [f"{SUBNET}.{i + 1}" for i in range(3)]
    cluster = _etcd(job, members=3, hosts=hosts,
                    netns=[f"{job.netns_name}-{i}" for i in range(3)])
    conf = dict(ttl_conf, quorum_timeout=5)
    try:
        # --local-addr: the worker store of group rank 0 is reached at the node's own address
        # (the nodes share the machine's hostname, which the namespaces cannot reach).
        agents = [job.start_agent("2:3", endpoint=cluster.endpoints, conf=conf, netns_node=i,
                                  extra=["--rdzv-backend", "etcd", "--max-restarts", "0",
                                         "--local-addr", hosts[i]])
                  for i in range(3)]
        check_round(job, job.wait_round(0, 6), 0, nodes=3, world=6)
    except BaseException:
        cluster.close()
        raise
    return cluster, agents


def etcd_partition_short_heals(job):
    cluster, agents = _netns_etcd(job, {"keep_alive_interval": 1, "keep_alive_max_attempt": 5})
    try:
        t = _link(job, 2, False)
        poll(lambda: time.time() - t >= 1.5, 5, "a 1.5 s cut")
        _link(job, 2, True)
        _never(lambda: job.records(1), 10, "a round 1 started after a cut shorter than the TTL")
        job.finish()
        for a in agents:
            check(a.wait(EXIT_BOUND_S) == 0, f"agent {a.index} exited non-zero:\n"
                  f"{a.stderr()[-2000:]}")
    finally:
        cluster.close()


def etcd_partition_node(job):
    cluster, agents = _netns_etcd(job, {"keep_alive_interval": 0.5, "keep_alive_max_attempt": 3})
    try:
        t = _link(job, 2, False)
        check_round(job, job.wait_round(1, 4), 1, nodes=2, world=4)
        log(f"MEASURED cut -> round 1 running without node 2: "
            f"{max(r['t'] for r in job.records(1)) - t:.2f} s")
        rc = agents[2].wait(EXIT_BOUND_S)
        line = _last_line(agents[2])
        log(f"MEASURED the cut-off agent exited {rc} after {time.time() - t:.1f} s: {line}")
        check(rc == 1, f"the cut-off agent exited {rc}")
        check("lost the rendezvous etcd at" in line, f"its last line: {line!r}")
        _link(job, 2, True)
        job.finish()
        for a in agents[:2]:
            check(a.wait(EXIT_BOUND_S) == 0, f"agent {a.index} exited non-zero")
    finally:
        cluster.close()


CASES = {f.__name__: f for f in [
    stopped_worker_next_round_at_once,
    frozen_worker_given_up,
    missed_rounds_job_succeeded,
    missed_rounds_job_failed,
    late_node_after_success,
    host_leaves_after_close_timeout,
    etcd_missed_rounds_job_succeeded,
    partition_short_heals,
    partition_dropped_then_heals,
    partition_store_host,
    etcd_partition_short_heals,
    etcd_partition_node,
]}

if __name__ == "__main__":
    sys.exit(harness.run(CASES))
