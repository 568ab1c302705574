"""One job of the fault soak (scripts/bench/soak): its agents, its faults, its checks.

A job is planned from its seed alone (soak_plan.plan): launcher (dtrun or torchrun 1.13),
backend (c10d, in network namespaces of scripts/fault/netns.py when root, or etcd), the nodes
it starts with, and its faults with their parameters. It runs the trainer of soak_trainer.py,
injects each fault once the previous one has recovered, then lets the training finish and checks
what the soak promises: every node's exit code agrees with the job's outcome, the final model is
the reference's bit for bit, no process of the job is left, nothing hung.

Recovery time of a fault: from its injection to the start of the last worker of the group that
trains next (the trainer's own "group" record, the same for both launchers); for dtrun also from
its event log (the last worker_started of that round).
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "scripts" / "fault"))
import fault  # noqa: E402  (scripts/fault/fault.py: finds a run's workers, signals, partitions)
import netns  # noqa: E402

PYTHON = os.environ.get("DTRUN_SYSTEM_PYTHON", "/usr/bin/python3")
TRAINER = HERE / "soak_trainer.py"
ANCHOR = Path(os.environ.get("DTRUN_TORCHRUN_ANCHOR", HERE / "torchrun_anchor.py"))
STEPS = 40
LEASE_S = 3.0  # keep_alive_interval 1 s x keep_alive_max_attempt 3
STALL_S = 6
CONF = {"keep_alive_interval": 1, "keep_alive_max_attempt": 3, "heartbeat_timeout": 3,
        "last_call_timeout": 1, "join_timeout": 60, "close_timeout": 20}
RECOVERY_DEADLINE_S = 90.0


class Hang(Exception):
    """Something the job should have done did not happen within its (generous) deadline."""


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
    except FileNotFoundError:
        pass
    return out


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise Hang(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.02)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """One agent process (dtrun or torchrun) and what the soak did to it."""

    def __init__(self, job, index, argv):
        self.index = index
        self.events = job.dir / f"agent{index}.events.jsonl"
        self.err = job.dir / f"agent{index}.err"
        self.fate = "member"  # member | killed | terminated | dropped
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        self.exit_time = None
        # When it exited, to the tenth of a second (whether it could know the job's outcome).
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self):
        self.proc.wait()
        self.exit_time = time.time()

    def alive(self):
        return self.proc.poll() is None

    def last_line(self):
        lines = [l for l in self.err.read_text(errors="replace").splitlines() if l.strip()]
        return lines[-1] if lines else ""


class Job:
    def __init__(self, soak, plan):
        self.soak = soak
        self.plan = plan
        self.rng = random.Random(plan["seed"] ^ 0x5EED)
        self.dir = Path(soak.work) / f"job-{plan['seed']}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.run_id = f"soak-{plan['seed']}"
        self.nodes = []
        self.netns = None
        self.allowed = 0
        self.results = []  # one dict per fault
        self.success_time = None

    # --- agents ---------------------------------------------------------------------------

    def _argv(self, index):
        p = self.plan
        trainer = [PYTHON, "-u", str(TRAINER), "--dir", str(self.dir), "--steps", str(STEPS)]
        conf = ",".join(f"{k}={v}" for k, v in dict(CONF, **p.get("conf", {})).items())
        nnodes = f"1:{p['max_nodes']}"
        if p["launcher"] == "torchrun":
            return [PYTHON, str(ANCHOR), "--nnodes", nnodes, "--nproc_per_node", "1",
                    "--rdzv_backend", "c10d", "--rdzv_endpoint", self.endpoint,
                    "--rdzv_id", self.run_id, "--max_restarts", "100", "--monitor_interval",
                    "0.1", "--rdzv_conf", conf, "--no_python", *trainer]
        argv = [str(self.soak.dtrun), "--nnodes", nnodes, "--nproc-per-node", "1",
                "--rdzv-backend", p["backend"], "--rdzv-endpoint", self.endpoint,
                "--rdzv-id", self.run_id, "--max-restarts", "100", "--shutdown-timeout", "5",
                "--stall-timeout", str(STALL_S), "--rdzv-conf", conf,
                "--log-dir", str(self.dir / "logs"),
                "--event-log", str(self.dir / f"agent{index}.events.jsonl"),
                *(["--prewarm", "torch"] if p.get("prewarm") else []),
                # e.g. --dump-stacks when replaying a job whose worker was killed as hung
                *os.environ.get("DTRUN_SOAK_ARGS", "").split(),
                "--python", PYTHON, *trainer[2:]]  # dtrun runs `PYTHON -u TRAINER ...`
        if self.netns:
            argv = ["ip", "netns", "exec", netns.node_ns(self.netns, index), *argv]
        return argv

    def start_node(self):
        index = len(self.nodes)
        node = Node(self, index, self._argv(index))
        self.nodes.append(node)
        return node

    def live(self):
        return [n for n in self.nodes if n.fate == "member" and n.alive()]

    def host(self):
        """The node whose loss ends the job by design (c10d: the store's host), or None."""
        return self.nodes[0] if self.plan["backend"] == "c10d" else None

    def group_rank0(self):
        """etcd: the live node of group rank 0 in the newest round (it hosts the worker store)."""
        best = None
        for n in self.live():
            for e in read_jsonl(n.events):
                if e.get("event") == "rendezvous_done" and e.get("group_rank") == 0:
                    if best is None or e["round"] > best[0]:
                        best = (e["round"], n)
        return best[1] if best else None

    # --- the trainer's records ------------------------------------------------------------

    def records(self, ev=None):
        rs = read_jsonl(self.dir / "progress.jsonl")
        return [r for r in rs if ev is None or r["ev"] == ev]

    def grant(self, n):
        self.allowed = min(STEPS, self.allowed + n)
        tmp = self.dir / "allowed.tmp"
        tmp.write_text(str(self.allowed))
        os.replace(tmp, self.dir / "allowed")

    def step_after(self, t):
        return next((r for r in self.records("step") if r["t"] > t), None)

    def group_after(self, t):
        return next((r for r in self.records("group") if r["started"] > t), None)

    def evlog_start(self, round_):
        """dtrun: the last worker_started of `round_` over every agent's event log."""
        ts = [e["ts"] for n in self.nodes for e in read_jsonl(n.events)
              if e.get("event") == "worker_started" and e.get("round") == round_]
        return max(ts) if ts else None

    # --- the job ----------------------------------------------------------------------------

    def setup(self):
        p = self.plan
        if p["backend"] == "c10d" and p["launcher"] == "dtrun" and self.soak.netns_ok:
            self.netns = f"dts{p['seed'] % 100000}"
            netns.teardown(self.netns)
            netns.setup(self.netns, p["max_nodes"], "10.213.0")
            self.endpoint = "10.213.0.1:29400"
        elif p["backend"] == "etcd":
            self.endpoint = self.soak.etcd.endpoints
        else:
            self.endpoint = f"127.0.0.1:{free_port()}"
        first = self.start_node()
        if p["backend"] == "c10d":
            # The host binds first, so that it is node 0.
            wait_for(lambda: self._listening() or not first.alive(), 30, "the store's host")
        for _ in range(p["nodes"] - 1):
            self.start_node()
        wait_for(lambda: self._group_of(p["nodes"]), 120, f"round 0 with {p['nodes']} nodes")
        self.grant(1)
        wait_for(lambda: self.step_after(0), 60, "the first step")

    def _listening(self):
        host, port = self.endpoint.rsplit(":", 1)
        cmd = ["ss", "-ltnH", f"sport = :{port}"]
        if self.netns:
            cmd = ["ip", "netns", "exec", netns.node_ns(self.netns, 0), *cmd]
        return bool(subprocess.run(cmd, capture_output=True, text=True).stdout.strip())

    def _group_of(self, world):
        return next((g for g in self.records("group") if g["world"] == world), None)

    def run(self):
        """Plays the job; returns its summary dict (never raises for a job failure)."""
        t_begin = time.time()
        summary = {"seed": self.plan["seed"], "launcher": self.plan["launcher"],
                   "backend": self.plan["backend"], "prewarm": self.plan.get("prewarm", False),
                   "faults": self.results, "hang": None,
                   "problems": []}
        try:
            self.setup()
            import soak_faults
            for spec in self.plan["faults"]:
                result = soak_faults.inject(self, spec)
                if result is None:
                    continue  # not applicable now (too few nodes, no room)
                self.results.append(result)
                self.grant(self.rng.randint(1, 2))
                wait_for(lambda: self.step_after(result["t0"]) or self.allowed >= STEPS, 60,
                         f"a step after the {spec['kind']} fault")
            self.finish(summary)
        except Hang as e:
            summary["hang"] = str(e)
        finally:
            self.teardown(summary)
        summary["duration_s"] = time.time() - t_begin
        return summary

    def finish(self, summary):
        self.grant(STEPS)
        (self.dir / "release").touch()
        wait_for(lambda: not any(n.alive() for n in self.nodes), 120, "every agent to exit")
        final = self.dir / "final.json"
        summary["model_ok"] = False
        if not final.exists():
            summary["problems"].append("no final.json: the training did not finish")
        elif json.loads(final.read_text())["w"] != self.soak.reference:
            summary["problems"].append("wrong model: final weights differ from the reference")
        else:
            summary["model_ok"] = True
        summary["finish_s"] = self.finishing_time()
        self._check_exits(summary)
        self._check_orphans(summary)

    def finishing_time(self):
        """The longest final barrier plus destroy_process_group of the job's last round, over
        its workers (the trainer's finishing and finished records); None without both."""
        ends = {r["pid"]: r["t"] for r in self.records("finished")}
        spans = [ends[r["pid"]] - r["t"] for r in self.records("finishing") if r["pid"] in ends]
        return max(spans) if spans else None

    def _check_exits(self, summary):
        """Each node's exit code against what it could know: members of a job that succeeded
        exit 0; nodes the soak killed die of SIGKILL; a node told to stop (SIGTERM) does not
        claim success; a node dropped (stopped or cut off past its lease) exits 1 if it left
        while the job still ran, 0 if it left after the job's success was on record."""
        ok_job = summary["model_ok"]
        success = [e["ts"] for n in self.nodes for e in read_jsonl(n.events)
                   if e.get("event") == "shutdown" and e.get("reason") == "succeeded"]
        if not success and ok_job:
            success = [r["t"] for r in self.records("final")]
        self.success_time = min(success) if success else None
        codes = []
        for n in self.nodes:
            rc = n.proc.returncode
            codes.append(rc)
            want = None
            if n.fate == "member":
                want = 0 if ok_job else 1
            elif n.fate == "killed":
                want = -signal.SIGKILL
            elif n.fate == "terminated":
                if rc == 0:
                    summary["problems"].append(f"node {n.index}: exited 0 after its SIGTERM")
            elif n.fate == "dropped":
                wait_for(lambda: n.exit_time is not None, 5, "the exit time")
                if self.success_time is None or n.exit_time < self.success_time - 0.5:
                    want = 1
                elif n.exit_time > self.success_time + 0.5:
                    want = 0 if ok_job else 1
            if want is not None and rc != want:
                summary["problems"].append(
                    f"exit code: node {n.index} ({n.fate}) exited {rc}, expected {want}: "
                    f"{n.last_line()[-300:]}")
        summary["exit_codes"] = codes

    def _check_orphans(self, summary):
        """Any process of the job (a worker, a worker's child, a standby) alive once every agent
        of the job has returned."""
        left = fault.job_processes(self.run_id)
        agents = [n.pid for n in self.nodes if n.alive()]
        if left or agents:
            time.sleep(1.0)  # report only what is still there a second later
            left = fault.job_processes(self.run_id)
        summary["orphans"] = [w["pid"] for w in left]
        if left:
            summary["problems"].append(
                f"orphans: {len(left)} process(es) of the job alive after the agents")

    def teardown(self, summary):
        for n in self.nodes:
            if n.alive():
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.killpg(n.pid, sig)
                    except OSError:
                        pass
        for n in self.nodes:
            try:
                n.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        for w in fault.job_processes(self.run_id):
            try:
                os.kill(w["pid"], signal.SIGCONT)
                os.kill(w["pid"], signal.SIGKILL)
            except OSError:
                pass
        if self.netns:
            netns.teardown(self.netns)
        if self.soak.etcd_down is not None:
            self.soak.etcd.start(self.soak.etcd_down)
            self.soak.etcd.wait_healthy(60)
            self.soak.etcd_down = None
        if not summary["problems"] and not summary["hang"] and not self.soak.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
