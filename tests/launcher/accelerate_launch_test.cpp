// `dtrun accelerate` (launcher/accelerate_launch.h): the oracle rows of accelerate launch that
// apply to one machine (what accelerate's launcher gives each worker, argv and variables, read
// from accelerate's code and checked by running it), then the config merge option by option.
// The workers' argv and environment are the agent's own (agent/worker_env.h) for the resolved
// run; the end-to-end comparison with real torch workers is tests/e2e/front_ends_test.py.
#include "launcher/accelerate_launch.h"

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
  explicit Fixture(int gpus = 0, int cores = 2) : machine(gpus, cores) {
    env = {{"PATH", "/usr/bin"}, {"HOME", machine.work.path().string()}};
  }
  std::string write(const std::string& text, const std::string& name = "cfg.yaml") {
    return machine.file(name, text).string();
  }
  // The tutorial's file as accelerate config leaves it: the default under HF_HOME.
  void defaultConfig(const std::string& text) {
    env["HF_HOME"] = (machine.work.path() / "hf").string();
    machine.file("hf/accelerate/default_config.yaml", text);
  }
  FrontEndLaunch launch(const Args& args) const {
    return parseAccelerateLaunch(args, env, machine.probe);
  }
  agent::LaunchConfig config(const Args& args) const { return launch(args).invocation.config; }
  std::string error(const Args& args) const {
    return usageErrorOf([&] { launch(args); });
  }
};

// What accelerate's multi-GPU path and torchrun give every worker of a two-process job.
Env torchrunVariables(int rank) {
  const std::string r = std::to_string(rank);
  return {{"RANK", r},
          {"LOCAL_RANK", r},
          {"WORLD_SIZE", "2"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"GROUP_RANK", "0"},
          {"GROUP_WORLD_SIZE", "1"},
          {"ROLE_NAME", "default"},
          {"ROLE_RANK", r},
          {"ROLE_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"TORCHELASTIC_RUN_ID", "none"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"},
          {"TORCHELASTIC_ERROR_FILE", "/logs/error.json"}};
}

const Env kDynamoDefaults{{"ACCELERATE_DYNAMO_BACKEND", "NO"},
                          {"ACCELERATE_DYNAMO_MODE", "default"},
                          {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "False"},
                          {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
                          {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "False"}};

// Oracle rows 1 and 2: two workers of `python -u train.py ARGS`, with these variables.
void checkTutorialRun(const agent::LaunchConfig& c, const Args& scriptArgs,
                      const std::string& precision) {
  CHECK(c.nprocPerNode == 2);
  CHECK(c.rdzv.host == "127.0.0.1");
  CHECK(c.rdzv.port == 0);  // a free port (accelerate: 29500)
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    auto w = workerOf(c, r);
    Args argv{"python3", "-u", "train.py"};
    argv.insert(argv.end(), scriptArgs.begin(), scriptArgs.end());
    CHECK(w.argv == argv);
    checkHas(w.env, kDynamoDefaults);
    checkHas(w.env, {{"ACCELERATE_MIXED_PRECISION", precision}, {"OMP_NUM_THREADS", "1"}});
    checkHas(w.env, torchrunVariables(r));
    checkLacks(w.env, {"ACCELERATE_USE_CPU", "ACCELERATE_USE_DEEPSPEED", "CUDA_VISIBLE_DEVICES",
                       "CROSS_RANK", "ACCELERATE_DEBUG_MODE"});
  }
}

}  // namespace

TEST_CASE("oracle 1: the tutorial config as --config_file, two workers from the agent",
          "[launcher][accelerate][oracle]") {
  Fixture f;  // no GPU: the file's num_processes decides, the GPUs are not counted
  auto launch =
      f.launch({"--config_file", f.write(kTutorialAccelerateConfig), "train.py", "--x", "1"});
  checkTutorialRun(launch.invocation.config, {"--x", "1"}, "no");
  CHECK_FALSE(launch.invocation.config.ompNumThreadsSet);  // accelerate set it: no torchrun notice
  // The notice: the same run as plain dtrun, with accelerate's variables in front.
  CHECK_THAT(launch.notice, StartsWith("accelerate launch's command line on dtrun."));
  CHECK_THAT(launch.notice,
             Contains("ACCELERATE_DYNAMO_BACKEND=NO ACCELERATE_DYNAMO_MODE=default "));
  CHECK_THAT(launch.notice,
             Contains("OMP_NUM_THREADS=1 dtrun --nproc-per-node=2 --rdzv-endpoint=127.0.0.1:0 "
                      "train.py --x 1"));
}

TEST_CASE("oracle 1b: unquoted `mixed_precision: no` runs as 'no' (accelerate >= 0.34 fails)",
          "[launcher][accelerate][oracle]") {
  Fixture f;
  std::string text = kTutorialAccelerateConfig;
  text.replace(text.find("'no'\nnum_machines"), 4, "no");
  auto launch = f.launch({"--config_file", f.write(text), "train.py", "--x", "1"});
  checkTutorialRun(launch.invocation.config, {"--x", "1"}, "no");
  CHECK(hasWarning(launch.invocation.config, "mixed_precision: no unquoted"));
}

