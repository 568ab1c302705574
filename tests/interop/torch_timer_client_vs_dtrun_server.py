#!/usr/bin/python3
"""torch's FileTimerClient (Debian's torch 1.13) against dtrun's FileTimerServer (file_timer_probe).

Real client processes, each started by this script, registered with the probe as a "worker" and
then told to go: a client that overstays `expires(after=...)` is reported and killed with the
signal it asked for; one that finishes inside its deadline is never touched; many processes at once;
a forked child's own request (its pid) counts for its worker; garbage on the FIFO is counted and
the server goes on; a process outside the job is ignored; torch's unnamed scope ("file#line")
passes through.

usage: torch_timer_client_vs_dtrun_server.py --probe BUILD/bin/file_timer_probe
Exit status: 0 pass, 1 fail, 77 skipped (torch not importable by this interpreter).
"""

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from dtrun_testing import Checks  # noqa: E402
from interop_util import require_torch_timer  # noqa: E402

# A client: imports torch (seconds on a loaded machine), says "ready", waits for "go" on stdin, then does MODE with torch's FileTimerClient.
CLIENT = r"""
import os, signal, sys, time
from torch.distributed.elastic import timer
path, mode, after = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = timer.FileTimerClient(path)
print("ready", flush=True)
sys.stdin.readline()
if mode == "hang":
    with timer.expires(after=after, scope="hang", client=client):
        print("armed", flush=True)
        time.sleep(600)
elif mode == "ok":
    for step in range(3):
        with timer.expires(after=after, scope="step", client=client):
            time.sleep(0.05)
    print("finished", flush=True)
elif mode == "unnamed":
    timer.configure(client)
    with timer.expires(after=after):
        print("armed", flush=True)
        time.sleep(600)
elif mode == "many":
    children = []
    for i in range(12):
        child = os.fork()
        if child == 0:
            with timer.expires(after=after, scope=f"rank-{i}", client=client):
                time.sleep(600)
            os._exit(0)
        children.append(child)
    print(" ".join(str(c) for c in children), flush=True)
    codes = [os.waitstatus_to_exitcode(os.waitpid(c, 0)[1]) for c in children]
    print(" ".join(str(c) for c in codes), flush=True)
elif mode == "fork":
    child = os.fork()
    if child == 0:
        with timer.expires(after=after, scope="child", client=client):
            print("child", os.getpid(), flush=True)
            time.sleep(600)
        os._exit(0)
    os.waitpid(child, 0)
    print("parent saw the child end", flush=True)
    time.sleep(600)
elif mode == "garbage":
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b"this is not json\n{\"pid\": 1}\n\xff\xfe\n")
    os.close(fd)
    with timer.expires(after=after, scope="after-garbage", client=client):
        print("armed", flush=True)
        time.sleep(600)
"""


class Probe:
    def __init__(self, probe):
        self.proc = subprocess.Popen([probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.events = {kind: queue.Queue() for kind in ("ready", "expired", "stats")}
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_log, daemon=True).start()
        ready = self.next("ready", 30)
        self.path = ready["path"]
        print(f"dtrun's file timer serves {self.path}", flush=True)

    def _read(self):
        for line in self.proc.stdout:
            e = json.loads(line)
            self.events[e["event"]].put(e)

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.append(line.rstrip())

    def next(self, kind, timeout):
        try:
            return self.events[kind].get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no {kind} event within {timeout} s; log:\n" +
                               "\n".join(self.log)) from None

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def stats(self):
        self.send({"stats": True})
        return self.next("stats", 30)

    def stop(self):
        self.proc.stdin.close()
        return self.proc.wait(30)


