#!/usr/bin/python3
"""A training script written the way accelerate's tutorials write them, for `dtrun accelerate`.

    accelerator = Accelerator()

accelerate is not installed here, so the script does what Accelerator's state does with what
the launcher gave it: it reads ACCELERATE_MIXED_PRECISION, ACCELERATE_USE_CPU, the dynamo and
DeepSpeed variables, and torch's RANK/WORLD_SIZE/LOCAL_RANK; with several processes it joins the
gloo group through env:// (MASTER_ADDR, MASTER_PORT), with one it runs alone, as accelerate's
single-process launcher leaves it. It writes to $OUT/rank<RANK or 0>.json its whole command line
(/proc/self/cmdline), its environment and the all-reduce result.

FAIL_RANK=r makes rank r exit 1 in the first round only (TORCHELASTIC_RESTART_COUNT 0).
"""
import json
import os
import sys

with open("/proc/self/cmdline", "rb") as f:
    cmdline = [a.decode() for a in f.read().split(b"\0")[:-1]]

state = {
    "mixed_precision": os.environ.get("ACCELERATE_MIXED_PRECISION", "no"),
    "use_cpu": os.environ.get("ACCELERATE_USE_CPU", "False") == "True",
    "dynamo_backend": os.environ.get("ACCELERATE_DYNAMO_BACKEND", "NO"),
    "use_deepspeed": os.environ.get("ACCELERATE_USE_DEEPSPEED", "false") == "true",
}
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if os.environ.get("FAIL_RANK") == str(rank) and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
    sys.exit(1)

total = rank
if world > 1:
    import torch
    import torch.distributed as dist

    if os.environ["MASTER_ADDR"].startswith("127.") or os.environ["MASTER_ADDR"] == "::1":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: gloo's device is lo
    dist.init_process_group("gloo", init_method="env://")
    t = torch.tensor([dist.get_rank()])
    dist.all_reduce(t)
    total = int(t.item())
    dist.destroy_process_group()

out = os.path.join(os.environ["OUT"], f"rank{rank}.json")
with open(out + ".tmp", "w") as f:
    json.dump({"cmdline": cmdline, "state": state, "env": dict(os.environ), "allreduce": total,
               "argv": sys.argv[1:]}, f)
os.replace(out + ".tmp", out)
