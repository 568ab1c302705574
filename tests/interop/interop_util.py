"""Helpers for the store interop tests: run under Debian's /usr/bin/python3 (python3-torch 1.13).

A test that cannot import torch exits with SKIP_CODE after printing why; ctest maps that code to
SKIP (SKIP_RETURN_CODE). Checks are collected rather than raised, so one run reports every
mismatch; finish() turns them into the exit status.
"""

import os
import select
import signal
import subprocess
import sys
import tempfile
import time

SKIP_CODE = 77


def require_torch():
    """Returns torch.distributed, or exits with SKIP_CODE saying why it is unavailable."""
    try:
        import torch  # noqa: F401
        import torch.distributed as dist

        dist.TCPStore  # noqa: B018  (1.13 has it; a CPU-only build without c10d does not)
    except Exception as e:  # ImportError, or an AttributeError from a build without distributed
        print(f"SKIPPED: {sys.executable} cannot use torch.distributed.TCPStore ({e!r}); "
              "install Debian's python3-torch", flush=True)
        sys.exit(SKIP_CODE)
    print(f"torch {torch.__version__} from {os.path.dirname(torch.__file__)}", flush=True)
    return dist


def require_torch_timer():
    """Returns torch.distributed.elastic.timer, or exits with SKIP_CODE saying why it is
    unavailable."""
    try:
        import torch
        from torch.distributed.elastic import timer
    except Exception as e:
        print(f"SKIPPED: {sys.executable} cannot import torch.distributed.elastic.timer ({e!r})")
        sys.exit(SKIP_CODE)
    print(f"torch {torch.__version__}", flush=True)
    return timer


def short(value, limit=160):
    """repr() cut to `limit` characters, for log lines about long values."""
    r = repr(value)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(r)} characters)"


class Checks:
    def __init__(self):
        self.failures = 0
        self.count = 0

    def eq(self, got, want, what):
        self.count += 1
        if got == want:
            print(f"ok    {what}: {short(got)}", flush=True)
        else:
            self.failures += 1
            print(f"FAIL  {what}: got {got!r}, want {want!r}", flush=True)

    def true(self, cond, what):
        self.eq(bool(cond), True, what)

    def raises(self, fn, exc_type, what, contains=None):
        self.count += 1
        try:
            fn()
        except exc_type as e:
            if contains is None or contains in str(e):
                print(f"ok    {what}: raised {type(e).__name__}: {e}", flush=True)
                return
            self.failures += 1
            print(f"FAIL  {what}: raised {type(e).__name__}: {e!r}, expected text {contains!r}",
                  flush=True)
            return
        except Exception as e:
            self.failures += 1
            print(f"FAIL  {what}: raised {type(e).__name__}: {e!r}, want {exc_type.__name__}",
                  flush=True)
            return
        self.failures += 1
        print(f"FAIL  {what}: did not raise {exc_type.__name__}", flush=True)

    def finish(self):
        """Exits 1 when a check failed, or when none was made (a test that asserts nothing
        cannot fail); else 0."""
        print(f"{self.count - self.failures}/{self.count} checks passed", flush=True)
        if self.count == 0:
            print("FAIL  no check was made: a test that asserts nothing cannot fail", flush=True)
        sys.exit(1 if self.failures or self.count == 0 else 0)


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


def poll_until(cond, timeout=30.0):
    """Polls `cond` with growing pauses until it is true (True) or `timeout` passes (False)."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
