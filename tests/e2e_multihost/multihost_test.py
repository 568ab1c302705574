#!/usr/bin/python3
"""dtrun --hostfile end to end: one shell starts a job on several "hosts" over a real sshd.

The hosts are loopback addresses (127.0.0.2, 127.0.0.3) served by an sshd this test starts on a
private port with its own keys (sshd_fixture.py); dtrun reaches them with
--ssh-command "ssh -F <the fixture's config>". Every case is one ctest test:

  ddp_two_hosts      examples/ddp_train.py (gloo DDP) on 2 + 1 workers of two hosts: every rank
                     finishes with the same parameters, output comes back prefixed by host
  ranks_and_env      the worker environment on each host: node ranks in hostfile order, slots as
                     CUDA_VISIBLE_DEVICES, the variables that travel (and those that do not),
                     .dtrun_env, the working directory and the script's arguments
  include_exclude    --include HOST:SLOT@HOST and --exclude HOST select hosts and devices
  unreachable_host   a host without sshd is named in one line and nothing starts anywhere
  ctrl_c             SIGINT to the launcher's process group (a terminal's Ctrl-C) stops every
                     host's workers: no process of the job is left
  sigterm            the same with SIGTERM to the launcher alone
  launcher_killed    SIGKILL to the launcher: the agents see their ssh's standard input close
                     and stop all the same
  deepspeed_hosts    dtrun deepspeed --hostfile: --local_rank=N first, DeepSpeed's CROSS_RANK,
                     CROSS_SIZE and LOCAL_SIZE, .deepspeed_env and DeepSpeed's exports on every host

    multihost_test.py --dtrun build/bin/dtrun --case NAME      (exit 0 pass, 1 fail, 77 skip)
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sshd_fixture import SshdFixture

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
import dtrun_testing as dt  # noqa: E402
from dtrun_testing import Failed  # noqa: E402
WORKER = HERE / "report_worker.py"
PYTHON = "/usr/bin/python3"  # the interpreter that sees Debian's torch
SKIP = dt.SKIP
HOSTS = ["127.0.0.2", "127.0.0.3"]
DOWN = "127.0.0.4"  # in the ssh config, with no server


# A check stops the case at its first failure; the messages say what passes, so each is printed.
CHECKS = dt.Checks(echo=True)
check = CHECKS.check
poll = CHECKS.poll


def processes_with(marker):
    """Pids (not this one's) whose command line mentions `marker`: the job's ssh, agents, workers."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        pid = int(cmdline.split("/")[2])
        if pid == os.getpid():
            continue
        try:
            with open(cmdline, "rb") as f:
                text = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in text and state not in ("Z", "X"):
            found.append((pid, text.strip()))
    return found


class Case:
    def __init__(self, dtrun, sshd):
        self.dtrun = dtrun
        self.sshd = sshd
        self.dir = Path(tempfile.mkdtemp(prefix="dtrun-multihost-"))
        self.out = self.dir / "out"
        self.out.mkdir()
        self.work = self.dir / "work"  # the launching shell's directory
        self.work.mkdir()
        self.log = self.dir / "launcher.log"
        self.proc = None

    def hostfile(self, text):
        path = self.dir / "hostfile"
        path.write_text(text)
        return str(path)

    def env(self, extra=None):
        env = dict(os.environ)
        env.update({"DTRUN_PYTHON": PYTHON, "DTRUN_LOG_LEVEL": "warn"})
        env.update(extra or {})
        return env

    def start(self, args, env=None, sub=None):
        """dtrun [SUB] --ssh-command SSH ARGS (SUB: a front-end such as deepspeed)."""
        cmd = [self.dtrun] + ([sub] if sub else []) + ["--ssh-command", self.sshd.ssh_command()]
        cmd += args
        print("$ " + " ".join(cmd), flush=True)
        out = open(self.log, "wb")
        # Its own session, as a shell's foreground job: a signal to its group is a Ctrl-C.
        self.proc = subprocess.Popen(cmd, env=self.env(env), cwd=self.work, stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"dtrun did not finish within {timeout} s")

    def run(self, args, timeout, env=None, sub=None):
        self.start(args, env, sub)
        return self.wait(timeout)

    def output(self):
        return self.log.read_text(errors="replace")

    def reports(self):
        out = {}
        for p in self.out.glob("rank*.json"):
            r = json.loads(p.read_text())
            out[r["rank"]] = r
        return out

    def close(self, passed):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid, _ in processes_with(str(self.dir)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if passed:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print(f"--- launcher output ({self.log}):\n{self.output()}")
            print(f"--- sshd log:\n{self.sshd.log()[-4000:]}")


def worker_args(case, *extra):
    return [str(WORKER), "--out", str(case.out)] + list(extra)


def ddp_two_hosts(case):
    ckpt = case.dir / "ckpt"
    # Gloo binds to what the host name resolves to; keep it on loopback like the hosts.
    (case.work / ".dtrun_env").write_text("GLOO_SOCKET_IFNAME=lo\n")
    hostfile = case.hostfile(f"# two hosts\n{HOSTS[0]} slots=2\n{HOSTS[1]} slots=1\n")
    code = case.run(["--hostfile", hostfile, "--master-port", str(free_port()),
                     str(REPO / "examples" / "ddp_train.py"), "--ckpt-dir", str(ckpt),
                     "--steps", "10"], timeout=240)
    text = case.output()
    check(code == 0, f"the job exits 0 (got {code})")
    records = [json.loads(l) for l in (ckpt / "progress.jsonl").read_text().splitlines()]
    started = {r["rank"]: r for r in records if r["event"] == "started"}
    finished = {r["rank"]: r for r in records if r["event"] == "finished"}
    check(sorted(started) == [0, 1, 2] and {r["world_size"] for r in started.values()} == {3},
          "ranks 0, 1, 2 of a world of 3 started")
    check(sorted(finished) == [0, 1, 2] and len({r["sha256"] for r in finished.values()}) == 1,
          "every rank finished with the same parameters")
    check((ckpt / "final.pt").exists(), "rank 0 saved final.pt")
    # Rank 0 is on the first host (node 0), rank 2 on the second; lines come back prefixed.
    check(re.search(rf"^{re.escape(HOSTS[0])}: \[rank 0\] finished", text, re.M) is not None,
          "rank 0's output comes back as '127.0.0.2: ...'")
    check(re.search(rf"^{re.escape(HOSTS[1])}: \[rank 2\] finished", text, re.M) is not None,
          "rank 2's output comes back as '127.0.0.3: ...'")
    # sshd tears a session down after ssh has its exit status: wait for it, with a deadline.
    # (poll raises Failed, naming what it waited for, when the deadline passes.)
    poll(lambda: not processes_with(str(case.dir)), 60, "no process of the job left")


def ranks_and_env(case):
    (case.work / ".dtrun_env").write_text("# for every host\nFROM_CWD_FILE='a b'\n")
    hostfile = case.hostfile(f"{HOSTS[0]} slots=2\n{HOSTS[1]} slots=2\n")
    env = {"TEST_NOT_SENT": "x", "NCCL_TEST_MARK": "nccl", "NOT_EXPORTED_VAR": "y",
           "CUDA_VISIBLE_DEVICES": "7", "PYTHONUNBUFFERED": "1"}
    code = case.run(["--hostfile", hostfile, "--master-port", str(free_port()), "--no-python",
                     PYTHON] + worker_args(case, "two words", "$HOME"), timeout=120, env=env)
    check(code == 0, f"the job exits 0 (got {code})")
    reports = case.reports()
    check(sorted(reports) == [0, 1, 2, 3], "four ranks ran")
    for rank, r in reports.items():
        host = HOSTS[rank // 2]
        check(r["host"] == host and r["group_rank"] == rank // 2,
              f"rank {rank} ran on {host} as node {rank // 2}")
        check(r["local_rank"] == rank % 2 and r["world_size"] == 4 and r["local_world_size"] == 2,
              f"rank {rank}: local rank {rank % 2}, world 4, 2 per node")
        check(r["cuda_visible_devices"] == "0,1",
              f"rank {rank}: CUDA_VISIBLE_DEVICES from the slots, not the launcher's 7")
        check(r["vars"].get("NCCL_TEST_MARK") == "nccl" and "TEST_NOT_SENT" not in r["vars"]
              and "NOT_EXPORTED_VAR" not in r["vars"],
              f"rank {rank}: NCCL_* travels, other variables do not")
        check(r["vars"].get("FROM_CWD_FILE") == "a b", f"rank {rank}: ./.dtrun_env applies")
        check(r["cwd"] == str(case.work), f"rank {rank}: the launching shell's directory")
        check(r["argv"][-2:] == ["two words", "$HOME"], f"rank {rank}: arguments untouched")
    text = case.output()
    for rank in range(4):
        line = f"{HOSTS[rank // 2]}: rank {rank} local {rank % 2} of 4"
        check(re.search(rf"^{re.escape(line)}$", text, re.M) is not None, f"'{line}' came back")


def include_exclude(case):
    hostfile = case.hostfile(f"{HOSTS[0]} slots=2\n{HOSTS[1]} slots=2\n")
    code = case.run(["--hostfile", hostfile, "--include", f"{HOSTS[0]}:1@{HOSTS[1]}",
                     "--master-port", str(free_port()), "--no-python", PYTHON]
                    + worker_args(case), timeout=120)
    check(code == 0, f"--include: the job exits 0 (got {code})")
    got = {r["rank"]: (r["host"], r["local_rank"], r["cuda_visible_devices"], r["world_size"])
           for r in case.reports().values()}
    check(got == {0: (HOSTS[0], 0, "1", 3), 1: (HOSTS[1], 0, "0,1", 3),
                  2: (HOSTS[1], 1, "0,1", 3)},
          f"--include {HOSTS[0]}:1@{HOSTS[1]}: slot 1 of the first host, all of the second")

    for p in case.out.glob("rank*.json"):
        p.unlink()
    code = case.run(["--hostfile", hostfile, "--exclude", HOSTS[0], "--master-port",
                     str(free_port()), "--no-python", PYTHON] + worker_args(case), timeout=120)
    check(code == 0, f"--exclude: the job exits 0 (got {code})")
    got = {r["rank"]: (r["host"], r["group_rank"], r["world_size"])
           for r in case.reports().values()}
    check(got == {0: (HOSTS[1], 0, 2), 1: (HOSTS[1], 0, 2)},
          f"--exclude {HOSTS[0]}: the second host alone, as node 0")


def one_host_left(case):
    """A hostfile job reduced to one host by --exclude, that host named by a loopback address
    other than 127.0.0.1: its store listens on that address, where the torch workers connect
    (they used to wait in their store connect for torch's 30 minutes)."""
    ckpt = case.dir / "ckpt"
    (case.work / ".dtrun_env").write_text("GLOO_SOCKET_IFNAME=lo\n")
    hostfile = case.hostfile(f"{HOSTS[0]} slots=2\n{HOSTS[1]} slots=2\n")
    code = case.run(["--hostfile", hostfile, "--exclude", HOSTS[0], "--master-port",
                     str(free_port()), str(REPO / "examples" / "ddp_train.py"), "--ckpt-dir",
                     str(ckpt), "--steps", "4"], timeout=240)
    check(code == 0, f"the job exits 0 (got {code})")
    records = [json.loads(l) for l in (ckpt / "progress.jsonl").read_text().splitlines()]
    finished = {r["rank"]: r for r in records if r["event"] == "finished"}
    check(sorted(finished) == [0, 1], "ranks 0 and 1 of the one host left finished")
    check(re.search(rf"^{re.escape(HOSTS[1])}: \[rank 0\] finished", case.output(), re.M)
          is not None, f"rank 0 ran on {HOSTS[1]}")


def unreachable_host(case):
    hostfile = case.hostfile(f"{HOSTS[0]} slots=1\n{DOWN} slots=1\n")
    code = case.run(["--hostfile", hostfile, "--no-python", PYTHON] + worker_args(case),
                    timeout=120)
    text = case.output()
    check(code == 1, f"dtrun exits 1 (got {code})")
    lines = [l for l in text.splitlines() if DOWN in l]
    check(len(lines) == 1 and "cannot be reached with ssh" in lines[0]
          and "nothing was started" in lines[0],
          f"one line names {DOWN}: {lines}")
    check(HOSTS[0] not in text, f"nothing is said about (or started on) {HOSTS[0]}")
    check(not case.reports() and not processes_with(str(case.dir)), "no worker ever ran")


def deepspeed_hosts(case):
    # DeepSpeed's command line (dtrun deepspeed): every worker gets --local_rank=N first and
    # DeepSpeed's CROSS_RANK, CROSS_SIZE, LOCAL_SIZE; every host gets .deepspeed_env and
    # DeepSpeed's exports.
    (case.work / ".deepspeed_env").write_text("TEST_FROM_DS_ENV = yes\n")
    hostfile = case.hostfile(f"{HOSTS[0]} slots=2\n{HOSTS[1]} slots=1\n")
    env = {"NCCL_TEST_MARK": "nccl", "TEST_NOT_SENT": "x"}
    code = case.run(["--hostfile", hostfile, "--master_port", str(free_port())]
                    + worker_args(case, "two words"), timeout=120, env=env, sub="deepspeed")
    check(code == 0, f"the job exits 0 (got {code})")
    reports = case.reports()
    check(sorted(reports) == [0, 1, 2], "three ranks ran")
    for rank, r in reports.items():
        node, local = (0, rank) if rank < 2 else (1, 0)
        check(r["host"] == HOSTS[node] and r["local_rank"] == local,
              f"rank {rank} ran on {HOSTS[node]} as local rank {local}")
        check(r["argv"][0] == f"--local_rank={local}" and r["argv"][-1] == "two words",
              f"rank {rank}: --local_rank={local} before the script's own arguments")
        want = {"CROSS_RANK": str(node), "CROSS_SIZE": "2", "LOCAL_SIZE": str(2 - node),
                "TEST_FROM_DS_ENV": "yes", "NCCL_TEST_MARK": "nccl"}
        check({k: r["vars"].get(k) for k in want} == want and "TEST_NOT_SENT" not in r["vars"],
              f"rank {rank}: DeepSpeed's variables, .deepspeed_env and NCCL_* (got {r['vars']})")
        check(r["cuda_visible_devices"] == ("0,1" if node == 0 else "0"),
              f"rank {rank}: CUDA_VISIBLE_DEVICES from the host's slots")
    check(case.output().count("deepspeed's command line on dtrun.") == 1,
          "the plain-dtrun notice, once, from the launching dtrun")


def stop_case(case, how):
    hostfile = case.hostfile(f"{HOSTS[0]} slots=2\n{HOSTS[1]} slots=1\n")
    case.start(["--hostfile", hostfile, "--master-port", str(free_port()),
                "--shutdown-timeout", "5", "--no-python", PYTHON] + worker_args(case, "--hang"))
    poll(lambda: len(list(case.out.glob("ready*"))) == 3, 120, "3 workers running")
    marker = str(case.dir)
    before = processes_with(marker)
    check(len(before) >= 3 + 2 + 2, f"workers, agents and ssh are running ({len(before)})")
    if how == "ctrl_c":
        os.killpg(case.proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    elif how == "sigterm":
        case.proc.send_signal(signal.SIGTERM)
    else:
        case.proc.kill()
    code = case.wait(60)
    if how != "launcher_killed":
        check(code != 0, f"the stopped job's exit code is a failure ({code})")
        text = case.output()
        name = "SIGINT" if how == "ctrl_c" else "SIGTERM"
        check(f"{name} received: stopping the job on every host" in text,
              f"the launcher says it stops the job on {name}")
        for host in HOSTS:
            check(re.search(rf"^{re.escape(host)}: .*standard input closed", text, re.M)
                  is not None, f"{host}'s agent stopped because its standard input closed")
    left = poll(lambda: not processes_with(marker) or None, 60,
                f"no process of the job left: {processes_with(marker)}")
    check(left, "no ssh, agent or worker of the job is left on any host")
    pids = [int(p.read_text()) for p in case.out.glob("ready*")]
    check(all(not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().rsplit(")", 1)[1]
              .split()[0] in "ZX" for p in pids), "every worker's pid is gone")


def free_port():
    return dt.free_port(HOSTS[0])


CASES = {
    "ddp_two_hosts": ddp_two_hosts,
    "ranks_and_env": ranks_and_env,
    "include_exclude": include_exclude,
    "unreachable_host": unreachable_host,
    "one_host_left": one_host_left,
    "deepspeed_hosts": deepspeed_hosts,
    "ctrl_c": lambda c: stop_case(c, "ctrl_c"),
    "sigterm": lambda c: stop_case(c, "sigterm"),
    "launcher_killed": lambda c: stop_case(c, "launcher_killed"),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrun", required=True)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    args = parser.parse_args()
    if not os.access(args.dtrun, os.X_OK):
        print(f"FAIL: {args.dtrun} is not an executable dtrun")
        return 1
    why = SshdFixture.unavailable()
    if why:
        print(f"SKIP: {why}")
        return SKIP
    if args.case in ("ddp_two_hosts", "one_host_left"):
        try:
            subprocess.run([PYTHON, "-c", "import torch"], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            print(f"SKIP: {PYTHON} cannot import torch; install python3-torch")
            return SKIP
    sshd = SshdFixture(HOSTS, unreachable=[DOWN])
    case = Case(os.path.abspath(args.dtrun), sshd)
    passed = False
    try:
        CASES[args.case](case)
        CHECKS.require_checks(args.case)
        passed = True
        print(f"PASS {args.case}")
        return 0
    except Failed as e:
        print(f"FAIL {args.case}: {e}")
        return 1
    finally:
        case.close(passed)
        sshd.keep = not passed
        sshd.close()


if __name__ == "__main__":
    sys.exit(main())
