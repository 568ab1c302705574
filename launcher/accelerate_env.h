// What accelerate's launchers add to the environment of the processes they start
// (accelerate/utils/launch.py: prepare_simple_launcher_cmd_env, prepare_multi_gpu_env,
// prepare_deepspeed_cmd_env), computed from accelerate's namespace once the config file is merged
// (launcher/accelerate_launch.h). Values are the str() of accelerate's objects, so they are
// spelled as accelerate spells them ("True", "false", "1.0", "INDUCTOR").
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "launcher/accelerate_options.h"

namespace dtrun::launcher {

/// Which of accelerate's launchers runs the job (launch_command's dispatch).
enum class AcceleratePath {
  kSimple,     ///< one process, plain python: NO, MULTI_CPU, --cpu
  kMultiGpu,   ///< torchrun's agent: MULTI_GPU and the other MULTI_*, FSDP, MEGATRON_LM
  kDeepSpeed,  ///< torchrun's agent with DeepSpeed's variables: DEEPSPEED
};

/// The variables accelerate sets over the launcher's environment `env` for `path`:
///   every path   ACCELERATE_MIXED_PRECISION (+ ACCELERATE_FP8_* for fp8), [ACCELERATE_DEBUG_MODE],
///                [CUDA_VISIBLE_DEVICES from --gpu_ids], [ACCELERATE_CPU_AFFINITY]
///   simple       ACCELERATE_USE_CPU, ACCELERATE_DYNAMO_*, OMP_NUM_THREADS, and MASTER_ADDR and
///                MASTER_PORT for several processes or machines
///   multi-GPU    ACCELERATE_DYNAMO_*, OMP_NUM_THREADS, FSDP's, Megatron-LM's and the
///                parallelism config's variables when chosen
///   DeepSpeed    ACCELERATE_USE_DEEPSPEED, ACCELERATE_CONFIG_DS_FIELDS (`dsFields`), the
///                DeepSpeed plugin's fields, PYTHONPATH with `cwd` appended
/// Throws UsageError for a value accelerate refuses (an unknown precision or dynamo backend).
/// Pure.
std::map<std::string, std::string> accelerateWorkerEnv(
    AcceleratePath path, const AccelerateArgs& a, const std::string& dsFields,
    const std::map<std::string, std::string>& env, const std::filesystem::path& cwd);

}  // namespace dtrun::launcher
