#!/usr/bin/python3
"""e2e:env_vs_torchrun: the worker environment under dtrun and under torchrun 1.13, key by key.

The same command line (torchrun's underscore spellings, which dtrun accepts too) runs under
both launchers: two workers print their whole environment, local rank 1 fails once, so the
group restarts and prints it again. The launchers' own environment is the same minimal one,
with PET_MAX_RESTARTS=1 standing in for --max_restarts (both must read it). Each run has its
own directory (TMPDIR, and OUT for the workers' files), shown as <run> in the comparison.

Keys that must match exactly: everything the launcher passes through or sets, except
  MASTER_PORT                        a different free port in every run
  TORCHELASTIC_ERROR_FILE            compared by shape: <run>/torchelastic_*/<id>_*/attempt_N/L/error.json
  TORCHELASTIC_USE_AGENT_STORE       dtrun's store serves the workers ("True"); 1.13's c10d
                                     says "False". With --no-agent-store dtrun must say "False".
  MASTER_ADDR                        dtrun's store host vs 1.13's rank-0 host: both non-empty
and the two variables newest torchrun adds and 1.13 does not, which dtrun sets:
  TORCH_NCCL_ASYNC_ERROR_HANDLING=1, TORCHELASTIC_SIGNALS_TO_HANDLE (starts SIGTERM,SIGINT,SIGHUP,SIGQUIT).
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import dtrun_testing as dt  # noqa: E402
import e2e_util  # noqa: E402

# The file appears complete (rename), so rank 1 cannot see a half-written one below.
WORKER = ('f="$OUT/env.$TORCHELASTIC_RESTART_COUNT.$LOCAL_RANK"; env -0 > "$f.tmp"; mv "$f.tmp" "$f"; '
          'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$LOCAL_RANK" = 1 ]; then '
          # Wait for rank 0's file, or the agent may stop rank 0 before it writes it.
          '  while [ ! -e "$OUT/env.0.0" ]; do sleep 0.01; done; exit 3; '
          'fi')
NOT_COMPARED = {"MASTER_PORT", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE",
                "MASTER_ADDR"}
DTRUN_ONLY = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE"}


def read_env(path, run_dir):
    """The environment a worker wrote, with this run's own directory shown as <run>."""
    with open(path, "rb") as f:
        entries = f.read().decode().split("\0")
    return {k: v.replace(run_dir, "<run>") for k, v in (e.split("=", 1) for e in entries if e)}


def launch(name, launcher, extra, work, c):
    out = os.path.join(work, name)
    os.makedirs(out)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           # Python would otherwise add LC_CTYPE (PEP 538) to torchrun's environment.
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "TMPDIR": out, "OUT": out, "FOO": "bar baz", "PET_MAX_RESTARTS": "1"}
    cmd = launcher + extra + e2e_util.standalone_like("envtest") + [
        "--nproc_per_node=2", "--monitor_interval=0.1", "--no_python", "/bin/sh", "-c", WORKER]
    code, text = dt.run(cmd, env, work, 240, os.path.join(work, name + ".log"))
    if not c.equal(code, 0, f"{name}: exit code"):
        print(text)
    envs = {}
    for r in (0, 1):
        for lr in (0, 1):
            path = os.path.join(out, f"env.{r}.{lr}")
            if c.check(os.path.exists(path), f"{name}: worker {lr} of round {r} wrote {path}"):
                envs[(r, lr)] = read_env(path, out)
    return envs


def error_file_shape(value, restart, lr):
    return re.fullmatch(r"<run>/torchelastic_[^/]+/envtest_[a-z0-9_]{8}/attempt_" +
                        f"{restart}/{lr}/error\\.json", value) is not None


def main():
    args = e2e_util.comparison_args()
    c = dt.Checks(collect=True)
    with tempfile.TemporaryDirectory(prefix="dtrun-env-vs-torchrun-") as work:
        torch_envs = launch("torchrun", e2e_util.torchrun_cmd(), [], work, c)
        for mode, extra, agent_store in (("dtrun", [], "True"),
                                         ("dtrun-no-agent-store", ["--no_agent_store"], "False")):
            dtrun_envs = launch(mode, [args.dtrun], extra, work, c)
            for key, t in sorted(torch_envs.items()):
                d = dtrun_envs.get(key)
                if d is None:
                    continue
                r, lr = key
                where = f"{mode}: round {r}, local rank {lr}"
                for k in sorted(set(t) | set(d)):
                    if k in NOT_COMPARED or k in DTRUN_ONLY:
                        continue
                    c.equal(d.get(k), t.get(k), f"{where}: {k}")
                c.equal(d.get("TORCHELASTIC_USE_AGENT_STORE"), agent_store,
                        f"{where}: TORCHELASTIC_USE_AGENT_STORE")
                c.equal(t.get("TORCHELASTIC_USE_AGENT_STORE"), "False",
                        f"torchrun {where}: TORCHELASTIC_USE_AGENT_STORE (1.13, c10d)")
                c.check(error_file_shape(d.get("TORCHELASTIC_ERROR_FILE", ""), r, lr),
                        f"{where}: TORCHELASTIC_ERROR_FILE {d.get('TORCHELASTIC_ERROR_FILE')}")
                c.check(error_file_shape(t.get("TORCHELASTIC_ERROR_FILE", ""), r, lr),
                        f"torchrun {where}: TORCHELASTIC_ERROR_FILE "
                        f"{t.get('TORCHELASTIC_ERROR_FILE')}")
                c.check(bool(d.get("MASTER_ADDR")) and bool(t.get("MASTER_ADDR")),
                        f"{where}: MASTER_ADDR set (dtrun {d.get('MASTER_ADDR')!r}, torchrun "
                        f"{t.get('MASTER_ADDR')!r})")
                c.check((d.get("MASTER_PORT") or "").isdigit(), f"{where}: MASTER_PORT a number")
                c.equal(d.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1",
                        f"{where}: TORCH_NCCL_ASYNC_ERROR_HANDLING (newest torchrun)")
                c.check(d.get("TORCHELASTIC_SIGNALS_TO_HANDLE", "").startswith(
                    "SIGTERM,SIGINT,SIGHUP,SIGQUIT"), f"{where}: TORCHELASTIC_SIGNALS_TO_HANDLE")
            # One MASTER_ADDR:MASTER_PORT per round for the whole group.
            for r in (0, 1):
                pair = {(dtrun_envs.get((r, lr), {}).get("MASTER_ADDR"),
                         dtrun_envs.get((r, lr), {}).get("MASTER_PORT")) for lr in (0, 1)}
                c.equal(len(pair), 1, f"{mode}: round {r}: one MASTER_ADDR:MASTER_PORT")
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main())
