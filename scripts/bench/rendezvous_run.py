#!/usr/bin/env python3
"""Timed runs for scripts/bench/rendezvous (a benchmark, not a test). Stdlib only.

  rendezvous_run.py launch   --launcher dtrun|torchrun --nodes N [--repeats R] ...
      N agents x 1 worker (/bin/true) on loopback, one job; the first agent to bind the endpoint
      hosts the store (both launchers). Seconds from the first agent's spawn until every agent
      has exited; every agent must exit 0. --backend etcd --etcd ENDPOINTS: dtrun's etcd backend
      against those etcd members, and torchrun 1.13's etcd-v2 backend against the first one
      (it needs etcd's v2 API: --enable-v2). Also prints the largest agent's peak RSS (VmHWM).
  rendezvous_run.py recovery --nodes N [--repeats R] ...
      N dtrun agents x 1 worker (/bin/sleep) with --nnodes 2:N against a `dtrun store`; one
      agent is SIGKILLed once all workers run; seconds from the kill until every survivor's
      worker of the next round has started (from the agents' --event-log), and until the first
      survivor stopped its old worker.

Prints one `RESULT key=value ...` line per repeat; progress and errors on stderr.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(argv, env, log_path):
    """posix_spawn (no Python-side fork cost): what a launch script would do, quickly."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, fd, 1),
            (os.POSIX_SPAWN_DUP2, fd, 2),
            (os.POSIX_SPAWN_CLOSE, fd)])
    finally:
        os.close(fd)


def sample_hwm(pids, box, stop):
    """Peak resident set (VmHWM, KiB) of each agent process itself (not its workers), read from
    /proc every 20 ms until `stop` is set: the agent's own memory, as scripts/bench/launch
    measures it."""
    while not stop.is_set():
        for p in pids:
            try:
                with open(f"/proc/{p}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            box[p] = max(box.get(p, 0), int(line.split()[1]))
                            break
            except OSError:
                pass
        stop.wait(0.02)


def wait_all(pids, timeout):
    """{pid: exit status}; kills what is left after `timeout` seconds (status None). Blocks in
    waitpid rather than polling, so the harness takes no CPU from the agents it times."""
    status = {}
    killed = set()

    def kill_rest():
        for p in pids:
            if p not in status:
                killed.add(p)
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    watchdog = threading.Timer(timeout, kill_rest)
    watchdog.start()
    try:
        while len(status) < len(pids):
            try:
                pid, st = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid in pids:
                status[pid] = None if pid in killed else os.waitstatus_to_exitcode(st)
    finally:
        watchdog.cancel()
    return status


def launch(args, workdir):
    port = free_port()
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, TMPDIR=workdir, OMP_NUM_THREADS="1")
    etcd = args.backend == "etcd"
    if args.launcher == "dtrun":
        endpoint = args.etcd if etcd else f"127.0.0.1:{port}"
        argv = [args.dtrun, "--nnodes", str(args.nodes), "--nproc-per-node", "1",
                "--rdzv-backend", args.backend, "--rdzv-endpoint", endpoint,
                "--rdzv-id", run_id, "--no-python", "/bin/true"]
    else:
        endpoint = args.etcd.split(",")[0] if etcd else f"127.0.0.1:{port}"
        argv = [args.python, args.anchor, "--nnodes", str(args.nodes), "--nproc_per_node", "1",
                "--rdzv_backend", "etcd-v2" if etcd else "c10d", "--rdzv_endpoint", endpoint,
                "--rdzv_id", run_id, "--monitor_interval", str(args.monitor_interval),
                "--no_python", "/bin/true"]
    t0 = time.perf_counter()
    pids = [spawn(argv, env, os.path.join(workdir, f"agent{i}.log")) for i in range(args.nodes)]
    rss, stop = {}, threading.Event()
    sampler = threading.Thread(target=sample_hwm, args=(pids, rss, stop))
    sampler.start()
    try:
        status = wait_all(pids, args.timeout)
    finally:
        stop.set()
        sampler.join()
    args.last_max_rss_kb = max(rss.values(), default=0)
    seconds = time.perf_counter() - t0
    bad = {i: status.get(p) for i, p in enumerate(pids) if status.get(p) != 0}
    if bad:
        first = next(iter(bad))
        with open(os.path.join(workdir, f"agent{first}.log"), errors="replace") as f:
            tail = f.read()[-1500:]
        print(f"rendezvous_run: {args.launcher} N={args.nodes}: {len(bad)} agents failed "
              f"(exit {sorted(set(map(str, bad.values())))}); agent {first}:\n{tail}",
              file=sys.stderr)
        return None
    return seconds


