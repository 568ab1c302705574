#!/usr/bin/env python3
"""End-to-end tests of dtrun's elastic behaviour (docs/rendezvous.md, docs/agent.md): 2 to 4
agents on loopback, one job, faults injected with scripts/fault/. Every case asserts the world
size, the rank assignment and the round number the workers see (harness.check_round).

  elastic_test.py --dtrun build/bin/dtrun --case NAME      (exit 0 pass, 1 fail, 77 skip)

Times dtrun aims at (detection within 1 s, within the heartbeat deadline: docs/benchmarks.md)
are printed as MEASURED lines; only generous safety bounds are asserted, since ctest runs these
in parallel on small shared machines. scripts/bench/rendezvous measures recovery strictly.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import harness  # noqa: E402
from dtrun_testing import Skip, check, free_port, log, pid_alive, poll  # noqa: E402
from harness import check_round  # noqa: E402

# Generous bounds: far above the targets, far below "hangs".
DETECT_BOUND_S = 10.0
EXIT_BOUND_S = 20.0


def _all_exit(job, agents, code, timeout=EXIT_BOUND_S):
    for a in agents:
        rc = a.wait(timeout)
        check(rc == code, f"agent {a.index} exited {rc}, expected {code}\n{a.stderr()[-2000:]}")


def _shutdown(agent, reason):
    """The agent's one shutdown record, which must give `reason`."""
    records = agent.events("shutdown")
    check(len(records) == 1 and records[0].get("reason") == reason,
          f"agent {agent.index}: shutdown records {records}, expected one with reason {reason}")
    return records[0]


def _first_exit_after(agent, t0, round_):
    """Seconds from t0 until the first worker of `round_` on `agent` exited."""
    ev = agent.wait_event("worker_exited", DETECT_BOUND_S, lambda e: e["round"] == round_,
                          f"agent {agent.index}: a worker of round {round_} exits")
    return ev["ts"] - t0


def worker_failure_restarts_everywhere(job):
    """Two workers on two different nodes fail in round 0: every node restarts into round 1,
    and that counts once, job-wide (--max-restarts 1 is enough)."""
    job.start_store()
    fail = {"E2E_FAIL": "0:1:3 0:4:5"}  # rank 1 (group rank 0) and rank 4 (group rank 2)
    agents = [job.start_agent(3, extra=["--max-restarts", "1"], env=fail) for _ in range(3)]
    job.wait_round(0, 6)
    check_round(job, job.records(), 0, nodes=3, world=6)
    groups = check_round(job, job.wait_round(1, 6), 1, nodes=3, world=6)
    log(f"round 1 groups: {groups}")
    job.finish()
    # Once every agent has ended, a second restart (one failure round counted twice) would have
    # started a round 2 (its workers find `finish` and exit 0) or, past --max-restarts 1, made
    # the agents exit 1.
    _all_exit(job, agents, 0)
    check(not job.records(2), "a round 2 started: one failure round was counted twice")
    decided = [e for a in agents for e in a.events("restart_decided")
               if e.get("reason") == "worker_failure" and e.get("decided_here")]
    check(len(decided) == 1, f"{len(decided)} agents decided the restart, expected exactly 1")


def max_restarts_exhausted_job_wide(job):
    """--max-restarts 1: a failure on node 0 in round 0 and one on node 1 in round 1. torch
    counts per agent (each node failed once: it would go on); dtrun counts job-wide, so every
    node exits 1 with the failure report after round 1."""
    job.start_store()
    fail = {"E2E_FAIL": "0:0:3 1:3:7"}
    agents = [job.start_agent(2, extra=["--max-restarts", "1"], env=fail) for _ in range(2)]
    for a in agents:
        rc = a.wait(EXIT_BOUND_S)
        err = a.stderr()
        check(rc == 1, f"agent {a.index} exited {rc}, expected 1\n{err[-2000:]}")
        check("Root Cause (first observed failure)" in err and "exitcode  : 7" in err,
              f"agent {a.index} printed no failure report naming exit code 7:\n{err[-3000:]}")
    check_round(job, job.records(), 0, nodes=2, world=4)
    check_round(job, job.records(), 1, nodes=2, world=4)
    check(not job.records(2), "a round 2 started after the restarts were used up")


