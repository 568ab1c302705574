#!/usr/bin/python3
"""e2e:front_ends_<case>: `dtrun accelerate` and `dtrun deepspeed` with real torch gloo workers.

The workers are tutorial-style scripts (accelerate_tutorial_train.py: an Accelerator-style state
read from ACCELERATE_* and torch's variables; ds_tutorial_train.py: argparse --local_rank and
deepspeed.init_distributed's env reads). Each dumps its /proc/self/cmdline and its environment;
the test compares them, field by field, with what accelerate's and DeepSpeed's own launchers give
their workers (the oracle values, read from their code and checked by running it), except
MASTER_PORT, which dtrun picks free on one machine. The real accelerate and deepspeed cannot be
installed here, so their values are written down, not run.

usage: front_ends_test.py --dtrun DTRUN --case NAME
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import e2e_util

HERE = os.path.dirname(os.path.abspath(__file__))
ACC = os.path.join(HERE, "accelerate_tutorial_train.py")
DS = os.path.join(HERE, "ds_tutorial_train.py")
PYTHON = "/usr/bin/python3"
NOTICE = "command line on dtrun."

TUTORIAL_YAML = """compute_environment: LOCAL_MACHINE
deepspeed_config: {}
distributed_type: MULTI_GPU
downcast_bf16: 'no'
fsdp_config: {}
gpu_ids: all
machine_rank: 0
main_process_ip: null
main_process_port: null
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""

DEEPSPEED_YAML = """compute_environment: LOCAL_MACHINE
deepspeed_config:
  gradient_accumulation_steps: 1
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
mixed_precision: fp16
num_machines: 1
num_processes: 2
"""

DYNAMO = {"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_DYNAMO_MODE": "default",
          "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False", "ACCELERATE_DYNAMO_USE_DYNAMIC": "False",
          "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False"}


def torchrun_vars(rank, world=2, restarts=0, max_restarts=0):
    """What torchrun 1.13 (and accelerate's in-process torchrun) gives rank `rank` of one node."""
    r = str(rank)
    return {"RANK": r, "LOCAL_RANK": r, "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default", "ROLE_RANK": r,
            "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_RUN_ID": "none",
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": str(restarts),
            "TORCHELASTIC_MAX_RESTARTS": str(max_restarts), "NCCL_ASYNC_ERROR_HANDLING": "1"}


def deepspeed_vars(rank, world, devices, master="127.0.0.1"):
    """What DeepSpeed's launch.py gives local rank `rank` of one node."""
    return {"CUDA_VISIBLE_DEVICES": devices, "MASTER_ADDR": master, "WORLD_SIZE": str(world),
            "CROSS_RANK": "0", "CROSS_SIZE": "1", "LOCAL_SIZE": str(world), "RANK": str(rank),
            "LOCAL_RANK": str(rank)}


