#!/usr/bin/python3
"""torch's own TCPStore client and PrefixStore (Debian's torch 1.13) against `dtrun store`.

Exercises every operation the 1.13 client has (set, get, add, compare_set, wait with and without a
timeout, delete_key, num_keys), binary values, clients waiting on one key from threads and from
processes, and cross-reads between torch's client and dtrun's (store_probe). Finally the store
must stop on SIGTERM with status 0 and must not have refused any request torch sent.

usage: torch_client_vs_dtrun_store.py --dtrun BUILD/bin/dtrun --probe BUILD/bin/store_probe
Exit status: 0 pass, 1 fail, 77 skipped (torch not importable by this interpreter).
"""

import argparse
import datetime
import multiprocessing
import os
import sys
import threading

sys.dont_write_bytecode = True  # keep the source tree clean of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from dtrun_testing import Checks  # noqa: E402
from interop_util import DtrunStore, require_torch, run_probe  # noqa: E402

N_WAITERS = 4


def connect(dist, port, world_size=None, seconds=60):
    return dist.TCPStore("127.0.0.1", port, world_size=world_size, is_master=False,
                         timeout=datetime.timedelta(seconds=seconds))


def waiter_process(port, results):
    """In a forked child: announce readiness, wait for "go" with the store timeout, read it."""
    import torch.distributed as dist
    try:
        store = connect(dist, port)
        store.add("ready-procs", 1)
        store.wait(["go-procs"])
        results.put(("ok", os.getpid(), store.get("go-procs")))
    except Exception as e:  # reported to the parent, which fails the check
        results.put(("error", os.getpid(), repr(e)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrun", required=True)
    parser.add_argument("--probe", required=True)
    args = parser.parse_args()
    dist = require_torch()
    c = Checks(collect=True)

    with DtrunStore(args.dtrun) as server:
        port = server.port
        s = connect(dist, port)

        # set / get: every byte value, empty values, str values, a large value.
        every = bytes(range(256))
        s.set("bin", every)
        c.equal(s.get("bin"), every, "get returns all 256 byte values")
        s.set("empty", b"")
        c.equal(s.get("empty"), b"", "an empty value is a value")
        s.set("str", "text")
        c.equal(s.get("str"), b"text", "a str value comes back as bytes")
        big = os.urandom(1 << 20)
        s.set("big", big)
        c.check(s.get("big") == big, "a 1 MiB random value survives")
        s.set("str", b"\x00overwritten")
        c.equal(s.get("str"), b"\x00overwritten", "set overwrites")

        # add: decimal text, negative deltas.
        c.equal(s.add("n", 5), 5, "add on a missing key starts from 0")
        c.equal(s.add("n", -7), -2, "add with a negative delta")
        c.equal(s.get("n"), b"-2", "a counter reads as decimal text")
        s.set("t", "41")
        c.equal(s.add("t", 1), 42, "add parses a value set as text")

        # compare_set, including torch's answer for a missing key.
        c.equal(s.compare_set("cas", "", "first"), b"first", "compare_set: missing key, empty expected")
        c.equal(s.compare_set("cas", "wrong", "second"), b"first", "compare_set: mismatch")
        c.equal(s.compare_set("cas", "first", "third"), b"third", "compare_set: match")
        c.equal(s.get("cas"), b"third", "compare_set stored the desired value")
        before = s.num_keys()
        c.equal(s.compare_set("missing", "exp", "des"), b"exp",
             "compare_set: missing key, non-empty expected answers expected")
        c.equal(s.num_keys(), before, "... and stores nothing")

        # delete_key and num_keys.
        s.set("d", b"x")
        c.equal(s.delete_key("d"), True, "delete_key of a present key")
        c.equal(s.delete_key("d"), False, "delete_key of a missing key")
        n0 = s.num_keys()
        s.set("nk1", b"1")
        s.set("nk1", b"2")
        s.add("nk2", 1)
        c.equal(s.num_keys(), n0 + 2, "num_keys counts keys, not writes")
        # A client built with world_size sends ADD("init/", 1) with the raw key.
        sized = connect(dist, port, world_size=2)
        c.equal(s.num_keys(), n0 + 3, "a world_size client adds the init/ key")
        del sized

        # wait without a timeout (the store's own), woken by another client's writes.
        writer = connect(dist, port)
        t = threading.Thread(target=lambda: (writer.set("late1", b"1"), writer.set("late2", b"2")))
        t.start()
        s.wait(["late1", "late2"])
        t.join()
        c.equal((s.get("late1"), s.get("late2")), (b"1", b"2"), "wait returned once both keys exist")
        # get waits for a key that arrives later.
        t = threading.Thread(target=lambda: writer.set("later", b"here"))
        t.start()
        c.equal(s.get("later"), b"here", "get waits for a late key")
        t.join()

        # wait with a timeout. torch 1.13's client gives up by socket timeout, without CANCEL_WAIT,
        # so this connection keeps a parked WAIT; it is not used again.
        w = connect(dist, port)
        c.raises(lambda: w.wait(["never"], datetime.timedelta(milliseconds=300)), RuntimeError,
                 "wait with a timeout on a missing key", contains="imeout")
        c.equal(s.wait(["late1"], datetime.timedelta(seconds=30)), None,
             "wait with a timeout on a present key returns")
        del w

        # PrefixStore on top of torch's client: keys become prefix/key.
        p = dist.PrefixStore("job", s)
        p.set("k", b"v")
        c.equal(s.get("job/k"), b"v", "PrefixStore.set writes job/k")
        c.equal(p.get("k"), b"v", "PrefixStore.get")
        c.equal(p.add("cnt", 3), 3, "PrefixStore.add")
        c.equal(s.get("job/cnt"), b"3", "... under the prefix")
        c.equal(p.compare_set("pc", "", "a"), b"a", "PrefixStore.compare_set")
        p.wait(["k", "cnt"])
        p.wait(["k"], datetime.timedelta(seconds=30))
        c.equal(p.num_keys(), s.num_keys(), "PrefixStore.num_keys counts the whole store")
        c.equal(p.delete_key("k"), True, "PrefixStore.delete_key")
        nested = dist.PrefixStore("inner", p)
        nested.set("x", b"\x00\x01")
        c.equal(s.get("job/inner/x"), b"\x00\x01", "nested PrefixStores stack their prefixes")

        # Several clients on threads wait on one key.
        results = []
        lock = threading.Lock()

        def waiter_thread():
            try:
                mine = connect(dist, port)
                mine.add("ready-threads", 1)
                mine.wait(["go-threads"])
                value = mine.get("go-threads")
            except Exception as e:
                value = repr(e)
            with lock:
                results.append(value)

        threads = [threading.Thread(target=waiter_thread) for _ in range(N_WAITERS)]
        for t in threads:
            t.start()
        c.poll(lambda: s.add("ready-threads", 0) == N_WAITERS, 30,
               "every waiter thread connected")
        s.set("go-threads", b"\x00go")
        for t in threads:
            t.join(60)
        c.equal(results, [b"\x00go"] * N_WAITERS, f"{N_WAITERS} threads woken by one set")

        # Several client processes wait on one key.
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        procs = [ctx.Process(target=waiter_process, args=(port, queue)) for _ in range(N_WAITERS)]
        for proc in procs:
            proc.start()
        c.poll(lambda: s.add("ready-procs", 0) == N_WAITERS, 60,
               "every waiter process connected")
        s.set("go-procs", b"now\xff")
        got = sorted(queue.get(timeout=60)[::2] for _ in procs)
        for proc in procs:
            proc.join(60)
        c.equal(got, [("ok", b"now\xff")] * N_WAITERS, f"{N_WAITERS} processes woken by one set")
        c.equal([proc.exitcode for proc in procs], [0] * N_WAITERS, "waiter processes exit 0")

        # dtrun's own client reads what torch's wrote, and the other way round.
        for dialect in ("2", "113"):
            lines = run_probe(args.probe, port, [
                "get", "bin", "5000", "get", "n", "5000", "check", "bin,cas", "cas", "cas",
                b"third".hex(), b"fourth".hex(), "set", f"from-dtrun-{dialect}", "00ff"],
                dialect=dialect)
            c.equal(lines, [f"get {every.hex()}", f"get {b'-2'.hex()}", "check true",
                         f"cas {b'fourth'.hex()}", "set ok"],
                 f"store_probe (dialect {dialect}) sees torch's keys")
            c.equal(s.get(f"from-dtrun-{dialect}"), b"\x00\xff",
                 f"torch sees store_probe's key (dialect {dialect})")
            s.set("cas", b"third")

        del s, p, nested, writer
        rc = server.stop()
        c.equal(rc, 0, "dtrun store exits 0 on SIGTERM")
        log = server.log()
        refused = [line for line in log.splitlines() if "closing connection" in line]
        c.equal(refused, [], "dtrun store refused no request from torch")
        print("dtrun store log:\n  " + log.strip().replace("\n", "\n  "), flush=True)

    c.finish()


if __name__ == "__main__":
    main()