def agent_killed_survivors_continue(job):
    """4 agents, --nnodes 2:4, --max-restarts 0: one agent is SIGKILLed; the 3 others stop
    their workers at once and go on in round 1 (a membership change, not a failure)."""
    job.start_store()
    agents = [job.start_agent("2:4", extra=["--max-restarts", "0"]) for _ in range(4)]
    rs = job.wait_round(0, 8)
    groups = check_round(job, rs, 0, nodes=4, world=8)
    victim = next(a for a in agents if a.pid == groups[1])
    victim_workers = [r["pid"] for r in rs if r["group_rank"] == 1]
    t0 = job.fault("kill-agent", "--run-id", job.run_id, "--group-rank", "1")["ts"]
    survivors = [a for a in agents if a is not victim]
    lags = [_first_exit_after(a, t0, 0) for a in survivors]
    log(f"MEASURED agent SIGKILL -> survivors' first worker_exited: "
        f"{', '.join(f'{x * 1000:.0f} ms' for x in lags)}")
    check(max(lags) < DETECT_BOUND_S, f"survivors took {max(lags):.2f} s to stop their workers")
    rs1 = job.wait_round(1, 6)
    restarted = max(r["t"] for r in rs1) - t0
    log(f"MEASURED agent SIGKILL -> every survivor's workers running in round 1: "
        f"{restarted * 1000:.0f} ms")
    groups1 = check_round(job, job.records(), 1, nodes=3, world=6)
    check(set(groups1.values()) == {a.pid for a in survivors},
          f"round 1 agents {groups1} are not the survivors")
    check(victim.wait(5) == -signal.SIGKILL, "the victim was not killed")
    poll(lambda: not any(pid_alive(p) for p in victim_workers), 10,
         "the killed agent's workers to die with it")
    job.finish()
    _all_exit(job, survivors, 0)


def agent_killed_replacement_joins(job):
    """--nnodes 2 (MIN = MAX): one of 2 agents is SIGKILLed; the survivor stops its workers and
    waits (it may not go on alone) until a replacement agent arrives; round 1 then has the
    survivor and the newcomer."""
    job.start_store()
    agents = [job.start_agent(2, extra=["--max-restarts", "0"]) for _ in range(2)]
    groups = check_round(job, job.wait_round(0, 4), 0, nodes=2, world=4)
    victim = next(a for a in agents if a.pid == groups[1])
    survivor = next(a for a in agents if a is not victim)
    t0 = job.fault("kill-agent", "--run-id", job.run_id, "--group-rank", "1")["ts"]
    log(f"MEASURED agent SIGKILL -> survivor's first worker_exited: "
        f"{_first_exit_after(survivor, t0, 0) * 1000:.0f} ms")
    # The survivor says it waits in round 1 with itself alone (its progress line, every 5 s):
    # it did not go on alone below --nnodes MIN, and did not give up.
    poll(lambda: re.search(r"round 1 is waiting for nodes .* 1 came \(min 2, max 2\)",
                           survivor.stderr()) or not survivor.running(), 30,
         "the survivor to say it waits for a replacement in round 1")
    check(survivor.running(), "the survivor gave up instead of waiting for a replacement:\n"
          f"{survivor.stderr()[-2000:]}")
    check(not job.records(1), "the survivor went on alone below --nnodes MIN")
    newcomer = job.start_agent(2, extra=["--max-restarts", "0"])
    groups1 = check_round(job, job.wait_round(1, 4), 1, nodes=2, world=4)
    check(set(groups1.values()) == {survivor.pid, newcomer.pid},
          f"round 1 agents {groups1}, expected the survivor {survivor.pid} and the newcomer "
          f"{newcomer.pid}")
    job.finish()
    _all_exit(job, [survivor, newcomer], 0)


