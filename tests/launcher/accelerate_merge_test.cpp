// `dtrun accelerate`: accelerate's merge of the command line and the config file, option by
// option (commands/launch.py's _validate_launch_command), the dispatch, the variables of each
// path (utils/launch.py) and the refusals.
#include <catch2/catch.hpp>

#include "launcher/accelerate_launch.h"
#include "tests/launcher/front_end_test_util.h"

using namespace dtrun::launcher;
using namespace dtrun::launcher::testing;
namespace agent = dtrun::agent;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

namespace {

struct Fixture {
  FakeMachine machine;
  Env env;
  explicit Fixture(int gpus = 0) : machine(gpus) {
    env = {{"PATH", "/usr/bin"}, {"HOME", machine.work.path().string()}};
  }
  std::string write(const std::string& text) { return machine.file("cfg.yaml", text).string(); }
  FrontEndLaunch launch(const Args& args) const {
    return parseAccelerateLaunch(args, env, machine.probe);
  }
  agent::LaunchConfig config(const Args& args) const { return launch(args).invocation.config; }
  Env env0(const Args& args) const { return workerOf(config(args), 0).env; }
  std::string error(const Args& args) const {
    return usageErrorOf([&] { launch(args); });
  }
};

}  // namespace

TEST_CASE("the command line wins over the file's keys", "[launcher][accelerate]") {
  Fixture f;
  const auto cfg = f.write(
      "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp16\n"
      "gpu_ids: 0,1\n"
      "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: max-autotune\n"
      "  dynamo_use_fullgraph: true\n");
  auto c = f.config({"--config_file", cfg, "t.py"});
  CHECK(c.nprocPerNode == 2);
  auto env = workerOf(c, 0).env;
  checkHas(env, {{"ACCELERATE_MIXED_PRECISION", "fp16"},
                 {"CUDA_VISIBLE_DEVICES", "0,1"},
                 {"ACCELERATE_DYNAMO_BACKEND", "INDUCTOR"},
                 {"ACCELERATE_DYNAMO_MODE", "max-autotune"},
                 {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "True"},
                 {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"}});
  auto over =
      f.config({"--config_file", cfg, "--num_processes=4", "--mixed-precision", "bf16",
                "--gpu_ids=2,3", "--dynamo_backend=eager", "--dynamo_mode=default", "t.py"});
  CHECK(over.nprocPerNode == 4);
  checkHas(workerOf(over, 3).env, {{"ACCELERATE_MIXED_PRECISION", "bf16"},
                                   {"CUDA_VISIBLE_DEVICES", "2,3"},
                                   {"ACCELERATE_DYNAMO_BACKEND", "EAGER"},
                                   {"ACCELERATE_DYNAMO_MODE", "default"},
                                   {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "True"}});
}

TEST_CASE("the file's rdzv_backend, same_network and enable_cpu_affinity are ignored",
          "[launcher][accelerate]") {
  Fixture f;
  const auto cfg = f.write(
      "distributed_type: MULTI_GPU\nnum_processes: 8\nnum_machines: 2\nmachine_rank: 1\n"
      "main_process_ip: 10.0.0.1\nmain_process_port: 1234\nsame_network: true\n"
      "rdzv_backend: c10d\nenable_cpu_affinity: true\n");
  auto c = f.config({"--config_file", cfg, "t.py"});
  // num_processes is the job's: 8 over 2 machines is 4 each.
  CHECK(c.nprocPerNode == 4);
  CHECK(c.rdzv.backend == agent::RendezvousBackend::kStatic);
  CHECK(c.rdzv.maxNodes == 2);
  CHECK(c.rdzv.nodeRank == 1);
  CHECK(c.rdzv.host == "10.0.0.1");
  CHECK(c.rdzv.port == 1234);
  CHECK(c.baseEnv.count("ACCELERATE_CPU_AFFINITY") == 0);
  // On the command line they count.
  auto cli = f.config({"--config_file", cfg, "--same_network", "--rdzv_backend=c10d",
                       "--enable_cpu_affinity", "t.py"});
  CHECK(cli.rdzv.backend == agent::RendezvousBackend::kC10d);
  CHECK(cli.givenOptions.count("master_addr") == 1);
  CHECK(cli.baseEnv.at("ACCELERATE_CPU_AFFINITY") == "1");
  // Floor division, unchecked by accelerate: 5 over 2 machines is 2 each.
  CHECK(f.config({"--config_file", cfg, "--num_processes=5", "t.py"}).nprocPerNode == 2);
  CHECK(f.error({"--config_file", cfg, "--num_processes=1", "t.py"}) ==
        "--num_processes 1 over 2 machines leaves none per machine");
  // An IPv6 address of machine 0.
  auto v6 = f.config({"--config_file", cfg, "--main_process_ip=::1", "t.py"});
  CHECK(v6.rdzv.host == "::1");
  CHECK(v6.rdzv.port == 1234);
}

TEST_CASE("one machine: a free port unless one is given, and 127.0.0.1", "[launcher][accelerate]") {
  Fixture f;
  auto free = f.config({"--multi_gpu", "--num_processes=2", "--main_process_ip=10.1.1.1", "t.py"});
  CHECK(free.rdzv.host == "127.0.0.1");  // accelerate's one-machine path ignores the address
  CHECK(free.rdzv.port == 0);
  auto zero = f.config({"--multi_gpu", "--num_processes=2", "--main_process_port=0", "t.py"});
  CHECK(zero.rdzv.port == 0);
  auto fixed = f.config({"--multi_gpu", "--num_processes=2", "--main_process_port=29555", "t.py"});
  CHECK(fixed.rdzv.backend == agent::RendezvousBackend::kStatic);
  CHECK(fixed.rdzv.port == 29555);
  auto c10d = f.config({"--multi_gpu", "--num_processes=2", "--rdzv_backend=c10d", "t.py"});
  CHECK(c10d.rdzv.backend == agent::RendezvousBackend::kC10d);
  CHECK(c10d.rdzv.port == 0);
}

TEST_CASE("without a file the GPUs decide, as accelerate counts them", "[launcher][accelerate]") {
  Fixture four(4);
  auto c = four.launch({"train.py"}).invocation.config;
  CHECK(c.nprocPerNode == 4);  // several GPUs: the multi-GPU path
  CHECK(c.workerVariables == agent::WorkerVariables::kTorchrun);
  CHECK(hasWarning(c, "--num_processes 4 (this machine's GPUs)"));
  // CUDA_VISIBLE_DEVICES restricts the count, as for torch.cuda.device_count().
  four.env["CUDA_VISIBLE_DEVICES"] = "1,2";
  CHECK(four.config({"train.py"}).nprocPerNode == 2);
  // One GPU or none: one plain process, even with --num_processes=2.
  Fixture one(1);
  auto single = one.config({"--num_processes=2", "train.py"});
  CHECK(single.nprocPerNode == 1);
  CHECK(single.workerVariables == agent::WorkerVariables::kNone);
  checkHas(workerOf(single, 0).env, {{"ACCELERATE_USE_CPU", "False"}, {"MASTER_PORT", "29500"}});
  // The launch word of `accelerate launch` is skipped.
  CHECK(one.config({"launch", "--multi_gpu", "--num_processes=2", "train.py"}).nprocPerNode == 2);
}

TEST_CASE("mode flags, sanity checks and what dtrun does not launch", "[launcher][accelerate]") {
  Fixture f;
  CHECK(f.error({"--multi_gpu", "--num_processes=1", "t.py"}) ==
        "--num_processes: --multi_gpu needs 2 processes or more");
  CHECK(f.error({"--cpu", "--multi_gpu", "t.py"}) ==
        "--cpu, --multi_gpu, --tpu, --use_deepspeed and --use_fsdp exclude each other: give "
        "one of them");
  CHECK(f.error({"--use_parallelism_config", "t.py"}) ==
        "--use_parallelism_config needs --use_fsdp (and --fsdp_version 2)");
  CHECK_THAT(f.error({"--tpu", "t.py"}),
             StartsWith("TPU training (--tpu, or distributed_type XLA)"));
  CHECK_THAT(
      f.error({"--config_file", f.write("distributed_type: XLA\nnum_processes: 8\n"), "t.py"}),
      StartsWith("TPU training"));
  CHECK_THAT(f.error({"--mpirun_hostfile=hosts", "t.py"}),
             StartsWith("--mpirun_hostfile: a multi-CPU job through mpirun is not launched"));
  CHECK_THAT(f.error({"--config_file",
                      f.write("distributed_type: MULTI_CPU\nnum_processes: 2\n"
                              "mpirun_config:\n  mpirun_hostfile: h\n"),
                      "t.py"}),
             Contains("mpirun_config: mpirun_hostfile: a multi-CPU job through mpirun"));
  // No abbreviations (allow_abbrev=False), unlike plain dtrun.
  CHECK_THAT(f.error({"--num_proc", "2", "t.py"}),
             StartsWith("unrecognized arguments: --num_proc"));
  CHECK(f.error({"--mixed_precision=fp32", "t.py"}) ==
        "--mixed_precision: invalid choice 'fp32': expected one of no,fp16,bf16,fp8");
  CHECK(f.error({"--num_processes=two", "t.py"}) ==
        "--num_processes: invalid value 'two': expected an integer");
  CHECK_THAT(f.error({"--config_file", f.write("distributed_type: MULTI_GPU\n"), "t.py"}),
             EndsWith("pass --num_processes (accelerate's rule)"));
  CHECK_THAT(f.error({"--config_file", "nowhere.yaml", "t.py"}),
             Contains("nowhere.yaml: no such config file"));
  CHECK(f.error({"-m", "--no_python", "--multi_gpu", "--num_processes=2", "mod"}) ==
        "--module and --no_python cannot be used together");
  CHECK(f.error({"--multi_gpu", "--num_processes=4", "--num_machines=2", "t.py"}) ==
        "--main_process_ip: needed with several machines");
  CHECK(f.error({"--num_machines=2", "--main_process_ip=h", "t.py"}) ==
        "--main_process_port: needed with several machines");
  // A file's DEEPSPEED gives way to --multi_gpu.
  auto c = f.config({"--config_file", f.write("distributed_type: DEEPSPEED\nnum_processes: 2\n"),
                     "--multi_gpu", "t.py"});
  CHECK(c.baseEnv.count("ACCELERATE_USE_DEEPSPEED") == 0);
  CHECK(c.baseEnv.at("ACCELERATE_DYNAMO_BACKEND") == "NO");
}

TEST_CASE("debug, GPU ids, threads, affinity, -m and --no_python", "[launcher][accelerate]") {
  Fixture f;
  const Args two{"--multi_gpu", "--num_processes=2"};
  auto with = [&](Args extra) {
    Args a = two;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  checkHas(f.env0(with({"--debug", "t.py"})), {{"ACCELERATE_DEBUG_MODE", "true"}});
  checkHas(
      f.env0({"--config_file",
              f.write("distributed_type: MULTI_GPU\nnum_processes: 2\ndebug: true\n"), "t.py"}),
      {{"ACCELERATE_DEBUG_MODE", "true"}});
  checkLacks(f.env0(with({"--gpu_ids=all", "t.py"})), {"CUDA_VISIBLE_DEVICES"});
  checkHas(f.env0(with({"--num_cpu_threads_per_process=4", "t.py"})), {{"OMP_NUM_THREADS", "4"}});
  checkHas(f.env0(with({"--enable_cpu_affinity", "t.py"})), {{"ACCELERATE_CPU_AFFINITY", "1"}});
  CHECK_THAT(
      f.error({"--config_file",
               f.write("distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: '0'\n"), "t.py"}),
      EndsWith("gpu_ids 0: several GPUs on one machine need two ids or more (or all)"));
  auto module = f.config(with({"-m", "pkg.train", "a"}));
  CHECK(workerOf(module, 0).argv == Args{"python3", "-u", "-m", "pkg.train", "a"});
  auto program = f.config(with({"--no_python", "./run.sh", "a"}));
  CHECK(workerOf(program, 0).argv == Args{"./run.sh", "a"});
  auto simple = f.config({"-m", "pkg.train"});
  CHECK(workerOf(simple, 0).argv == Args{"python3", "-m", "pkg.train"});
  // Everything after the script is the script's.
  auto rest = f.config(with({"t.py", "--num_processes", "5", "--cpu"}));
  CHECK(rest.nprocPerNode == 2);
  CHECK(rest.scriptArgs == Args{"--num_processes", "5", "--cpu"});
}

TEST_CASE("FSDP, Megatron-LM and FP8 sections become their variables", "[launcher][accelerate]") {
  Fixture f;
  const auto fsdp = f.write(
      "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"
      "  offload_params: true\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
      "  fsdp_transformer_layer_cls_to_wrap: BertLayer\n  fsdp_sync_module_states: true\n");
  checkHas(f.env0({"--config_file", fsdp, "t.py"}),
           {{"ACCELERATE_USE_FSDP", "true"},
            {"FSDP_VERSION", "2"},
            {"FSDP_OFFLOAD_PARAMS", "true"},  // offload_params got its fsdp_ prefix
            {"FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP"},
            {"FSDP_TRANSFORMER_CLS_TO_WRAP", "BertLayer"},
            {"FSDP_SHARDING_STRATEGY", "FULL_SHARD"},
            {"FSDP_RESHARD_AFTER_FORWARD", "true"},
            {"FSDP_MIN_NUM_PARAMS", "100000000"},
            {"FSDP_FORWARD_PREFETCH", "false"},
            {"FSDP_USE_ORIG_PARAMS", "true"},
            {"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"},
            {"FSDP_SYNC_MODULE_STATES", "true"},
            {"FSDP_ACTIVATION_CHECKPOINTING", "false"}});
  checkHas(f.env0({"--config_file", fsdp, "--fsdp_offload_params=false", "t.py"}),
           {{"FSDP_OFFLOAD_PARAMS", "false"}});
  CHECK_THAT(f.error({"--config_file",
                      f.write("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n"
                              "  fsdp_sync_module_states: false\n"),
                      "t.py"}),
             Contains("fsdp_cpu_ram_efficient_loading needs fsdp_sync_module_states true"));
  checkHas(f.env0({"--use_megatron_lm", "--multi_gpu", "--num_processes=2",
                   "--megatron_lm_tp_degree=2", "--megatron_lm_gradient_clipping=0.5", "t.py"}),
           {{"ACCELERATE_USE_MEGATRON_LM", "true"},
            {"MEGATRON_LM_TP_DEGREE", "2"},
            {"MEGATRON_LM_PP_DEGREE", "1"},
            {"MEGATRON_LM_GRADIENT_CLIPPING", "0.5"},
            {"MEGATRON_LM_USE_CUSTOM_FSDP", "False"}});
  auto fp8 =
      f.env0({"--multi_gpu", "--num_processes=2", "--mixed_precision=fp8", "--fp8_backend=te",
              "--fp8_override_linear_precision=true,false,false", "t.py"});
  checkHas(fp8, {{"ACCELERATE_MIXED_PRECISION", "fp8"},
                 {"ACCELERATE_FP8_BACKEND", "te"},
                 {"ACCELERATE_FP8_FORMAT", "HYBRID"},
                 {"ACCELERATE_FP8_AMAX_HISTORY_LEN", "1024"},
                 {"ACCELERATE_FP8_OVERRIDE_FPROP", "1"},
                 {"ACCELERATE_FP8_OVERRIDE_DGRAD", "0"},
                 {"ACCELERATE_FP8_PAD_INNER_DIM", "1"},
                 {"ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL", "False"}});
}

TEST_CASE("what dtrun adds stays on: its own options, restarts, logs", "[launcher][accelerate]") {
  Fixture f;
  f.env["DTRUN_PYTHON"] = "/usr/bin/python3";
  auto launch = f.launch({"--multi_gpu", "--num_processes=2", "--max_restarts=3",
                          "--monitor_interval=0.5", "--tee=3", "--log_dir=/tmp/l", "--role=r",
                          "--event-log=/tmp/ev", "--file-timer", "--stall-timeout=30", "t.py"});
  const auto& c = launch.invocation.config;
  CHECK(c.maxRestarts == 3);
  CHECK(c.monitorInterval == std::chrono::milliseconds(500));
  CHECK(c.tee.forRank(0) == agent::Std::kAll);
  CHECK(c.logDir == "/tmp/l");
  CHECK(c.role == "r");
  CHECK(c.eventLog == "/tmp/ev");
  CHECK(c.fileTimer);
  CHECK(c.python == "/usr/bin/python3");
  // The notice shows what the command line gave, not what came from variables.
  CHECK_THAT(launch.notice, Contains("--max-restarts=3 --monitor-interval=0.5 --role=r --tee=3 "
                                     "--log-dir=/tmp/l --event-log=/tmp/ev --file-timer"));
  CHECK_THAT(launch.notice, !Contains("--python"));
  // A PET_ variable plain dtrun would read is overridden by accelerate's own value.
  f.env["PET_MAX_RESTARTS"] = "5";
  CHECK(f.config({"--multi_gpu", "--num_processes=2", "t.py"}).maxRestarts == 0);
}
