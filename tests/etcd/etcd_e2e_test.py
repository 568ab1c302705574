#!/usr/bin/python3
"""dtrun's etcd backend end to end: real agents, a real 3-member etcd on loopback
(tests/etcd/etcd_fixture.py), faults injected mid-run.

  etcd_e2e_test.py --dtrun build/bin/dtrun --case NAME     (exit 0 pass, 1 fail, 77 skip)

ddp_two_agents        examples/elastic_ddp_train.py (gloo DDP), 2 agents x 2 workers: the final
                      model is bit for bit the one of the same run on the c10d backend.
ddp_four_agents       the same with 4 agents x 1 worker.
member_killed         one etcd member SIGKILLed mid-run (after the checkpoint of step 20): the job
                      does not notice (one round, no restart) and ends with the same model.
store_host_killed     --nnodes 1:2; the agent of group rank 0 (it hosts the workers' store) is
                      SIGKILLed after step 20: the survivor re-forms alone, hosts the store
                      itself, resumes from the checkpoint, and ends with the model of a
                      fault-free world-size-4 run to 1e-9 relative, and bit for bit with a
                      fault-free run of the same world-size schedule.
quorum_lost_recovers  two members SIGKILLed mid-run: the workers keep running, the agents say
                      what is wrong and until when they wait; one member comes back, the job ends
                      with exit 0.
quorum_lost_fails     two members SIGKILLed and kept down: every agent exits 1 within
                      quorum_timeout (+ slack) with one line naming etcd and the bound.
etcd_restarted        a job ends, etcd is stopped entirely and started again on its data, and a
                      second job with the same --rdzv-id runs (the first one left no keys).
bad_setup             bad endpoints, a bad TLS file, a wrong password: one clear error line each.
"""
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "support"))
sys.path.insert(0, str(HERE.parent / "e2e_elastic"))
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import torch_ddp_test as ddp  # noqa: E402
from dtrun_testing import Skip, check, free_port, log, poll  # noqa: E402
from etcd_fixture import EtcdCluster  # noqa: E402

# Heartbeats a loaded test machine can keep (the harness's 0.2 s x 3 is for fault detection
# speed; a missed beat here would be a false fault).
STEADY = {"keep_alive_interval": 1, "keep_alive_max_attempt": 5}
ETCD_CONF = dict(STEADY, quorum_timeout=60)


def _cluster(job, **kw):
    try:
        return EtcdCluster(job.dir / "etcd", **kw)
    except FileNotFoundError as e:
        raise Skip(str(e))


def _etcd_agent(job, cluster, nnodes, nproc, program=None, conf=None, extra=()):
    return job.start_agent(nnodes, nproc=nproc, endpoint=cluster.endpoints,
                           conf=dict(ETCD_CONF, **(conf or {})),
                           extra=["--rdzv-backend", "etcd", *extra], program=program)


def _run_c10d(job, name, agents, nproc, steps=ddp.STEPS, ckpt=None):
    """The fault-free reference on dtrun's c10d backend (torch_ddp_test's run, with the steady
    heartbeats of these tests), writing into `ckpt` (default <name>/ckpt); returns its final
    model."""
    return ddp._final(ddp._run(job, name, agents, nproc, steps=steps, ckpt=ckpt, conf=STEADY))


def _wait_all(agents, timeout=180):
    for a in agents:
        rc = a.wait(timeout)
        check(rc == 0, f"agent {a.index} exited {rc}:\n{a.stderr()[-3000:]}")


def _only_outcome_left(cluster, job):
    """A finished job leaves its outcome alone, for agents that lost their lease while it ended,
    and only for close_timeout (the harness's 5 s): then no key is left."""
    prefix = f"dtrun/{job.run_id}/"
    check(cluster.keys(prefix) <= 1, f"the finished job left {cluster.keys(prefix)} keys in etcd")
    poll(lambda: cluster.keys(prefix) == 0, 30, "the outcome's lease (close_timeout) to lapse")


def _ddp_same_as_c10d(job, agents, nproc):
    ddp._torch()
    reference = _run_c10d(job, "reference", agents, nproc)
    cluster = _cluster(job)
    try:
        ckpt = job.dir / "ckpt"
        t0 = time.monotonic()
        ags = [_etcd_agent(job, cluster, agents, nproc, program=ddp._program(ckpt))
               for _ in range(agents)]
        _wait_all(ags)
        log(f"MEASURED {agents} agents x {nproc} workers, {ddp.STEPS} DDP steps on etcd: "
            f"{time.monotonic() - t0:.2f} s")
        final = ddp._final(ckpt)
        check(final["worlds"] == [agents * nproc] * ddp.STEPS, f"worlds: {final['worlds']}")
        diff = ddp._same(final, reference)
        check(not diff, f"the etcd run's model differs from the c10d run's in {diff}")
        _only_outcome_left(cluster, job)
        log("final model identical to the c10d backend's; no key left in etcd")
    finally:
        cluster.close()