def agent_killed_no_replacement_times_out(job):
    """--nnodes 2, join_timeout 3: the survivor of a SIGKILLed peer waits join_timeout for a
    replacement, then exits 1 with an error that names who came (itself)."""
    job.start_store()
    agents = [job.start_agent(2, conf={"join_timeout": 3}) for _ in range(2)]
    groups = check_round(job, job.wait_round(0, 4), 0, nodes=2, world=4)
    survivor = next(a for a in agents if a.pid == groups[0])
    t0 = job.fault("kill-agent", "--run-id", job.run_id, "--group-rank", "1")["ts"]
    rc = survivor.wait(3 + EXIT_BOUND_S)
    waited = time.time() - t0
    log(f"MEASURED survivor exited {waited:.1f} s after the kill (join_timeout 3 s)")
    check(rc == 1, f"the survivor exited {rc}, expected 1")
    check(waited >= 2.5, f"the survivor gave up after {waited:.1f} s, before join_timeout")
    failed = _shutdown(survivor, "rendezvous_failed")
    check(re.search(r"timed out after 3 s with 1 node\(s\) of min 2, max 2: .*\(pid "
                    + str(survivor.pid) + r", 2 procs\)", failed["error"]),
          f"the join-timeout record does not name the survivor (pid {survivor.pid}): {failed}")
    check(not job.records(1), "a round 1 started with a single node")


def agent_stopped_seen_by_heartbeat(job):
    """3 agents, --nnodes 2:3, keep_alive 0.2 s x 3: one agent is SIGSTOPped (a hang: its
    socket stays open). The store's lease closes its connection after 0.6 s of silence; the
    others go on in round 1. SIGCONT later: the stale agent must end (no hang), its workers
    too, and it must not disturb the running round."""
    job.start_store()
    agents = [job.start_agent("2:3", extra=["--max-restarts", "0"]) for _ in range(3)]
    rs = job.wait_round(0, 6)
    groups = check_round(job, rs, 0, nodes=3, world=6)
    victim = next(a for a in agents if a.pid == groups[2])
    survivors = [a for a in agents if a is not victim]
    t0 = job.fault("stop-agent", "--run-id", job.run_id, "--group-rank", "2")["ts"]
    lags = [_first_exit_after(a, t0, 0) for a in survivors]
    log(f"MEASURED agent SIGSTOP -> survivors' first worker_exited: "
        f"{', '.join(f'{x * 1000:.0f} ms' for x in lags)} (deadline 0.2 s x 3 = 600 ms)")
    check(max(lags) >= 0.3, f"survivors reacted after {max(lags):.2f} s, before the heartbeat "
          "deadline could pass: something else than the lease noticed")
    check(max(lags) < DETECT_BOUND_S, f"survivors took {max(lags):.2f} s")
    groups1 = check_round(job, job.wait_round(1, 4), 1, nodes=2, world=4)
    check(set(groups1.values()) == {a.pid for a in survivors}, f"round 1 agents {groups1}")
    t1 = job.fault("cont-agent", "--pid", str(victim.pid))["ts"]
    rc = victim.wait(EXIT_BOUND_S)
    log(f"MEASURED the continued agent exited {rc} {time.time() - t1:.2f} s after SIGCONT; "
        f"stderr tail: {victim.stderr().strip().splitlines()[-1:]}")
    check(rc != 0, "the stale agent claims success")
    stale = [r["pid"] for r in rs if r["group_rank"] == 2]
    poll(lambda: not any(pid_alive(p) for p in stale), 10, "the stale agent's workers to end")
    job.finish()
    # Once the survivors have ended, a round the stale agent's return started would show: its
    # workers, and the survivors' rendezvous_done events.
    _all_exit(job, survivors, 0)
    check(not job.records(2), "the stale agent's return started another round")
    for a in survivors:
        rounds = [e["round"] for e in a.events("rendezvous_done")]
        check(rounds == [0, 1], f"agent {a.index} went through rounds {rounds}, expected [0, 1]")