TEST_CASE("oracle 2: --mixed_precision=fp16 over the default file under HF_HOME",
          "[launcher][accelerate][oracle]") {
  Fixture f;
  f.defaultConfig(kTutorialAccelerateConfig);
  checkTutorialRun(f.config({"--mixed_precision=fp16", "train.py"}), {}, "fp16");
  // The same file found under XDG_CACHE_HOME and under ~/.cache.
  Fixture xdg;
  xdg.env["XDG_CACHE_HOME"] = (xdg.machine.work.path() / "xdg").string();
  xdg.machine.file("xdg/huggingface/accelerate/default_config.yaml", kTutorialAccelerateConfig);
  checkTutorialRun(xdg.config({"train.py"}), {}, "no");
  Fixture home;
  home.machine.file(".cache/huggingface/accelerate/default_config.yaml", kTutorialAccelerateConfig);
  checkTutorialRun(home.config({"train.py"}), {}, "no");
}

TEST_CASE("oracle 3: --cpu skips the default file: one plain process, no rank variables",
          "[launcher][accelerate][oracle]") {
  Fixture f(/*gpus=*/8, /*cores=*/2);
  f.defaultConfig(kTutorialAccelerateConfig);
  auto c = f.config({"--cpu", "train.py"});
  CHECK(c.nprocPerNode == 1);
  CHECK(c.workerVariables == agent::WorkerVariables::kNone);
  auto w = workerOf(c, 0);
  CHECK(w.argv == Args{"python3", "train.py"});  // no -u
  checkHas(w.env, kDynamoDefaults);
  // num_processes defaulted to the 8 GPUs: MASTER_* are set; 2 cores // 8 is no thread count.
  checkHas(w.env, {{"ACCELERATE_USE_CPU", "True"},
                   {"ACCELERATE_MIXED_PRECISION", "no"},
                   {"OMP_NUM_THREADS", "1"},
                   {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", "29500"},
                   {"PATH", "/usr/bin"}});
  checkLacks(w.env, {"RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
                     "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE"});
  // With no GPU, num_processes is 0: no MASTER_*.
  Fixture none(0, 2);
  auto w0 = workerOf(none.config({"--cpu", "train.py"}), 0);
  checkLacks(w0.env, {"MASTER_ADDR", "MASTER_PORT", "RANK"});
  // Many cores are shared by the processes: 16 // 2 = 8 threads each.
  Fixture big(0, 16);
  auto w8 = workerOf(big.config({"--cpu", "--num_processes=2", "train.py"}), 0);
  checkHas(w8.env, {{"OMP_NUM_THREADS", "8"}, {"MASTER_PORT", "29500"}});
  big.env["OMP_NUM_THREADS"] = "3";
  checkHas(workerOf(big.config({"--cpu", "--num_processes=2", "train.py"}), 0).env,
           {{"OMP_NUM_THREADS", "3"}});
}

TEST_CASE("oracle 4: distributed_type DEEPSPEED with a deepspeed_config section",
          "[launcher][accelerate][oracle]") {
  Fixture f;
  f.env["PYTHONPATH"] = "/opt/lib";
  const std::string cfg = f.write(
      "compute_environment: LOCAL_MACHINE\n"
      "deepspeed_config:\n"
      "  gradient_accumulation_steps: 1\n"
      "  offload_optimizer_device: none\n"
      "  offload_param_device: none\n"
      "  zero3_init_flag: false\n"
      "  zero_stage: 2\n"
      "distributed_type: DEEPSPEED\n"
      "mixed_precision: fp16\n"
      "num_machines: 1\n"
      "num_processes: 2\n");
  auto c = f.config({"--config_file", cfg, "train.py", "--x", "1"});
  CHECK(c.nprocPerNode == 2);
  for (int r = 0; r < 2; ++r) {
    auto w = workerOf(c, r);
    CHECK(w.argv == Args{"python3", "-u", "train.py", "--x", "1"});  // no --local_rank
    checkHas(w.env, {{"ACCELERATE_USE_DEEPSPEED", "true"},
                     {"ACCELERATE_CONFIG_DS_FIELDS",
                      "gradient_accumulation_steps,offload_optimizer_device,offload_param_device,"
                      "zero3_init_flag,zero_stage,mixed_precision"},
                     {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"},
                     {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1"},
                     {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none"},
                     {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none"},
                     {"ACCELERATE_DEEPSPEED_ZERO3_INIT", "false"},
                     {"ACCELERATE_MIXED_PRECISION", "fp16"},
                     {"PYTHONPATH", "/opt/lib:" + f.machine.work.path().string()},
                     {"OMP_NUM_THREADS", "1"}});  // torchrun's, for two workers
    checkHas(w.env, torchrunVariables(r));
    checkLacks(w.env, {"ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_GRADIENT_CLIPPING",
                       "ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_USE_CPU"});
  }
  CHECK(c.ompNumThreadsSet);  // torchrun's OMP_NUM_THREADS notice, as accelerate leaves it
  // Without a file the DeepSpeed path lists no fields.
  auto bare = workerOf(f.config({"--use_deepspeed", "--num_processes=2", "--zero_stage=3",
                                 "--gradient_clipping=1", "train.py"}),
                       0);
  checkHas(bare.env, {{"ACCELERATE_CONFIG_DS_FIELDS", ""},
                      {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"},
                      {"ACCELERATE_GRADIENT_CLIPPING", "1.0"}});
}
