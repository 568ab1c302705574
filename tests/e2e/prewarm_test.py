#!/usr/bin/python3
"""Warm starts (--prewarm) end to end, with real /usr/bin/python3 workers importing torch 1.13
(tests/e2e/prewarm_worker.py and examples/ddp_train.py). One ctest test per case
(e2e:prewarm_<case>); every wait is on the event log, a file or a process, with a deadline.

usage: prewarm_test.py --dtrun BIN --source-dir DIR --case CASE
Exit status: 0 pass, 1 fail, 77 skipped (torch not importable by this interpreter).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_util import (Checker, cases, events, named, run, run_case, skip,  # noqa: E402
                      standalone_like, wait_for)

WORKER = os.path.join(HERE, "prewarm_worker.py")


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class Case:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.c = Checker()
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PET_", "DTRUN_", "TORCHELASTIC_"))}
        self.env.update(TMPDIR=work, PYTHONDONTWRITEBYTECODE="1")

    def cmd(self, name, opts, script, nproc):
        self.events_of = getattr(self, "events_of", {})
        self.events_of[name] = os.path.join(self.work, f"{name}.jsonl")
        return [self.args.dtrun, *standalone_like(f"prewarm-{name}"), f"--nproc-per-node={nproc}",
                f"--event-log={self.events_of[name]}", "--log-level=info", "--python",
                sys.executable, *opts, *script]

    def dtrun(self, name, opts, script, nproc, timeout=560):
        return run(self.cmd(name, opts, script, nproc), self.env, self.work, timeout,
                   os.path.join(self.work, f"{name}.log"))

    def start(self, name, opts, script, nproc):
        log = open(os.path.join(self.work, f"{name}.log"), "wb")
        return subprocess.Popen(self.cmd(name, opts, script, nproc), env=self.env, cwd=self.work,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def events(self, name):
        return events(self.events_of[name])

    def log(self, name):
        with open(os.path.join(self.work, f"{name}.log"), errors="replace") as f:
            return f.read()

    def standby_use(self, name):
        """{(round, local rank): standby?} from worker_started."""
        return {(e["round"], e["local_rank"]): e.get("standby")
                for e in named(self.events(name), "worker_started")}


def case_ddp_checksum(k):
    """examples/ddp_train.py (gloo DDP, rank 1 fails at step 12, resumes from the step-10
    checkpoint) with and without --prewarm torch: the same final parameters, and every worker
    of the prewarmed run, restarted ones included, was a standby."""
    example = os.path.join(k.args.source_dir, "examples", "ddp_train.py")
    script = [example, "--steps=20", "--ckpt-every=5", "--fail-at-step=12", "--fail-rank=1"]
    results = {}

    def launch(name, opts):
        ckpt = os.path.join(k.work, name)
        results[name] = k.dtrun(name, ["--max-restarts=1", *opts], script + [f"--ckpt-dir={ckpt}"],
                                2)

    threads = [threading.Thread(target=launch, args=a)
               for a in (("warm", ["--prewarm=torch"]), ("cold", []))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    digests = {}
    for name in ("warm", "cold"):
        code, text = results[name]
        if not k.c.equal(code, 0, f"{name}: exit code"):
            print(text[-4000:])
        progress = events(os.path.join(k.work, name, "progress.jsonl"))
        digests[name] = {e["rank"]: e["sha256"] for e in named(progress, "finished")}
        k.c.equal(sorted(e["rank"] for e in progress
                         if e["event"] == "resumed" and e["restart_count"] == 1), [0, 1],
                  f"{name}: both ranks resumed in round 1")
    k.c.equal(k.standby_use("warm"), {(r, lr): True for r in (0, 1) for lr in (0, 1)},
              "warm: every worker of both rounds was a standby")
    k.c.equal(k.standby_use("cold"), {(r, lr): False for r in (0, 1) for lr in (0, 1)},
              "cold: no standby")
    k.c.check(len(digests["warm"]) == 2 and digests["warm"] == digests["cold"],
              f"the same SHA-256 of the final parameters: {digests}")
    import torch
    paths = [os.path.join(k.work, n, "final.pt") for n in ("warm", "cold")]
    if not k.c.check(all(os.path.exists(p) for p in paths), "both runs wrote final.pt"):
        return
    finals = [torch.load(p) for p in paths]
    k.c.check(sorted(finals[0]) == sorted(finals[1]) and
              all(torch.equal(finals[0][t], finals[1][t]) for t in finals[0]),
              "final.pt: every tensor equal (torch.equal)")


def case_ten_restarts(k):
    """A worker that fails ten rounds in a row: every round's workers are standbys."""
    code, out = k.dtrun("warm", ["--prewarm=torch", "--max-restarts=10"],
                        [WORKER, "restarts", "10"], 2, timeout=860)
    k.c.equal(code, 0, "exit code")
    use = k.standby_use("warm")
    k.c.equal(sorted(use), [(r, lr) for r in range(11) for lr in (0, 1)],
              "eleven rounds of two workers")
    k.c.equal([key for key, warm in sorted(use.items()) if not warm], [],
              "workers that were not standbys")
    evs = k.events("warm")
    k.c.equal(named(evs, "prewarm_fallback") + named(evs, "prewarm_disabled"), [],
              "no fallback, prewarming stayed on")
    k.c.check(len(named(evs, "standby_ready")) >= 22,
              "at least two standbys ready for each of the 11 rounds")


