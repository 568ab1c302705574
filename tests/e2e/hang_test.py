#!/usr/bin/python3
"""Hung workers under dtrun, end to end: real torch FileTimerClient workers (tests/e2e/
timer_worker.py), native workers with dtrun_worker's timer client (worker_probe timer), and the
stall watch. Each case is one ctest test (e2e:hang_<case>); every wait is on an event (a file, a
log line, a process exit) with a deadline.

usage: hang_test.py --dtrun BIN --probe WORKER_PROBE --case CASE
Exit status: 0 pass, 1 fail, 77 skipped (torch not importable by this interpreter).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from dtrun_testing import Checks, pid_alive, read_jsonl, run, skip, wait_for  # noqa: E402

WORKER = os.path.join(HERE, "timer_worker.py")


def named(evs, name):
    return [e for e in evs if e["event"] == name]


class Case:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.c = Checks(collect=True)
        self.env = dict(os.environ, TMPDIR=work, PYTHONDONTWRITEBYTECODE="1")

    def dtrun(self, opts, script, nproc, timeout=240, env=None, python=True):
        log = os.path.join(self.work, "dtrun.log")
        self.event_log = os.path.join(self.work, "events.jsonl")
        cmd = [self.args.dtrun, "--standalone", f"--nproc-per-node={nproc}",
               f"--event-log={self.event_log}", "--log-level=info", *opts]
        cmd += ["--python", sys.executable] if python else ["--no-python"]
        return run(cmd + script, env or self.env, self.work, timeout, log)


def case_overstay_restarts(k):
    """A FileTimerClient worker that overstays is killed, the group restarts and finishes; the
    punctual ranks are never touched; garbage on the FIFO is counted and served past."""
    code, out = k.dtrun(["--file-timer", "--max-restarts=1"], [WORKER, "overstay"], 4)
    c, evs = k.c, read_jsonl(k.event_log)
    c.equal(code, 0, "dtrun exit code")
    hung = named(evs, "worker_hung")
    c.equal([(e["rank"], e["scope_id"], e["signal"]) for e in hung], [(1, "step", 9)],
            "one hang: rank 1, scope step, SIGKILL")
    started = {(e["round"], e["rank"]): e["pid"] for e in named(evs, "worker_started")}
    c.check(hung and hung[0]["pid"] == started.get((0, 1)), "the hung pid is rank 1's worker")
    c.check(hung and hung[0]["overstay_ms"] >= 0, "the overstay is measured")
    c.check(hung and hung[0]["round"] == 0 and hung[0]["local_rank"] == 1,
            "the hang is round 0's, local rank 1")
    exits = {(e["round"], e["rank"]): e for e in named(evs, "worker_exited")}
    c.equal(exits.get((0, 1), {}).get("signal"), 9, "rank 1 died of SIGKILL")
    c.equal(sorted(r for (rnd, r), e in exits.items() if rnd == 1 and e["exit_code"] == 0),
            [0, 1, 2, 3], "round 1: every rank exited 0")
    c.check("malformed line" in out, "the garbage on the FIFO is logged")
    decided = named(evs, "restart_decided")
    c.check(any(e.get("reason") == "worker_failure" for e in decided),
            "the hang counted as a failure restart")


def case_punctual_many_ranks(k):
    """Eight ranks arming and releasing deadlines at once, every step inside its deadline: never
    touched, one round, exit 0."""
    code, out = k.dtrun(["--file-timer"], [WORKER, "punctual"], 8)
    evs = read_jsonl(k.event_log)
    k.c.equal(code, 0, "dtrun exit code")
    k.c.equal(named(evs, "worker_hung") + named(evs, "restart_decided"), [],
              "no hang, no restart")
    k.c.equal(sorted(e["rank"] for e in named(evs, "worker_exited") if e["exit_code"] == 0),
              list(range(8)), "every rank exited 0 in round 0")


def case_forked_children_hang(k):
    """Every rank's worker forks a child that overstays its own deadline, all within a few ms.
    The first overstay ends the round (its worker's group is killed; the failure stops the
    others, their children with them), so one to four hangs are recorded, depending on how many
    deadlines pass before the first worker's exit is seen. Each one names the child of its rank
    (the pid it printed), never a worker; no child is left; one restart; round 1 succeeds."""
    code, out = k.dtrun(["--file-timer", "--max-restarts=1"], [WORKER, "fork-hang"], 4)
    evs = read_jsonl(k.event_log)
    k.c.equal(code, 0, "dtrun exit code")
    hung = named(evs, "worker_hung")
    workers = {e["pid"] for e in named(evs, "worker_started")}
    children = {int(m.group(1)): int(m.group(2))
                for m in re.finditer(r"^rank (\d) child (\d+)$", out, re.M)}
    k.c.equal(sorted(children), [0, 1, 2, 3], "every rank's worker forked its child")
    k.c.check(1 <= len(hung) <= 4, f"{len(hung)} hang(s) recorded, one to four")
    k.c.equal(len({e["rank"] for e in hung}), len(hung), "each rank's child hung at most once")
    k.c.check(all(e["round"] == 0 and e["scope_id"] == "child" and e["signal"] == signal.SIGKILL
                  for e in hung), "every hang: round 0, scope child, SIGKILL")
    k.c.check(all(e["pid"] == children.get(e["rank"]) and e["pid"] not in workers for e in hung),
              "each reported pid is the child its rank printed, not a worker")
    k.c.check(not [p for p in children.values() if pid_alive(p)], "no child of round 0 is left")
    failures = [e for e in named(evs, "restart_decided") if e.get("reason") == "worker_failure"]
    k.c.equal([e["round"] for e in failures], [0], "one failure restart, of round 0")
    k.c.equal(sorted(e["rank"] for e in named(evs, "worker_exited")
                     if e["round"] == 1 and e["exit_code"] == 0), [0, 1, 2, 3],
              "round 1: every rank exited 0")


def case_max_restarts_report(k):
    """A worker that hangs every round uses up --max-restarts; the report says it hung, shows its
    stderr's last lines and, with --dump-stacks, where its Python code was."""
    code, out = k.dtrun(["--file-timer", "--dump-stacks", "--max-restarts=1"],
                        [WORKER, "stuck"], 1)
    k.c.equal(code, 1, "dtrun exit code")
    k.c.check("hung: timer \"load\"" in out, "the report leads with the hang")
    k.c.check("loading shard 3" in out, "the worker's last stderr line is in the report")
    k.c.check("in stuck_loading_shard" in out, "its Python stack names the function it hung in")
    k.c.equal(len(named(read_jsonl(k.event_log), "worker_hung")), 2, "two hangs (rounds 0 and 1)")


