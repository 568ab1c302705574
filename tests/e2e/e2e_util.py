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
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from dtrun_testing import skip  # noqa: E402

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