def read_events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def recovery(args, workdir):
    env = dict(os.environ, TMPDIR=workdir)
    store_out = os.path.join(workdir, "store.out")
    store = subprocess.Popen([args.dtrun, "store", "--host", "127.0.0.1", "--port", "0"],
                             stdout=open(store_out, "w"), stderr=subprocess.DEVNULL)
    agents = []
    try:
        deadline = time.monotonic() + 20
        while True:
            with open(store_out) as f:
                text = f.read()
            if "\n" in text:
                addr = text.split("\n", 1)[0]
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the store printed no address")
            time.sleep(0.01)
        run_id = f"bench-rec-{uuid.uuid4().hex[:8]}"
        conf = "join_timeout=60,last_call_timeout=30"
        for i in range(args.nodes):
            ev = os.path.join(workdir, f"agent{i}.events")
            argv = [args.dtrun, "--nnodes", f"2:{args.nodes}", "--nproc-per-node", "1",
                    "--rdzv-endpoint", addr, "--rdzv-id", run_id, "--rdzv-conf", conf,
                    "--event-log", ev, "--no-python", "/bin/sleep", "120"]
            agents.append((spawn(argv, env, os.path.join(workdir, f"agent{i}.log")), ev))

        def started(round_):
            return [e for _, ev in agents for e in read_events(ev)
                    if e["event"] == "worker_started" and e["round"] == round_]

        deadline = time.monotonic() + 60
        while len(started(0)) < args.nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(started(0))} of {args.nodes} workers started")
            time.sleep(0.01)
        # The victim: the agent with the highest group rank (it does not matter which).
        victim = None
        for pid, ev in agents:
            done = [e for e in read_events(ev) if e["event"] == "rendezvous_done"]
            if done and done[0]["group_rank"] == args.nodes - 1:
                victim = pid
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        survivors = [(p, ev) for p, ev in agents if p != victim]
        deadline = time.monotonic() + 30
        while True:
            restarted = [e for p, ev in survivors for e in read_events(ev)
                         if e["event"] == "worker_started" and e["round"] == 1]
            if len(restarted) >= len(survivors):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(restarted)} of {len(survivors)} survivors restarted")
            time.sleep(0.005)
        stopped = [e for p, ev in survivors for e in read_events(ev)
                   if e["event"] == "worker_exited" and e["round"] == 0]
        return (max(e["ts"] for e in restarted) - t_kill,
                min(e["ts"] for e in stopped) - t_kill if stopped else float("nan"))
    finally:
        for pid, _ in agents:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_all([p for p, _ in agents], 10)
        store.kill()
        store.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["launch", "recovery"])
    parser.add_argument("--launcher", choices=["dtrun", "torchrun"], default="dtrun")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtrun", default="build/bin/dtrun")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--anchor", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "torchrun_anchor.py"))
    parser.add_argument("--monitor-interval", type=float, default=0.1,
                        help="torchrun's --monitor_interval (1.13's default is 5)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--backend", choices=["c10d", "etcd"], default="c10d")
    parser.add_argument("--etcd", default="", help="etcd members (host:port,...) for --backend etcd")
    parser.add_argument("--tmpdir", default=None,
                        help="where each run's scratch directory goes (the agents' TMPDIR, hence "
                             "their log trees, and their stdout files); default: the system's")
    args = parser.parse_args()
    failed = False
    for r in range(args.repeats):
        workdir = tempfile.mkdtemp(prefix="dtrun-bench-rdzv-", dir=args.tmpdir)
        try:
            if args.mode == "launch":
                s = launch(args, workdir)
                if s is None:
                    failed = True
                    print(f"RESULT mode=launch launcher={args.launcher} nodes={args.nodes} "
                          f"repeat={r} seconds=failed", flush=True)
                else:
                    print(f"RESULT mode=launch launcher={args.launcher} nodes={args.nodes} "
                          f"repeat={r} seconds={s:.3f} backend={args.backend} "
                          f"max_rss_kb={args.last_max_rss_kb}", flush=True)
            else:
                back, stop = recovery(args, workdir)
                print(f"RESULT mode=recovery launcher=dtrun nodes={args.nodes} repeat={r} "
                      f"seconds={back:.3f} stopped_after={stop:.3f}", flush=True)
        except RuntimeError as e:
            failed = True
            print(f"rendezvous_run: {e}", file=sys.stderr)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
