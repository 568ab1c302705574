"""One-node and IPv6 endpoints end to end, with real torch workers (launcher/launch_plan.h).

Each case is a job whose store must listen where its workers are told to connect. The workers
(endpoint_worker.py) join a gloo group through env:// with a 60 s timeout, so a store that
listens elsewhere fails the job within a minute instead of hanging for torch's 30:

  master_addr_127_0_0_2   --master-addr 127.0.0.2, one node (static backend)
  endpoint_127_0_0_2      --rdzv-endpoint 127.0.0.2:PORT, one node (c10d)
  endpoint_ipv6_one_node  --rdzv-endpoint [::1]:PORT, one node
  endpoint_ipv6_two_agents  two agents of one job on [::1]:PORT: they meet, world size 4
  unreachable_store       is_host=false and nothing listening: the agent says so every few
                          seconds (endpoint, error, until when) and gives up at the join timeout

usage: endpoints_test.py --dtrun DTRUN --case NAME   (exit 77: torch missing)
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "endpoint_worker.py")


def free_port(host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def job_env(out_dir):
    env = dict(os.environ)
    env["E2E_OUT"] = out_dir
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["OMP_NUM_THREADS"] = "1"
    return env


def results(out_dir):
    out = {}
    for name in sorted(os.listdir(out_dir)):
        if name.startswith("rank") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                r = json.load(f)
            out[r["rank"]] = r
    return out


def check_job(c, out_dir, world, addr):
    got = results(out_dir)
    c.equal(sorted(got), list(range(world)), "every rank reported")
    for rank, r in got.items():
        c.equal(r["world_size"], world, f"rank {rank}: world size")
        c.equal(r["sum"], sum(range(world)), f"rank {rank}: all_reduce of the ranks")
        c.equal(r["master_addr"], addr, f"rank {rank}: MASTER_ADDR")


def one_node(args, c, extra, addr):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [args.dtrun, "--nproc-per-node=2", "--python", sys.executable, *extra, WORKER]
        code, text = e2e_util.run(cmd, job_env(tmp), tmp, 120, os.path.join(tmp, "log"))
        c.equal(code, 0, "dtrun exit code")
        check_job(c, tmp, 2, addr)


def two_agents(args, c):
    port = free_port("::1")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [args.dtrun, "--nnodes=2", "--nproc-per-node=2", "--python", sys.executable,
               f"--rdzv-endpoint=[::1]:{port}", "--rdzv-id=v6", WORKER]
        procs = []
        logs = []
        for i in range(2):
            logs.append(open(os.path.join(tmp, f"agent{i}.log"), "wb"))
            procs.append(subprocess.Popen(cmd, env=job_env(tmp), cwd=tmp, stdout=logs[-1],
                                          stderr=subprocess.STDOUT, start_new_session=True))
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=120))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                codes.append(None)
        for f in logs:
            f.close()
        for i in range(2):
            with open(os.path.join(tmp, f"agent{i}.log"), errors="replace") as f:
                print(f"--- agent {i}\n{f.read()}")
        c.equal(codes, [0, 0], "both agents' exit codes")
        check_job(c, tmp, 4, "::1")


def unreachable(args, c):
    port = free_port("127.0.0.1")  # nothing listens there
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [args.dtrun, "--nnodes=2", f"--rdzv-endpoint=127.0.0.1:{port}",
               "--rdzv-conf=is_host=false,join_timeout=12", "--no-python", "/bin/true"]
        code, text = e2e_util.run(cmd, job_env(tmp), tmp, 120, os.path.join(tmp, "log"))
        c.check(code != 0, f"dtrun gives up with a failure (exit code {code})")
        lines = [ln for ln in text.splitlines() if "cannot reach the rendezvous store" in ln]
        c.check(len(lines) >= 2, f"it said so more than once while it waited ({len(lines)} lines)")
        for ln in lines[:1]:
            c.check(f"127.0.0.1:{port}" in ln, "the line names the endpoint")
            c.check("refused" in ln.lower(), "the line names the error")
            c.check("retrying until" in ln, "the line says until when")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtrun", required=True)
    ap.add_argument("--case", required=True)
    args = ap.parse_args()
    c = e2e_util.Checker()
    if args.case == "unreachable_store":
        unreachable(args, c)
        return c.exit_code()
    e2e_util.require_torch_and_anchor()
    if args.case == "master_addr_127_0_0_2":
        one_node(args, c, ["--master-addr=127.0.0.2", f"--master-port={free_port('127.0.0.2')}"],
                 "127.0.0.2")
    elif args.case == "endpoint_127_0_0_2":
        one_node(args, c, [f"--rdzv-endpoint=127.0.0.2:{free_port('127.0.0.2')}"], "127.0.0.2")
    elif args.case == "endpoint_ipv6_one_node":
        one_node(args, c, [f"--rdzv-endpoint=[::1]:{free_port('::1')}"], "::1")
    elif args.case == "endpoint_ipv6_two_agents":
        two_agents(args, c)
    else:
        ap.error(f"unknown case {args.case}")
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main())
