#!/usr/bin/python3
"""Real PyTorch under dtrun: examples/elastic_ddp_train.py (gloo DDP, float64, checkpoints) with
2 agents x 2 workers, faults injected mid-run with scripts/fault/fault.py.

  torch_ddp_test.py --dtrun build/bin/dtrun --case NAME     (exit 0 pass, 1 fail, 77 skip)

worker_killed  a worker is SIGKILLed after the checkpoint of step 20: every worker restarts,
               resumes from the checkpoint and the final model is bit for bit the one of a
               fault-free run (same world size, 4, at every step).
agent_killed   --nnodes 1:2; a whole agent is SIGKILLed after step 20: the survivor goes on
               alone with world size 2. The final model equals, bit for bit, a fault-free run
               with the same world-size schedule (4 up to the resumed checkpoint, then 2), and
               the fault-free world-size-4 run to 1e-9 relative (the example's loss makes the
               math independent of the world size; only float rounding differs).
token          the store (`dtrun store --token-file`) and both agents share a secret: the job
               trains to the end with world size 4 and no restart while a stranger, a plain
               torch TCPStore client, tries to move the round counter, read and forge the
               rendezvous' keys (each refused: its connection is closed), and still reaches
               keys of its own; an agent with another token is refused at once, by name.
Needs torch importable by this interpreter (Debian's python3-torch under /usr/bin/python3);
exits 77 otherwise.
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import harness  # noqa: E402
from dtrun_testing import Skip, check, log, poll, read_jsonl  # noqa: E402

EXAMPLE = harness.REPO / "examples" / "elastic_ddp_train.py"
STEPS = 60
KILL_AFTER_STEP = 20


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise Skip(f"{sys.executable} cannot import torch ({e}); install Debian's python3-torch")


def _program(ckpt, steps=STEPS, sleep=0.0):
    return [str(EXAMPLE), "--ckpt-dir", str(ckpt), "--steps", str(steps),
            "--step-sleep", str(sleep)]


def _progress(ckpt):
    return read_jsonl(ckpt / "progress.jsonl")


def _final(ckpt):
    with open(ckpt / "final.json") as f:
        return json.load(f)


def _run(job, name, agents, nproc, steps=STEPS, ckpt=None, conf=None):
    """A fault-free run on dtrun's c10d backend with its own store and run id, in
    job.dir/<name>, writing into `ckpt` (default job.dir/<name>/ckpt); `conf`: --rdzv-conf
    entries. Returns the checkpoint directory."""
    where = job.dir / name
    where.mkdir()
    ckpt = ckpt or where / "ckpt"
    sub = harness.Job(f"{job.name}-{name}", job.dtrun, directory=where)
    try:
        sub.start_store()
        ags = [sub.start_agent(agents, nproc=nproc, conf=conf, program=_program(ckpt, steps))
               for _ in range(agents)]
        for a in ags:
            rc = a.wait(180)
            check(rc == 0, f"{name}: agent {a.index} exited {rc}:\n{a.stderr()[-3000:]}")
    finally:
        sub.close()
    return ckpt


def _same(a, b):
    """Names of the parameters that differ between two final.json files (exactly)."""
    return [k for k in a["params"] if a["params"][k] != b["params"][k]]


def _max_rel_diff(a, b):
    worst = 0.0
    for k in a["params"]:
        for x, y in zip(a["params"][k], b["params"][k]):
            fx, fy = float.fromhex(x), float.fromhex(y)
            worst = max(worst, abs(fx - fy) / max(abs(fy), 1e-12))
    return worst


def _start_faulty(job, nnodes):
    ckpt = job.dir / "ckpt"
    job.start_store()
    agents = [job.start_agent(nnodes, nproc=2, extra=["--max-restarts", "3"],
                              program=_program(ckpt, sleep=0.05)) for _ in range(2)]
    poll(lambda: any(e["event"] == "checkpoint" and e["step"] >= KILL_AFTER_STEP
                     for e in _progress(ckpt)), 120, f"the checkpoint of step {KILL_AFTER_STEP}")
    return ckpt, agents


def _resumed(ckpt, restart):
    return [e for e in _progress(ckpt) if e["event"] == "resumed" and e["restart_count"] == restart]


def _one_killed_one_survivor(agents):
    """Waits for both agents: one SIGKILLed, the other exited 0. Returns the survivor."""
    victim, survivors = None, []
    for a in agents:
        rc = a.wait(180)
        if rc == -9:
            victim = a
        else:
            survivors.append((a, rc))
    check(victim is not None and len(survivors) == 1, "expected one killed agent, one survivor")
    survivor, rc = survivors[0]
    check(rc == 0, f"the survivor exited {rc}:\n{survivor.stderr()[-3000:]}")
    return survivor


def _world_4_then_2(final):
    """Checks the world sizes per step: 4 up to some step k >= KILL_AFTER_STEP, then 2.
    Returns k."""
    k = final["worlds"].index(2) if 2 in final["worlds"] else STEPS
    check(final["worlds"] == [4] * k + [2] * (STEPS - k) and k >= KILL_AFTER_STEP,
          f"world sizes per step: {final['worlds']}")
    return k


def worker_killed(job):
    _torch()
    reference = _final(_run(job, "reference", agents=2, nproc=2))
    ckpt, agents = _start_faulty(job, 2)
    job.fault("kill-worker", "--run-id", job.run_id, "--rank", "3")
    for a in agents:
        rc = a.wait(180)
        check(rc == 0, f"agent {a.index} exited {rc}:\n{a.stderr()[-3000:]}")
    rounds = sorted({e["restart_count"] for e in _progress(ckpt)})
    log(f"rounds seen by the workers: {rounds}")
    check(len(rounds) >= 2, "no restart happened")
    last = rounds[-1]
    resumed = _resumed(ckpt, last)
    check(sorted(e["rank"] for e in resumed) == [0, 1, 2, 3],
          f"not every rank resumed in round {last}: {resumed}")
    check(len({e["step"] for e in resumed}) == 1 and resumed[0]["step"] >= KILL_AFTER_STEP,
          f"ranks resumed from different or early checkpoints: {resumed}")
    final = _final(ckpt)
    check(final["worlds"] == [4] * STEPS, f"world sizes per step: {final['worlds']}")
    diff = _same(final, reference)
    check(not diff, f"the final model differs from the fault-free run in {diff}")
    log(f"final model identical to the fault-free run (resumed at step {resumed[0]['step']}, "
        f"round {last})")


def agent_killed(job):
    _torch()
    reference4 = _final(_run(job, "reference4", agents=2, nproc=2))
    ckpt, agents = _start_faulty(job, "1:2")
    t0 = job.fault("kill-agent", "--run-id", job.run_id, "--group-rank", "1")["ts"]
    survivor = _one_killed_one_survivor(agents)
    decided = [e for e in survivor.events("restart_decided")]
    log(f"survivor's restart decisions: {decided}")
    final = _final(ckpt)
    k = _world_4_then_2(final)
    last = max(e["restart_count"] for e in _progress(ckpt))
    resumed = _resumed(ckpt, last)
    check(sorted(e["rank"] for e in resumed) == [0, 1] and {e["world_size"] for e in resumed}
          == {2}, f"round {last} should resume ranks 0 and 1 of world size 2: {resumed}")
    started = [e["t"] for e in _progress(ckpt) if e["event"] == "started"
               and e["restart_count"] == last]
    log(f"MEASURED agent SIGKILL -> survivor's workers training again (torch imported, "
        f"gloo up): {max(started) - t0:.2f} s")
    rel = _max_rel_diff(final, reference4)
    log(f"MEASURED max relative difference to the fault-free world-size-4 run: {rel:.3g}")
    check(rel <= 1e-9, f"the final model is {rel:.3g} (relative) away from the fault-free run")
    # The same world-size schedule without faults: 4 workers up to step k, then 2 from the
    # checkpoint of step k.
    sched = job.dir / "schedule-ckpt"
    _run(job, "schedule-a", agents=2, nproc=2, steps=k, ckpt=sched)
    _run(job, "schedule-b", agents=1, nproc=2, steps=STEPS, ckpt=sched)
    same_schedule = _final(sched)
    check(same_schedule["worlds"] == final["worlds"], "the schedules differ")
    diff = _same(final, same_schedule)
    check(not diff, f"the final model differs from the same-schedule run in {diff}")
    log(f"final model identical to a fault-free run with world size 4 for {k} steps, then 2")


def _token_file(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, text.encode() + b"\n")
    os.close(fd)
    return path


def _stranger(addr, what, action):
    """Runs `action` on a fresh torch TCPStore client; returns the error it raised, or None."""
    import datetime
    import torch.distributed as dist
    host, port = addr.rsplit(":", 1)
    client = dist.TCPStore(host, int(port), is_master=False,
                           timeout=datetime.timedelta(seconds=10))
    try:
        action(client)
    except (RuntimeError, ValueError) as e:  # torch raises RuntimeError on a closed connection
        log(f"stranger: {what}: refused ({str(e).splitlines()[0][:100]})")
        return e
    return None


def token(job):
    _torch()
    secret = _token_file(job.dir / "token", "job-secret-" + os.urandom(12).hex())
    wrong = _token_file(job.dir / "wrong", "not-the-secret-" + os.urandom(12).hex())
    addr = job.start_store(extra=["--token-file", str(secret)])
    ckpt = job.dir / "ckpt"
    conf = {"token_file": str(secret)}
    agents = [job.start_agent(2, nproc=2, conf=conf,
                              program=_program(ckpt, steps=STEPS, sleep=0.2))
              for _ in range(2)]
    poll(lambda: len([e for e in _progress(ckpt) if e["event"] == "started"]) >= 4, 120,
         "four workers training")
    prefix = f"dtrun/{job.run_id}/"
    check(_stranger(addr, "ADD on the round counter",
                    lambda c: (c.add(prefix + "round", 1), c.get("anything"))) is not None,
          "a stranger moved the round counter")
    check(_stranger(addr, "GET of the round counter", lambda c: c.get(prefix + "round"))
          is not None, "a stranger read a rendezvous key")
    check(_stranger(addr, "SET of a node's description",
                    lambda c: (c.set(prefix + "r0/node0", "{junk"), c.get("anything")))
          is not None, "a stranger wrote a rendezvous key")
    check(_stranger(addr, "its own keys",
                    lambda c: (c.set("stranger/key", "v"),
                               check(c.get("stranger/key") == b"v", "own key lost"))) is None,
          "a torch client without the token could not use keys of its own")
    # An agent with another token: refused at the first connection, by name, and it stops.
    intruder = job.start_agent(2, nproc=2, conf={"token_file": str(wrong)},
                               program=_program(job.dir / "intruder", steps=1))
    rc = intruder.wait(60)
    check(rc != 0, "an agent with the wrong token joined")
    check("refused this client's token" in intruder.stderr(),
          f"the refused agent does not say why:\n{intruder.stderr()[-2000:]}")
    for a in agents:
        rc = a.wait(240)
        check(rc == 0, f"agent {a.index} exited {rc}:\n{a.stderr()[-3000:]}")
    final = _final(ckpt)
    check(final["worlds"] == [4] * STEPS, f"world sizes per step: {final['worlds']}")
    rounds = sorted({e["restart_count"] for e in _progress(ckpt)})
    check(rounds == [0], f"the job restarted (rounds {rounds}): a stranger moved it")
    store_err = (job.dir / "store.err").read_text()
    check("need the store's token" in store_err and "closing connection from 127.0.0.1:"
          in store_err, f"the store did not log the refusals:\n{store_err[-2000:]}")
    log("job finished with world size 4 and no restart; every stranger's request refused")


CASES = {"worker_killed": worker_killed, "agent_killed": agent_killed, "token": token}

if __name__ == "__main__":
    sys.exit(harness.run(CASES))
