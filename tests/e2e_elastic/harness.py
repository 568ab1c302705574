"""Harness of the elastic end-to-end tests: several dtrun agents on loopback, one job.

A `Job` owns a fresh directory, a unique --rdzv-id, and every process it starts (a `dtrun store`,
agents); `Job.close()` kills what is left. Workers are tests/e2e_elastic/worker.sh, which append
one JSON line per start to <dir>/workers.jsonl (see there); agents write --event-log files.
`check_round` asserts the invariants of every round: ranks unique and contiguous, node by
node in group-rank order; one world size and one group world size on every worker of the round,
and the round number (TORCHELASTIC_RESTART_COUNT) its agent started it for.
"""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
from dtrun_testing import (SKIP, Failed, Skip, check, log, poll, read_jsonl,  # noqa: E402
                           require_checks)

FAULT = REPO / "scripts" / "fault" / "fault.py"
NETNS = REPO / "scripts" / "fault" / "netns.py"
WORKER = HERE / "worker.sh"


def _die_with_parent():
    # The test runner killed (ctest timeout) must not leave agents behind; their workers follow
    # them through dtrun's own guard.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Agent:
    def __init__(self, job, index, argv, env):
        self.job = job
        self.index = index
        self.events_path = job.dir / f"agent{index}.events.jsonl"
        self.out_path = job.dir / f"agent{index}.out"
        self.err_path = job.dir / f"agent{index}.err"
        self.argv = argv
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env,
                                         preexec_fn=_die_with_parent)
        self.pid = self.proc.pid
        self.start_time = time.time()

    def events(self, name=None):
        evs = read_jsonl(self.events_path)
        return [e for e in evs if name is None or e["event"] == name]

    def wait_event(self, name, timeout, pred=lambda e: True, what=None):
        return poll(lambda: next((e for e in self.events(name) if pred(e)), None), timeout,
                    what or f"agent {self.index}: event {name}")

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def running(self):
        return self.proc.poll() is None

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"agent {self.index} (pid {self.pid}) still runs after {timeout} s")

    def signal(self, signo):
        if self.running():
            os.kill(self.pid, signo)


