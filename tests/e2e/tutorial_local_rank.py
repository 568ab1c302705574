#!/usr/bin/python3
"""A worker written the way the PyTorch tutorials wrote them for torch.distributed.launch.

    parser.add_argument("--local_rank", type=int, default=-1)

It joins the gloo group through env:// (init_process_group reads RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), all-reduces its rank, and writes what it saw to $OUT/rank<RANK>.json: its argv, the
parsed --local_rank and --epochs, LOCAL_RANK, RANK, WORLD_SIZE and the all-reduce result.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--epochs", type=int, default=1)
args, rest = parser.parse_known_args()

if os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost"):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
dist.init_process_group("gloo", init_method="env://")
total = torch.tensor([dist.get_rank()])
dist.all_reduce(total)
seen = {
    "argv": sys.argv[1:],
    "local_rank_arg": args.local_rank,
    "epochs": args.epochs,
    "rest": rest,
    "LOCAL_RANK": os.environ.get("LOCAL_RANK"),
    "RANK": os.environ["RANK"],
    "WORLD_SIZE": os.environ["WORLD_SIZE"],
    "allreduce": int(total.item()),
}
with open(os.path.join(os.environ["OUT"], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(seen, f)
dist.destroy_process_group()