def standby_lost(k, how):
    """Round 0's worker waits on a FIFO; the standby prepared for round 1 is killed or stopped
    before the round starts; round 1 starts cold, saying why, and the job finishes."""
    fifo = os.path.join(k.work, "go")
    os.mkfifo(fifo)
    p = k.start("warm", ["--prewarm=torch", "--max-restarts=1"], [WORKER, "wait", fifo], 1)
    try:
        ready = wait_for(lambda: named(k.events("warm"), "standby_ready")[1:], 400,
                         "the second standby (for round 1) to be ready")
        pid = ready[0]["pid"]
        if how == "killed":
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: [e for e in named(k.events("warm"), "standby_exited")
                              if e["pid"] == pid], 60, "the agent to see the standby's death")
        else:
            os.kill(pid, signal.SIGSTOP)
            wait_for(lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
                     == "T", 60, "the standby to stop")
        with open(fifo, "w") as f:
            f.write("go")
        code = p.wait(timeout=400)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    out = k.log("warm")
    k.c.equal(code, 0, "exit code")
    k.c.equal(k.standby_use("warm"), {(0, 0): True, (1, 0): False},
              "round 0 from a standby, round 1 cold")
    fallback = named(k.events("warm"), "prewarm_fallback")
    expected = "SIGKILL" if how == "killed" else "stopped"
    k.c.check(len(fallback) == 1 and expected in fallback[0]["reason"],
              f"one fallback, saying {expected!r}: {fallback}")
    k.c.check(f"local rank 0 starts cold: its standby (pid {pid})" in out,
              "dtrun's log says why round 1 started cold")
    k.c.check("rank 0 round 1 done" in out, "round 1's cold worker ran")
    k.c.check(gone(pid), f"the lost standby {pid} is gone")


def case_standby_killed(k):
    standby_lost(k, "killed")


def case_standby_stopped(k):
    standby_lost(k, "stopped")


