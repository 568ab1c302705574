#!/usr/bin/python3
"""A training script written the way DeepSpeed's tutorials write them, for `dtrun deepspeed`.

    parser.add_argument("--local_rank", type=int, default=-1)   # the launcher passes it
    deepspeed.add_config_arguments(parser)                       # --deepspeed, --deepspeed_config

DeepSpeed is not installed here, so the two calls a tutorial makes are done as DeepSpeed does
them: add_config_arguments adds --deepspeed and --deepspeed_config, and init_distributed reads
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and LOCAL_RANK, then joins the gloo group through
env://. Each rank all-reduces its rank and writes to $OUT/rank<RANK>.json its whole command line
(/proc/self/cmdline), the parsed arguments, its environment and the all-reduce result.

FAIL_RANK=r FAIL_CODE=n makes rank r exit with n (FAIL_CODE=KILL: SIGKILL itself) before joining;
FAIL_ONCE=1 only in the first round (TORCHELASTIC_RESTART_COUNT 0), so that a restart succeeds.
"""
import argparse
import json
import os
import signal
import sys

parser = argparse.ArgumentParser(description="tutorial")
parser.add_argument("--local_rank", type=int, default=-1, help="passed by the launcher")
parser.add_argument("--epochs", type=int, default=1)
group = parser.add_argument_group("DeepSpeed")  # what deepspeed.add_config_arguments adds
group.add_argument("--deepspeed", default=False, action="store_true")
group.add_argument("--deepspeed_config", default=None, type=str)
args, rest = parser.parse_known_args()

with open("/proc/self/cmdline", "rb") as f:
    cmdline = [a.decode() for a in f.read().split(b"\0")[:-1]]

fail_rank = os.environ.get("FAIL_RANK")
first_round = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
if fail_rank == os.environ.get("RANK") and (first_round or os.environ.get("FAIL_ONCE") != "1"):
    code = os.environ.get("FAIL_CODE", "3")
    if code == "KILL":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(int(code))

# deepspeed.init_distributed(): the launcher's variables, then torch's env:// rendezvous.
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

required = ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"]
missing = [k for k in required if k not in os.environ]
if missing:
    sys.exit(f"init_distributed: {missing} not set by the launcher")
if os.environ["MASTER_ADDR"].startswith("127.") or os.environ["MASTER_ADDR"] in ("::1",
                                                                                "localhost"):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: gloo's device is lo
dist.init_process_group("gloo", init_method="env://")
total = torch.tensor([dist.get_rank()])
dist.all_reduce(total)
seen = {
    "cmdline": cmdline,
    "local_rank_arg": args.local_rank,
    "deepspeed": args.deepspeed,
    "deepspeed_config": args.deepspeed_config,
    "rest": rest,
    "env": dict(os.environ),
    "allreduce": int(total.item()),
}
out = os.path.join(os.environ["OUT"], f"rank{dist.get_rank()}.json")
with open(out + ".tmp", "w") as f:
    json.dump(seen, f)
os.replace(out + ".tmp", out)
dist.destroy_process_group()