def node_joins_running_job(job):
    """3 agents run with --nnodes 2:4 and --max-restarts 0; a 4th arrives: the running group
    restarts into a bigger round (4 nodes, 8 workers), which is not counted as a failure."""
    job.start_store()
    agents = [job.start_agent("2:4", extra=["--max-restarts", "0"]) for _ in range(3)]
    # Start-up order on a loaded machine may make round 0 close with 2 and the third join as a
    # scale-up already; wait for the round that has all three.
    r3 = poll(lambda: next(([r] for r in sorted({x["round"] for x in job.records()})
                            if len(job.records(r)) == 6), None), 30, "a round with 3 nodes")[0]
    check_round(job, job.records(), r3, nodes=3, world=6)
    newcomer = job.start_agent("2:4", extra=["--max-restarts", "0"])
    t0 = time.time()
    groups = check_round(job, job.wait_round(r3 + 1, 8), r3 + 1, nodes=4, world=8)
    log(f"MEASURED newcomer start -> 8 workers running in round {r3 + 1}: "
        f"{(max(r['t'] for r in job.records(r3 + 1)) - t0) * 1000:.0f} ms")
    check(newcomer.pid in groups.values(), f"the newcomer is not in round {r3 + 1}: {groups}")
    job.finish()
    _all_exit(job, agents + [newcomer], 0)


def _store_host_job(job, n):
    """n agents on one endpoint; the first to bind it hosts the store. Returns (host, others,
    address)."""
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    conf = {"heartbeat_timeout": 1}
    host = job.start_agent(n, endpoint=endpoint, conf=conf)

    def bound():
        import socket
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    poll(bound, 20, f"the first agent to serve the store on {endpoint}")
    check(host.running(), f"the host agent exited:\n{host.stderr()}")
    others = [job.start_agent(n, endpoint=endpoint, conf=conf) for _ in range(n - 1)]
    check_round(job, job.wait_round(0, 2 * n), 0, nodes=n, world=2 * n)
    return host, others, endpoint


def _store_lost(job, others, endpoint, t0, deadline_s):
    """Every agent of `others` exits 1 naming the store, and their workers end."""
    for a in others:
        rc = a.wait(EXIT_BOUND_S)
        shutdown = [e for e in a.events("shutdown") if e.get("reason") == "store_lost"]
        took = shutdown[0]["ts"] - t0 if shutdown else float("nan")
        log(f"MEASURED agent {a.index}: store lost -> shutdown event after {took * 1000:.0f} ms "
            f"(deadline {deadline_s * 1000:.0f} ms), exit {rc}")
        check(rc == 1, f"agent {a.index} exited {rc}, expected 1")
        lost = _shutdown(a, "store_lost")
        check(lost["error"].startswith(f"store at {endpoint}"),
              f"agent {a.index}'s store_lost record does not name the store {endpoint}: {lost}")
        check(took < DETECT_BOUND_S, f"agent {a.index} took {took:.2f} s to notice")
    agents = {a.pid for a in others}
    workers = [r["pid"] for r in job.records(0) if r["agent"] in agents]
    poll(lambda: not any(pid_alive(p) for p in workers), 10, "their workers to end")


def store_host_killed(job):
    """The agent hosting the store is SIGKILLed: the 2 others exit 1 at once (their connections
    close), naming the store's address, and stop their workers."""
    host, others, endpoint = _store_host_job(job, 3)
    t0 = job.fault("kill-agent", "--pid", str(host.pid))["ts"]
    _store_lost(job, others, endpoint, t0, 0.6)


def store_host_stopped(job):
    """The agent hosting the store is SIGSTOPped (store and all): nothing closes, nothing
    answers. The others' heartbeat (every 0.2 s, answer within heartbeat_timeout 1 s) fails:
    they exit 1 naming the store within interval + heartbeat_timeout, and never hang."""
    host, others, endpoint = _store_host_job(job, 3)
    t0 = job.fault("stop-agent", "--pid", str(host.pid))["ts"]
    try:
        _store_lost(job, others, endpoint, t0, 1.2)
    finally:
        host.signal(signal.SIGCONT)