def start_client(probe, mode, after, owner, register=True):
    p = subprocess.Popen([sys.executable, "-c", CLIENT, probe.path, mode, str(after)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if register:
        probe.send({"root": p.pid, "owner": owner})
        probe.stats()  # the probe handles commands in order: the root is known now
    ready = p.stdout.readline().strip()
    if ready != "ready":
        raise RuntimeError(f"client {mode}: {ready!r} instead of 'ready'")
    p.stdin.write("go\n")
    p.stdin.flush()
    return p


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    args = parser.parse_args()
    require_torch_timer()
    c = Checks(collect=True)
    probe = Probe(args.probe)

    # 1. An overstaying client is killed with SIGKILL (FileTimerClient's default).
    hung = start_client(probe, "hang", 0.5, owner=3)
    c.equal(hung.stdout.readline().strip(), "armed", "the client armed its deadline")
    e = probe.next("expired", 120)
    c.equal((e["pid"], e["owner"], e["scope_id"], e["signal"], e["killed"]),
         (hung.pid, 3, "hang", signal.SIGKILL, True), "the overstay is reported and acted on")
    c.check(e["overstay_ms"] >= 0, f"overstay {e['overstay_ms']} ms is not negative")
    c.equal(hung.wait(30), -signal.SIGKILL, "the client died of the signal it asked for")
    print(f"acted on {e['overstay_ms']} ms after the deadline", flush=True)

    # 2. A client that finishes its steps inside the deadline is never touched.
    ok = start_client(probe, "ok", 5, owner=1)
    c.equal(ok.stdout.readline().strip(), "finished", "the punctual client finished its steps")
    c.equal(ok.wait(30), 0, "the punctual client exited 0")

    # 3. Deadlines of many processes at once: 12 forked children of one client, each its own scope.
    many = start_client(probe, "many", 0.5, owner=10)
    pids = [int(w) for w in many.stdout.readline().split()]
    seen = {}
    for _ in pids:
        e = probe.next("expired", 120)
        seen[e["pid"]] = e
    c.equal(sorted(seen), sorted(pids), "every one of 12 processes expired once")
    c.equal(sorted(e["scope_id"] for e in seen.values()), sorted(f"rank-{i}" for i in range(12)),
         "each with its own scope")
    c.equal(many.stdout.readline().split(), [str(-signal.SIGKILL)] * 12, "and was killed")
    many.wait(30)

    # 4. A forked child's request carries the child's pid and counts for the parent's worker.
    fork = start_client(probe, "fork", 0.5, owner=7)
    words = fork.stdout.readline().split()
    child = int(words[1]) if len(words) == 2 else -1
    e = probe.next("expired", 120)
    c.equal((e["pid"], e["owner"], e["scope_id"]), (child, 7, "child"), "the child's timer")
    c.equal(fork.stdout.readline().strip(), "parent saw the child end", "only the child was killed")
    fork.kill()
    fork.wait()

    # 5. Garbage on the FIFO: counted, and the next request still works.
    before = probe.stats()
    garbage = start_client(probe, "garbage", 0.5, owner=4)
    c.equal(garbage.stdout.readline().strip(), "armed", "a request after garbage")
    e = probe.next("expired", 120)
    c.equal((e["pid"], e["scope_id"]), (garbage.pid, "after-garbage"), "is served")
    garbage.wait(30)
    after = probe.stats()
    c.equal(after["malformed"] - before["malformed"], 3, "three malformed lines counted")

    # 6. A process outside the job: its request is ignored, it is never killed.
    stranger = start_client(probe, "hang", 0.2, owner=0, register=False)
    c.equal(stranger.stdout.readline().strip(), "armed", "the stranger armed a deadline")
    c.poll(lambda: probe.stats()["ignored"] > after["ignored"], 30, "its request is ignored")
    c.equal(stranger.poll(), None, "the stranger is still running")
    stranger.kill()
    stranger.wait()

    # 7. torch's unnamed scope: "<file>#<line>" of the caller.
    unnamed = start_client(probe, "unnamed", 0.3, owner=2)
    c.equal(unnamed.stdout.readline().strip(), "armed", "an unnamed scope")
    e = probe.next("expired", 120)
    # torch 1.13 names it after stack()[1] of its generator: contextlib's frame, not the caller's.
    c.check(re.fullmatch(r".+#[0-9]+", e["scope_id"]), f"is named file#line: {e['scope_id']!r}")
    unnamed.wait(30)

    final = probe.stats()
    c.equal(final["armed"], 0, "nothing left armed")
    c.equal(probe.stop(), 0, "the probe stops on EOF")
    c.finish()


if __name__ == "__main__":
    main()
