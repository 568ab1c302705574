#!/usr/bin/python3
"""e2e:torch_launch_vs_torch: `dtrun launch` against torch's own `python -m torch.distributed.launch`.

Both launchers run the same tutorial-style script (tutorial_local_rank.py: argparse
--local_rank, gloo through env://, one all-reduce) with the same command line, once as the
tutorials wrote it and once with --use_env. Torch's side is Debian's torch 1.13 through
scripts/bench/torch_launch_anchor.py (the Python 3.11 fix of torchrun_anchor.py, nothing else).
Each rank writes what it saw: its arguments, the parsed --local_rank, LOCAL_RANK, RANK,
WORLD_SIZE and the all-reduce result. They must be the same under both, and what torch 1.13
does: --local_rank=N first without --use_env, nothing added with it. dtrun's notice (what to
change to move to plain dtrun) must appear once, not once per rank.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import dtrun_testing as dt  # noqa: E402
import e2e_util  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "tutorial_local_rank.py")
ANCHOR = os.path.join(HERE, "..", "..", "scripts", "bench", "torch_launch_anchor.py")
NOTICE = "torch.distributed.launch is deprecated in favour of torchrun"


def launch(name, launcher, mode, work, c):
    out = os.path.join(work, name)
    os.makedirs(out)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": out, "OUT": out}
    cmd = launcher + mode + ["--nproc_per_node=2", f"--master_port={dt.free_port()}", SCRIPT,
                             "--epochs", "3", "extra words"]
    code, text = dt.run(cmd, env, work, 240, os.path.join(work, name + ".log"))
    if not c.equal(code, 0, f"{name}: exit code"):
        print(text)
    seen = {}
    for rank in (0, 1):
        try:
            with open(os.path.join(out, f"rank{rank}.json")) as f:
                seen[rank] = json.load(f)
        except OSError as e:
            c.check(False, f"{name}: rank {rank} wrote what it saw ({e})")
    return seen, text


def main():
    args = e2e_util.comparison_args()
    c = dt.Checks(collect=True)
    with tempfile.TemporaryDirectory(prefix="dtrun-launch-") as work:
        for mode in ([], ["--use_env"]):
            tag = "use_env" if mode else "local_rank"
            dtrun, dtrun_text = launch(f"dtrun-{tag}", [args.dtrun, "launch"], mode, work, c)
            torch, torch_text = launch(f"torch-{tag}", [sys.executable, ANCHOR], mode, work, c)
            for rank in (0, 1):
                want_argv = ([] if mode else [f"--local_rank={rank}"]) + ["--epochs", "3",
                                                                          "extra words"]
                for who, seen in (("dtrun launch", dtrun), ("torch.distributed.launch", torch)):
                    s = seen.get(rank, {})
                    c.equal(s.get("argv"), want_argv, f"{tag}: {who}: rank {rank}'s arguments")
                    c.equal(s.get("local_rank_arg"), -1 if mode else rank,
                            f"{tag}: {who}: rank {rank}'s args.local_rank")
                    c.equal((s.get("LOCAL_RANK"), s.get("RANK"), s.get("WORLD_SIZE")),
                            (str(rank), str(rank), "2"), f"{tag}: {who}: rank {rank}'s ranks")
                    c.equal(s.get("allreduce"), 1, f"{tag}: {who}: rank {rank}'s all-reduce")
                c.equal(dtrun.get(rank), torch.get(rank),
                        f"{tag}: rank {rank} saw the same under both launchers")
            c.equal(dtrun_text.count(NOTICE), 1, f"{tag}: dtrun launch's notice, once")
            c.check("torch.distributed.launch is deprecated" in torch_text,
                    f"{tag}: torch's own deprecation warning (the reference prints one too)")
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main())
