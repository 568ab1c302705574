#include "launcher/deepspeed_resources.h"

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "common/cpu_topology.h"
#include "common/devices.h"

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;

// DeepSpeed's EXPORT_ENVS with the CUDA accelerator's NCCL and Nebula's names, all matched as
// name prefixes (runner.py: var.startswith(name)).
constexpr std::array<std::string_view, 23> kExportPrefixes{
    "MLFLOW",
    "PYTHON",
    "MV2",
    "UCX",
    "NCCL",
    "DLTS_JOB_ID",
    "DLTS_NUM_WORKER",
    "NEBULA_PERSISTENT_STORAGE_PATH",
    "NEBULA_PERSISTENT_TIME_INTERVAL",
    "AML_RUN_ID",
    "AZUREML_RUN_TOKEN",
    "AZUREML_WORKSPACE_SCOPE",
    "AZUREML_EXPERIMENT_SCOPE",
    "AZUREML_RUN_HISTORY_SERVICE_ENDPOINT",
    "AZUREML_RUN_ID",
    "NEBULA_MEMORY_BUFFER_SIZE",
    "AZUREML_PARAMETER_ITPJOB_NAME",
    "FC_TASKROLE_NAME",
    "FC_TASK_INDEX",
    "MASTER_HOST",
    "LOCAL_HOST",
    "AZUREML_BLOB_ACCOUNT_NAME",
    "AZUREML_BLOB_ACCOUNT_KEY",
};

std::string readText(const fs::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(what + " " + path.string() + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int intValue(const ParsedOptions& p, const char* dest, int fallback) {
  return static_cast<int>(p.integer(dest, INT_MIN, INT_MAX).value_or(fallback));
}

}  // namespace

int deepSpeedDeviceCount(const Env& env, const HostProbe& host) {
  Env withoutCvd = env;
  withoutCvd.erase("CUDA_VISIBLE_DEVICES");
  const int gpus = countCudaDevices(DeviceDirs{host.devDir, host.sysDir}, withoutCvd);
  auto cpus = [&] {
    if (auto it = env.find("LOCAL_SIZE"); it != env.end()) {
      const auto n = parseInteger("LOCAL_SIZE", it->second, INT_MIN, INT_MAX);
      if (n > 0) return static_cast<int>(n);
    }
    return std::max(countNumaNodesWithCpus(host.sysDir), 1);
  };
  auto it = env.find("DS_ACCELERATOR");
  if (it == env.end()) return gpus > 0 ? gpus : cpus();
  if (it->second == "cpu") return cpus();
  if (it->second == "cuda") {
    if (gpus == 0) {
      throw UsageError(
          "DS_ACCELERATOR=cuda: no GPU found here (DeepSpeed: no GPU resources "
          "available); give --hostfile or unset DS_ACCELERATOR");
    }
    return gpus;
  }
  throw UsageError("DS_ACCELERATOR=" + it->second +
                   ": dtrun deepspeed counts CUDA (NVIDIA, AMD) GPUs or CPUs (cuda or cpu); give "
                   "the slots with --include or --num_gpus instead");
}

DeepSpeedResources deepSpeedResources(const ParsedOptions& p, const Env& env,
                                      const HostProbe& host) {
  DeepSpeedResources r;
  std::vector<HostSlots> pool;
  const GivenValue* given = p.value("hostfile");
  const fs::path hostfile = given ? fs::path(given->value) : host.deepspeedHostfile;
  std::error_code ec;
  if (fs::is_regular_file(hostfile, ec)) {
    pool = parseHostfile(readText(hostfile, given ? given->source : "hostfile"), hostfile.string());
    r.hostfile = hostfile.string();
  } else if (given) {
    r.warnings.push_back(given->source + " " + given->value +
                         ": no such file; running on this machine's devices only, as DeepSpeed "
                         "does");
  }
  const int numNodes = intValue(p, "num_nodes", -1);
  const int numGpus = intValue(p, "num_gpus", -1);
  std::optional<GivenValue> include;
  if (const auto* g = p.value("include"); g && !g->value.empty()) include = *g;
  const GivenValue* exclude = p.value("exclude");
  if (exclude && exclude->value.empty()) exclude = nullptr;

  if (pool.empty()) {
    // DeepSpeed reads CUDA_VISIBLE_DEVICES as the slots of this machine, then unsets it.
    auto cvd = env.find("CUDA_VISIBLE_DEVICES");
    if (cvd != env.end() && !cvd->second.empty()) {
      if (include || exclude || numNodes > 1 || numGpus > 0) {
        r.warnings.push_back("CUDA_VISIBLE_DEVICES=" + cvd->second +
                             " is ignored: --include, --exclude, --num_gpus or --num_nodes chose "
                             "the devices (DeepSpeed's rule)");
      } else {
        include = GivenValue{"localhost:" + cvd->second, "CUDA_VISIBLE_DEVICES"};
      }
    }
  }
  if ((numNodes >= 0 || numGpus >= 0) && (include || exclude)) {
    const GivenValue* g = p.value(numNodes >= 0 ? "num_nodes" : "num_gpus");
    throw UsageError(g->source + ": not with " + (include ? include->source : exclude->source) +
                     " (DeepSpeed's rule: choose the devices one way)");
  }
  if (pool.empty()) {
    pool.push_back({"localhost", {}});
    for (int i = 0, n = deepSpeedDeviceCount(env, host); i < n; ++i) pool[0].slots.push_back(i);
    if (numNodes > 1) {
      throw UsageError(p.value("num_nodes")->source + " " + std::to_string(numNodes) +
                       ": more than one node needs a hostfile (-H/--hostfile) listing them");
    }
  }
  r.pool = pool;
  r.hosts = filterHosts(pool, include ? &*include : nullptr, exclude, IncludeSlots::kDeepSpeed);
  if (numNodes > 0 && static_cast<std::size_t>(numNodes) < r.hosts.size()) r.hosts.resize(numNodes);
  if (numGpus > 0) {
    for (auto& h : r.hosts) {
      h.slots.clear();
      for (int i = 0; i < numGpus; ++i) h.slots.push_back(i);
    }
  }
  return r;
}

Env deepSpeedExports(const Env& env, const fs::path& workDir) {
  Env out;
  const bool aisc = env.count("AISC_JOB_NAME") != 0;
  for (const auto& [k, v] : env) {
    if (aisc && (k == "NCCL_IB_HCA" || k == "UCX_NET_DEVICES")) continue;
    for (auto prefix : kExportPrefixes) {
      if (k.rfind(prefix, 0) == 0) {
        out[k] = v;
        break;
      }
    }
  }
  auto old = env.find("PYTHONPATH");
  out["PYTHONPATH"] = workDir.string() + (old != env.end() ? ":" + old->second : "");
  auto name = env.find("DS_ENV_FILE");
  const fs::path file = name != env.end() ? name->second : ".deepspeed_env";
  auto home = env.find("HOME");
  for (const fs::path& dir : {home != env.end() ? fs::path(home->second) : fs::path(), workDir}) {
    if (dir.empty()) continue;
    const fs::path path = dir / file;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    for (auto& [k, v] : parseEnvFile(readText(path, "env file"), path.string())) out[k] = v;
  }
  return out;
}

}  // namespace dtrun::launcher
