"""The worker of scripts/bench/prewarm: a gloo DDP training loop that stamps the wall clock.

usage: prewarm_worker.py STAMPS STEPS
Appends one JSON line per stamp to STAMPS (one write(2) each, O_APPEND):
  imported     the first line after `import torch` and the DDP imports
  first_step   its first training step of the round done (an allreduce of the whole group)
  training     step 20 done (the benchmark kills a worker after this)
"round" in a stamp is 0 for workers started before the kill, 1 for those started after it (the
benchmark creates STAMPS.killed first): the launchers number their rounds differently (torchrun
counts restarts per agent). Workers of round 0 train until they are stopped; those of round 1
train STEPS steps and exit 0.
"""
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

IMPORTED = time.time()

import json  # noqa: E402
import os  # noqa: E402

STAMPS, STEPS = sys.argv[1], int(sys.argv[2])
RANK = int(os.environ["RANK"])
ROUND = 1 if os.path.exists(STAMPS + ".killed") else 0


def stamp(what, t=None):
    line = json.dumps({"what": what, "round": ROUND, "rank": RANK, "pid": os.getpid(),
                       "t": time.time() if t is None else t}) + "\n"
    fd = os.open(STAMPS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)


stamp("imported", IMPORTED)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 1)
step = 0
while ROUND == 0 or step < STEPS:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    step += 1
    if step == 1:
        stamp("first_step")
    if step == 20:
        stamp("training")
dist.destroy_process_group()
