#!/usr/bin/python3
"""Runs Debian's torchrun (torch 1.13, python3-torch) unchanged, as the reference dtrun is
compared with in the benchmarks and the side-by-side tests.

On Python 3.11 torch 1.13's torchrun cannot start: its Std.from_str turns the value "0" of
--redirects/--tee into None, because iterating an IntFlag no longer yields its zero member. This
script replaces only that parser with one that converts the digits directly, then calls
torch.distributed.run.main as the torchrun console script would.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _std_from_str(cls, text):
    if re.match(api._VALUE_REGEX, text):
        return cls(int(text))
    if re.match(api._MAPPING_REGEX, text):
        pairs = (item.split(":") for item in text.split(","))
        return {int(rank): cls(int(value)) for rank, value in pairs}
    raise ValueError(f"not a --redirects/--tee value: {text!r}")


api.Std.from_str = classmethod(_std_from_str)

from torch.distributed.run import main  # noqa: E402  (after the fix, as the console script)

if __name__ == "__main__":
    sys.exit(main())
