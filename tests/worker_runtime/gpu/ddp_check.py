"""DDP with the nccl backend under dtrun in agent-store mode (run by scripts/gpu-check.sh).

    dtrun --standalone --nproc-per-node 1 --no-python python3 tests/worker_runtime/gpu/ddp_check.py

init_process_group("nccl") with env:// makes torch 2.x's own TCPStore client talk to dtrun's
store (TORCHELASTIC_USE_AGENT_STORE=True, keys under /worker/attempt_<n>), so this also proves
the 2.x wire protocol against a real 2.x client. A second, raw TCPStore client exercises the
store operations one by one. Prints "[ddp rank R] OK" on success; any failure raises.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def log(msg):
    print(f"[ddp rank {os.environ.get('RANK', '?')}] {msg}", flush=True)


def check_env():
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                 "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE"):
        assert name in os.environ, f"{name} is not set by dtrun"
        log(f"{name}={os.environ[name]}")
    assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True", "not in agent-store mode"
    assert dist.is_torchelastic_launched()


def check_raw_store(rank, world):
    """torch's TCPStore client (2.x protocol) against dtrun's store, operation by operation."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=datetime.timedelta(seconds=60))
    p = f"ddp_check/{rank}/"
    store.set(p + "k", b"v\x00\xff")
    assert store.get(p + "k") == b"v\x00\xff"
    assert store.add(p + "n", 5) == 5 and store.add(p + "n", -2) == 3
    assert store.get(p + "n") == b"3"
    assert store.compare_set(p + "k", b"v\x00\xff", b"w") == b"w"
    assert store.check([p + "k", p + "n"]) and not store.check([p + "missing"])
    store.wait([p + "k"], datetime.timedelta(seconds=5))
    store.append(p + "a", b"x")
    store.append(p + "a", b"y")
    assert store.get(p + "a") == b"xy"
    assert store.multi_get([p + "k", p + "a"]) == [b"w", b"xy"]
    store.multi_set([p + "m1", p + "m2"], [b"1", b"2"])
    assert store.get(p + "m2") == b"2"
    assert store.delete_key(p + "m1") and not store.check([p + "m1"])
    assert store.num_keys() > 0
    try:
        store.wait([p + "never"], datetime.timedelta(milliseconds=300))
        raise AssertionError("wait on a missing key returned")
    except Exception as e:  # DistStoreError: wait timeout
        log(f"wait timeout as expected: {type(e).__name__}")
    log("raw TCPStore client: set/get/add/compare_set/check/wait/append/multi_get/multi_set/"
        "delete_key/num_keys OK")


def main():
    log(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"NCCL {torch.cuda.nccl.version()}, {torch.cuda.device_count()} GPU(s)")
    assert int(torch.__version__.split(".")[0]) >= 2, "needs torch 2.x"
    check_env()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    check_raw_store(rank, world)

    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    t0 = time.time()
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=device)
    log(f"init_process_group(nccl) in {time.time() - t0:.2f} s: rank {dist.get_rank()} of "
        f"{dist.get_world_size()}")

    x = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(x)
    expected = world * (world + 1) / 2
    assert torch.all(x == expected), f"all_reduce gave {x[0].item()}, expected {expected}"

    torch.manual_seed(1234)  # same initial weights everywhere; DDP broadcasts them anyway
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(device)
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    torch.manual_seed(100 + rank)  # different data per rank
    first = last = None
    for step in range(30):
        inputs = torch.randn(64, 512, device=device)
        target = torch.randint(0, 10, (64,), device=device)
        loss = torch.nn.functional.cross_entropy(ddp(inputs), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    # DDP keeps replicas identical: the parameter checksum is the same on every rank.
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum()
    gathered = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    assert all(torch.equal(g, gathered[0]) for g in gathered), f"replicas differ: {gathered}"
    dist.barrier()
    log(f"DDP: 30 steps, loss {first:.4f} -> {last:.4f}, replicas identical "
        f"(checksum {checksum.item():.6f})")
    dist.destroy_process_group()
    log("OK")


if __name__ == "__main__":
    main()
