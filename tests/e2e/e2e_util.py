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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
# wait_for: a poll with a deadline that fails naming what it waited for.
from dtrun_testing import Checks, events, run, skip  # noqa: E402,F401  (re-exported)
from dtrun_testing import poll as wait_for  # noqa: E402,F401

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


def Checker():
    """The e2e tests' checker: every check counted and printed, the failures the exit code."""
    return Checks(collect=True)


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
