// `dtrun deepspeed ARGS`: the deepspeed launcher's command line (its runner.py and launch.py),
// run by dtrun's agent (docs/migration.md). DeepSpeed's own rules:
//
//   resources  the hostfile (-H, default /job/hostfile; a missing one means this machine);
//              without one this machine's devices: CUDA_VISIBLE_DEVICES when set becomes
//              --include localhost:<its list> (unless a resource option is given), else the GPUs
//              counted as dtrun counts them (common/devices.h, CUDA_VISIBLE_DEVICES ignored as
//              DeepSpeed unsets it first), else DeepSpeed's CPU accelerator ($LOCAL_SIZE, else the
//              NUMA nodes with CPUs); then --include/--exclude (launcher/hostfile.h's grammar, an
//              include's slots taken as they are and sorted, a bare host = all its slots),
//              --num_nodes (the first N hosts) and --num_gpus (slots 0..N-1 on every host)
//   where      one host left (and no --force_multi), or --no_ssh: this machine runs it, node
//              --node_rank of the hostfile's hosts with --no_ssh; several: every host over ssh
//              through dtrun's --hostfile path (--launcher pdsh, the default; the MPI launchers
//              and slurm are refused with a line saying what to use)
//   workers    python -u SCRIPT --local_rank=N ARGS (N directly after the script, unless
//              --no_local_rank; -m with --module; no python with --no_python), with
//              CUDA_VISIBLE_DEVICES = the host's slots and DeepSpeed's CROSS_RANK, CROSS_SIZE,
//              LOCAL_SIZE besides torchrun's variables (agent/worker_env.h); LOCAL_RANK is the
//              index on the node
//   exit code  the first failed worker's own code, 256-N when signal N ended it
//   env files  several hosts: the launching shell's MLFLOW*, PYTHON*, MV2*, UCX*, NCCL* and
//              Nebula/AzureML variables, PYTHONPATH with the working directory first, then
//              ~/.deepspeed_env and ./.deepspeed_env ($DS_ENV_FILE names them) for every host
//
// Every flag after the script is the script's: `deepspeed train.py --num_nodes 2` is one node.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/front_end.h"

namespace dtrun::launcher {

/// The parser of `dtrun deepspeed`: the deepspeed runner's options (unique prefixes work, as its
/// argparse allows them), then dtrun's own (frontEndDtrunOptions(FrontEnd::kDeepSpeed)).
const OptionParser& deepSpeedParser();

/// `dtrun deepspeed ARGS` translated (see the file comment). `env` is the launcher's
/// environment. Reads the hostfile, the env files, and the device trees of `host`. Throws
/// UsageError (one line naming the option, file or variable) and HelpRequested.
FrontEndRun translateDeepSpeed(const std::vector<std::string>& args,
                               const std::map<std::string, std::string>& env,
                               const HostProbe& host);

/// translateDeepSpeed, then resolveFrontEnd.
FrontEndLaunch parseDeepSpeedLaunch(const std::vector<std::string>& args,
                                    const std::map<std::string, std::string>& env,
                                    const HostProbe& host);

}  // namespace dtrun::launcher