def standalone_store_killed(job):
    """A separate `dtrun store` is SIGKILLed under 2 running agents: both exit 1 naming it."""
    addr = job.start_store()
    agents = [job.start_agent(2, conf={"heartbeat_timeout": 1}) for _ in range(2)]
    check_round(job, job.wait_round(0, 4), 0, nodes=2, world=4)
    t0 = job.fault("kill-agent", "--pid", str(job.store_proc.pid))["ts"]
    _store_lost(job, agents, addr, t0, 0.6)


def agent_sigterm_leaves_job(job):
    """An agent told to stop (SIGTERM, as Slurm or a user does) leaves the job: the others go
    on without it in round 1. It is a membership change, not a worker failure: with
    --max-restarts 0 the job must go on (torch #67742 closed the rendezvous for everyone)."""
    job.start_store()
    agents = [job.start_agent("2:3", extra=["--max-restarts", "0"]) for _ in range(3)]
    groups = check_round(job, job.wait_round(0, 6), 0, nodes=3, world=6)
    victim = next(a for a in agents if a.pid == groups[2])
    survivors = [a for a in agents if a is not victim]
    job.fault("kill-agent", "--pid", str(victim.pid), "--signal", "TERM")
    rc = victim.wait(EXIT_BOUND_S)
    check(rc != 0, f"the stopped agent exited {rc}")
    groups1 = check_round(job, job.wait_round(1, 4, timeout=10), 1, nodes=2, world=4)
    check(set(groups1.values()) == {a.pid for a in survivors}, f"round 1 agents {groups1}")
    job.finish()
    _all_exit(job, survivors, 0)