def ddp_two_agents(job):
    _ddp_same_as_c10d(job, 2, 2)


def ddp_four_agents(job):
    _ddp_same_as_c10d(job, 4, 1)


def _start_ddp(job, cluster, nnodes):
    ckpt = job.dir / "ckpt"
    agents = [_etcd_agent(job, cluster, nnodes, 2, extra=["--max-restarts", "3"],
                          program=ddp._program(ckpt, sleep=0.05)) for _ in range(2)]
    poll(lambda: any(e["event"] == "checkpoint" and e["step"] >= ddp.KILL_AFTER_STEP
                     for e in ddp._progress(ckpt)), 120,
         f"the checkpoint of step {ddp.KILL_AFTER_STEP}")
    return ckpt, agents


def member_killed(job):
    ddp._torch()
    reference = _run_c10d(job, "reference", 2, 2)
    cluster = _cluster(job)
    try:
        ckpt, agents = _start_ddp(job, cluster, 2)
        cluster.kill(0)  # the member every agent talks to first
        log("etcd member 0 SIGKILLed")
        _wait_all(agents)
        rounds = sorted({e["restart_count"] for e in ddp._progress(ckpt)})
        check(rounds == [0], f"the job restarted (rounds {rounds}): a member's loss was visible")
        diff = ddp._same(ddp._final(ckpt), reference)
        check(not diff, f"the final model differs from the fault-free run in {diff}")
        log("one round, the final model identical to the fault-free run")
    finally:
        cluster.close()


def store_host_killed(job):
    ddp._torch()
    reference4 = _run_c10d(job, "reference4", 2, 2)
    cluster = _cluster(job)
    try:
        ckpt, agents = _start_ddp(job, cluster, "1:2")
        t0 = job.fault("kill-agent", "--run-id", job.run_id, "--group-rank", "0")["ts"]
        ddp._one_killed_one_survivor(agents)
        final = ddp._final(ckpt)
        k = ddp._world_4_then_2(final)
        last = max(e["restart_count"] for e in ddp._progress(ckpt))
        resumed = ddp._resumed(ckpt, last)
        check(sorted(e["rank"] for e in resumed) == [0, 1],
              f"round {last} should resume ranks 0 and 1: {resumed}")
        started = [e["t"] for e in ddp._progress(ckpt)
                   if e["event"] == "started" and e["restart_count"] == last]
        log(f"MEASURED store host SIGKILL -> survivor's workers training again: "
            f"{max(started) - t0:.2f} s")
        rel = ddp._max_rel_diff(final, reference4)
        log(f"MEASURED max relative difference to the fault-free world-size-4 run: {rel:.3g}")
        check(rel <= 1e-9, f"the final model is {rel:.3g} (relative) away from the fault-free run")
    finally:
        cluster.close()
    # The same world-size schedule without faults (4 workers up to step k, then 2 from the
    # checkpoint of step k): bit for bit the same model.
    sched = job.dir / "schedule-ckpt"
    _run_c10d(job, "schedule-a", 2, 2, steps=k, ckpt=sched)
    same_schedule = _run_c10d(job, "schedule-b", 1, 2, ckpt=sched)
    check(same_schedule["worlds"] == final["worlds"], "the schedules differ")
    diff = ddp._same(final, same_schedule)
    check(not diff, f"the final model differs from the same-schedule fault-free run in {diff}")
    log(f"final model identical to a fault-free run with world size 4 for {k} steps, then 2")


def _quorum_job(job, cluster, quorum_timeout):
    agents = [_etcd_agent(job, cluster, 2, 2, conf={"quorum_timeout": quorum_timeout})
              for _ in range(2)]
    job.wait_round(0, 4, timeout=60)
    cluster.kill(1)
    cluster.kill(2)
    t0 = time.monotonic()
    log("etcd members 1 and 2 SIGKILLed: no quorum")
    for a in agents:
        poll(lambda a=a: "does not answer" in a.stderr(), 60,
             f"agent {a.index}: a line saying etcd does not answer")
    check(all(a.running() for a in agents), "an agent stopped while etcd was down")
    return agents, t0