class Run:
    def __init__(self, args, c):
        self.dtrun = args.dtrun
        self.c = c
        self.work = tempfile.mkdtemp(prefix="dtrun-frontends-")
        self.out = os.path.join(self.work, "out")
        os.makedirs(self.out)
        self.home = os.path.join(self.work, "home")  # no default config unless a case puts one
        os.makedirs(self.home)
        self.env = {"PATH": "/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8",
                    "LC_ALL": "C.UTF-8", "TMPDIR": self.work, "OUT": self.out,
                    "DTRUN_PYTHON": PYTHON, "PYTHONPATH": "/opt/nothing"}
        self.runs = 0

    def file(self, name, text):
        path = os.path.join(self.work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def launch(self, sub, args, want_code=0, extra_env=None):
        """Runs `dtrun SUB ARGS` in the work directory; returns its output."""
        self.runs += 1
        for name in os.listdir(self.out):
            os.unlink(os.path.join(self.out, name))
        env = dict(self.env, **(extra_env or {}))
        code, text = e2e_util.run([self.dtrun, sub] + args, env, self.work, 240,
                                  os.path.join(self.work, f"run{self.runs}.log"))
        if not self.c.equal(code, want_code, f"dtrun {sub} {' '.join(args)}: exit code"):
            print(text)
        return text

    def ranks(self, n):
        seen = {}
        for rank in range(n):
            try:
                with open(os.path.join(self.out, f"rank{rank}.json")) as f:
                    seen[rank] = json.load(f)
            except OSError as e:
                self.c.check(False, f"rank {rank} wrote what it saw ({e})")
        self.c.equal(sorted(os.listdir(self.out)), [f"rank{r}.json" for r in range(n)],
                     f"exactly {n} worker(s) ran")
        return seen

    def fields(self, seen, want, what):
        """Every oracle field, one check each; MASTER_PORT only has to be a port."""
        env = seen.get("env", {})
        for k, v in want.items():
            self.c.equal(env.get(k), v, f"{what}: {k}")
        port = env.get("MASTER_PORT")
        if port is not None:
            self.c.check(port.isdigit() and 0 < int(port) < 65536, f"{what}: MASTER_PORT {port}")

    def lacks(self, seen, names, what):
        env = seen.get("env", {})
        for n in names:
            self.c.check(n not in env, f"{what}: {n} not set")

    def notice_once(self, text):
        self.c.equal(text.count(NOTICE), 1, "the plain-dtrun notice, once")

    def close(self):
        shutil.rmtree(self.work, ignore_errors=True)


def tutorial_run(r, text, precision, script_args, restarts=0, max_restarts=0):
    seen = r.ranks(2)
    for rank, s in seen.items():
        r.c.equal(s["cmdline"][1:], ["-u", ACC] + script_args, f"rank {rank}: argv")
        r.fields(s, dict(DYNAMO, ACCELERATE_MIXED_PRECISION=precision, OMP_NUM_THREADS="1",
                         **torchrun_vars(rank, 2, restarts, max_restarts)), f"rank {rank}")
        r.c.check(bool(s["env"].get("TORCHELASTIC_ERROR_FILE")), f"rank {rank}: an error file")
        r.lacks(s, ["ACCELERATE_USE_CPU", "ACCELERATE_USE_DEEPSPEED", "CROSS_RANK"], f"rank {rank}")
        r.c.equal(s["allreduce"], 1, f"rank {rank}: the all-reduce")
    r.notice_once(text)


def case_acc_config_file(r):
    cfg = r.file("cfg.yaml", TUTORIAL_YAML)
    tutorial_run(r, r.launch("accelerate", ["--config_file", cfg, ACC, "--x", "1"]), "no",
                 ["--x", "1"])
    # Oracle 1b: the tutorial's unquoted no (accelerate >= 0.34 fails on it): dtrun runs it.
    unquoted = r.file("unquoted.yaml", TUTORIAL_YAML.replace("'no'\nnum", "no\nnum"))
    text = r.launch("accelerate", ["--config_file", unquoted, ACC, "--x", "1"])
    tutorial_run(r, text, "no", ["--x", "1"])
    r.c.check("mixed_precision: no unquoted" in text, "the unquoted no is warned about")


def case_acc_default_config(r):
    r.file("hf/accelerate/default_config.yaml", TUTORIAL_YAML)
    hf = {"HF_HOME": os.path.join(r.work, "hf")}
    text = r.launch("accelerate", ["launch", "--mixed_precision=fp16", ACC], extra_env=hf)
    tutorial_run(r, text, "fp16", [])


def case_acc_multi_gpu(r):
    tutorial_run(r, r.launch("accelerate", ["--num_processes", "2", "--multi_gpu", ACC]), "no", [])


def case_acc_cpu(r):
    # The default file is skipped under --cpu: one plain process, no -u, no rank variables.
    r.file("hf/accelerate/default_config.yaml", TUTORIAL_YAML)
    text = r.launch("accelerate", ["--cpu", ACC, "--y"], extra_env={"HF_HOME": r.work + "/hf"})
    s = r.ranks(1).get(0, {})
    r.c.equal(s.get("cmdline"), [PYTHON, ACC, "--y"], "argv: python without -u")
    # No GPU here: num_processes is 0, so no MASTER_*.
    r.fields(s, dict(DYNAMO, ACCELERATE_USE_CPU="True", ACCELERATE_MIXED_PRECISION="no",
                     OMP_NUM_THREADS="1", PYTHONPATH="/opt/nothing"), "the process")
    r.lacks(s, ["RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "NCCL_ASYNC_ERROR_HANDLING"],
            "the process")
    r.c.equal(s.get("state", {}).get("use_cpu"), True, "Accelerator-style state: use_cpu")
    r.notice_once(text)


def case_acc_deepspeed(r):
    cfg = r.file("ds.yaml", DEEPSPEED_YAML)
    text = r.launch("accelerate", ["--config_file", cfg, ACC, "--x", "1"])
    seen = r.ranks(2)
    for rank, s in seen.items():
        r.c.equal(s["cmdline"][1:], ["-u", ACC, "--x", "1"], f"rank {rank}: argv (no --local_rank)")
        r.fields(s, dict(
            ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="2",
            ACCELERATE_CONFIG_DS_FIELDS="gradient_accumulation_steps,offload_optimizer_device,"
                                        "offload_param_device,zero3_init_flag,zero_stage,"
                                        "mixed_precision",
            ACCELERATE_GRADIENT_ACCUMULATION_STEPS="1",
            ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE="none",
            ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE="none", ACCELERATE_DEEPSPEED_ZERO3_INIT="false",
            ACCELERATE_MIXED_PRECISION="fp16", PYTHONPATH="/opt/nothing:" + r.work,
            OMP_NUM_THREADS="1", **torchrun_vars(rank)), f"rank {rank}")
        r.lacks(s, ["ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_USE_CPU"], f"rank {rank}")
        r.c.equal(s["state"]["use_deepspeed"], True, f"rank {rank}: Accelerator-style state")
    r.notice_once(text)


def case_acc_restart(r):
    text = r.launch("accelerate", ["--num_processes", "2", "--multi_gpu", "--max_restarts", "1",
                                   ACC], extra_env={"FAIL_RANK": "1"})
    tutorial_run(r, text, "no", [], restarts=1, max_restarts=1)


def case_acc_bad_config(r):
    bad = r.file("bad.yaml", "distributed_type: [MULTI_GPU\n")
    text = r.launch("accelerate", ["--config_file", bad, ACC], want_code=2)
    r.c.check(f"error: {bad}:" in text and "not valid YAML" in text, "bad YAML: one line naming the file")
    unknown = r.file("unknown.yaml", TUTORIAL_YAML + "num_gpu: 2\n")
    text = r.launch("accelerate", ["--config_file", unknown, ACC], want_code=2)
    r.c.check(f"error: {unknown}: unknown key 'num_gpu'" in text, "unknown key: named")
    r.c.equal(len([l for l in text.splitlines() if "error:" in l]), 1, "one error line")
    text = r.launch("accelerate", ["--tpu", ACC], want_code=2)
    r.c.check("TPU training" in text, "TPU is refused")
    r.c.equal(os.listdir(r.out), [], "nothing ran")


def ds_run(r, text, world, devices, script_args, local_rank=True, master="127.0.0.1"):
    seen = r.ranks(world)
    for rank, s in seen.items():
        lr = [f"--local_rank={rank}"] if local_rank else []
        r.c.equal(s["cmdline"][1:], ["-u", DS] + lr + script_args, f"rank {rank}: argv")
        r.c.equal(s["local_rank_arg"], rank if local_rank else -1, f"rank {rank}: args.local_rank")
        r.fields(s, deepspeed_vars(rank, world, devices, master), f"rank {rank}")
        r.lacks(s, ["OMP_NUM_THREADS"], f"rank {rank}")  # DeepSpeed sets none
        r.c.equal(s["allreduce"], world * (world - 1) // 2, f"rank {rank}: the all-reduce")
    r.notice_once(text)
    return seen


def case_ds_num_gpus(r):
    text = r.launch("deepspeed", ["--num_gpus", "2", DS, "--deepspeed", "--deepspeed_config",
                                  "ds.json"])
    seen = ds_run(r, text, 2, "0,1", ["--deepspeed", "--deepspeed_config", "ds.json"])
    for rank, s in seen.items():
        r.c.equal((s["deepspeed"], s["deepspeed_config"]), (True, "ds.json"),
                  f"rank {rank}: DeepSpeed's own arguments")


def case_ds_include(r):
    ds_run(r, r.launch("deepspeed", ["--include", "localhost:1", DS, "--epochs", "2"]), 1, "1",
           ["--epochs", "2"])


def case_ds_no_local_rank(r):
    ds_run(r, r.launch("deepspeed", ["--num_gpus=2", "--no_local_rank", DS, "--epochs", "2"]), 2,
           "0,1", ["--epochs", "2"], local_rank=False)


def case_ds_restart(r):
    text = r.launch("deepspeed", ["--num_gpus", "2", "--max-restarts=1", DS],
                    extra_env={"FAIL_RANK": "1", "FAIL_ONCE": "1"})
    seen = ds_run(r, text, 2, "0,1", [])
    for rank, s in seen.items():
        r.c.equal(s["env"].get("TORCHELASTIC_RESTART_COUNT"), "1", f"rank {rank}: restarted once")


def case_ds_exit_code(r):
    # Oracle 9: the first failed worker's own code; a SIGKILLed one gives 256 - 9.
    text = r.launch("deepspeed", ["--num_gpus", "2", DS], want_code=3,
                    extra_env={"FAIL_RANK": "1", "FAIL_CODE": "3"})
    r.c.check("ds_tutorial_train.py FAILED" in text, "dtrun's failure report")
    r.launch("deepspeed", ["--num_gpus", "2", DS], want_code=247,
             extra_env={"FAIL_RANK": "1", "FAIL_CODE": "KILL"})


def case_ds_master_addr(r):
    # A hostfile of one host runs here, on the address given: IPv4 loopback other than
    # 127.0.0.1, and IPv6.
    hosts = r.file("hostfile", "localhost slots=2\n")
    for addr in ("127.0.0.2", "::1"):
        text = r.launch("deepspeed", ["-H", hosts, "--master_addr", addr, DS])
        ds_run(r, text, 2, "0,1", [], master=addr)


CASES = {name[5:]: f for name, f in globals().items() if name.startswith("case_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtrun", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except Exception as e:
        e2e_util.skip(f"{sys.executable} cannot import torch ({e}); install python3-torch")
    c = e2e_util.Checker()
    r = Run(args, c)
    try:
        CASES[args.case](r)
    finally:
        r.close()
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main())