def same_as_cold(k, opts):
    """The same worker run cold and from a standby: what it sees of its process, field by
    field, its streams' contents and its exit code."""
    runs = {}
    # The same command line for both (one run id, one output directory); the log directory's
    # own name is random.
    out = os.path.join(k.work, "fields")
    logs = os.path.join(k.work, "logs")
    for name, extra in (("cold", []), ("warm", ["--prewarm=torch"])):
        os.mkdir(out)
        code, text = k.dtrun(name, [f"--log-dir={logs}", "--rdzv-id=same", *opts, *extra],
                             [WORKER, "fields", out], 2)
        runs[name] = {"code": code, "text": text, "logs": os.path.join(k.work, name + "-logs"),
                      "fields": {}}
        for lr in (0, 1):
            with open(os.path.join(out, f"fields-0-{lr}.json")) as f:
                runs[name]["fields"][lr] = json.load(f)
        os.rename(logs, runs[name]["logs"])
        shutil.rmtree(out)
    k.c.equal(k.standby_use("warm"), {(0, 0): True, (0, 1): True}, "warm: both from standbys")
    for name in runs:
        k.c.equal(runs[name]["code"], 1, f"{name}: dtrun's exit code")
        # The first exit code 3 stops the group: the other worker exits 3 too, or is stopped.
        exits = [(e["exit_code"], e["signal"]) for e in named(k.events(name), "worker_exited")]
        k.c.check(len(exits) == 2 and exits[0] == (3, None) and
                  exits[1] in ((3, None), (None, signal.SIGTERM)),
                  f"{name}: the workers' exit codes {exits}")

    def normal(value, name):
        # What differs between any two runs: the log directory's name, the free port, pipes.
        text = re.sub(re.escape(logs) + r"/same_[^/]+", "<logs>", json.dumps(value))
        value = json.loads(re.sub(r"(pipe|socket):\[\d+\]", r"\1", text))
        if isinstance(value, dict) and "MASTER_PORT" in value:
            value["MASTER_PORT"] = "<port>"
        return value

    for lr in (0, 1):
        cold, warm = runs["cold"]["fields"][lr], runs["warm"]["fields"][lr]
        k.c.equal(sorted(warm), sorted(cold), f"rank {lr}: the same fields")
        for field in sorted(cold):
            if field == "torch_preloaded":
                continue
            w, c = normal(warm[field], "warm"), normal(cold[field], "cold")
            if isinstance(c, dict) and w != c:  # say which keys differ, not the whole dict
                w = {key: w.get(key) for key in set(w) | set(c) if w.get(key) != c.get(key)}
                c = {key: c.get(key) for key in w}
            k.c.check(w == c, f"rank {lr}: {field}" + ("" if w == c else f": {w!r} != {c!r}"))
        k.c.equal((cold["torch_preloaded"], warm["torch_preloaded"]), (False, True),
                  f"rank {lr}: torch was imported ahead only in the warm run")
        k.c.check(warm["c_environ"] == warm["environ"], f"rank {lr}: C environ == os.environ")
    for lr in (0, 1):
        for stream in ("stdout", "stderr"):
            lines = {}
            for name in runs:
                text = runs[name]["text"]
                for run_dir in os.listdir(runs[name]["logs"]) if os.path.isdir(
                        runs[name]["logs"]) else []:
                    path = os.path.join(runs[name]["logs"], run_dir, "attempt_0", str(lr),
                                        f"{stream}.log")
                    if os.path.exists(path):
                        with open(path, errors="replace") as f:
                            text = f.read()
                lines[name] = [line for line in text.splitlines()
                               if line.lstrip("[default0123]:").startswith(f"rank {lr} ")]
            # Sorted: on the console, a rank's two streams come through two pipes.
            lines = {name: sorted(v) for name, v in lines.items()}
            k.c.check(lines["warm"] == lines["cold"] and lines["cold"],
                      f"rank {lr} {stream}: the same lines {lines}")


def case_same_as_cold(k):
    same_as_cold(k, [])


def case_same_as_cold_redirected(k):
    same_as_cold(k, ["--redirects=3"])


