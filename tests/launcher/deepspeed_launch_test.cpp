// `dtrun deepspeed` (launcher/deepspeed_launch.h): the oracle rows of the deepspeed launcher that
// apply to one machine (what DeepSpeed's runner and launch.py give each worker, read from their
// code and checked by running it), with device counts from fake device trees; then the options
// one by one. The workers' argv and environment are the agent's own (agent/worker_env.h); the
// end-to-end comparison with real torch workers is tests/e2e/front_ends_test.py.
#include "launcher/deepspeed_launch.h"

#include <catch2/catch.hpp>

#include "tests/launcher/front_end_test_util.h"

using namespace dtrun::launcher;
using namespace dtrun::launcher::testing;
namespace agent = dtrun::agent;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

struct Fixture {
  FakeMachine machine;
  Env env;
  explicit Fixture(int gpus = 0) : machine(gpus) {
    env = {{"PATH", "/usr/bin"}, {"HOME", machine.work.path().string()}};
  }
  FrontEndLaunch launch(const Args& args) const {
    return parseDeepSpeedLaunch(args, env, machine.probe);
  }
  agent::LaunchConfig config(const Args& args) const { return launch(args).invocation.config; }
  std::string error(const Args& args) const {
    return usageErrorOf([&] { launch(args); });
  }
};

// DeepSpeed's launch.py variables for local rank `r` of one node of `n` workers on `devices`.
Env deepSpeedVariables(int r, int n, const std::string& devices) {
  return {{"CUDA_VISIBLE_DEVICES", devices},
          {"MASTER_ADDR", "127.0.0.1"},
          {"WORLD_SIZE", std::to_string(n)},
          {"CROSS_RANK", "0"},
          {"CROSS_SIZE", "1"},
          {"LOCAL_SIZE", std::to_string(n)},
          {"RANK", std::to_string(r)},
          {"LOCAL_RANK", std::to_string(r)}};
}

}  // namespace

TEST_CASE("oracle 5: --num_gpus=2, no hostfile: --local_rank=N right after the script",
          "[launcher][deepspeed][oracle]") {
  Fixture f(/*gpus=*/4);
  auto launch =
      f.launch({"--num_gpus=2", "train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"});
  const auto& c = launch.invocation.config;
  CHECK(c.nprocPerNode == 2);
  CHECK(c.rdzv.port == 0);  // a free port (DeepSpeed: 29500)
  CHECK(c.exitCodes == agent::ExitCodeScheme::kWorker);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    auto w = workerOf(c, r);
    CHECK(w.argv == Args{"python3", "-u", "train.py", "--local_rank=" + std::to_string(r),
                         "--deepspeed", "--deepspeed_config", "ds_config.json"});
    checkHas(w.env, deepSpeedVariables(r, 2, "0,1"));
    // torchrun's too, but not its OMP_NUM_THREADS=1, which DeepSpeed does not set.
    checkHas(w.env, {{"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "0"}});
    checkLacks(w.env, {"OMP_NUM_THREADS"});
  }
  CHECK_THAT(launch.notice, StartsWith("deepspeed's command line on dtrun."));
  CHECK_THAT(launch.notice,
             Contains("CUDA_VISIBLE_DEVICES=0,1 dtrun --nproc-per-node=2 "
                      "--rdzv-endpoint=127.0.0.1:0 --worker-variables=deepspeed "
                      "--exit-code=worker train.py '--local_rank=${local_rank}' --deepspeed"));
  // The tutorial's --num_gpus=8 on a machine of 8; DeepSpeed checks no count (4 GPUs here).
  auto eight = f.config({"--num_gpus=8", "train.py"});
  CHECK(eight.nprocPerNode == 8);
  checkHas(workerOf(eight, 7).env, deepSpeedVariables(7, 8, "0,1,2,3,4,5,6,7"));
  // No option: every GPU counted here.
  CHECK(f.config({"train.py"}).nprocPerNode == 4);
  // argparse's abbreviations work, as in DeepSpeed.
  CHECK(f.config({"--num_gpu", "3", "train.py"}).nprocPerNode == 3);
  CHECK(f.config({"--num_accelerators=3", "train.py"}).nprocPerNode == 3);
}

TEST_CASE("oracle 6: --include localhost:1,3, LOCAL_RANK the index",
          "[launcher][deepspeed][oracle]") {
  for (int gpus : {4, 0}) {  // an include's slots are not checked against the count
    INFO(gpus << " GPUs");
    Fixture f(gpus);
    auto c = f.config({"--include", "localhost:3,1", "train.py", "--x", "1"});
    CHECK(c.nprocPerNode == 2);
    for (int r = 0; r < 2; ++r) {
      auto w = workerOf(c, r);
      CHECK(w.argv ==
            Args{"python3", "-u", "train.py", "--local_rank=" + std::to_string(r), "--x", "1"});
      checkHas(w.env, deepSpeedVariables(r, 2, "1,3"));  // sorted, as DeepSpeed's parser
    }
    CHECK(f.config({"-i", "localhost:1", "train.py"}).baseEnv.at("CUDA_VISIBLE_DEVICES") == "1");
  }
}

TEST_CASE("oracle 7: the tutorial's 'manual multi-node' flags after the script are the script's",
          "[launcher][deepspeed][oracle]") {
  Fixture f(8);
  auto c = f.config({"--num_gpus=8", "train.py", "--master_addr", "10.0.0.9", "--master_port",
                     "6000", "--num_nodes=2", "--node_rank=0"});
  CHECK(c.nprocPerNode == 8);
  CHECK(c.rdzv.maxNodes == 1);
  CHECK(c.rdzv.host == "127.0.0.1");
  auto w = workerOf(c, 3);
  CHECK(w.argv == Args{"python3", "-u", "train.py", "--local_rank=3", "--master_addr", "10.0.0.9",
                       "--master_port", "6000", "--num_nodes=2", "--node_rank=0"});
  checkHas(w.env, deepSpeedVariables(3, 8, "0,1,2,3,4,5,6,7"));
  // Before the script: --num_nodes 2 needs a hostfile; an address without one is 127.0.0.1.
  CHECK(f.error({"--num_nodes=2", "train.py"}) ==
        "--num_nodes 2: more than one node needs a hostfile (-H/--hostfile) listing them");
  auto before = f.config({"--master_addr", "10.0.0.9", "--master_port", "6000", "train.py"});
  CHECK(before.rdzv.host == "127.0.0.1");
  CHECK(before.rdzv.port == 6000);
  CHECK(before.rdzv.backend == agent::RendezvousBackend::kStatic);
}

TEST_CASE("oracle 9: a failed worker's own exit code, --no_local_rank, --module, --no_python",
          "[launcher][deepspeed][oracle]") {
  Fixture f(2);
  CHECK(f.config({"train.py"}).exitCodes == agent::ExitCodeScheme::kWorker);
  CHECK(workerOf(f.config({"--no_local_rank", "train.py", "a"}), 1).argv ==
        Args{"python3", "-u", "train.py", "a"});
  CHECK(workerOf(f.config({"--module", "pkg.train", "a"}), 1).argv ==
        Args{"python3", "-u", "-m", "pkg.train", "--local_rank=1", "a"});
  CHECK(workerOf(f.config({"--no_python", "./run.sh", "a"}), 0).argv ==
        Args{"./run.sh", "--local_rank=0", "a"});
  CHECK(f.error({"--module", "--no_python", "x"}) == "--no_python and --module exclude each other");
}
