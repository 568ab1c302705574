#!/usr/bin/python3
"""e2e:ddp_parity: examples/ddp_train.py under dtrun and under torchrun 1.13 ends equal.

Both launchers run the same gloo DDP job (2 workers, --max_restarts=1) with one injected
failure: rank 1 raises at step 12 of the first attempt, after the checkpoint of step 10. Each
run must restart once, resume both ranks from ckpt_10.pt and finish; the final parameters of
the two runs must be equal tensor by tensor (torch.equal) and by SHA-256. The dtrun run uses
agent-store mode (--standalone): the workers' env:// store is dtrun's own.

The two launches run at the same time (independent directories and free ports).
"""
import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import dtrun_testing as dt  # noqa: E402
import e2e_util  # noqa: E402

STEPS, CKPT_EVERY, FAIL_AT = 20, 5, 12
RESUME_FROM = FAIL_AT // CKPT_EVERY * CKPT_EVERY  # 10


def progress(ckpt_dir):
    path = os.path.join(ckpt_dir, "progress.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_run(name, code, text, ckpt_dir, agent_store, c):
    if not c.equal(code, 0, f"{name}: exit code"):
        print(text[-6000:])
    events = progress(ckpt_dir)

    def which(event, **match):
        return [e for e in events
                if e["event"] == event and all(e.get(k) == v for k, v in match.items())]

    for rank in (0, 1):
        c.equal(len(which("started", rank=rank, restart_count=0, step=0)), 1,
                f"{name}: rank {rank} started at step 0 in attempt 0")
        resumed = which("resumed", rank=rank, restart_count=1)
        c.equal([(e["step"], e["checkpoint"]) for e in resumed],
                [(RESUME_FROM, f"ckpt_{RESUME_FROM}.pt")],
                f"{name}: rank {rank} resumed from the checkpoint after the restart")
        finished = which("finished", rank=rank)
        c.equal([e["restart_count"] for e in finished], [1],
                f"{name}: rank {rank} finished once, seeing TORCHELASTIC_RESTART_COUNT=1")
        for e in which("started", rank=rank):
            c.equal(e["agent_store"], agent_store,
                    f"{name}: rank {rank} TORCHELASTIC_USE_AGENT_STORE in attempt "
                    f"{e['restart_count']}")
    c.equal(len(which("failing", rank=1, restart_count=0, step=FAIL_AT)), 1,
            f"{name}: rank 1 failed at step {FAIL_AT} in attempt 0")
    return {e["rank"]: e["sha256"] for e in which("finished")}


def main():
    args = e2e_util.comparison_args()
    import torch

    example = os.path.join(args.source_dir, "examples", "ddp_train.py")
    c = dt.Checks(collect=True)
    with tempfile.TemporaryDirectory(prefix="dtrun-ddp-parity-") as work:
        env = dict(os.environ)
        for k in list(env):
            if k.startswith(("PET_", "DTRUN_", "TORCHELASTIC_")) or k == "OMP_NUM_THREADS":
                del env[k]
        env["TMPDIR"] = work
        script = [example, f"--steps={STEPS}", f"--ckpt-every={CKPT_EVERY}",
                  f"--fail-at-step={FAIL_AT}", "--fail-rank=1"]
        runs = {
            "dtrun": [args.dtrun, "--standalone", "--nproc-per-node=2", "--max-restarts=1",
                      "--python", sys.executable, "--event-log",
                      os.path.join(work, "dtrun-events.jsonl")],
            "torchrun": e2e_util.torchrun_cmd() + e2e_util.standalone_like("ddp-parity") + [
                "--nproc_per_node=2", "--max_restarts=1", "--monitor_interval=0.1"],
        }
        results = {}

        def launch(name):
            ckpt = os.path.join(work, name)
            cmd = runs[name] + script + [f"--ckpt-dir={ckpt}"]
            try:
                results[name] = dt.run(cmd, env, work, 280,
                                             os.path.join(work, name + ".log"))
            except AssertionError as e:
                results[name] = (None, str(e))

        threads = [threading.Thread(target=launch, args=(n,)) for n in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        digests = {}
        for name, agent_store in (("dtrun", "True"), ("torchrun", "False")):
            code, text = results[name]
            digests[name] = check_run(name, code, text, os.path.join(work, name), agent_store, c)

        # dtrun's own account: two rounds, one restart.
        events = []
        path = os.path.join(work, "dtrun-events.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                events = [json.loads(line) for line in f if line.strip()]
        c.equal([e["round"] for e in events if e["event"] == "rendezvous_done"], [0, 1],
                "dtrun: rendezvous rounds")

        # The same final parameters, bit for bit.
        c.check(len(set(digests["dtrun"].values()) | set(digests["torchrun"].values())) == 1,
                f"SHA-256 of the final parameters, every rank of both runs: {digests}")
        finals = {}
        for name in runs:
            p = os.path.join(work, name, "final.pt")
            if c.check(os.path.exists(p), f"{name}: wrote {p}"):
                finals[name] = torch.load(p)
        if len(finals) == 2:
            d, t = finals["dtrun"], finals["torchrun"]
            c.equal(sorted(d), sorted(t), "final.pt: the same tensors")
            for k in sorted(set(d) & set(t)):
                c.check(torch.equal(d[k], t[k]), f"final.pt: {k} equal (torch.equal)")
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main())
