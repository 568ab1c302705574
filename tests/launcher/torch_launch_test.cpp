// `dtrun launch` (launcher/torch_launch.h): torch.distributed.launch's command line. The answers
// are those of torch 1.13's launch.py and run.py (get_args_parser's defaults, config_from_args'
// --local_rank, launch()'s --no-python check); the end-to-end comparison with torch's own
// launcher on a tutorial script is tests/e2e/torch_launch_vs_torch.py.
#include "launcher/torch_launch.h"

#include <catch2/catch.hpp>

#include "tests/launcher/launcher_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

struct Fixture {
  dtrun::test::TempDir dir;
  HostProbe probe = testing::fakeProbe(dir.path(), dir.path());
  TorchLaunch launch(const Args& args, const Env& env = {}) const {
    return parseTorchLaunch(args, env, probe);
  }
  std::string error(const Args& args, const Env& env = {}) const {
    return testing::usageErrorOf([&] { launch(args, env); });
  }
};

}  // namespace

TEST_CASE("dtrun launch gives the script --local_rank=N first, unless --use-env",
          "[launcher][torch_launch]") {
  Fixture f;
  auto cfg = f.launch({"--nproc_per_node=2", "train.py", "--epochs", "3"}).invocation.config;
  CHECK(cfg.nprocPerNode == 2);
  CHECK(cfg.script == "train.py");
  // The agent puts each worker's local rank in place of ${local_rank}.
  CHECK(cfg.scriptArgs == Args{"--local_rank=${local_rank}", "--epochs", "3"});
  CHECK(cfg.entrypoint.back() == "train.py");
  for (const char* flag :
       {"--use_env", "--use-env", "--no-local-rank", "--no_local_rank", "--use"}) {
    INFO(flag);
    CHECK(f.launch({flag, "train.py", "--epochs", "3"}).invocation.config.scriptArgs ==
          Args{"--epochs", "3"});
  }
  // -m and --run-path get it too, after the module or script, as torch's run.py does.
  auto module = f.launch({"-m", "pkg.train", "x"}).invocation.config;
  CHECK(module.entrypoint == Args{"python3", "-u", "-m", "pkg.train"});
  CHECK(module.scriptArgs == Args{"--local_rank=${local_rank}", "x"});
  // The script's own --use_env is the script's.
  CHECK(f.launch({"train.py", "--use_env"}).invocation.config.scriptArgs ==
        Args{"--local_rank=${local_rank}", "--use_env"});
}

TEST_CASE("dtrun launch: --no-python needs --use-env", "[launcher][torch_launch]") {
  Fixture f;
  CHECK(f.error({"--no_python", "./run.sh"}) ==
        "--no_python: needs --use-env (a program that is not Python cannot be given "
        "--local_rank; with --use-env it reads LOCAL_RANK)");
  CHECK_THAT(f.error({"./run.sh"}, {{"PET_NO_PYTHON", "1"}}), StartsWith("PET_NO_PYTHON: needs"));
  auto cfg = f.launch({"--no-python", "--use-env", "./run.sh", "a"}).invocation.config;
  CHECK(cfg.entrypoint == Args{"./run.sh"});
  CHECK(cfg.scriptArgs == Args{"a"});
}

