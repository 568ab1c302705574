#!/usr/bin/python3
"""A small DDP training job (gloo, CPU) that survives Slurm preemption: it checkpoints on a signal
and resumes from its newest checkpoint when the job is requeued.

Run it under dtrun in a Slurm job (scripts/slurm/*.sbatch), or anywhere dtrun runs:

    srun dtrun --nproc-per-node=gpu examples/slurm_train.py --ckpt-dir ckpt/$SLURM_JOB_ID
    dtrun --standalone --nproc-per-node=2 examples/slurm_train.py --ckpt-dir /tmp/ckpt

Preemption, the way Slurm announces it:
  * `sbatch --signal=USR1@120` sends SIGUSR1 to every task of every step 120 s (up to 60 s
    early) before the time limit; dtrun forwards SIGUSR1 to its workers and keeps running.
    With `--signal=B:USR1@120` only the batch shell gets it, so forward it yourself.
  * SIGTERM comes when the job is cancelled, preempted, or out of time; KillWait seconds later
    (slurm.conf, 30 by default) SIGKILL follows. dtrun forwards SIGTERM and sends SIGKILL after
    --shutdown-timeout, so keep that below KillWait.
On SIGUSR1 or SIGTERM every rank stops at the same step (the ranks agree with an all-reduce after
each step, since each notices the signal at its own time), rank 0 saves a checkpoint, writes
<ckpt-dir>/PREEMPTED ("<step> <signal>"), and every worker exits 0, so dtrun ends cleanly. The
batch script sees the file and runs `scontrol requeue $SLURM_JOB_ID`; the rerun resumes here.

The handlers are installed before torch is imported: a signal that arrives earlier kills the
process (the default action of SIGUSR1). Every event (start, resume, signal, preemption, finish)
is appended as one JSON line to <ckpt-dir>/progress.jsonl, with the rank, the node and
SLURM_RESTART_COUNT. The data and the seeds are fixed, so a run that was preempted and resumed
ends with exactly the parameters of an uninterrupted run (their SHA-256 is printed and logged).
"""
import signal

SIGNALS_SEEN = []  # in arrival order; the handler only records, the training loop acts


def _record(signum, _frame):
    SIGNALS_SEEN.append(signum)


for _s in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(_s, _record)
    signal.siginterrupt(_s, False)  # restart interrupted system calls (gloo, the store client)

import argparse  # noqa: E402  (after the handlers, on purpose)
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

SAMPLES = 256
FEATURES = 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", default=os.environ.get("SLURM_TRAIN_CKPT_DIR", "ckpt"),
                   help="checkpoints, PREEMPTED, final.pt and progress.jsonl (env "
                        "SLURM_TRAIN_CKPT_DIR)")
    p.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint period in steps")
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    p.add_argument("--step-seconds", type=float, default=0.0,
                   help="sleep this long in every step, standing in for real work")
    return p.parse_args()


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 1))


def make_data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    return x, torch.sin(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g)


def batch_for(step, rank, world, batch, x, y):
    # The data a rank sees at a step depends on the step only, never on what ran before.
    g = torch.Generator().manual_seed(10_000 + step)
    idx = torch.randperm(SAMPLES, generator=g)[: batch * world]
    mine = idx[rank * batch: (rank + 1) * batch]
    return x[mine], y[mine]


def newest_checkpoint(ckpt_dir):
    found = []
    for name in os.listdir(ckpt_dir):
        if name.startswith("ckpt_") and name.endswith(".pt"):
            found.append((int(name[5:-3]), os.path.join(ckpt_dir, name)))
    return max(found) if found else None


def save_atomic(obj, path):
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def write_atomic(text, path):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def params_sha256(model):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class Progress:
    """One JSON line per event in <ckpt-dir>/progress.jsonl (O_APPEND, one write each)."""

    def __init__(self, ckpt_dir, rank, world):
        self.path = os.path.join(ckpt_dir, "progress.jsonl")
        self.base = {
            "rank": rank, "world_size": world, "pid": os.getpid(),
            "node": os.environ.get("SLURMD_NODENAME", socket.gethostname()),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
            "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        }

    def log(self, event, **fields):
        record = {"event": event, **self.base, **fields}
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)
        print(f"[rank {self.base['rank']}] {event} {fields}", flush=True)


def checkpoint(model, optimizer, step, ckpt_dir, rank):
    if rank == 0:
        save_atomic({"step": step, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict()},
                    os.path.join(ckpt_dir, f"ckpt_{step}.pt"))
    dist.barrier()  # nobody leaves before the checkpoint it may resume from exists


def main():
    args = parse_args()
    torch.set_num_threads(1)
    # Gloo binds to the address the host name resolves to; with the store on loopback (one
    # machine), stay on loopback unless the user chose an interface.
    if os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(args.ckpt_dir, exist_ok=True)
    progress = Progress(args.ckpt_dir, rank, world)

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    found = newest_checkpoint(args.ckpt_dir)
    if found:
        state = torch.load(found[1])
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        progress.log("resumed", step=start, checkpoint=os.path.basename(found[1]))
    progress.log("started", step=start)
    ddp = DDP(model)  # broadcasts rank 0's parameters: all ranks start equal
    x, y = make_data()
    loss_fn = torch.nn.MSELoss()

    noticed = 0
    for step in range(start, args.steps):
        xb, yb = batch_for(step, rank, world, args.batch, x, y)
        optimizer.zero_grad()
        loss_fn(ddp(xb), yb).backward()  # gradients are averaged across the ranks here
        optimizer.step()
        if args.step_seconds > 0:
            time.sleep(args.step_seconds)
        done = step + 1
        # A signal may come twice (from Slurm and forwarded by dtrun): log each, act once.
        while noticed < len(SIGNALS_SEEN):
            progress.log("signal", signal=signal.Signals(SIGNALS_SEEN[noticed]).name, step=done)
            noticed += 1
        stop = torch.tensor([1 if SIGNALS_SEEN else 0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # everyone stops at the same step
        if stop.item() and done < args.steps:
            checkpoint(model, optimizer, done, args.ckpt_dir, rank)
            why = signal.Signals(SIGNALS_SEEN[0]).name if SIGNALS_SEEN else "peer"
            if rank == 0:
                write_atomic(f"{done} {why}\n", os.path.join(args.ckpt_dir, "PREEMPTED"))
            progress.log("preempted", step=done, signal=why)
            dist.destroy_process_group()
            return 0
        if done % args.ckpt_every == 0:
            checkpoint(model, optimizer, done, args.ckpt_dir, rank)

    digest = params_sha256(model)
    if rank == 0:
        save_atomic(model.state_dict(), os.path.join(args.ckpt_dir, "final.pt"))
        print(f"final parameters sha256 {digest}", flush=True)
    progress.log("finished", step=args.steps, sha256=digest)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
