"""Helpers for the store interop tests: run under Debian's /usr/bin/python3 (python3-torch 1.13).

A test that cannot import torch exits with SKIP after printing why; ctest maps that code to
SKIP (SKIP_RETURN_CODE). Checks are tests/support/dtrun_testing.py's, collected rather than
raised (Checks(collect=True)), so one run reports every mismatch; finish() turns them into the
exit status.
"""

import os
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from dtrun_testing import SKIP  # noqa: E402


def require_torch():
    """Returns torch.distributed, or exits with SKIP saying why it is unavailable."""
    try:
        import torch  # noqa: F401
        import torch.distributed as dist

        dist.TCPStore  # noqa: B018  (1.13 has it; a CPU-only build without c10d does not)
    except Exception as e:  # ImportError, or an AttributeError from a build without distributed
        print(f"SKIPPED: {sys.executable} cannot use torch.distributed.TCPStore ({e!r}); "
              "install Debian's python3-torch", flush=True)
        sys.exit(SKIP)
    print(f"torch {torch.__version__} from {os.path.dirname(torch.__file__)}", flush=True)
    return dist


def require_torch_timer():
    """Returns torch.distributed.elastic.timer, or exits with SKIP saying why it is
    unavailable."""
    try:
        import torch
        from torch.distributed.elastic import timer
    except Exception as e:
        print(f"SKIPPED: {sys.executable} cannot import torch.distributed.elastic.timer ({e!r})")
        sys.exit(SKIP)
    print(f"torch {torch.__version__}", flush=True)
    return timer


def read_line(pipe, timeout):
    """One line from a pipe within `timeout` seconds, or None."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = pipe.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            return None
        buf += chunk
    return buf.decode().strip()


class DtrunStore:
    """`dtrun store --host 127.0.0.1 --port 0` as a child process; its log goes to a temp file."""

    def __init__(self, dtrun, extra_args=()):
        self.log_file = tempfile.NamedTemporaryFile(prefix="dtrun-store-", suffix=".log")
        self.proc = subprocess.Popen(
            [dtrun, "store", "--host", "127.0.0.1", "--port", "0", *extra_args],
            stdout=subprocess.PIPE, stderr=self.log_file)
        line = read_line(self.proc.stdout, 30)
        if not line:
            self.proc.kill()
            raise RuntimeError(f"dtrun store printed no address; log:\n{self.log()}")
        host, _, port = line.rpartition(":")
        self.host, self.port = host, int(port)
        print(f"dtrun store listening on {host}:{port} (pid {self.proc.pid})", flush=True)

    def log(self):
        with open(self.log_file.name, "r", errors="replace") as f:
            return f.read()

    def stop(self, timeout=30):
        """SIGTERM, then the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def run_probe(probe, port, ops, dialect="113", timeout=120):
    """Runs store_probe with `ops` (a list of strings); returns its stdout lines."""
    cmd = [probe, "--host", "127.0.0.1", "--port", str(port), "--dialect", dialect, *ops]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.stderr:
        print("store_probe stderr:\n  " + r.stderr.strip().replace("\n", "\n  "), flush=True)
    if r.returncode != 0:
        raise RuntimeError(f"store_probe exited {r.returncode}: {r.stdout}")
    return r.stdout.splitlines()
