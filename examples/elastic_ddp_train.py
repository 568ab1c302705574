#!/usr/bin/python3
"""Elastic DDP training (gloo, CPU) whose result does not depend on the world size.

Run it under dtrun (or torchrun) on any number of nodes and workers; when a worker or a whole
node is lost, the launcher restarts the survivors, possibly with fewer workers, and the job
resumes from its last checkpoint and ends with the same model:

    dtrun --nnodes 1:2 --nproc-per-node 2 --rdzv-endpoint head:29400 --rdzv-id job \\
        --max-restarts 3 examples/elastic_ddp_train.py --ckpt-dir /shared/ckpt

Why the result is independent of the world size W (and of restarts):
  * every step s uses one fixed global batch of --global-batch samples, drawn from a fixed data
    set by a permutation seeded with s alone; rank r of W takes the r-th of W equal slices
    (--global-batch must be divisible by every W the job may run with: 24 serves 1, 2, 3, 4, 6);
  * each rank's loss is  W / B * sum over its slice of (f(x) - y)^2,  so when DDP averages the
    gradients over the W ranks, the result is (1/B) * the sum over the whole global batch: the
    gradient of the global batch's mean squared error, whatever W is;
  * no dropout, no randomness after the seeded initialisation; SGD with momentum, whose buffer
    is in the checkpoint; rank 0 saves (step, model, optimizer) every --ckpt-every steps,
    atomically (write, then rename), and every rank resumes from the newest checkpoint;
  * the model is in float64. Mathematically W does not matter; in floating point the sums are
    grouped differently (W partial sums, then the all-reduce), so runs with different W agree
    to about 1e-13 relative, not bit for bit. Runs with the same W at every step (whatever
    restarts happened) do agree bit for bit: gloo's all-reduce adds in a fixed order, and DDP
    keeps one gradient bucket layout for good (find_unused_parameters=True, see main()); with
    torch's default the layout changes after the first iteration of each process, so a
    resumed run would round its first step differently (about 1e-14 at the end).

Output in --ckpt-dir: ckpt_<step>.pt; progress.jsonl (one line per event and rank: started,
resumed, checkpoint (rank 0), finished, with TORCHELASTIC_RESTART_COUNT and the world size); final.json from
rank 0: every parameter as exact float.hex strings, the steps and the world size of each step.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

SAMPLES = 480
FEATURES = 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", required=True, help="checkpoints, progress.jsonl, final.json")
    p.add_argument("--steps", type=int, default=60, help="training steps (60)")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint period in steps (5)")
    p.add_argument("--global-batch", type=int, default=24,
                   help="samples per step over all ranks; divisible by the world size (24)")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep per step, to leave time for fault injection (0)")
    p.add_argument("--lr", type=float, default=0.05)
    return p.parse_args()


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 1)).double()


def make_data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g, dtype=torch.float64)
    w = torch.randn(FEATURES, 1, generator=g, dtype=torch.float64)
    y = torch.sin(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g, dtype=torch.float64)
    return x, y


def my_slice(step, rank, world, global_batch, x, y):
    """Rank `rank`'s part of step `step`'s global batch: depends on the step, not on history."""
    g = torch.Generator().manual_seed(10_000 + step)
    batch = torch.randperm(SAMPLES, generator=g)[:global_batch]
    per_rank = global_batch // world
    mine = batch[rank * per_rank:(rank + 1) * per_rank]
    return x[mine], y[mine]


def newest_checkpoint(ckpt_dir):
    found = [(int(n[5:-3]), n) for n in os.listdir(ckpt_dir)
             if n.startswith("ckpt_") and n.endswith(".pt")]
    return max(found) if found else None


def save_atomic(write, path):
    tmp = f"{path}.tmp{os.getpid()}"
    write(tmp)
    os.replace(tmp, path)


class Progress:
    """One JSON line per event in <ckpt-dir>/progress.jsonl (O_APPEND, one write each)."""

    def __init__(self, ckpt_dir, rank, world, restart):
        self.path = os.path.join(ckpt_dir, "progress.jsonl")
        self.base = {"rank": rank, "world_size": world, "restart_count": restart,
                     "pid": os.getpid()}

    def log(self, event, **fields):
        line = json.dumps({"event": event, **self.base, **fields, "t": time.time()}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@record
def main():
    args = parse_args()
    torch.set_num_threads(1)
    if os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit(f"--global-batch {args.global_batch} is not divisible by the world "
                         f"size {world}")
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    os.makedirs(args.ckpt_dir, exist_ok=True)
    progress = Progress(args.ckpt_dir, rank, world, restart)

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start, worlds = 0, []
    newest = newest_checkpoint(args.ckpt_dir)
    if newest:
        state = torch.load(os.path.join(args.ckpt_dir, newest[1]))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, worlds = state["step"], state["worlds"]
        progress.log("resumed", step=start)
    progress.log("started", step=start)
    # find_unused_parameters=True keeps DDP from rebuilding its gradient buckets after the first
    # iteration (torch 1.13 rebuilds only when it is False). The bucket layout decides the order
    # in which the all-reduce adds each gradient element, so without it the first step after a
    # resume would round differently from the same step of an uninterrupted run.
    ddp = DDP(model, find_unused_parameters=True)
    x, y = make_data()

    for step in range(start, args.steps):
        xb, yb = my_slice(step, rank, world, args.global_batch, x, y)
        optimizer.zero_grad()
        # W/B * sum: DDP's average over the W ranks turns it into the global batch's mean.
        loss = ((ddp(xb) - yb) ** 2).sum() * (world / args.global_batch)
        loss.backward()
        optimizer.step()
        worlds.append(world)
        done = step + 1
        if rank == 0 and (done % args.ckpt_every == 0 or done == args.steps):
            save_atomic(lambda p: torch.save({"step": done, "model": model.state_dict(),
                                              "optimizer": optimizer.state_dict(),
                                              "worlds": worlds}, p),
                        os.path.join(args.ckpt_dir, f"ckpt_{done}.pt"))
            progress.log("checkpoint", step=done)
        if args.step_sleep:
            time.sleep(args.step_sleep)

    if rank == 0:
        final = {"steps": args.steps, "worlds": worlds,
                 "params": {name: [v.hex() for v in t.flatten().tolist()]
                            for name, t in sorted(model.state_dict().items())}}
        save_atomic(lambda p: open(p, "w").write(json.dumps(final)),
                    os.path.join(args.ckpt_dir, "final.json"))
    progress.log("finished", step=args.steps)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
