"""A training-script stand-in that arms deadlines with torch's FileTimerClient, as real training
code does under torchrun with TORCHELASTIC_ENABLE_FILE_TIMER=1. Used by hang_test.py and by the
hang benchmark (scripts/bench/hang).

usage: timer_worker.py MODE [OUT_DIR]
  punctual   10 steps, each inside `expires(after=5)`; exits 0
  overstay   round 0: rank 1 hangs inside `expires(after=1, scope="step")`; the other ranks do
             punctual steps and then wait, untimed; rank 0 first writes garbage to the FIFO.
             Later rounds: punctual.
  fork-hang  round 0: every rank forks a child that hangs inside its own `expires(after=1)`;
             later rounds: punctual
  stuck      every round: prints to stderr, then hangs in stuck_loading_shard() under a 1 s
             deadline
  armed-long arms a 120 s deadline, writes OUT_DIR/armed-<round>-<rank>, and waits for
             OUT_DIR/go-<round>; then releases and exits 0
  bench      round 0: rank 0 prints "hang <time>" and overstays a 1 s deadline; every later
             round prints "step <time>" at its first step and exits 0
Each round's outcome line goes to stdout: "rank R round N done".
"""
import os
import sys
import time

from torch.distributed.elastic import timer

MODE = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else None
RANK = int(os.environ["RANK"])
ROUND = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
CLIENT = timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"])


def punctual(steps=10):
    for _ in range(steps):
        with timer.expires(after=5, scope="step", client=CLIENT):
            time.sleep(0.02)


def done():
    print(f"rank {RANK} round {ROUND} done", flush=True)
    sys.exit(0)


def stuck_loading_shard():
    sys.stderr.write("loading shard 3\n")
    sys.stderr.flush()
    with timer.expires(after=1, scope="load", client=CLIENT):
        time.sleep(600)


if MODE == "punctual":
    punctual()
    done()
elif MODE == "overstay":
    if ROUND > 0:
        punctual()
        done()
    if RANK == 0:
        fd = os.open(os.environ["TORCHELASTIC_TIMER_FILE"], os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"not a timer request\n{\"pid\": \"x\"}\n")
        os.close(fd)
    if RANK == 1:
        with timer.expires(after=1, scope="step", client=CLIENT):
            print("rank 1 hanging", flush=True)
            time.sleep(600)
    punctual()
    time.sleep(600)  # waiting for a peer that never comes, as a collective would
elif MODE == "fork-hang":
    if ROUND > 0:
        punctual()
        done()
    child = os.fork()
    if child == 0:
        with timer.expires(after=1, scope="child", client=CLIENT):
            print(f"rank {RANK} child {os.getpid()}", flush=True)
            time.sleep(600)
        os._exit(0)
    os.waitpid(child, 0)
    time.sleep(600)
elif MODE == "stuck":
    stuck_loading_shard()
elif MODE == "armed-long":
    with timer.expires(after=120, scope="long", client=CLIENT):
        open(os.path.join(OUT, f"armed-{ROUND}-{RANK}"), "w").close()
        go = os.path.join(OUT, f"go-{ROUND}")
        while not os.path.exists(go):
            time.sleep(0.05)
    done()
elif MODE == "bench":
    if ROUND == 0 and RANK == 0:
        with timer.expires(after=1, scope="bench", client=CLIENT):
            print(f"hang {time.time():.6f}", flush=True)
            time.sleep(600)
    if ROUND == 0:
        time.sleep(600)
    with timer.expires(after=5, scope="bench", client=CLIENT):
        print(f"step {time.time():.6f}", flush=True)
    done()
else:
    sys.exit(f"unknown mode {MODE}")