def quorum_lost_recovers(job):
    cluster = _cluster(job)
    try:
        agents, _ = _quorum_job(job, cluster, 120)
        workers_before = len(job.records())
        line = next(l for l in agents[0].stderr().splitlines() if "does not answer" in l)
        log(f"agent 0 says: {line}")
        check("workers keep running" in line and "quorum_timeout" in line, f"unclear: {line}")
        cluster.start(1)
        cluster.wait_healthy(60)
        log("member 1 is back: quorum again")
        poll(lambda: all("answers again" in a.stderr() for a in agents), 60,
             "every agent to see etcd answer again")
        job.finish()
        _wait_all(agents, 60)
        check(len(job.records()) == workers_before == 4, "workers were restarted")
        log("the job went on through the outage and ended with exit 0")
    finally:
        cluster.close()


def quorum_lost_fails(job):
    cluster = _cluster(job)
    try:
        # Above one renewal attempt (keep_alive_interval 1 s + heartbeat_timeout 5 s), so that
        # the agents first say what is wrong, then give up.
        bound = 12
        agents, t0 = _quorum_job(job, cluster, bound)
        for a in agents:
            rc = a.wait(bound + 60)
            check(rc == 1, f"agent {a.index} exited {rc}, expected 1")
        took = time.monotonic() - t0
        log(f"MEASURED quorum lost -> every agent out: {took:.2f} s (quorum_timeout {bound} s)")
        check(took < bound + 30, f"agents took {took:.1f} s, beyond the bound")
        for a in agents:
            # What the agent decided, from its record; and the one line the user reads.
            ended = a.events("shutdown")
            check(len(ended) == 1 and "without quorum for" in ended[0].get("error", "")
                  and "quorum_timeout" in ended[0]["error"],
                  f"agent {a.index}: its shutdown record does not name the quorum bound: {ended}")
            errors = [l for l in a.stderr().splitlines() if "[error]" in l or "error:" in l]
            check(any("without quorum for" in l and "quorum_timeout" in l for l in errors),
                  f"agent {a.index}: no clear line:\n{a.stderr()[-2000:]}")
            log(f"agent {a.index}: {errors[0]}")
    finally:
        cluster.close()


def etcd_restarted(job):
    cluster = _cluster(job)
    try:
        job.finish()  # workers exit 0 at once
        for attempt in (1, 2):
            ags = [_etcd_agent(job, cluster, 2, 1) for _ in range(2)]
            _wait_all(ags, 60)
            _only_outcome_left(cluster, job)
            log(f"job {attempt} with run id {job.run_id}: exit 0, no key left")
            if attempt == 1:
                cluster.stop_all()
                cluster.start_all()
                log("etcd stopped entirely and started again")
    finally:
        cluster.close()


def _one_line(job, argv_extra, conf, culprit, endpoints):
    a = job.start_agent(1, nproc=1, endpoint=endpoints, conf=conf,
                        extra=["--rdzv-backend", "etcd", *argv_extra])
    rc = a.wait(60)
    check(rc != 0, f"the agent exited {rc}")
    errors = [l for l in a.stderr().splitlines() if "error" in l.lower()]
    check(len(errors) == 1, f"expected one error line, got {len(errors)}:\n{a.stderr()}")
    check(all(c in errors[0] for c in culprit), f"the line does not name {culprit}: {errors[0]}")
    log(f"one line: {errors[0]}")


def bad_setup(job):
    cluster = _cluster(job)
    try:
        dead = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
        _one_line(job, [], {}, ["etcd at " + dead, "cannot connect"], dead)
        _one_line(job, [], {"protocol": "https", "cacert": "/nonexistent/ca.pem"},
                  ["cacert", "/nonexistent/ca.pem"], cluster.endpoints)
        import subprocess
        eps = ",".join(f"http://{e}" for e in cluster.endpoints.split(","))
        for args in (["user", "add", "root:rootpw"], ["auth", "enable"]):
            r = subprocess.run(["/usr/bin/etcdctl", f"--endpoints={eps}", *args],
                               capture_output=True, text=True, env={"ETCDCTL_API": "3"})
            check(r.returncode == 0, f"etcdctl {args}: {r.stdout}{r.stderr}")
        _one_line(job, [], {"user": "root", "password": "wrong"},
                  ["authentication as user 'root' failed"], cluster.endpoints)
    finally:
        cluster.close()


CASES = {f.__name__: f for f in (ddp_two_agents, ddp_four_agents, member_killed,
                                 store_host_killed, quorum_lost_recovers, quorum_lost_fails,
                                 etcd_restarted, bad_setup)}

if __name__ == "__main__":
    sys.exit(harness.run(CASES))
