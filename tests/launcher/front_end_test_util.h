// What the front-end tests (accelerate_*_test.cpp, deepspeed_*_test.cpp) share: a fake machine
// (device files and sysfs, a working directory), and the argv and environment a worker of a
// resolved run would get, built by the agent's own functions (agent/worker_env.h) for the round
// the launch would join, so that a test compares them with the other launcher's oracle values.
#pragma once

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "agent/worker_env.h"
#include "launcher/front_end.h"
#include "tests/launcher/launcher_test_util.h"
#include "tests/support/fake_devices.h"
#include "tests/support/test_support.h"

namespace dtrun::launcher::testing {

using Env = std::map<std::string, std::string>;
using Args = std::vector<std::string>;

// accelerate config's own output for two GPUs on one machine, as the tutorials show it.
inline constexpr const char* kTutorialAccelerateConfig = R"(compute_environment: LOCAL_MACHINE
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
)";

/// A machine with `gpus` NVIDIA GPUs, `cores` physical cores (two threads each) on one NUMA
/// node, and a working directory of its own.
struct FakeMachine {
  dtrun::test::FakeDeviceTree tree;
  dtrun::test::TempDir work;
  HostProbe probe;

  explicit FakeMachine(int gpus = 0, int cores = 2) {
    tree.addNvidia(gpus);
    tree.addCpus(cores, 2);
    tree.addNumaNodes({"0-" + std::to_string(2 * cores - 1)});
    probe = fakeProbe(tree.dev(), work.path());
    probe.sysDir = tree.sys();
    probe.deepspeedHostfile = work.path() / "no-job-hostfile";
  }
  std::filesystem::path file(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories((work.path() / name).parent_path());
    dtrun::test::writeFile(work.path() / name, text);
    return work.path() / name;
  }
};

/// What one worker gets.
struct Worker {
  Args argv;
  Env env;
};

/// Local rank `localRank` of node `groupRank` of `nodes` (each with config.nprocPerNode
/// workers), told MASTER_ADDR as the launch tells it (the rendezvous host) and port 29500.
inline Worker workerOf(const agent::LaunchConfig& config, int localRank, int nodes = 1,
                       int groupRank = 0) {
  rendezvous::RoundInfo round;
  round.groupRank = groupRank;
  round.groupWorldSize = nodes;
  round.rankOffset = groupRank * config.nprocPerNode;
  round.worldSize = nodes * config.nprocPerNode;
  const std::string host = config.rdzv.host.empty() ? "localhost" : config.rdzv.host;
  Worker w;
  w.argv = agent::workerArgv(config, localRank);
  for (const auto& e : agent::workerEnv(config, round, localRank, agent::WorkerStore{host, 29500},
                                        "/logs/error.json")) {
    const auto eq = e.find('=');
    w.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return w;
}

/// Every key of `want` has that value in `env` (one check each, so a failure names the key).
inline void checkHas(const Env& env, const Env& want) {
  for (const auto& [k, v] : want) {
    INFO(k);
    auto it = env.find(k);
    CHECK((it == env.end() ? std::string("<unset>") : it->second) == v);
  }
}

/// True when one of the config's warnings contains `text` (it says which it has when not).
inline bool hasWarning(const agent::LaunchConfig& config, const std::string& text) {
  for (const auto& w : config.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  for (const auto& w : config.warnings) UNSCOPED_INFO("warning: " << w);
  return false;
}

/// None of `names` is in `env`.
inline void checkLacks(const Env& env, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    INFO(n);
    CHECK(env.count(n) == 0);
  }
}

}  // namespace dtrun::launcher::testing
