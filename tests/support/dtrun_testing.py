"""What every python test of dtrun shares: one checker, one poll, one free port, skipping,
processes and event logs. Standard library only (the tests run under /usr/bin/python3, the
interpreter that sees Debian's torch).

    sys.path.insert(0, str(<repo> / "tests" / "support"))
    import dtrun_testing as dt

Checks: every check is counted. A Checks either stops at the first failure (raises Failed: the
elastic harness, whose messages say what went wrong) or goes on and reports every failure at
the end (collect=True: the comparisons with torch, which show all mismatches in one run, each
check printed as "ok    what" or "FAIL  what"). Either way a run that made no check fails: a
test that asserts nothing cannot fail. The module's own CHECKS (check, poll, require_checks) is
the stopping kind.

Waiting is polling with a deadline (wait_for, Checks.poll), never a sleep that hopes.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

SKIP = 77  # ctest's SKIP_RETURN_CODE for every python test


class Skip(Exception):
    """The test cannot run here; the message says why (ctest reports SKIP)."""


class Failed(AssertionError):
    """A check failed; the message says which."""


def skip(why):
    """Ends the test as skipped: prints why, exits with SKIP."""
    print(f"SKIP: {why}", flush=True)
    sys.exit(SKIP)


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def short(value, limit=160):
    """repr() cut to `limit` characters, for lines about long values."""
    r = repr(value)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(r)} characters)"


def wait_for(cond, timeout, interval=0.02):
    """Calls `cond` until it returns something truthy, which is returned, or `timeout` seconds
    pass (None). The pause between calls grows from 1 ms to `interval`."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, interval)


class Checks:
    def __init__(self, collect=False, echo=None):
        """collect=False: a failed check raises Failed; True: it is counted and the run goes
        on (exit_code() or finish() at the end). echo: print passed checks too (default: when
        collecting; a stopping Checks whose messages say what passes may ask for it)."""
        self.collect = collect
        self.echo = collect if echo is None else echo
        self.count = 0
        self.failures = 0

    def check(self, ok, what):
        """One check; returns bool(ok)."""
        self.count += 1
        if not ok:
            self.failures += 1
            print("FAIL  " + what, flush=True)
            if not self.collect:
                raise Failed(what)
        elif self.echo:
            print("ok    " + what, flush=True)
        return bool(ok)

    def equal(self, actual, expected, what):
        if actual == expected:
            return self.check(True, f"{what}: {short(actual)}")
        return self.check(False, f"{what}: got {actual!r}, want {expected!r}")

    def raises(self, fn, exc_type, what, contains=None):
        """Checks that fn() raises exc_type, with `contains` in its text when given."""
        try:
            fn()
        except exc_type as e:
            if contains is None or contains in str(e):
                return self.check(True, f"{what}: raised {type(e).__name__}: {e}")
            return self.check(False, f"{what}: raised {type(e).__name__}: {e!r}, expected text "
                                     f"{contains!r}")
        except Exception as e:
            return self.check(False, f"{what}: raised {type(e).__name__}: {e!r}, want "
                                     f"{exc_type.__name__}")
        return self.check(False, f"{what}: did not raise {exc_type.__name__}")

    def poll(self, cond, timeout, what, interval=0.02):
        """wait_for(cond, timeout) as one check: returns cond's truthy value; when `timeout`
        seconds pass first, the check fails naming `what`."""
        value = wait_for(cond, timeout, interval)
        if value:
            self.check(True, what)
        else:
            self.check(False, f"timed out after {timeout} s waiting for {what}")
        return value

    def require_checks(self, case="the test"):
        """Raises Failed when no check was made: a case that asserts nothing would pass whatever
        dtrun did."""
        if self.count == 0:
            raise Failed(f"{case} made no check: a test that asserts nothing cannot fail")

    def exit_code(self):
        """0 when every check passed and there was one; else 1 (saying why)."""
        if self.count == 0:
            print("FAIL  no check was made: a test that asserts nothing cannot fail", flush=True)
            return 1
        print(f"{self.failures} of {self.count} check(s) failed" if self.failures else
              f"all {self.count} checks passed", flush=True)
        return 1 if self.failures else 0

    def finish(self):
        """Exits with exit_code()."""
        sys.exit(self.exit_code())


CHECKS = Checks()
check = CHECKS.check
poll = CHECKS.poll
require_checks = CHECKS.require_checks


def free_port(host="127.0.0.1", *others):
    """A port that was free a moment ago on `host` and on each of `others` (bound to 0, read
    back, released): for programs that take a port number rather than a socket. Tests that can
    start `dtrun store --port 0` and read its port do that instead."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        try:
            for other in others:
                with socket.socket() as s:
                    s.bind((other, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no port free on all of {[host, *others]}")


def pid_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def read_jsonl(path):
    """The JSON objects of a file with one per line (an event log); [] while it does not
    exist."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def events(path, name=None):
    """The records of the event log at `path` (--event-log), only those named `name` if given."""
    return [e for e in read_jsonl(path) if name is None or e["event"] == name]


def run(cmd, env, cwd, timeout, log_path):
    """Runs cmd to the end; returns (exit code, stdout+stderr). Output also goes to `log_path`.

    The launcher gets a session of its own; if it outlives `timeout`, that whole process group
    is killed (torchrun 1.13's workers share it; dtrun's die with dtrun) and Failed is raised.
    """
    print("$ " + " ".join(cmd), flush=True)
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    with open(log_path, "rb") as f:
        text = f.read().decode(errors="replace")
    if code is None:
        raise Failed(f"{cmd[0]} did not finish within {timeout} s:\n{text}")
    return code, text