class Job:
    def __init__(self, name, dtrun, directory=None):
        """`directory`: an existing directory to use (and leave) instead of a fresh one."""
        self.name = name
        self.dtrun = str(dtrun)
        self.own_dir = directory is None
        self.dir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix=f"dtrun-e2e-{name}-"))
        self.run_id = f"{name}-{uuid.uuid4().hex[:10]}"
        self.records_path = self.dir / "workers.jsonl"
        self.agents = []
        self.store_proc = None
        self.store_addr = None
        self.netns_name = None
        self.keep = False

    # --- processes -------------------------------------------------------------------------

    def start_store(self, extra=(), nofile=None):
        """A separate `dtrun store --port 0` (plus `extra` options; `nofile`: its hard and soft
        RLIMIT_NOFILE); returns "127.0.0.1:<port>"."""
        out = open(self.dir / "store.out", "w+")

        def preexec():
            if nofile is not None:
                import resource
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            _die_with_parent()

        self.store_proc = subprocess.Popen(
            [self.dtrun, "store", "--host", "127.0.0.1", "--port", "0", *extra], stdout=out,
            stderr=open(self.dir / "store.err", "w"), preexec_fn=preexec)

        def addr():
            text = (self.dir / "store.out").read_text()
            return text.split("\n", 1)[0] if "\n" in text else None

        self.store_addr = poll(addr, 20, "the store's address")
        return self.store_addr

    def start_agent(self, nnodes, nproc=2, endpoint=None, conf=None, extra=(), env=None,
                    netns_node=None, program=None):
        """One dtrun agent running `program` (argv, run with --no-python; default worker.sh).
        `conf`: --rdzv-conf entries; `env`: added to the environment (E2E_FAIL...)."""
        conf = dict({"join_timeout": 30, "keep_alive_interval": 0.2, "keep_alive_max_attempt": 3,
                     "last_call_timeout": 1, "close_timeout": 5}, **(conf or {}))
        endpoint = endpoint or self.store_addr
        argv = [self.dtrun, "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
                "--rdzv-id", self.run_id, "--monitor-interval", "0.1",
                "--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items()),
                "--shutdown-timeout", "5", "--log-dir", str(self.dir / "logs"),
                "--event-log", str(self.dir / f"agent{len(self.agents)}.events.jsonl")]
        if endpoint:
            argv += ["--rdzv-endpoint", endpoint]
        argv += list(extra) + ["--no-python"] + list(program or [str(WORKER)])
        if netns_node is not None:
            argv = [sys.executable, str(NETNS), "exec", "--name", self.netns_name,
                    "--node", str(netns_node), "--"] + argv
        e = dict(os.environ)
        e.update({"E2E_DIR": str(self.dir)})
        e.update(env or {})
        agent = Agent(self, len(self.agents), argv, e)
        self.agents.append(agent)
        return agent

    def fault(self, *args):
        """Runs scripts/fault/fault.py with --json; returns its first JSON line."""
        r = subprocess.run([sys.executable, str(FAULT), *args, "--json"], capture_output=True,
                           text=True, timeout=30)
        check(r.returncode == 0, f"fault.py {' '.join(args)} failed: {r.stdout}{r.stderr}")
        result = json.loads(r.stdout.splitlines()[0])
        log(f"fault: {result['target']} pid {result['pid']} "
            f"{result.get('signal') or result.get('fault')}")
        return result

    def finish(self):
        """Lets every worker exit 0."""
        (self.dir / "finish").touch()

    # --- what the workers saw --------------------------------------------------------------

    def records(self, round_=None):
        rs = read_jsonl(self.records_path)
        return [r for r in rs if round_ is None or r["round"] == round_]

    def wait_round(self, round_, workers, timeout=30):
        """Waits until `workers` workers of round `round_` have started; returns their records."""
        return poll(lambda: (lambda rs: rs if len(rs) >= workers else None)(self.records(round_)),
                    timeout, f"{workers} workers in round {round_} "
                    f"(rounds so far: {sorted({r['round'] for r in self.records()})})")

    # --- cleanup ---------------------------------------------------------------------------

    def close(self):
        for a in self.agents:
            if a.running():
                a.signal(signal.SIGCONT)
                a.signal(signal.SIGKILL)
                try:
                    a.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        if self.store_proc and self.store_proc.poll() is None:
            self.store_proc.kill()
            self.store_proc.wait()
        if self.netns_name:
            subprocess.run([sys.executable, str(NETNS), "teardown", "--name", self.netns_name])
        if not self.own_dir:
            return
        if self.keep or os.environ.get("E2E_KEEP"):
            log(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def dump(self):
        """Everything a failing test should show."""
        for a in self.agents:
            print(f"----- agent {a.index} pid {a.pid} rc {a.proc.poll()}: {' '.join(a.argv)}")
            print(f"--- stderr (last 40 lines):")
            print("\n".join(a.stderr().splitlines()[-40:]))
            print(f"--- events:")
            for e in a.events():
                print(json.dumps(e))
        print("----- worker records:")
        for r in self.records():
            print(json.dumps(r))


def _check_started_by_agents(job, rs, where):
    """Every worker of `rs` was started by its agent for the round and rank it reports: the
    agent's worker_started event for the worker's pid names the same round (its
    TORCHELASTIC_RESTART_COUNT) and rank. The agent writes those events just after starting its
    workers, so they are waited for (with a deadline)."""
    by_pid = {a.pid: a for a in job.agents}
    strangers = sorted({r["agent"] for r in rs} - set(by_pid))
    check(not strangers, f"{where}: workers of processes that are no agent of this job: "
          f"{strangers}")

    def started():
        events = {e["pid"]: e for agent_pid in {r["agent"] for r in rs}
                  for e in by_pid[agent_pid].events("worker_started")}
        return events if all(r["pid"] in events for r in rs) else None

    events = poll(started, 10, f"{where}: the agents' worker_started events of every worker")
    for r in rs:
        e = events[r["pid"]]
        check((e["round"], e["rank"]) == (r["round"], r["rank"]),
              f"{where}: worker pid {r['pid']} saw TORCHELASTIC_RESTART_COUNT {r['round']} and "
              f"RANK {r['rank']}, but its agent started it for round {e['round']} as rank "
              f"{e['rank']}")


def check_round(job, records, round_, nodes, world, nproc_of=None):
    """Asserts the invariants of one round from its workers' records: `nodes` nodes and `world`
    workers; ranks 0..world-1 each exactly once; every worker of the round agrees on
    WORLD_SIZE and GROUP_WORLD_SIZE, and was started by its agent for this round and rank;
    group ranks 0..nodes-1, one agent each; ranks contiguous per node, in group-rank order.
    `nproc_of`: {group rank: nproc} when nodes differ. Returns {group rank: agent pid}."""
    rs = [r for r in records if r["round"] == round_]
    where = f"round {round_}"
    check(len(rs) == world, f"{where}: {len(rs)} workers started, expected {world}: {rs}")
    check(sorted(r["rank"] for r in rs) == list(range(world)),
          f"{where}: ranks {sorted(r['rank'] for r in rs)} are not 0..{world - 1}")
    check({r["world_size"] for r in rs} == {world},
          f"{where}: WORLD_SIZE {sorted({r['world_size'] for r in rs})}, expected {world}")
    check({r["group_world_size"] for r in rs} == {nodes},
          f"{where}: GROUP_WORLD_SIZE {sorted({r['group_world_size'] for r in rs})}, "
          f"expected {nodes}")
    _check_started_by_agents(job, rs, where)
    by_group = {}
    for r in rs:
        by_group.setdefault(r["group_rank"], []).append(r)
    check(sorted(by_group) == list(range(nodes)),
          f"{where}: group ranks {sorted(by_group)}, expected 0..{nodes - 1}")
    agents = {}
    offset = 0
    for g in range(nodes):
        members = sorted(by_group[g], key=lambda r: r["local_rank"])
        pids = {r["agent"] for r in members}
        check(len(pids) == 1, f"{where}: group rank {g} is claimed by agents {pids}")
        agents[g] = pids.pop()
        n = len(members)
        if nproc_of is not None:
            check(n == nproc_of[g], f"{where}: group rank {g} has {n} workers, expected "
                  f"{nproc_of[g]}")
        check([r["local_rank"] for r in members] == list(range(n)),
              f"{where}: group rank {g} local ranks {[r['local_rank'] for r in members]}")
        check([r["rank"] for r in members] == list(range(offset, offset + n)),
              f"{where}: group rank {g} has ranks {[r['rank'] for r in members]}, expected "
              f"{offset}..{offset + n - 1}")
        check({r["local_world_size"] for r in members} == {n},
              f"{where}: LOCAL_WORLD_SIZE differs on group rank {g}")
        offset += n
    check(len(set(agents.values())) == nodes, f"{where}: one agent holds two group ranks")
    return agents


def run(cases, argv=None):
    """main() of a test script: --dtrun PATH --case NAME; exit 0 pass, 1 fail, 77 skip."""
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrun", required=True)
    parser.add_argument("--case", required=True, choices=sorted(cases))
    args = parser.parse_args(argv)
    if not os.access(args.dtrun, os.X_OK):
        # Built with these tests: missing is a failure, never a reason to skip.
        print(f"FAIL: {args.dtrun} is not an executable dtrun")
        return 1
    job = Job(args.case.replace("_", "-"), args.dtrun)
    log(f"case {args.case}: run id {job.run_id}, dir {job.dir}")
    try:
        cases[args.case](job)
        require_checks(args.case)
        log(f"PASS {args.case}")
        return 0
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP
    except Exception as e:
        job.keep = True
        print(f"FAIL {args.case}: {e!r}")
        job.dump()
        return 1
    finally:
        job.close()
