#!/usr/bin/python3
"""dtrun's TcpStore client, in torch 1.13 mode, against torch 1.13's own TCPStore server.

This script hosts the server (torch.distributed.TCPStore(is_master=True, port=0)) and prints its
port, then runs store_probe (tests/interop/store_probe.cpp) with sequences of operations and checks
every line it prints, and reads what the probe wrote through torch's own client. Several probes
wait on one key that torch sets.

usage: dtrun_client_vs_torch_store.py --probe BUILD/bin/store_probe
Exit status: 0 pass, 1 fail, 77 skipped (torch not importable by this interpreter).
"""

import argparse
import datetime
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # keep the source tree clean of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from dtrun_testing import Checks  # noqa: E402
from interop_util import require_torch, run_probe  # noqa: E402

N_WAITERS = 4


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    args = parser.parse_args()
    dist = require_torch()
    c = Checks(collect=True)

    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=60))
    port = master.port
    print(f"torch TCPStore server (is_master=True) listening on 127.0.0.1:{port}", flush=True)

    every = bytes(range(256))
    steps = [
        # (operation and arguments, the line store_probe must print)
        (["set", "k", b"hello".hex()], "set ok"),
        (["get", "k", "5000"], f"get {b'hello'.hex()}"),
        (["set", "bin", every.hex()], "set ok"),
        (["get", "bin", "5000"], f"get {every.hex()}"),
        (["set", "empty", ""], "set ok"),
        (["get", "empty", "5000"], "get "),
        (["add", "n", "5"], "add 5"),
        (["add", "n", "-7"], "add -2"),
        (["get", "n", "5000"], f"get {b'-2'.hex()}"),
        (["cas", "c", "", b"first".hex()], f"cas {b'first'.hex()}"),
        (["cas", "c", b"wrong".hex(), b"second".hex()], f"cas {b'first'.hex()}"),
        (["cas", "c", b"first".hex(), b"third".hex()], f"cas {b'third'.hex()}"),
        # torch's own answer for a missing key with a non-empty `expected`: `expected`, no store.
        (["cas", "missing", b"exp".hex(), b"des".hex()], f"cas {b'exp'.hex()}"),
        (["check", "missing"], "check false"),
        (["check", "k,n,empty"], "check true"),
        (["wait", "k,n", "5000"], "wait ok"),
        # 1.13 has no CANCEL_WAIT: the client drops the connection and reconnects on next use.
        (["wait", "never", "300"], "wait TimeoutError"),
        (["numkeys"], "numkeys 5"),  # k, bin, empty, n, c
        (["delete", "k"], "delete true"),
        (["delete", "k"], "delete false"),
        (["numkeys"], "numkeys 4"),
        # 1.13 has neither MULTI_SET nor MULTI_GET: TcpStore sends one SET / GET per key.
        (["multiset", f"m1={b'1'.hex()},m2="], "multiset ok"),
        (["multiget", "m2,m1", "5000"], f"multiget ,{b'1'.hex()}"),
        (["append", "k", "00"], "append ProtocolError"),  # refused before anything is sent
        (["get", "m1", "5000"], f"get {b'1'.hex()}"),
        # torch's server closes the connection when ADD meets a non-number; the client reconnects.
        (["set", "word", b"abc".hex()], "set ok"),
        (["add", "word", "1"], "add ConnectionError"),
        (["numkeys"], "numkeys 7"),
    ]
    ops = [arg for op, _ in steps for arg in op]
    lines = run_probe(args.probe, port, ops, dialect="113")
    for i, (op, want) in enumerate(steps):
        got = lines[i] if i < len(lines) else "(no line)"
        c.equal(got, want, "store_probe " + " ".join(a if len(a) <= 24 else a[:24] + "..." for a in op))
    c.equal(len(lines), len(steps), "one line per operation")

    # torch's client sees what dtrun's client wrote, with torch's "/" key prefix on both sides.
    c.equal(master.get("bin"), every, "torch reads the bytes dtrun's client set")
    c.equal(master.get("n"), b"-2", "torch reads dtrun's counter")
    c.equal(master.get("c"), b"third", "torch reads the compare_set result")
    c.equal(master.get("m2"), b"", "torch reads an empty value set through multiset")
    c.equal(master.num_keys(), 7, "torch counts the same keys")

    # ... and dtrun's client sees what torch wrote.
    master.set("from-torch", b"\x00\x01\x02")
    master.add("torch-counter", 41)
    lines = run_probe(args.probe, port,
                      ["get", "from-torch", "5000", "add", "torch-counter", "1"], dialect="113")
    c.equal(lines, ["get 000102", "add 42"], "store_probe reads torch's keys")

    # Several dtrun clients wait on one key; torch's client sets it.
    cmd = [args.probe, "--host", "127.0.0.1", "--port", str(port), "--dialect", "113",
           "add", "ready", "1", "wait", "go", "60000", "get", "go", "5000"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(N_WAITERS)]
    c.poll(lambda: master.add("ready", 0) == N_WAITERS, 60, "every waiting store_probe connected")
    go = b"\xffgo"
    master.set("go", go)
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        outs.append(out.splitlines())
    c.equal(sorted(o[0] for o in outs), [f"add {i}" for i in range(1, N_WAITERS + 1)],
         "each waiting probe counted itself in")
    c.equal([o[1:] for o in outs], [["wait ok", f"get {go.hex()}"]] * N_WAITERS,
         f"{N_WAITERS} store_probes woken by one set")
    c.equal([proc.returncode for proc in procs], [0] * N_WAITERS, "waiting probes exit 0")

    c.finish()


if __name__ == "__main__":
    main()
