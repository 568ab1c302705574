#!/usr/bin/python3
"""The fault soak's trainer (scripts/bench/soak): a small, real DDP training on gloo whose final
model is bit for bit the same whatever the world size and whatever restarts happened.

Why the bits cannot depend on the world size W, the restarts, or the order of additions:
  * the model is one float64 linear layer (8 -> 1, no bias); the data are small integers and
    every weight lives on a grid of 2^-16 (it is rounded back onto it after each step), so every
    product and sum the step computes is exact: no rounding happens anywhere, and exact sums do
    not care how they are grouped (DDP's buckets, gloo's ring, W partial sums);
  * step s uses one fixed global batch of 12 samples (divisible by 1, 2, 3, 4, 6), drawn by a
    permutation seeded with s alone; rank r of W takes the r-th of W equal slices, and its loss
    is W/2 * sum (f(x) - y)^2 over its slice, so after DDP's average over the ranks the gradient
    is the global batch's sum, exactly, for every W;
  * rank 0 checkpoints (step, weights) after every step, atomically; every rank resumes from the
    newest checkpoint.

The soak steers the pace with two files in --dir: `allowed` (how many steps may be taken so far;
the soak raises it after each fault) and `release` (once it exists and every step is taken, the
job ends). Between steps the group keeps doing small all-reduces, so a stalled peer stalls
everybody, and it prints a line at least every 0.5 s (dtrun's --stall-timeout watches output), from its
start to its exit (see Notice).

Records in --dir/progress.jsonl, one JSON line each (O_APPEND, one write):
  start   every process, first thing, before torch is imported: t, pid, rank, round
  group   rank 0, at the group's first all-reduce: the latest start time of its members (the
          moment the last worker of this round started: the recovery time's end), world size
  step    rank 0, after each step: step, world size, round
  final   rank 0: the weights as float.hex strings (final.json holds them too)
  finishing, finished   every process, before its final barrier and after
          destroy_process_group (what is left is the interpreter's shutdown): pid, rank, round
"""
import argparse
import json
import os
import select
import sys
import time

T_START = time.time()

SAMPLES = 96
FEATURES = 8
BATCH = 12
LR = 2.0 ** -6
GRID = 2.0 ** 16


