#!/usr/bin/python3
"""A worker for the multi-host tests (stdlib only): it reports where and how it runs.

    report_worker.py --out DIR [--hang] [ARGS...]

Writes DIR/rank<RANK>.json with its ranks and sizes, CUDA_VISIBLE_DEVICES, the variables named
TEST_*, NCCL_*, FROM_*, DTRUN_*, CROSS_* and LOCAL_SIZE, its working directory and argv, and the host it was started on
(the server address of SSH_CONNECTION, which sshd sets for the session the agent runs in). Prints
one line "rank R local L of W" on stdout. With --hang it then writes DIR/ready<RANK> and sleeps
until it is killed, so a test can stop the job and check that nothing is left.
"""
import json
import os
import sys
import time


def main():
    args = sys.argv[1:]
    out = args[args.index("--out") + 1]
    env = os.environ
    ssh = env.get("SSH_CONNECTION", "").split()
    report = {
        "rank": int(env["RANK"]),
        "local_rank": int(env["LOCAL_RANK"]),
        "world_size": int(env["WORLD_SIZE"]),
        "group_rank": int(env["GROUP_RANK"]),
        "local_world_size": int(env["LOCAL_WORLD_SIZE"]),
        "host": ssh[2] if len(ssh) == 4 else None,
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "vars": {k: v for k, v in env.items()
                 if k.startswith(("TEST_", "NCCL_", "FROM_", "DTRUN_", "NOT_EXPORTED", "CROSS_",
                                  "LOCAL_SIZE"))},
        "cwd": os.getcwd(),
        "argv": args,
    }
    path = os.path.join(out, f"rank{report['rank']}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(report, f)
    os.rename(path + ".tmp", path)
    print(f"rank {report['rank']} local {report['local_rank']} of {report['world_size']}",
          flush=True)
    if "--hang" in args:
        with open(os.path.join(out, f"ready{report['rank']}"), "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
