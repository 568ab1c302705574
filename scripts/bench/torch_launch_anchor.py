#!/usr/bin/python3
"""Runs Debian's `python -m torch.distributed.launch` (torch 1.13, python3-torch) unchanged, as
the reference `dtrun launch` is compared with.

torch.distributed.launch is torchrun's parser plus --use_env, so it has torchrun's Python 3.11
problem; importing torchrun_anchor (next to this file) applies the same one fix, then
torch.distributed.launch.main runs as `python -m torch.distributed.launch` would run it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchrun_anchor  # noqa: E402,F401  (the Std.from_str fix, nothing else)
from torch.distributed.launch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
