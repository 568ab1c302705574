#!/usr/bin/python3
"""Operations per second from concurrent torch TCPStore clients, for scripts/bench/store.

usage: store_load.py --server NAME=HOST:PORT[@PID] [--server ...] [--ops set,get,add]
                     [--clients 1,8,64] [--slots 16] [--slot-seconds 0.25]

For every (op, clients) pair, forks `clients` processes. Each connects one torch.distributed
TCPStore client (is_master=False: torch 1.13's client protocol) to every server, then works through
--slots slots: in slot k every process runs the op against server k mod n as fast as it can for
--slot-seconds. The servers thus take turns and a noisy neighbour (this machine is shared) hurts
each alike. set and add use a key per client; get reads one shared key (torch's get is WAIT + GET:
two round trips). A set has no reply in the protocol, so each process ends every slot with a
num_keys() round trip: a slot's sets count only once the server has handled them. All processes
meet at a barrier before each slot, so a server that is still draining its backlog delays only
its own slot, never the next server's.

A slot's rate is the operations all processes did in it over the time from its start to the last
acknowledgement; a server's figure is the median over its slots. Given a server's PID, the CPU time the server process used during its
slots (from /proc/PID/stat, sampled at every slot boundary) over the operations done in them is
reported too: what an operation costs the server, independent of how fast the clients are.
Output: one line per (op, clients, server),
    RESULT op=set clients=8 server=dtrun ops_per_s=12345.6 slots=8 min=11000.0 max=13000.0 cpu_us_per_op=4.1
Needs torch (Debian's python3-torch, /usr/bin/python3).
"""
import argparse
import datetime
import multiprocessing
import os
import sys
import time

import torch.distributed as dist

CHECK_EVERY = 4  # operations between clock reads


def cpu_seconds(pid):
    """User + system CPU time of a whole process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_op(store, op, rank):
    key = f"bench/{op}/{rank}"
    value = b"x" * 16
    if op == "set":
        return lambda: store.set(key, value)
    if op == "get":
        return lambda: store.get("bench/get/shared")
    if op == "add":
        return lambda: store.add(key, 1)
    raise ValueError(op)


def worker(servers, op, rank, slots, slot_seconds, barrier, results):
    try:
        stores = [dist.TCPStore(host, port, is_master=False,
                                timeout=datetime.timedelta(seconds=120))
                  for _, host, port, _ in servers]
        fns = [make_op(s, op, rank) for s in stores]
        slots_done = []
        for k in range(slots):
            # Every slot starts together, after every client has finished the previous one:
            # one server's backlog can never eat into the next server's slot.
            barrier.wait(300)
            begin = time.monotonic()
            end = begin + slot_seconds
            s = k % len(stores)
            fn, n = fns[s], 0
            while time.monotonic() < end:
                for _ in range(CHECK_EVERY):
                    fn()
                n += CHECK_EVERY
            stores[s].num_keys()  # the server has handled every op sent before this reply
            slots_done.append((n, begin, time.monotonic()))
        barrier.wait(300)
        results.put(("ok", slots_done))
    except Exception as e:
        results.put(("error", repr(e)))


def measure(servers, op, clients, slots, slot_seconds):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(clients + 1)  # the clients, and this process sampling CPU times
    results = ctx.Queue()
    procs = [ctx.Process(target=worker,
                         args=(servers, op, r, slots, slot_seconds, barrier, results))
             for r in range(clients)]
    for p in procs:
        p.start()
    # CPU time of each server between slot boundaries; slot k belongs to server k mod n.
    cpu = [0.0] * len(servers)
    pids = [pid for _, _, _, pid in servers]
    last = None
    for k in range(slots + 1):
        barrier.wait(300 + slots * slot_seconds * 10)
        now = [cpu_seconds(p) if p else 0.0 for p in pids]
        if last is not None:
            i = (k - 1) % len(servers)
            cpu[i] += now[i] - last[i]
        last = now
    got = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [g[1] for g in got if g[0] != "ok"]
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed, first: {errors[0]}")
    # A slot's rate: all the operations its clients did, over the time from its start to the
    # last client's acknowledgement (which includes the server draining its own backlog).
    per_slot, ops = [], []
    for k in range(slots):
        n = sum(g[1][k][0] for g in got)
        span = max(g[1][k][2] for g in got) - min(g[1][k][1] for g in got)
        ops.append(n)
        per_slot.append(n / span)
    rates = [per_slot[i::len(servers)] for i in range(len(servers))]
    cpu_per_op = [cpu[i] / max(1, sum(ops[i::len(servers)])) for i in range(len(servers))]
    return rates, cpu_per_op


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", action="append", required=True,
                        help="NAME=HOST:PORT, e.g. dtrun=127.0.0.1:29400")
    parser.add_argument("--ops", default="set,get,add")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--slot-seconds", type=float, default=0.25)
    args = parser.parse_args()
    servers = []
    for s in args.server:
        name, _, addr = s.partition("=")
        addr, _, pid = addr.partition("@")
        host, _, port = addr.rpartition(":")
        servers.append((name, host, int(port), int(pid) if pid else 0))
        # The key every get reads.
        dist.TCPStore(host, int(port), is_master=False).set("bench/get/shared", b"y" * 16)

    for op in args.ops.split(","):
        for clients in (int(c) for c in args.clients.split(",")):
            rates, cpu_per_op = measure(servers, op, clients, args.slots, args.slot_seconds)
            for (name, _, _, pid), values, cpu in zip(servers, rates, cpu_per_op):
                v = sorted(values)
                median = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
                cpu_text = f" cpu_us_per_op={cpu * 1e6:.2f}" if pid else ""
                print(f"RESULT op={op} clients={clients} server={name} ops_per_s={median:.1f} "
                      f"slots={len(v)} min={v[0]:.1f} max={v[-1]:.1f}{cpu_text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