def case_stall(k):
    """--stall-timeout: a group that prints nothing for that long is killed as hung and
    restarted; no timer client needed."""
    script = ('echo "round $TORCHELASTIC_RESTART_COUNT"; '
              '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 600; exit 0')
    code, out = k.dtrun(["--stall-timeout=1.5", "--max-restarts=1"], ["sh", "-c", script], 2,
                        python=False)
    evs = read_jsonl(k.event_log)
    k.c.equal(code, 0, "dtrun exit code")
    stalled = named(evs, "worker_group_stalled")
    k.c.equal([e["round"] for e in stalled], [0], "one stall, in round 0")
    k.c.check(stalled and stalled[0]["quiet_ms"] >= 1500,
              f"quiet for at least the 1.5 s of --stall-timeout: {stalled}")
    k.c.equal(sorted(e["rank"] for e in named(evs, "worker_exited")
                     if e["round"] == 1 and e["exit_code"] == 0), [0, 1],
              "round 1: both ranks exited 0")


def native(k, api):
    """A native worker arming its step with dtrun_worker's timer client hangs in round 0: killed,
    restarted, round 1 releases its scope."""
    code, out = k.dtrun(["--file-timer", "--max-restarts=1"],
                        [k.args.probe, "timer", "1", "0.1", "--hang-on-round", "0", *api], 2,
                        python=False)
    evs = read_jsonl(k.event_log)
    k.c.equal(code, 0, "dtrun exit code")
    k.c.equal(sorted({e["scope_id"] for e in named(evs, "worker_hung")}), ["probe-step"],
              "the native worker's scope hung")
    k.c.equal(out.count("timer released round 1"), 2, "round 1: both ranks released in time")


