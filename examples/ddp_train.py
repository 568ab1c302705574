#!/usr/bin/python3
"""A small, deterministic DDP training job (gloo, CPU) that checkpoints and resumes.

Run it under dtrun or torchrun; it reads the worker environment they set (RANK, WORLD_SIZE,
MASTER_ADDR/PORT, TORCHELASTIC_RESTART_COUNT, ...) through init_process_group("gloo") with the
default env:// method. Under dtrun, MASTER_ADDR:MASTER_PORT is dtrun's own store
(TORCHELASTIC_USE_AGENT_STORE=True), so no worker opens a port.

    dtrun --standalone --nproc-per-node=2 --max-restarts=1 examples/ddp_train.py \\
        --ckpt-dir /tmp/ckpt --fail-at-step 12

What it does:
  * fixed seeds and a fixed synthetic regression data set, so every run computes exactly the
    same parameters, whatever launched it and however often it was restarted;
  * rank 0 saves a checkpoint (model, optimizer, step) every --ckpt-every steps into
    --ckpt-dir, atomically (write, then rename);
  * on start, every rank resumes from the newest checkpoint there;
  * --fail-at-step K makes rank --fail-rank raise at step K, only in the first attempt
    (TORCHELASTIC_RESTART_COUNT == 0), so the launcher restarts the group and the job resumes;
  * at the end rank 0 saves the final parameters (final.pt) and prints their SHA-256;
  * every rank appends what it did (start, resume, failure, finish) to <ckpt-dir>/progress.jsonl.

Options may also come from the environment: DDP_CKPT_DIR, DDP_FAIL_AT_STEP, DDP_FAIL_RANK.
"""
import argparse
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

SAMPLES = 256
FEATURES = 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", default=os.environ.get("DDP_CKPT_DIR", "ddp_ckpt"),
                   help="where checkpoints, final.pt and progress.jsonl go (env DDP_CKPT_DIR)")
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint period in steps")
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    p.add_argument("--fail-at-step", type=int,
                   default=int(os.environ.get("DDP_FAIL_AT_STEP", "-1")),
                   help="fail once at this step, in the first attempt only (env "
                        "DDP_FAIL_AT_STEP; -1 = never)")
    p.add_argument("--fail-rank", type=int, default=int(os.environ.get("DDP_FAIL_RANK", "1")),
                   help="the rank that fails (env DDP_FAIL_RANK; default 1)")
    return p.parse_args()


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 1))


def make_data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def batch_for(step, rank, world, batch, x, y):
    # A fixed, step-dependent permutation: the data a rank sees at a step never depends on
    # what happened before (restarts included).
    g = torch.Generator().manual_seed(10_000 + step)
    idx = torch.randperm(SAMPLES, generator=g)[: batch * world]
    mine = idx[rank * batch: (rank + 1) * batch]
    return x[mine], y[mine]


def checkpoints(ckpt_dir):
    found = []
    for name in os.listdir(ckpt_dir):
        if name.startswith("ckpt_") and name.endswith(".pt"):
            found.append((int(name[5:-3]), os.path.join(ckpt_dir, name)))
    return sorted(found)


def save_atomic(obj, path):
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def params_sha256(model):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class Progress:
    """Appends one JSON line per event to <ckpt-dir>/progress.jsonl (O_APPEND, one write)."""

    def __init__(self, ckpt_dir, rank, restart):
        self.path = os.path.join(ckpt_dir, "progress.jsonl")
        self.base = {"rank": rank, "restart_count": restart, "pid": os.getpid()}

    def log(self, event, **fields):
        line = json.dumps({"event": event, **self.base, **fields}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        print(f"[rank {self.base['rank']}] {event} {fields}", flush=True)


@record
def main():
    args = parse_args()
    torch.set_num_threads(1)
    # Gloo binds to the address the host name resolves to; on a single machine with
    # MASTER_ADDR on loopback, stay on loopback (unless the user chose an interface).
    if os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    os.makedirs(args.ckpt_dir, exist_ok=True)
    progress = Progress(args.ckpt_dir, rank, restart)

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    found = checkpoints(args.ckpt_dir)
    if found:
        step, path = found[-1]
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        progress.log("resumed", step=start, checkpoint=os.path.basename(path))
    progress.log("started", step=start, world_size=world,
                 agent_store=os.environ.get("TORCHELASTIC_USE_AGENT_STORE"))
    ddp = DDP(model)  # broadcasts rank 0's parameters: all ranks start equal
    x, y = make_data()
    loss_fn = torch.nn.MSELoss()

    for step in range(start, args.steps):
        if step == args.fail_at_step and rank == args.fail_rank and restart == 0:
            progress.log("failing", step=step)
            raise RuntimeError(f"injected failure at step {step} on rank {rank}")
        xb, yb = batch_for(step, rank, world, args.batch, x, y)
        optimizer.zero_grad()
        loss = loss_fn(ddp(xb), yb)
        loss.backward()  # gradients are averaged across the ranks here
        optimizer.step()
        done = step + 1
        if done % args.ckpt_every == 0 or done == args.steps:
            if rank == 0:
                save_atomic({"step": done, "model": model.state_dict(),
                             "optimizer": optimizer.state_dict()},
                            os.path.join(args.ckpt_dir, f"ckpt_{done}.pt"))
            dist.barrier()  # nobody runs ahead of a checkpoint that may be needed
            if rank == 0:
                print(f"step {done}: loss {loss.item():.6f}, checkpoint saved", flush=True)

    digest = params_sha256(model)
    if rank == 0:
        save_atomic(model.state_dict(), os.path.join(args.ckpt_dir, "final.pt"))
    progress.log("finished", step=args.steps, sha256=digest)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
