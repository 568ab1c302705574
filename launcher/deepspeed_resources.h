// The deepspeed runner's resources and exports (launcher/deepspeed_launch.h has the rules): which
// hosts and slots a command line selects, and what every host's environment gets when the job
// spans several. Pure but for the hostfile, the env files and the device trees they read.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "launcher/cli.h"
#include "launcher/hostfile.h"
#include "launcher/option_parser.h"

namespace dtrun::launcher {

/// The devices DeepSpeed's accelerator counts on this machine: DS_ACCELERATOR=cuda the GPUs
/// (common/devices.h, without CUDA_VISIBLE_DEVICES, which DeepSpeed unsets first; none is an
/// error), =cpu the CPU accelerator's ($LOCAL_SIZE, else the NUMA nodes with CPUs, at least 1),
/// unset the GPUs if there are any, else the CPU accelerator's. Throws UsageError naming
/// DS_ACCELERATOR for another value.
int deepSpeedDeviceCount(const std::map<std::string, std::string>& env, const HostProbe& host);

/// What a command line selects.
struct DeepSpeedResources {
  std::vector<HostSlots> hosts;  ///< in node-rank order, each with its slots
  std::vector<HostSlots> pool;   ///< what they were chosen from (the hostfile, or localhost)
  std::string hostfile;          ///< the hostfile read; "" when this machine's devices were used
  std::vector<std::string> warnings;
};

/// The hosts and slots of `parsed` (deepSpeedParser()'s result): the hostfile or this machine's
/// devices, --include/--exclude, --num_nodes, --num_gpus (launcher/deepspeed_launch.h). Throws
/// UsageError naming the option, the variable or the hostfile's line.
DeepSpeedResources deepSpeedResources(const ParsedOptions& parsed,
                                      const std::map<std::string, std::string>& env,
                                      const HostProbe& host);

/// What every host of a job over several hosts gets besides dtrun's own exports: the launching
/// shell's variables whose names start with MLFLOW, PYTHON, MV2, UCX, NCCL or one of the
/// Nebula/AzureML names (NCCL_IB_HCA and UCX_NET_DEVICES not with AISC_JOB_NAME), PYTHONPATH with
/// `workDir` first, then the KEY=VALUE lines of ~/NAME and `workDir`/NAME, NAME being $DS_ENV_FILE
/// or .deepspeed_env (a later one wins; the grammar of launcher/hostfile.h's parseEnvFile).
std::map<std::string, std::string> deepSpeedExports(const std::map<std::string, std::string>& env,
                                                    const std::filesystem::path& workDir);

}  // namespace dtrun::launcher
