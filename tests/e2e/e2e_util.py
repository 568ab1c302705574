"""What the python end-to-end tests that compare dtrun with torch share (run by /usr/bin/python3,
which sees torch); checks, runs and skips are tests/support/dtrun_testing.py's.

Torchrun is Debian's torch 1.13 through the measurement anchor, which patches only the
Python 3.11 parsing bug (Std.from_str) before calling torch.distributed.run.main. Its
--standalone always uses the fixed port 29400, so tests ask for the same thing on a free port
instead (--rdzv_backend=c10d --rdzv_endpoint=localhost:0, what newest torchrun's --standalone
does), which lets tests run in parallel.
"""
import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from dtrun_testing import events, run, skip  # noqa: E402,F401  (re-exported for the e2e tests)

ANCHOR = os.environ.get(
    "DTRUN_TORCHRUN_ANCHOR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "bench",
                 "torchrun_anchor.py"))


def require_torch_and_anchor():
    """Exits with SKIP, saying why, unless torch imports here and the torchrun anchor exists."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        skip(f"{sys.executable} cannot import torch ({e}); install python3-torch")
    if not os.path.exists(ANCHOR):
        skip(f"the torchrun anchor {ANCHOR} does not exist (set DTRUN_TORCHRUN_ANCHOR)")


def comparison_args():
    """The command line of a test that compares dtrun with torch (--dtrun, --source-dir); exits
    with SKIP, saying why, unless torch imports here and the torchrun anchor exists."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtrun", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    require_torch_and_anchor()
    return args


def torchrun_cmd():
    return [sys.executable, ANCHOR]


def standalone_like(run_id):
    """Both launchers' arguments for a single-node c10d job on a free port."""
    return ["--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", f"--rdzv_id={run_id}"]


def named(evs, name):
    """The records of event `name`, in order."""
    return [e for e in evs if e["event"] == name]


def wait_for(cond, timeout, what):
    """Polls `cond` until it returns something truthy (returned) or `timeout` seconds pass
    (AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


class Checker:
    """Collects failed checks, prints each, and gives the exit code at the end: a failure when a
    check failed, or when none was made (a test that asserts nothing cannot fail)."""

    def __init__(self):
        self.failures = 0
        self.count = 0

    def check(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        self.count += 1
        if not ok:
            self.failures += 1
        return ok

    def equal(self, actual, expected, what):
        return self.check(actual == expected, f"{what}: {actual!r} == {expected!r}")

    def exit_code(self):
        if self.count == 0:
            print("FAIL  no check was made: a test that asserts nothing cannot fail", flush=True)
            return 1
        print(f"{self.failures} of {self.count} check(s) failed" if self.failures else
              f"all {self.count} checks passed")
        return 1 if self.failures else 0


def cases(namespace):
    """A test script's cases: its functions named case_<name>, by <name>."""
    return {name[5:]: fn for name, fn in namespace.items() if name.startswith("case_")}


def run_case(case, k, work):
    """Runs one case (`k.c` its Checker) in the directory `work`, then exits with the checker's
    status; a wait that timed out (AssertionError) is a failed check. `work` is removed when
    every check passed, and kept and named otherwise."""
    try:
        case(k)
    except AssertionError as e:
        k.c.check(False, str(e))
    finally:
        if k.c.failures == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}")
    sys.exit(k.c.exit_code())