def case_hang_and_stacks(k):
    """A prewarmed worker that hangs under the file timer is killed as hung, with its Python
    stacks in the report, in both rounds; the restarted one is a standby too."""
    timer_worker = os.path.join(HERE, "timer_worker.py")
    code, out = k.dtrun("warm", ["--prewarm=torch", "--file-timer", "--dump-stacks",
                                 "--max-restarts=1"], [timer_worker, "stuck"], 1)
    evs = k.events("warm")
    k.c.equal(code, 1, "exit code")
    k.c.equal(k.standby_use("warm"), {(0, 0): True, (1, 0): True}, "both rounds from standbys")
    k.c.equal(len(named(evs, "worker_hung")), 2, "two hangs (rounds 0 and 1)")
    k.c.check('hung: timer "load"' in out, "the report leads with the hang")
    k.c.check("loading shard 3" in out, "the worker's last stderr line is in the report")
    k.c.check("in stuck_loading_shard" in out, "its Python stack names the function it hung in")


def case_error_file(k):
    """A prewarmed worker that raises under @record: its error file's traceback is the
    report's, as for a cold worker."""
    reports = {}
    for name, extra in (("cold", []), ("warm", ["--prewarm=torch"])):
        code, out = k.dtrun(name, extra, [WORKER, "raise"], 1)
        k.c.equal(code, 1, f"{name}: exit code")
        reports[name] = out
        k.c.check("ValueError: boom in round 0" in out, f"{name}: the error file's message")
        k.c.check(f'{WORKER}", line' in out and "in main" in out,
                  f"{name}: the traceback of the script")
    k.c.equal(k.standby_use("warm"), {(0, 0): True}, "warm: from a standby")

    def traceback(text):
        lines = text.splitlines()
        start = next((i for i, line in enumerate(lines) if "Traceback" in line), len(lines))
        return [line for line in lines[start:start + 12] if "File" in line or "Error" in line]

    k.c.equal(traceback(reports["warm"]), traceback(reports["cold"]),
              "the same traceback in both reports")


def no_orphans(k, sig):
    """dtrun killed with `sig` while a worker runs and the next round's standby waits, both with
    a child started by a prewarmed module: none of them outlives dtrun."""
    fifo = os.path.join(k.work, "never")
    os.mkfifo(fifo)
    children = os.path.join(k.work, "children")
    os.mkdir(children)
    with open(os.path.join(k.work, "prewarm_spawner.py"), "w") as f:
        f.write("import os, subprocess\n"
                "child = subprocess.Popen(['sleep', '600'])\n"
                "open(os.path.join(os.environ['SPAWNER_DIR'], str(child.pid)), 'w').close()\n")
    k.env.update(PYTHONPATH=k.work, SPAWNER_DIR=children)
    p = k.start("warm", ["--prewarm=torch,prewarm_spawner"], [WORKER, "block", fifo], 1)
    try:
        ready = wait_for(lambda: named(k.events("warm"), "standby_ready")[1:], 400,
                         "the standby of the next round")
        started = named(k.events("warm"), "worker_started")
        pids = [ready[0]["pid"], started[0]["pid"]]
        wait_for(lambda: len(os.listdir(children)) == 2, 60, "both children's pid files")
        pids += [int(n) for n in os.listdir(children)]
        k.c.check(all(not gone(pid) for pid in pids), f"before: all running {pids}")
        os.kill(p.pid, sig)
        p.wait(timeout=120)
        wait_for(lambda: all(gone(pid) for pid in pids), 60,
                 f"worker, standby and their children {pids} to be gone")
        k.c.check(True, f"none of {pids} outlived dtrun ({signal.Signals(sig).name})")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def case_no_orphans_sigkill(k):
    no_orphans(k, signal.SIGKILL)


def case_no_orphans_sigterm(k):
    no_orphans(k, signal.SIGTERM)


CASES = cases(globals())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrun", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    args = parser.parse_args()
    args.dtrun, args.source_dir = os.path.abspath(args.dtrun), os.path.abspath(args.source_dir)
    try:
        import torch  # noqa: F401
    except Exception as e:
        skip(f"{sys.executable} cannot import torch ({e}); install python3-torch")
    work = tempfile.mkdtemp(prefix="dtrun-prewarm-test-")
    run_case(CASES[args.case], Case(args, work), work)


if __name__ == "__main__":
    main()