def log(path, **fields):
    line = (json.dumps(dict(fields, t=time.time())) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class Notice:
    """A child that prints "rank R: <phase>" every 0.5 s while this process is in a phase that
    prints nothing itself, so that --stall-timeout counts only a group that trains and is quiet:
    "starting" until the group's first all-reduce (importing torch, waiting for peers) and
    "finishing" from the final barrier to this process's exit (barrier, destroy_process_group,
    the interpreter's shutdown). A thread could not: importing torch holds the GIL, for seconds
    on a loaded machine, and threads stop before the interpreter's end. The child is forked
    before torch is imported (so it holds none of gloo's sockets) and ends when this process's
    end of the pipe closes (its exit, or its death)."""

    def __init__(self, rank):
        r, w = os.pipe()
        if os.fork() == 0:
            os.close(w)
            phase = "starting"
            while True:
                if select.select([r], [], [], 0.5)[0]:
                    data = os.read(r, 64)
                    if not data:
                        os._exit(0)
                    phase = data.decode().split()[-1]
                elif phase != "quiet":
                    print(f"rank {rank}: {phase}", flush=True)
        os.close(r)
        self._w = w

    def phase(self, name):
        os.write(self._w, f" {name}".encode())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="the job's directory (progress, checkpoints)")
    p.add_argument("--steps", type=int, default=24)
    args = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    progress = os.path.join(args.dir, "progress.jsonl")
    log(progress, ev="start", pid=os.getpid(), rank=rank, round=restart, start=T_START)
    print(f"rank {rank}: started (round {restart})", flush=True)
    notice = Notice(rank)

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    if os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    elif os.path.exists("/sys/class/net/eth0"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")  # a node namespace of netns.py
    dist.init_process_group("gloo")
    world = dist.get_world_size()

    g = torch.Generator().manual_seed(1234)
    x = torch.randint(-2, 3, (SAMPLES, FEATURES), generator=g).double()
    w_true = torch.randint(-3, 4, (FEATURES, 1), generator=g).double()
    y = x @ w_true + torch.randint(-2, 3, (SAMPLES, 1), generator=g).double()

    model = torch.nn.Linear(FEATURES, 1, bias=False).double()
    ckpts = sorted((int(n[5:-5]), n) for n in os.listdir(args.dir)
                   if n.startswith("ckpt_") and n.endswith(".json"))
    step = 0
    with torch.no_grad():
        if ckpts:
            with open(os.path.join(args.dir, ckpts[-1][1])) as f:
                saved = json.load(f)
            step = saved["step"]
            model.weight.copy_(torch.tensor([[float.fromhex(v) for v in saved["w"]]]))
        else:
            w0 = torch.randint(-64, 65, (1, FEATURES), generator=torch.Generator().manual_seed(7))
            model.weight.copy_(w0.double() / 16)
    ddp = DDP(model)

    # The group's first collective: when did its last member start?
    started = torch.tensor([T_START], dtype=torch.float64)
    dist.all_reduce(started, op=dist.ReduceOp.MAX)
    notice.phase("quiet")
    if rank == 0:
        log(progress, ev="group", pid=os.getpid(), round=restart, world=world,
            started=started.item(), step=step)

    def allowed():
        try:
            with open(os.path.join(args.dir, "allowed")) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    last_line = time.monotonic()
    while True:
        # Rank 0 decides for everybody (one all-reduce), so no rank leaves a collective alone.
        flags = torch.tensor([min(allowed(), args.steps) if rank == 0 else 0,
                              1 if rank == 0 and os.path.exists(os.path.join(args.dir, "release"))
                              else 0], dtype=torch.float64)
        dist.all_reduce(flags)
        may, release = int(flags[0].item()), bool(flags[1].item())
        if step < may:
            lo = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(10_000 + step))
            batch = lo[:BATCH]
            per = BATCH // world
            mine = batch[rank * per:(rank + 1) * per]
            ddp.zero_grad()
            out = ddp(x[mine])
            loss = (world / 2.0) * ((out - y[mine]) ** 2).sum()
            loss.backward()
            with torch.no_grad():
                model.weight -= LR * model.weight.grad
                model.weight.copy_(torch.round(model.weight * GRID) / GRID)
            step += 1
            if rank == 0:
                state = {"step": step, "w": [v.hex() for v in model.weight.flatten().tolist()]}
                tmp = os.path.join(args.dir, f".ckpt_{step}.{os.getpid()}")
                with open(tmp, "w") as f:
                    json.dump(state, f)
                os.replace(tmp, os.path.join(args.dir, f"ckpt_{step}.json"))
                log(progress, ev="step", pid=os.getpid(), round=restart, world=world, step=step)
            print(f"rank {rank}: step {step} of {args.steps} (world {world})", flush=True)
            last_line = time.monotonic()
            continue
        if step >= args.steps and release:
            break
        time.sleep(0.05)
        if time.monotonic() - last_line >= 0.5:
            print(f"rank {rank}: waiting at step {step} (world {world})", flush=True)
            last_line = time.monotonic()

    if rank == 0:
        final = {"w": [v.hex() for v in model.weight.flatten().tolist()], "steps": step}
        with open(os.path.join(args.dir, "final.json.tmp"), "w") as f:
            json.dump(final, f)
        os.replace(os.path.join(args.dir, "final.json.tmp"), os.path.join(args.dir, "final.json"))
        log(progress, ev="final", pid=os.getpid(), round=restart, world=world, **final)
    notice.phase("finishing")
    log(progress, ev="finishing", pid=os.getpid(), rank=rank, round=restart)
    dist.barrier()
    dist.destroy_process_group()
    log(progress, ev="finished", pid=os.getpid(), rank=rank, round=restart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
