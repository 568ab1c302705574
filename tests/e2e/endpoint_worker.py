"""A worker of tests/e2e/endpoints_test.py: joins the gloo group through env:// (torch's
TCPStore client at MASTER_ADDR:MASTER_PORT, dtrun's store) with a 60 s timeout, all-reduces its
rank, and writes what it saw to $E2E_OUT/rank<RANK>.json."""
import datetime
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
total = torch.tensor([dist.get_rank()])
dist.all_reduce(total)
rank = dist.get_rank()
out = os.path.join(os.environ["E2E_OUT"], f"rank{rank}.json")
with open(out + ".tmp", "w") as f:
    json.dump({"rank": rank, "world_size": dist.get_world_size(), "sum": int(total.item()),
               "master_addr": os.environ["MASTER_ADDR"]}, f)
os.replace(out + ".tmp", out)
dist.destroy_process_group()
