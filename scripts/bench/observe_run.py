#!/usr/bin/env python3
"""Timed runs for scripts/bench/observe (a benchmark, not a test). Stdlib only.

  observe_run.py status  --dtrun D --nodes N [--repeats R]
      N agents x 1 worker (/bin/sleep) against a `dtrun store` on loopback, one job; once every
      agent has published "running", `dtrun status --json` is run R times: the wall time of each
      run (process start, connect, the reads, the output), and the bytes it printed.
  observe_run.py cpu     --dtrun D [--seconds S]
      2 agents x 1 silent worker (/bin/sleep) against a `dtrun store`, steady (heartbeats only):
      the first agent's CPU time (utime + stime, /proc/<pid>/stat) over S seconds, without a
      metrics endpoint, and again with --metrics-port 0 scraped once a second.

Prints one `RESULT key=value ...` line per measurement; progress on stderr.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start_store(dtrun, workdir):
    out = open(os.path.join(workdir, "store.out"), "w+")
    p = subprocess.Popen([dtrun, "store", "--host", "127.0.0.1", "--port", "0"], stdout=out,
                         stderr=open(os.path.join(workdir, "store.err"), "w"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out.seek(0)
        text = out.read()
        if "\n" in text:
            return p, text.split("\n", 1)[0]
        time.sleep(0.02)
    raise SystemExit("the store did not start")


def start_agents(dtrun, workdir, addr, run_id, n, extra=(), events=False):
    procs = []
    env = dict(os.environ, TMPDIR=workdir)
    for i in range(n):
        argv = [dtrun, "--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-endpoint", addr,
                "--rdzv-id", run_id, "--rdzv-conf", "join_timeout=120,last_call_timeout=5",
                "--log-dir", os.path.join(workdir, "logs"), *extra]
        if events:
            argv += ["--event-log", os.path.join(workdir, f"agent{i}.events.jsonl")]
        argv += ["--no-python", "/bin/sleep", "3600"]
        log_file = open(os.path.join(workdir, f"agent{i}.log"), "wb")
        procs.append(subprocess.Popen(argv, stdout=log_file, stderr=log_file, env=env,
                                      stdin=subprocess.DEVNULL))
    return procs


def status_json(dtrun, addr, run_id):
    t = time.perf_counter()
    r = subprocess.run([dtrun, "status", "--rdzv-endpoint", addr, "--rdzv-id", run_id, "--json"],
                       capture_output=True, text=True, timeout=60)
    return time.perf_counter() - t, r


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def bench_status(args):
    workdir = tempfile.mkdtemp(prefix="dtrun-bench-observe-", dir=args.scratch)
    store, addr = start_store(args.dtrun, workdir)
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    agents = []
    try:
        t0 = time.monotonic()
        agents = start_agents(args.dtrun, workdir, addr, run_id, args.nodes)
        deadline = time.monotonic() + 300
        while True:
            _, r = status_json(args.dtrun, addr, run_id)
            if r.returncode == 0 and json.loads(r.stdout)["counts"].get("running") == args.nodes:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"not every agent runs: {r.stdout[:500]}{r.stderr[:500]}")
            time.sleep(0.5)
        log(f"{args.nodes} agents running after {time.monotonic() - t0:.1f} s")
        times = []
        for _ in range(args.repeats):
            dt, r = status_json(args.dtrun, addr, run_id)
            if r.returncode != 0:
                raise SystemExit(r.stderr)
            times.append(dt)
            size = len(r.stdout)
        print(f"RESULT what=status nodes={args.nodes} median_s={statistics.median(times):.4f} "
              f"min_s={min(times):.4f} max_s={max(times):.4f} bytes={size}", flush=True)
    finally:
        stop(agents)
        stop([store])
        shutil.rmtree(workdir, ignore_errors=True)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_cpu(args):
    for scraped in (False, True):
        workdir = tempfile.mkdtemp(prefix="dtrun-bench-observe-", dir=args.scratch)
        store, addr = start_store(args.dtrun, workdir)
        run_id = f"bench-{uuid.uuid4().hex[:8]}"
        extra = ["--metrics-port", "0", "--metrics-host", "127.0.0.1"] if scraped else []
        agents = start_agents(args.dtrun, workdir, addr, run_id, 2, extra, events=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                _, r = status_json(args.dtrun, addr, run_id)
                if r.returncode == 0 and json.loads(r.stdout)["counts"].get("running") == 2:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("the job did not start")
                time.sleep(0.2)
            url = None
            if scraped:
                with open(os.path.join(workdir, "agent0.events.jsonl")) as f:
                    for line in f:
                        e = json.loads(line)
                        if e["event"] == "metrics_listening":
                            url = e["url"]
            time.sleep(2)  # past the start-up's own work: steady state only is measured
            pid = agents[0].pid
            c0, t0 = cpu_seconds(pid), time.monotonic()
            scrapes = 0
            while time.monotonic() - t0 < args.seconds:
                if url:
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        resp.read()
                    scrapes += 1
                time.sleep(1.0)
            c1, t1 = cpu_seconds(pid), time.monotonic()
            print(f"RESULT what=cpu scraped={int(scraped)} scrapes={scrapes} "
                  f"cpu_ms_per_s={(c1 - c0) * 1000 / (t1 - t0):.3f} seconds={t1 - t0:.1f}",
                  flush=True)
        finally:
            stop(agents)
            stop([store])
            shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["status", "cpu"])
    parser.add_argument("--dtrun", required=True)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--scratch", default=None)
    args = parser.parse_args()
    bench_status(args) if args.what == "status" else bench_cpu(args)


if __name__ == "__main__":
    main()