def node_partitioned(job):
    """3 nodes in network namespaces (scripts/fault/netns.py), node 0 hosting the store on its
    own private address. Node 2 is cut off: no packet passes, no connection closes. The store's
    lease drops node 2 after keep_alive 0.2 s x 3 of silence and nodes 0 and 1 go on in round 1;
    node 2's heartbeat gets no answer within heartbeat_timeout (1 s): it stops its workers and
    exits 1 naming the store, instead of hanging."""
    r = subprocess.run([sys.executable, str(harness.NETNS), "check"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise Skip(f"cannot build network namespaces here: {r.stdout.strip()} {r.stderr.strip()}")
    job.netns_name = f"dte{os.getpid()}"
    r = subprocess.run([sys.executable, str(harness.NETNS), "setup", "--name", job.netns_name,
                        "--nodes", "3"], capture_output=True, text=True)
    check(r.returncode == 0, f"netns setup failed: {r.stderr}")
    endpoint = "10.213.0.1:29400"  # node 0's address, seen only inside these namespaces
    conf = {"heartbeat_timeout": 1}
    nodes = [job.start_agent("2:3", endpoint=endpoint, conf=conf, netns_node=0,
                             extra=["--max-restarts", "0"])]
    poll(lambda: "29400" in subprocess.run(
        ["ip", "netns", "exec", f"{job.netns_name}-0", "ss", "-ltn"], capture_output=True,
        text=True).stdout, 20, "node 0 to serve the store")
    nodes += [job.start_agent("2:3", endpoint=endpoint, conf=conf, netns_node=i,
                              extra=["--max-restarts", "0"]) for i in (1, 2)]
    rs = job.wait_round(0, 6)
    groups = check_round(job, rs, 0, nodes=3, world=6)
    cut_off = nodes[2]
    g_cut = next(g for g, pid in groups.items() if pid == cut_off.pid)
    t0 = time.time()
    r = subprocess.run([sys.executable, str(harness.NETNS), "cut", "--name", job.netns_name,
                        "--node", "2"], capture_output=True, text=True)
    check(r.returncode == 0, f"netns cut failed: {r.stderr}")
    log(f"cut node 2 (group rank {g_cut}) off the network")
    lags = [_first_exit_after(a, t0, 0) for a in nodes[:2]]
    log(f"MEASURED partition -> connected nodes' first worker_exited: "
        f"{', '.join(f'{x * 1000:.0f} ms' for x in lags)} (deadline 0.2 s x 3 = 600 ms)")
    check(max(lags) < DETECT_BOUND_S, f"connected nodes took {max(lags):.2f} s")
    groups1 = check_round(job, job.wait_round(1, 4), 1, nodes=2, world=4)
    check(set(groups1.values()) == {nodes[0].pid, nodes[1].pid}, f"round 1 agents {groups1}")
    rc = cut_off.wait(EXIT_BOUND_S)
    lost = [e for e in cut_off.events("shutdown") if e.get("reason") == "store_lost"]
    log(f"MEASURED the cut-off node exited {rc}, store_lost "
        f"{(lost[0]['ts'] - t0) * 1000 if lost else float('nan'):.0f} ms after the cut")
    check(rc == 1, f"the cut-off node exited {rc}, expected 1")
    lost = _shutdown(cut_off, "store_lost")
    check(lost["error"].startswith(f"store at {endpoint}"),
          f"the cut-off node's store_lost record does not name the store {endpoint}: {lost}")
    stale = [r["pid"] for r in rs if r["agent"] == cut_off.pid]
    poll(lambda: not any(pid_alive(p) for p in stale), 10, "the cut-off node's workers to end")
    subprocess.run([sys.executable, str(harness.NETNS), "heal", "--name", job.netns_name,
                    "--node", "2"], check=True)
    job.finish()
    _all_exit(job, nodes[:2], 0)


def static_backend_three_nodes(job):
    """--rdzv-backend=static, 3 agents with 1, 2 and 3 workers, started in reverse node-rank
    order: ranks follow --node-rank, contiguous; a worker failure restarts every node into
    round 1 with the same assignment."""
    port = free_port()
    nproc = {0: 1, 1: 2, 2: 3}

    def static(rank):
        return job.start_agent(3, nproc=nproc[rank], endpoint="", env={"E2E_FAIL": "0:4:3"},
                               extra=["--rdzv-backend", "static", "--node-rank", str(rank),
                                      "--master-addr", "127.0.0.1", "--master-port", str(port),
                                      "--max-restarts", "1"])

    # Node 0 (which serves the store) last: nodes 2 and 1 retry until it does. The ranks must
    # follow --node-rank whatever the order of arrival.
    agents = {r: static(r) for r in (2, 1)}
    agents[0] = static(0)
    for round_ in (0, 1):
        groups = check_round(job, job.wait_round(round_, 6), round_, nodes=3, world=6,
                             nproc_of=nproc)
        check(groups == {r: a.pid for r, a in agents.items()},
              f"round {round_}: group ranks {groups} do not follow --node-rank")
    check({r["master"] for r in job.records()} == {f"127.0.0.1:{port}"},
          "workers were not given --master-addr:--master-port")
    job.finish()
    _all_exit(job, agents.values(), 0)


def static_backend_node_replaced(job):
    """--rdzv-backend=static with 2 agents: node rank 1 is SIGKILLed; node 0 stops its workers
    and waits; an agent started again with --node-rank 1 takes the place, and round 1 has the
    same ranks."""
    port = free_port()

    def static(rank):
        return job.start_agent(2, endpoint="",
                               extra=["--rdzv-backend", "static", "--node-rank", str(rank),
                                      "--master-addr", "127.0.0.1", "--master-port", str(port)])

    first = static(0)
    second = static(1)
    groups = check_round(job, job.wait_round(0, 4), 0, nodes=2, world=4)
    check(groups == {0: first.pid, 1: second.pid}, f"round 0 group ranks {groups}")
    t0 = job.fault("kill-agent", "--pid", str(second.pid))["ts"]
    log(f"MEASURED static: SIGKILL -> node 0's first worker_exited: "
        f"{_first_exit_after(first, t0, 0) * 1000:.0f} ms")
    replacement = static(1)
    groups = check_round(job, job.wait_round(1, 4), 1, nodes=2, world=4)
    check(groups == {0: first.pid, 1: replacement.pid}, f"round 1 group ranks {groups}")
    job.finish()
    _all_exit(job, [first, replacement], 0)


def progress_lines_and_join_timeout(job):
    """--nnodes 3 with only 2 agents and join_timeout 7: while waiting each prints progress
    lines (nodes joined, MIN and MAX, time left) every 5 s; after 7 s both exit 1 with an error
    naming the 2 nodes that came."""
    job.start_store()
    agents = [job.start_agent(3, conf={"join_timeout": 7}) for _ in range(2)]
    for a in agents:
        rc = a.wait(7 + EXIT_BOUND_S)
        err = a.stderr()
        check(rc == 1, f"agent {a.index} exited {rc}, expected 1")
        check(re.search(r"round 0 is waiting for nodes until \S+ \(in \d+ s\) \(join timeout\): "
                        r"[12] came \(min 3, max 3\).*; [12] more for the minimum of 3", err),
              f"agent {a.index} printed no progress line:\n{err}")
        failed = _shutdown(a, "rendezvous_failed")
        m = re.search(r"timed out after 7 s with (\d) node\(s\) of min 3, max 3: (.*)",
                      failed["error"])
        check(m, f"agent {a.index}'s shutdown record holds no join-timeout error: {failed}")
        for other in agents:
            check(f"(pid {other.pid}, 2 procs)" in m.group(2),
                  f"agent {a.index}'s error does not name agent {other.index}: {m.group(0)}")
    check(not job.records(), "workers started without a complete round")


def rounds_agree_through_changes(job):
    """One job through a failure, a lost node and a new node (3 agents, --nnodes 2:4,
    --max-restarts 1): rounds 0..3, and in each every worker sees the same round number,
    world size and contiguous ranks; the failure counts once, the membership changes not."""
    job.start_store()
    # A long last call, so that round 0 waits for all three even on a loaded machine (3 < MAX).
    opts = dict(extra=["--max-restarts", "1"], env={"E2E_FAIL": "0:2:9"},
                conf={"last_call_timeout": 3})
    agents = [job.start_agent("2:4", **opts) for _ in range(3)]
    check_round(job, job.wait_round(0, 6), 0, nodes=3, world=6)
    groups = check_round(job, job.wait_round(1, 6), 1, nodes=3, world=6)  # after the failure
    victim = next(a for a in agents if a.pid == groups[0])
    job.fault("kill-agent", "--pid", str(victim.pid))
    groups = check_round(job, job.wait_round(2, 4), 2, nodes=2, world=4)  # without the victim
    newcomer = job.start_agent("2:4", **opts)
    groups = check_round(job, job.wait_round(3, 6), 3, nodes=3, world=6)  # with the newcomer
    check(newcomer.pid in groups.values(), f"round 3 agents {groups} lack the newcomer")
    job.finish()
    _all_exit(job, [a for a in agents if a is not victim] + [newcomer], 0)
    # Every agent's own account agrees with the workers': rounds 0 and 1 with the three first
    # agents, round 2 without the victim, round 3 with the newcomer, and no other round.
    rounds = {}
    for a in agents + [newcomer]:
        for e in a.events("rendezvous_done"):
            rounds.setdefault(e["round"], set()).add(a.pid)
    log(f"rounds and their agents: {rounds}")
    first = {a.pid for a in agents}
    rest = first - {victim.pid}
    expected = {0: first, 1: first, 2: rest, 3: rest | {newcomer.pid}}
    check(rounds == expected, f"rounds and their agents {rounds}, expected {expected}")
    check(not job.records(4), "a round 4 started")


def many_restarts_report_true_exit_codes(job):
    """2 agents x 2 workers through 20 failure restarts (--max-restarts 20): in round r the
    worker of rank r % 4 exits 3, the others are stopped (SIGTERM) or, in the last round, exit 0.
    Every exit the agents record must be one of those: a worker's exit status is never lost or
    invented (e.g. 255), and the job succeeds in round 20."""
    rounds = 20
    job.start_store()
    fail = {"E2E_FAIL": " ".join(f"{r}:{r % 4}:3" for r in range(rounds))}
    agents = [job.start_agent(2, extra=["--max-restarts", str(rounds)], env=fail)
              for _ in range(2)]
    check_round(job, job.wait_round(rounds, 4, timeout=60), rounds, nodes=2, world=4)
    job.finish()
    for a in agents:
        a.wait(EXIT_BOUND_S)
    wrong = [e for a in agents for e in a.events("worker_exited")
             if not (e["signal"] == signal.SIGTERM
                     or (e["exit_code"] == 3 and e["rank"] == e["round"] % 4)
                     or (e["exit_code"] == 0 and e["round"] == rounds))]
    check(not wrong, f"{len(wrong)} worker exits recorded wrongly, e.g. {wrong[:3]}")
    for r in range(rounds + 1):
        check_round(job, job.records(), r, nodes=2, world=4)
    _all_exit(job, agents, 0)


def _stop_b_after_round0(job, barrier_s):
    """2 agents x 2 workers (--nnodes 1:2); the second is SIGSTOPped while its workers run, then
    every worker finishes (exit 0), the stopped agent's too. Returns (a, b)."""
    job.start_store()
    agents = [job.start_agent("1:2", extra=["--exit-barrier-timeout", str(barrier_s)])
              for _ in range(2)]
    groups = check_round(job, job.wait_round(0, 4), 0, nodes=2, world=4)
    b = next(x for x in agents if x.pid == groups[1])
    a = next(x for x in agents if x is not b)
    job.fault("stop-agent", "--pid", str(b.pid))
    job.finish()
    return a, b


def stopped_after_success_no_rerun(job):
    """The fault soak of docs/hangs.md: agent B stops answering after its workers finished (SIGSTOP;
    its lease lapses after 0.6 s here). Every worker exits 0. A's group succeeded, so A must not
    open a new round and run the finished script again as world 2: it waits, bounded, for the
    outcome. B resumed: its workers had succeeded, so B exits 0, and A learns it and exits 0."""
    a, b = _stop_b_after_round0(job, 120)
    poll(lambda: "stopped answering after this node's workers succeeded" in a.stderr(), 30,
         "A to notice B's silence after its own success")
    check(a.running(), "A left before the outcome was known")
    t = job.fault("cont-agent", "--pid", str(b.pid))["ts"]
    _all_exit(job, [a, b], 0)
    log(f"MEASURED both agents exited 0 {time.time() - t:.2f} s after B's SIGCONT")
    check(not job.records(1), "a new round ran the finished script again")


def stopped_after_success_bounded_wait(job):
    """The same, with B still stopped when --exit-barrier-timeout (2 s) passes: A exits 0 (its
    workers succeeded; the others' outcome is unknown) and never restarts; B, resumed later,
    exits 0 too: each node says what it knows."""
    a, b = _stop_b_after_round0(job, 2)
    rc = a.wait(30)
    check(rc == 0, f"A exited {rc}, expected 0\n{a.stderr()[-2000:]}")
    unknown = _shutdown(a, "succeeded")
    check(unknown.get("others") == "unknown" and unknown.get("round") == 0,
          f"A's shutdown record does not say the others' outcome is unknown: {unknown}")
    job.fault("cont-agent", "--pid", str(b.pid))
    _all_exit(job, [b], 0)
    check(not job.records(1), "a new round ran the finished script again")


CASES = {f.__name__: f for f in [
    worker_failure_restarts_everywhere,
    max_restarts_exhausted_job_wide,
    agent_killed_survivors_continue,
    agent_killed_replacement_joins,
    agent_killed_no_replacement_times_out,
    agent_stopped_seen_by_heartbeat,
    agent_sigterm_leaves_job,
    node_joins_running_job,
    store_host_killed,
    store_host_stopped,
    standalone_store_killed,
    rounds_agree_through_changes,
    many_restarts_report_true_exit_codes,
    node_partitioned,
    static_backend_three_nodes,
    static_backend_node_replaced,
    progress_lines_and_join_timeout,
    stopped_after_success_no_rerun,
    stopped_after_success_bounded_wait,
]}

if __name__ == "__main__":
    sys.exit(harness.run(CASES))
