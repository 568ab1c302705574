#!/usr/bin/python3
"""`dtrun store` at its descriptor limit (RLIMIT_NOFILE 64, hard): connections past what the
process can hold are refused at once (accepted with the spare descriptor and closed, so the
client hears "no" now instead of waiting in the kernel's queue), with a few warning lines and
one count instead of a line each; the connections it took stay served, and once they go it
serves new clients again. The store never dies.

  store_fd_limit_test.py --dtrun build/bin/dtrun          (exit 0 pass, 1 fail)
"""
import argparse
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

LIMIT = 64
CLIENTS = 150
DEADLINE_S = 20
VALIDATE = b"\x00" + struct.pack("<I", 0x3C85F7CE)


def ping(nonce):
    return b"\x0d" + struct.pack("<I", nonce)  # torch 2.x PING


def poll(cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def closed_by_peer(s):
    """True when the server closed `s` (EOF or reset); never blocks."""
    r, _, _ = select.select([s], [], [], 0)
    if not r:
        return False
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def served(s, nonce):
    s.sendall(VALIDATE + ping(nonce))
    s.settimeout(DEADLINE_S)
    got = b""
    while len(got) < 4:
        chunk = s.recv(4 - len(got))
        if not chunk:
            return False
        got += chunk
    return struct.unpack("<I", got)[0] == nonce


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtrun", required=True)
    args = ap.parse_args()
    checks = 0

    def check(cond, message):
        nonlocal checks
        checks += 1
        if not cond:
            raise AssertionError(message)

    tmp = tempfile.mkdtemp(prefix="dtrun-fdlimit-")
    out, err = open(os.path.join(tmp, "out"), "w+"), open(os.path.join(tmp, "err"), "w+")
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))  # noqa: E731
    store = subprocess.Popen([args.dtrun, "store", "--host", "127.0.0.1", "--port", "0"],
                             stdout=out, stderr=err, preexec_fn=limit)
    clients = []
    try:
        addr = poll(lambda: open(out.name).read().partition("\n")[0] or None, DEADLINE_S,
                    "the store's address")
        port = int(addr.rsplit(":", 1)[1])
        started = {}
        for i in range(CLIENTS):
            s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
            clients.append(s)
            started[s] = time.monotonic()
        # Every client is either served or refused; the refused hear it at once.
        refused_after = {}

        def settled():
            for s in clients:
                if s not in refused_after and closed_by_peer(s):
                    refused_after[s] = time.monotonic() - started[s]
            return len(refused_after) >= CLIENTS - LIMIT

        poll(settled, DEADLINE_S, f"at least {CLIENTS - LIMIT} refusals")
        kept = [s for s in clients if s not in refused_after]
        print(f"{len(refused_after)} of {CLIENTS} connections refused, {len(kept)} kept; "
              f"slowest refusal {max(refused_after.values()) * 1000:.0f} ms after connect")
        check(store.poll() is None, "the store died at its descriptor limit")
        check(0 < len(kept) < LIMIT, f"{len(kept)} connections kept with {LIMIT} descriptors")
        check(all(served(s, 100 + i) for i, s in enumerate(kept)),
              "a connection the store took is not served")
        # Once they go, new clients are served again.
        for s in clients:
            s.close()
        clients = []

        def fresh():
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as s:
                try:
                    return served(s, 7)
                except OSError:
                    return False

        poll(fresh, DEADLINE_S, "a new client served after the others left")
        # One warning per refusal would be 86 lines; the limiter writes 5 and a count.
        text = poll(lambda: (lambda t: t if "more in the last" in t else None)(
            open(err.name).read()), DEADLINE_S, "the count of suppressed warnings")
        lines = [ln for ln in text.splitlines() if "no file descriptors left" in ln]
        print(f"warning lines naming the cause: {len(lines)}")
        check(1 <= len(lines) <= 5, f"{len(lines)} warning lines for the refusals:\n{text}")
        store.send_signal(signal.SIGTERM)
        check(store.wait(DEADLINE_S) == 0, f"the store exited {store.returncode}")
    finally:
        for s in clients:
            s.close()
        if store.poll() is None:
            store.kill()
            store.wait()
    if checks == 0:
        raise AssertionError("no check ran")
    print(f"PASS ({checks} checks)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"FAIL: {e}", flush=True)
        sys.exit(1)