def case_native_cpp(k):
    native(k, [])


def case_native_c(k):
    native(k, ["--c-api"])


def case_agent_restarted(k):
    """Two agents (TORCHELASTIC_ENABLE_FILE_TIMER=1, each with its own TORCHELASTIC_TIMER_FILE);
    agent B is SIGKILLed while its worker's deadline is armed and started again on the same path:
    the stale FIFO is replaced, the new round's timers work, nothing is killed as hung."""
    work, dtrun = k.work, k.args.dtrun
    store = subprocess.Popen([dtrun, "store", "--host", "127.0.0.1", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    agents = {}
    try:
        endpoint = store.stdout.readline().strip()

        def start(name):
            env = dict(k.env, TORCHELASTIC_ENABLE_FILE_TIMER="1",
                       TORCHELASTIC_TIMER_FILE=os.path.join(work, f"timer-{name}"))
            log = open(os.path.join(work, f"{name}.log"), "ab")
            p = subprocess.Popen(
                [dtrun, "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                 f"--rdzv-endpoint={endpoint}", "--rdzv-id=hang-restart",
                 "--rdzv-conf=is_host=false,last_call_timeout=1", "--log-level=info",
                 f"--event-log={os.path.join(work, name + '.jsonl')}", "--python",
                 sys.executable, WORKER, "armed-long", work],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            agents[name] = p
            return p

        def armed(rnd, n):
            return wait_for(lambda: all(os.path.exists(os.path.join(work, f"armed-{rnd}-{r}"))
                                        for r in range(n)), 180, interval=0.05)

        start("a")
        start("b")
        k.c.check(armed(0, 2), "round 0: both workers armed a 120 s deadline")
        os.killpg(agents["b"].pid, signal.SIGKILL)
        agents["b"].wait()
        k.c.check(os.path.exists(os.path.join(work, "timer-b")), "B's FIFO is left behind")
        k.c.check(armed(1, 1), "round 1: A goes on alone, its new worker armed")
        start("b2")
        # B2 waits for a round with room: A restarts into round 2 with it.
        k.c.check(armed(2, 2), "round 2: both workers armed again, B2 on the stale path")
        open(os.path.join(work, "go-2"), "w").close()
        codes = {n: agents[n].wait(120) for n in ("a", "b2")}
        k.c.equal(codes, {"a": 0, "b2": 0}, "both agents exit 0")
        for n in ("a", "b2"):
            evs = read_jsonl(os.path.join(work, n + ".jsonl"))
            k.c.equal(named(evs, "worker_hung"), [], f"{n}: nothing killed as hung")
        with open(os.path.join(work, "b2.log"), errors="replace") as f:
            b2 = f.read()
        k.c.check("file timer: serving " + os.path.join(work, "timer-b2") in b2,
                  "B2 serves its FIFO")
    finally:
        for p in agents.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        store.kill()
        store.wait()


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrun", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    args = parser.parse_args()
    args.dtrun, args.probe = os.path.abspath(args.dtrun), os.path.abspath(args.probe)
    if not args.case.startswith("native") and args.case != "stall":
        try:
            from torch.distributed.elastic import timer  # noqa: F401
        except Exception as e:
            skip(f"{sys.executable} cannot import torch.distributed.elastic.timer ({e})")
    work = tempfile.mkdtemp(prefix="dtrun-hang-")
    k = Case(args, work)
    try:
        CASES[args.case](k)
    finally:
        if k.c.failures == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}")
    sys.exit(k.c.exit_code())


if __name__ == "__main__":
    main()
