// `dtrun deepspeed`, option by option: the devices without a hostfile (CUDA_VISIBLE_DEVICES,
// DS_ACCELERATOR, the CPU accelerator), the hostfile and its filters, --no_ssh, several hosts
// over ssh with DeepSpeed's exports and .deepspeed_env, the launchers dtrun refuses.
#include <algorithm>
#include <catch2/catch.hpp>

#include "launcher/deepspeed_launch.h"
#include "launcher/deepspeed_resources.h"
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
  // A new file each time: a test keeps several.
  std::string hostfile(const std::string& text) {
    return machine.file("hostfile" + std::to_string(++files), text).string();
  }
  int files = 0;
  FrontEndLaunch launch(const Args& args) const {
    return parseDeepSpeedLaunch(args, env, machine.probe);
  }
  agent::LaunchConfig config(const Args& args) const { return launch(args).invocation.config; }
  std::string cvd(const Args& args) const {
    return config(args).baseEnv.at("CUDA_VISIBLE_DEVICES");
  }
  std::string error(const Args& args) const {
    return usageErrorOf([&] { launch(args); });
  }
};

}  // namespace

TEST_CASE("CUDA_VISIBLE_DEVICES becomes the include list, unless a resource option is given",
          "[launcher][deepspeed]") {
  Fixture f(8);
  f.env["CUDA_VISIBLE_DEVICES"] = "3,5";
  auto c = f.config({"train.py"});
  CHECK(c.nprocPerNode == 2);
  CHECK(c.baseEnv.at("CUDA_VISIBLE_DEVICES") == "3,5");
  CHECK(workerOf(c, 1).env.at("LOCAL_RANK") == "1");
  // DeepSpeed unsets it first, so --num_gpus 2 counts from device 0, and says so.
  auto two = f.launch({"--num_gpus", "2", "train.py"});
  CHECK(two.invocation.config.baseEnv.at("CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(hasWarning(two.invocation.config, "CUDA_VISIBLE_DEVICES=3,5 is ignored"));
  CHECK(f.cvd({"--exclude", "localhost:0", "train.py"}) == "1,2,3,4,5,6,7");
  f.env["CUDA_VISIBLE_DEVICES"] = "GPU-aaaa";
  CHECK_THAT(f.error({"train.py"}), StartsWith("CUDA_VISIBLE_DEVICES: invalid slot 'GPU-aaaa'"));
}

TEST_CASE("devices without GPUs: DeepSpeed's CPU accelerator and DS_ACCELERATOR",
          "[launcher][deepspeed]") {
  Fixture cpu(0);
  CHECK(deepSpeedDeviceCount(cpu.env, cpu.machine.probe) == 1);  // one NUMA node here
  cpu.env["LOCAL_SIZE"] = "3";
  CHECK(cpu.config({"train.py"}).nprocPerNode == 3);
  cpu.env["DS_ACCELERATOR"] = "cuda";
  CHECK_THAT(cpu.error({"train.py"}), StartsWith("DS_ACCELERATOR=cuda: no GPU found here"));
  cpu.env["DS_ACCELERATOR"] = "xpu";
  CHECK_THAT(cpu.error({"train.py"}), StartsWith("DS_ACCELERATOR=xpu: dtrun deepspeed counts"));
  Fixture gpus(2);
  gpus.env["DS_ACCELERATOR"] = "cpu";
  CHECK(gpus.config({"train.py"}).nprocPerNode == 1);
  gpus.env.erase("DS_ACCELERATOR");
  CHECK(gpus.config({"train.py"}).nprocPerNode == 2);
}

TEST_CASE("exclusive resource options, as DeepSpeed's rules", "[launcher][deepspeed]") {
  Fixture f(4);
  CHECK(f.error({"--num_gpus=2", "--include=localhost:0", "t.py"}) ==
        "--num_gpus: not with --include (DeepSpeed's rule: choose the devices one way)");
  CHECK(f.error({"-i", "localhost:0", "-e", "localhost:1", "t.py"}) ==
        "-i/--include and -e/--exclude exclude each other: give one of them");
  CHECK_THAT(f.error({"--include=worker-1:0", "t.py"}),
             StartsWith("--include: host 'worker-1' of 'worker-1:0' is not in the hostfile"));
  CHECK(f.error({"--exclude=localhost:0,1,2,3", "t.py"}) ==
        "--exclude localhost:0,1,2,3: leaves no host to run on");
  // A bare host in an include is all its slots (DeepSpeed <= 0.19.6 gave it none).
  CHECK(f.cvd({"--include=localhost", "t.py"}) == "0,1,2,3");
}

TEST_CASE("a hostfile of one host runs here, --no_ssh runs this machine's part",
          "[launcher][deepspeed]") {
  Fixture f(0);
  const auto one = f.hostfile("# one node\nlocalhost slots=2\n");
  auto c = f.config({"-H", one, "train.py"});
  CHECK(c.nprocPerNode == 2);
  CHECK(c.rdzv.host == "127.0.0.1");
  CHECK(c.baseEnv.at("CUDA_VISIBLE_DEVICES") == "0,1");
  // One host left by a filter: here too, with a warning when it names another machine.
  const auto two = f.hostfile("worker-0 slots=4\nworker-1 slots=2\n");
  auto left = f.launch({"-H", two, "--include", "worker-1:1", "train.py"});
  CHECK(left.invocation.config.nprocPerNode == 1);
  CHECK_FALSE(left.invocation.multiHost);
  CHECK(hasWarning(left.invocation.config, "one host left, worker-1"));
  // A given address is what the workers are told (IPv6 as it is), and what the store binds.
  auto v6 = f.config({"-H", one, "--master_addr", "::1", "train.py"});
  CHECK(v6.rdzv.host == "::1");
  CHECK(v6.rdzv.port == 0);
  auto lo2 = f.config({"-H", one, "--master_addr=127.0.0.2", "--master_port=6001", "train.py"});
  CHECK(lo2.rdzv.host == "127.0.0.2");
  CHECK(lo2.rdzv.port == 6001);
  // --no_ssh: node --node_rank of the hostfile's, static at the first host unless given.
  auto node1 = f.config({"-H", two, "--no_ssh", "--node_rank=1", "train.py"});
  CHECK(node1.nprocPerNode == 2);
  CHECK(node1.rdzv.backend == agent::RendezvousBackend::kStatic);
  CHECK(node1.rdzv.maxNodes == 2);
  CHECK(node1.rdzv.nodeRank == 1);
  CHECK(node1.rdzv.host == "worker-0");
  CHECK(node1.rdzv.port == 29500);
  CHECK(node1.baseEnv.at("CUDA_VISIBLE_DEVICES") == "0,1");
  checkHas(workerOf(node1, 1, 2, 1).env,
           {{"CROSS_RANK", "1"}, {"CROSS_SIZE", "2"}, {"LOCAL_SIZE", "2"}, {"LOCAL_RANK", "1"}});
  CHECK(f.error({"-H", two, "--no_ssh", "train.py"}) ==
        "--no_ssh needs --node_rank from 0 to 1 (this machine's host in the hostfile)");
  // A missing hostfile means this machine, as DeepSpeed, with a warning.
  auto missing = f.config({"-H", "nowhere", "train.py"});
  CHECK(missing.nprocPerNode == 1);
  CHECK(hasWarning(missing, "-H/--hostfile nowhere: no such file"));
}

TEST_CASE("several hosts: dtrun's --hostfile path with DeepSpeed's selection and exports",
          "[launcher][deepspeed]") {
  Fixture f(0);
  f.env["NCCL_SOCKET_IFNAME"] = "eth0";
  f.env["PYTHONUNBUFFERED"] = "1";
  f.env["MLFLOW_RUN"] = "7";
  f.env["SECRET"] = "no";
  f.machine.file(".deepspeed_env", "WANDB_MODE=offline\nNCCL_DEBUG = INFO\n");
  const auto hosts = f.hostfile("worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=4\n");
  auto launch = f.launch({"--hostfile", hosts, "--num_nodes", "2", "train.py", "--deepspeed"});
  REQUIRE(launch.invocation.multiHost);
  const auto& plan = *launch.invocation.multiHost;
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[1] == HostSlots{"worker-1", {0, 1, 2, 3}});
  CHECK(plan.masterAddr == "worker-0");
  CHECK(plan.masterPort == 29500);
  const auto& e = plan.exportedEnv;
  CHECK(e.at("NCCL_SOCKET_IFNAME") == "eth0");
  CHECK(e.at("PYTHONUNBUFFERED") == "1");
  CHECK(e.at("MLFLOW_RUN") == "7");
  CHECK(e.at("PYTHONPATH") == f.machine.work.path().string());
  CHECK(e.at("WANDB_MODE") == "offline");
  CHECK(e.at("NCCL_DEBUG") == "INFO");
  CHECK(e.count("SECRET") == 0);
  // Every agent runs DeepSpeed's conventions; every worker gets --local_rank=N first.
  const auto argv = plan.agentArgv(1);
  auto has = [&](const std::string& w) {
    return std::find(argv.begin(), argv.end(), w) != argv.end();
  };
  CHECK(has("--worker-variables=deepspeed"));
  CHECK(has("--exit-code=worker"));
  CHECK(has("--nproc-per-node=4"));
  CHECK(argv.back() == "--deepspeed");
  CHECK(argv[argv.size() - 2] == "--local_rank=${local_rank}");
  // $DS_ENV_FILE names the file.
  f.machine.file("my.env", "ONLY=me\n");
  f.env["DS_ENV_FILE"] = "my.env";
  auto named = f.launch({"-H", hosts, "train.py"});
  CHECK(named.invocation.multiHost->exportedEnv.at("ONLY") == "me");
  CHECK(named.invocation.multiHost->exportedEnv.count("WANDB_MODE") == 0);
  // Filters, --num_gpus and --ssh_port.
  auto some = f.launch({"-H", hosts, "-i", "worker-2:2,0@worker-0", "--ssh_port", "2222",
                        "--master_addr=10.0.0.1", "--master_port=7000", "train.py"});
  const auto& p = *some.invocation.multiHost;
  CHECK(p.hosts == std::vector<HostSlots>{{"worker-0", {0, 1, 2, 3}}, {"worker-2", {0, 2}}});
  CHECK(p.sshCommand == Args{"ssh", "-p", "2222"});
  // dtrun's own --ssh-command says how to reach the hosts (not with --ssh_port).
  auto viaConfig = f.launch({"-H", hosts, "--ssh-command", "ssh -F my.cfg", "train.py"});
  CHECK(viaConfig.invocation.multiHost->sshCommand == Args{"ssh", "-F", "my.cfg"});
  CHECK(f.error({"-H", hosts, "--ssh_port=2", "--ssh-command=ssh", "train.py"}) ==
        "--ssh_port: not with --ssh-command, which says how to reach the hosts");
  CHECK(p.masterAddr == "10.0.0.1");
  CHECK(p.masterPort == 7000);
  CHECK(f.error({"-H", hosts, "--num_gpus=8", "train.py"}) ==
        "--num_gpus: host worker-0 has slots=4 in " + hosts +
            "; over ssh dtrun runs a host's workers on its hostfile slots only");
}

TEST_CASE("launchers and options dtrun does not run, one line each", "[launcher][deepspeed]") {
  Fixture f(0);
  const auto hosts = f.hostfile("a slots=1\nb slots=1\n");
  CHECK_THAT(f.error({"-H", hosts, "--launcher", "openmpi", "t.py"}),
             StartsWith("--launcher: openmpi: dtrun starts one agent per host over ssh"));
  CHECK_THAT(f.error({"-H", hosts, "--launcher=SLURM", "t.py"}),
             StartsWith("--launcher: slurm: run dtrun under srun instead"));
  CHECK_THAT(f.error({"-H", hosts, "--launcher=mpich", "t.py"}), Contains("mpirun"));
  CHECK_THAT(f.error({"-H", hosts, "--launcher=impi", "t.py"}), Contains("mpirun"));
  CHECK_THAT(f.error({"-H", hosts, "--launcher=mvapich", "t.py"}), Contains("mpirun"));
  CHECK_THAT(f.error({"-H", hosts, "--launcher_args=-R ssh", "t.py"}),
             StartsWith("--launcher_args: pdsh's own arguments"));
  // pdsh, any case, is dtrun's ssh; locally the launcher is not used, as in DeepSpeed.
  CHECK(f.launch({"-H", hosts, "--launcher=PDSH", "t.py"}).invocation.multiHost);
  CHECK(f.config({"--launcher=openmpi", "t.py"}).nprocPerNode == 1);
  CHECK_THAT(f.error({"--autotuning", "tune", "t.py"}),
             StartsWith("--autotuning: DeepSpeed's autotuner"));
  CHECK_THAT(f.error({"--elastic_training", "t.py"}),
             StartsWith("--elastic_training: use plain dtrun"));
  CHECK_THAT(f.error({"--bind_cores_to_rank", "t.py"}), Contains("numactl"));
  CHECK_THAT(f.error({"--log_level=loud", "t.py"}),
             StartsWith("--log_level: invalid choice 'loud'"));
}

TEST_CASE("logs and dtrun's options in deepspeed mode", "[launcher][deepspeed]") {
  Fixture f(1);
  auto c = f.config({"--enable_each_rank_log=/tmp/ranks", "--log_level=warning", "--max-restarts=2",
                     "--event-log=/tmp/ev", "t.py"});
  CHECK(c.logDir == "/tmp/ranks");
  CHECK(c.redirects.forRank(0) == agent::Std::kAll);
  CHECK(c.logLevel == "warn");
  CHECK(c.maxRestarts == 2);
  CHECK(c.eventLog == "/tmp/ev");
  CHECK(f.config({"-q", "t.py"}).logLevel == "error");
  CHECK(hasWarning(f.config({"--save_pid", "t.py"}), "--save_pid is ignored by dtrun"));
}