TEST_CASE("dtrun launch: the static rendezvous by default", "[launcher][torch_launch]") {
  Fixture f;
  // One node: static on a free port (torch: 29500), node 0 serves the store.
  auto one = f.launch({"--nproc_per_node", "2", "t.py"}).invocation.config;
  CHECK(one.rdzv.backend == dtrun::agent::RendezvousBackend::kStatic);
  CHECK(one.rdzv.host == "127.0.0.1");
  CHECK(one.rdzv.port == 0);
  CHECK(one.rdzv.storeTimeout == 600s);
  // A given port is kept, as is the tutorial's multi-node form.
  CHECK(f.launch({"--master_port=1234", "t.py"}).invocation.config.rdzv.port == 1234);
  auto multi = f.launch({"--nnodes=2", "--node_rank=1", "--master_addr=10.1.2.3",
                         "--master_port=29501", "--nproc_per_node=8", "t.py"})
                   .invocation.config;
  CHECK(multi.rdzv.backend == dtrun::agent::RendezvousBackend::kStatic);
  CHECK(multi.rdzv.host == "10.1.2.3");
  CHECK(multi.rdzv.port == 29501);
  CHECK(multi.rdzv.nodeRank == 1);
  CHECK(multi.rdzv.maxNodes == 2);
  auto twoNoPort = f.launch({"--nnodes=2", "--node_rank=0", "t.py"}).invocation.config;
  CHECK(twoNoPort.rdzv.port == 29500);
  // --rdzv-backend and --standalone say otherwise.
  CHECK(f.launch({"--rdzv_backend=c10d", "--rdzv_endpoint=h:5", "--nnodes=2", "t.py"})
            .invocation.config.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
  CHECK(f.launch({"--standalone", "t.py"}).invocation.config.rdzv.backend ==
        dtrun::agent::RendezvousBackend::kC10d);
  // An endpoint without a backend is static's endpoint, as in torch.
  auto ep = f.launch({"--rdzv_endpoint=h:7", "--nnodes=2", "t.py"}).invocation.config;
  CHECK(ep.rdzv.backend == dtrun::agent::RendezvousBackend::kStatic);
  CHECK(ep.rdzv.host == "h");
  CHECK(ep.rdzv.port == 7);
}

TEST_CASE("dtrun launch: the notice says what to change, with plain dtrun's command",
          "[launcher][torch_launch]") {
  Fixture f;
  auto n = f.launch({"--nproc_per_node=2", "--master_port", "1234", "train.py", "--lr", "0.1"},
                    {{"PET_MAX_RESTARTS", "2"}})
               .notice;
  CHECK_THAT(n, Contains("os.environ[\"LOCAL_RANK\"]") &&
                    EndsWith("then run: dtrun --nproc-per-node=2 --master-port=1234 train.py "
                             "--lr 0.1"));
  CHECK(n.find('\n') == std::string::npos);
  auto useEnv = f.launch({"--use_env", "train.py"}).notice;
  CHECK_THAT(useEnv, Contains("drop --use-env") && EndsWith("then run: dtrun train.py"));
  auto endpoint = f.launch({"--rdzv_endpoint=h:7", "--nnodes=2", "t.py", "it's"}).notice;
  CHECK_THAT(
      endpoint,
      EndsWith("dtrun --nnodes=2 --rdzv-endpoint=h:7 --rdzv-backend=static t.py 'it'\\''s'"));
}

TEST_CASE("dtrun launch: help and bad options", "[launcher][torch_launch]") {
  Fixture f;
  std::string help;
  try {
    f.launch({"-h"});
  } catch (const HelpRequested& h) {
    help = h.text();
  }
  CHECK_THAT(help, StartsWith("usage: dtrun launch [-h] [options] training_script") &&
                       Contains("--use-env, --no-local-rank") && Contains("--nproc-per-node") &&
                       Contains("--hostfile FILE") && Contains("--local_rank=N"));
  CHECK_THAT(f.error({"--bogus", "t.py"}), StartsWith("unrecognized arguments: --bogus (see "
                                                      "dtrun launch --help)"));
  CHECK(f.error({}) ==
        "the following arguments are required: training_script (see dtrun launch --help)");
}

TEST_CASE("dtrun launch --hostfile: every host's agent gets --local_rank through plain dtrun",
          "[launcher][torch_launch]") {
  Fixture f;
  dtrun::test::writeFile(f.dir.path() / "hosts", "a slots=2\nb slots=2\n");
  auto inv =
      f.launch({"--hostfile", (f.dir.path() / "hosts").string(), "train.py", "x"}).invocation;
  REQUIRE(inv.multiHost);
  auto argv = inv.multiHost->agentArgv(1);
  CHECK(argv.front() ==
        "/opt/dtrun/bin/dtrun");  // plain dtrun, not `dtrun launch`: one notice only
  CHECK(Args(argv.end() - 4, argv.end()) ==
        Args{"--", "train.py", "--local_rank=${local_rank}", "x"});
  CHECK(std::count(argv.begin(), argv.end(), "--use-env") == 0);
}
