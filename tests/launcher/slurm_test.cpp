// dtrun under Slurm (launcher/slurm.h, launcher/endpoint_check.h): hostlist expansion, the
// defaults derived inside a job step from an injected environment and injected scontrol output,
// the hook main() calls, the loopback endpoint check, and --nproc-per-node=gpu with the
// environment Slurm's gres/gpu plugin exports.
//
// The expected expansions are what `scontrol show hostnames` of Slurm 22.05 printed for the same
// expressions; tests/slurm/hostlist_oracle.sh compares them against a live scontrol.
#include "launcher/slurm.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <set>

#include "common/error.h"
#include "launcher/cli.h"
#include "launcher/endpoint_check.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using dtrun::countVisibleGpus;
using dtrun::agent::LaunchConfig;
using Env = std::map<std::string, std::string>;
using Hosts = std::vector<std::string>;

namespace {

// A fake machine for the derivation: which names resolve, and what scontrol answers.
struct FakeSlurm {
  std::set<std::string> resolvable{"vm", "node01", "gpu-a1"};
  CommandResult scontrol{true, 0, "", ""};
  std::vector<std::vector<std::string>> calls;

  SlurmProbe probe() {
    return SlurmProbe{
        [this](const std::string& h) { return resolvable.count(h) > 0; },
        [this](const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
          CHECK(timeout == kScontrolTimeout);
          calls.push_back(argv);
          return scontrol;
        }};
  }
};

// The environment of task 0 of step 0 of job 955000, two tasks on one node, as srun sets it
// (captured from Slurm 22.05 and trimmed).
Env stepEnv() {
  return {
      {"SLURM_JOB_ID", "955000"},    {"SLURM_JOBID", "955000"},     {"SLURM_STEP_ID", "0"},
      {"SLURM_STEPID", "0"},         {"SLURM_PROCID", "0"},         {"SLURM_LOCALID", "0"},
      {"SLURM_NTASKS", "2"},         {"SLURM_NPROCS", "2"},         {"SLURM_STEP_NUM_TASKS", "2"},
      {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_NNODES", "1"},         {"SLURM_JOB_NUM_NODES", "1"},
      {"SLURM_JOB_NODELIST", "vm"},  {"SLURM_STEP_NODELIST", "vm"}, {"SLURM_NODELIST", "vm"},
      {"SLURMD_NODENAME", "vm"},     {"PATH", "/usr/bin:/bin"}};
}

// The batch script's own environment: SLURM_PROCID and SLURM_NTASKS, but no step.
Env batchEnv() {
  Env env = stepEnv();
  for (const char* v : {"SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS",
                        "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST"}) {
    env.erase(v);
  }
  return env;
}

// Two nodes n1, n2 known only to Slurm, one task each (the multi-slurmd cluster).
Env twoNodeEnv() {
  Env env = stepEnv();
  env["SLURM_JOB_NODELIST"] = env["SLURM_STEP_NODELIST"] = env["SLURM_NODELIST"] = "n[1-2]";
  env["SLURM_STEP_NUM_NODES"] = env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = "2";
  return env;
}

LaunchConfig parsed(const std::vector<std::string>& args, const Env& env = {}) {
  HostProbe host;
  host.cpuCount = 4;
  return parseCommandLine(args, env, host);
}

const char* kScontrolMultiLine =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1 \n"
    "   CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=7.46\n"
    "   AvailableFeatures=(null)\n"
    "   Gres=(null)\n"
    "   NodeAddr=10.1.2.3 NodeHostName=vm Version=22.05.8\n"
    "   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n";

}  // namespace

TEST_CASE("hostlist: Slurm's forms expand as scontrol show hostnames does", "[launcher][slurm]") {
  struct Case {
    std::string expr;
    Hosts hosts;
  };
  const std::vector<Case> cases{
      {"vm", {"vm"}},
      {"node[01-04,07]", {"node01", "node02", "node03", "node04", "node07"}},
      {"rack[1-2]-node[01-02]", {"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
      // Three groups: Slurm varies the last fastest and the one before it slowest.
      {"a[1-2]b[3-4]c[5-6]",
       {"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"}},
      {"n[1-2]x[1-2]", {"n1x1", "n1x2", "n2x1", "n2x2"}},
      {"n[1-2]-[3-4]", {"n1-3", "n1-4", "n2-3", "n2-4"}},
      {"n[9-10]", {"n9", "n10"}},
      {"n[001-5]", {"n001", "n002", "n003", "n004", "n005"}},  // the low end sets the width
      {"n[009-011]", {"n009", "n010", "n011"}},
      {"n[099-100]", {"n099", "n100"}},
      {"n[01-1]", {"n01"}},
      {"n[1-01]", {"n1"}},
      {"n[0-2]", {"n0", "n1", "n2"}},
      {"n[00-02]", {"n00", "n01", "n02"}},
      {"n[7]", {"n7"}},
      {"n[1-]", {"n1"}},  // an empty high end is the low end
      {"[1-2]", {"1", "2"}},
      {"n[1-3] m[2-3]", {"n1", "n2", "n3", "m2", "m3"}},
      {"n[1-2]\tm1", {"n1", "n2", "m1"}},
      {"x,y[1-2],z", {"x", "y1", "y2", "z"}},
      {"n[1-2],", {"n1", "n2"}},
      {",,a", {"a"}},
      {"n[1-2],n[2-3]", {"n1", "n2", "n2", "n3"}},  // no de-duplication, no sorting
      {"n1x", {"n1x"}},
      {"a]b", {"a]b"}},
      {"gpu-a1,gpu-b[10-11]", {"gpu-a1", "gpu-b10", "gpu-b11"}},
      {"", {}},
  };
  for (const auto& c : cases) {
    INFO(c.expr);
    CHECK(expandHostlist(c.expr) == c.hosts);
  }
  CHECK(expandHostlist("n[1-65536]").size() == 65536);
  CHECK(expandHostlist("n[1-65536]").back() == "n65536");
}

TEST_CASE("hostlist: what Slurm rejects, and malformed brackets, throw ConfigError",
          "[launcher][slurm]") {
  // Slurm answers "Invalid hostlist" or misreads these; none is a node list Slurm produces.
  for (const std::string expr : {"n[5-3]", "a[1-3]b", "a.b[1-2].c", "n[1-2]]", "n[]", "n[a-b]",
                                 "n[1,,2]", "n[-1]", "n[1-4:2]", "n[1-65537]", "n[1-2", "n[[1-2]",
                                 "n[+1-2]", "n[1 -2]", "n[1-2x]", "n[1234567890123456789]"}) {
    INFO(expr);
    try {
      expandHostlist(expr);
      FAIL_CHECK("no ConfigError");
    } catch (const dtrun::ConfigError& e) {
      CHECK_THAT(e.what(), Contains(expr));
    }
  }
  CHECK_THROWS_WITH(expandHostlist("n[5-3]"), Contains("backwards"));
  CHECK_THROWS_WITH(expandHostlist("a[1-3]b"), Contains("after the last bracket"));
  CHECK_THROWS_WITH(expandHostlist("n[1-65537]"), Contains("65536"));
  // A bound on the whole expression, checked while expanding.
  CHECK_THROWS_WITH(expandHostlist("a[1-65536]b[1-65536]"), Contains("more than"));
}

TEST_CASE("slurm: the derived port separates nearby jobs and a job's steps", "[launcher][slurm]") {
  CHECK(slurmRendezvousPort(955000, 0) == 20000);
  CHECK(slurmRendezvousPort(955001, 0) == 20010);
  CHECK(slurmRendezvousPort(955001, 3) == 20013);
  CHECK(slurmRendezvousPort(999, 9) == 29999);
  CHECK(slurmRendezvousPort(12, 12) == 20122);
  std::set<std::uint16_t> seen;
  for (std::uint64_t job = 4000; job < 5000; ++job) {
    for (std::uint64_t step = 0; step < 10; ++step) {
      std::uint16_t p = slurmRendezvousPort(job, step);
      CHECK((p >= 20000 && p < 30000));
      seen.insert(p);
    }
  }
  CHECK(seen.size() == 10000);  // 1000 consecutive jobs x 10 steps: no two alike
}

TEST_CASE("slurm: NodeAddr from scontrol's one-line and multi-line output", "[launcher][slurm]") {
  CHECK(parseNodeAddr(kScontrolMultiLine) == "10.1.2.3");
  CHECK(parseNodeAddr("NodeName=n2 Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=vm") == "127.0.0.1");
  CHECK(parseNodeAddr("NodeName=n2 NodeAddr=fe80::1") == "fe80::1");
  CHECK(parseNodeAddr("NodeName=n2 ActiveNodeAddr=1.2.3.4") == std::nullopt);
  CHECK(parseNodeAddr("Node n9 not found") == std::nullopt);
  CHECK(parseNodeAddr("NodeAddr= NodeHostName=x") == std::nullopt);
}

TEST_CASE("slurm: runCommand captures output and exit codes, and kills at the timeout",
          "[launcher][slurm]") {
  auto r = runCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, 5s);
  CHECK(r.finished);
  CHECK(r.exitCode == 3);
  CHECK(r.output == "out\nerr\n");
  CHECK(r.error.empty());

  auto start = std::chrono::steady_clock::now();
  auto slow = runCommand({"sh", "-c", "echo begun; exec sleep 30"}, 300ms);
  CHECK_FALSE(slow.finished);
  CHECK(slow.output == "begun\n");
  CHECK_THAT(slow.error, Contains("300 ms"));
  CHECK(std::chrono::steady_clock::now() - start < 10s);

  auto missing = runCommand({"dtrun-no-such-command-here"}, 5s);
  CHECK_FALSE(missing.finished);
  CHECK_THAT(missing.error, Contains("dtrun-no-such-command-here"));

  auto killed = runCommand({"sh", "-c", "kill -TERM $$"}, 5s);
  CHECK(killed.finished);
  CHECK(killed.exitCode == 128 + SIGTERM);
}

TEST_CASE("slurm: a step of two tasks gets endpoint, nnodes and run id", "[launcher][slurm]") {
  FakeSlurm slurm;
  auto d = deriveSlurmDefaults(stepEnv(), parsed({"train.py"}), slurm.probe());
  CHECK(d.variables ==
        Env{{"PET_NNODES", "2"}, {"PET_RDZV_ENDPOINT", "vm:20000"}, {"PET_RDZV_ID", "955000.0"}});
  CHECK(slurm.calls.empty());  // "vm" resolves: no scontrol
  CHECK_THAT(d.summary, Contains("Slurm step 955000.0"));
  CHECK_THAT(d.summary, Contains("--nnodes 2 (SLURM_STEP_NUM_TASKS)"));
  CHECK_THAT(d.summary,
             Contains("--rdzv-endpoint vm:20000 (first host of SLURM_STEP_NODELIST=vm)"));
  CHECK_THAT(d.summary, Contains("--rdzv-id 955000.0"));
  CHECK(d.warnings.empty());
}

TEST_CASE("slurm: the step's node list and task count win over the job's", "[launcher][slurm]") {
  // sbatch -N 3 -n 6, then srun -N 2 -n 2 -r 1: the step runs on node02-node03 only.
  Env env = stepEnv();
  env["SLURM_JOB_NODELIST"] = "node[01-03]";
  env["SLURM_STEP_NODELIST"] = "node[02-03]";
  env["SLURM_NTASKS"] = "2";
  env["SLURM_STEP_NUM_TASKS"] = "2";
  env["SLURM_STEP_ID"] = "4";
  FakeSlurm slurm;
  slurm.resolvable = {"node02"};
  auto d = deriveSlurmDefaults(env, parsed({"train.py"}), slurm.probe());
  CHECK(d.variables.at("PET_RDZV_ENDPOINT") == "node02:20004");
  CHECK(d.variables.at("PET_RDZV_ID") == "955000.4");

  // Without step variables (older Slurm), the job's list and SLURM_NTASKS.
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_STEP_NUM_TASKS");
  env["SLURM_NTASKS"] = "3";
  slurm.resolvable = {"node01"};
  d = deriveSlurmDefaults(env, parsed({"train.py"}), slurm.probe());
  CHECK(d.variables.at("PET_RDZV_ENDPOINT") == "node01:20004");
  CHECK(d.variables.at("PET_NNODES") == "3");
}

TEST_CASE("slurm: a name only Slurm knows falls back to its NodeAddr", "[launcher][slurm]") {
  FakeSlurm slurm;
  slurm.scontrol.output = "NodeName=n1 Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=vm\n";
  auto d = deriveSlurmDefaults(twoNodeEnv(), parsed({"train.py"}), slurm.probe());
  REQUIRE(slurm.calls.size() == 1);
  CHECK(slurm.calls[0] == std::vector<std::string>{"scontrol", "-o", "show", "node", "n1"});
  CHECK(d.variables.at("PET_RDZV_ENDPOINT") == "127.0.0.1:20000");
  CHECK_THAT(d.summary, Contains("NodeAddr of n1"));

  slurm.scontrol.output = kScontrolMultiLine;
  d = deriveSlurmDefaults(twoNodeEnv(), parsed({"train.py"}), slurm.probe());
  CHECK(d.variables.at("PET_RDZV_ENDPOINT") == "10.1.2.3:20000");

  slurm.scontrol.output = "NodeName=n1 NodeAddr=fd00::7 NodeHostName=vm\n";
  d = deriveSlurmDefaults(twoNodeEnv(), parsed({"train.py"}), slurm.probe());
  CHECK(d.variables.at("PET_RDZV_ENDPOINT") == "[fd00::7]:20000");
  // ... which the command line parser reads back as host and port.
  Env env{{"PET_RDZV_ENDPOINT", "[fd00::7]:20000"}, {"PET_NNODES", "2"}};
  auto cfg = parsed({"train.py"}, env);
  CHECK(cfg.rdzv.host == "fd00::7");
  CHECK(cfg.rdzv.port == 20000);
}

TEST_CASE("slurm: no usable NodeAddr is a usage error naming --rdzv-endpoint",
          "[launcher][slurm]") {
  FakeSlurm slurm;
  SECTION("scontrol fails") {
    slurm.scontrol = {true, 1, "slurm_load_node error: Invalid node name specified\n", ""};
    CHECK_THROWS_WITH(deriveSlurmDefaults(twoNodeEnv(), parsed({"train.py"}), slurm.probe()),
                      Contains("exit code 1: slurm_load_node error") &&
                          Contains("give --rdzv-endpoint HOST[:PORT]") && Contains("n1"));
  }
  SECTION("scontrol times out") {
    slurm.scontrol = {false, -1, "", "scontrol did not finish within 10000 ms"};
    CHECK_THROWS_WITH(deriveSlurmDefaults(twoNodeEnv(), parsed({"train.py"}), slurm.probe()),
                      Contains("did not finish"));
  }
  SECTION("NodeAddr is the unresolvable name itself") {
    slurm.scontrol.output = "NodeName=n1 NodeAddr=n1 NodeHostName=n1\n";
    CHECK_THROWS_AS(deriveSlurmDefaults(twoNodeEnv(), parsed({"train.py"}), slurm.probe()),
                    UsageError);
  }
  SECTION("a node list that is not a hostlist") {
    Env env = twoNodeEnv();
    env["SLURM_STEP_NODELIST"] = "n[2-1]";
    CHECK_THROWS_WITH(deriveSlurmDefaults(env, parsed({"train.py"}), slurm.probe()),
                      Contains("SLURM") || Contains("n[2-1]"));
  }
}

TEST_CASE("slurm: a one-host step whose name does not resolve uses loopback", "[launcher][slurm]") {
  Env env = stepEnv();
  env["SLURM_STEP_NODELIST"] = "ghost7";
  FakeSlurm slurm;
  slurm.scontrol = {true, 1, "error", ""};
  auto d = deriveSlurmDefaults(env, parsed({"train.py"}), slurm.probe());
  CHECK(d.variables.at("PET_RDZV_ENDPOINT") == "127.0.0.1:20000");
  CHECK_THAT(d.summary, Contains("loopback"));
}

TEST_CASE("slurm: options given on the command line or as PET_* are never derived",
          "[launcher][slurm]") {
  FakeSlurm slurm;
  slurm.resolvable.clear();  // any scontrol call would be recorded
  auto d = deriveSlurmDefaults(
      stepEnv(),
      parsed({"--rdzv-endpoint", "head:1234", "--nnodes", "1:4", "--rdzv-id", "mine", "t.py"}),
      slurm.probe());
  CHECK(d.variables.empty());
  CHECK(d.summary.empty());
  CHECK(slurm.calls.empty());

  // --nnodes given: its maximum decides whether an endpoint is needed.
  slurm.resolvable = {"vm"};
  d = deriveSlurmDefaults(stepEnv(), parsed({"--nnodes=1:4", "t.py"}), slurm.probe());
  CHECK(d.variables == Env{{"PET_RDZV_ENDPOINT", "vm:20000"}, {"PET_RDZV_ID", "955000.0"}});
  d = deriveSlurmDefaults(stepEnv(), parsed({"--nnodes=1", "t.py"}), slurm.probe());
  CHECK(d.variables.empty());

  // PET_* in the environment count as given.
  Env env = stepEnv();
  env["PET_RDZV_ID"] = "from-env";
  d = deriveSlurmDefaults(env, parsed({"t.py"}, env), slurm.probe());
  CHECK(d.variables.count("PET_RDZV_ID") == 0);
  CHECK(d.variables.count("PET_NNODES") == 1);
}

TEST_CASE("slurm: nothing is derived outside a step, standalone, static, or for one task",
          "[launcher][slurm]") {
  FakeSlurm slurm;
  CHECK(deriveSlurmDefaults({{"PATH", "/bin"}}, parsed({"t.py"}), slurm.probe()).variables.empty());
  // The batch script: SLURM_PROCID=0 and SLURM_NTASKS=2, but a dtrun there is one agent.
  CHECK(deriveSlurmDefaults(batchEnv(), parsed({"t.py"}), slurm.probe()).variables.empty());
  Env noProcid = stepEnv();
  noProcid.erase("SLURM_PROCID");
  CHECK(deriveSlurmDefaults(noProcid, parsed({"t.py"}), slurm.probe()).variables.empty());
  CHECK(deriveSlurmDefaults(stepEnv(), parsed({"--standalone", "t.py"}), slurm.probe())
            .variables.empty());
  CHECK(deriveSlurmDefaults(stepEnv(), parsed({"--master-addr=h", "--nnodes=2", "t.py"}),
                            slurm.probe())
            .variables.empty());
  CHECK(deriveSlurmDefaults(stepEnv(), parsed({"--rdzv-backend=static", "t.py"}), slurm.probe())
            .variables.empty());
  // One task: one agent, dtrun's single-node mode (a free port) needs no endpoint.
  Env one = stepEnv();
  one["SLURM_STEP_NUM_TASKS"] = one["SLURM_NTASKS"] = "1";
  auto d = deriveSlurmDefaults(one, parsed({"t.py"}), slurm.probe());
  CHECK(d.variables.empty());
  CHECK(d.summary.empty());  // nothing derived, nothing said
  // A task count that is not a number is reported, not guessed.
  Env junk = stepEnv();
  junk["SLURM_STEP_NUM_TASKS"] = "2(x3)";
  d = deriveSlurmDefaults(junk, parsed({"t.py"}), slurm.probe());
  CHECK(d.variables.empty());
  REQUIRE(d.warnings.size() == 1);
  CHECK_THAT(d.warnings[0], Contains("SLURM_STEP_NUM_TASKS='2(x3)'"));
  CHECK(slurm.calls.empty());
}

TEST_CASE("slurm: the hook adds only absent variables, and the command line still wins",
          "[launcher][slurm]") {
  FakeSlurm slurm;
  Env env = stepEnv();
  std::vector<std::string> args{"--nproc-per-node=3", "train.py", "--lr", "1"};
  auto d = applySlurmDefaults(args, env, slurm.probe());
  CHECK(env.at("PET_RDZV_ENDPOINT") == "vm:20000");
  CHECK(env.at("PET_NNODES") == "2");
  CHECK(env.at("PET_RDZV_ID") == "955000.0");
  auto cfg = parsed(args, env);
  CHECK(cfg.rdzv.host == "vm");
  CHECK(cfg.rdzv.port == 20000);
  CHECK(cfg.rdzv.minNodes == 2);
  CHECK(cfg.rdzv.maxNodes == 2);
  CHECK(cfg.rdzv.runId == "955000.0");
  CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
  CHECK(cfg.nprocPerNode == 3);
  CHECK(cfg.scriptArgs == std::vector<std::string>{"--lr", "1"});

  // Explicit options: nothing added for them.
  Env env2 = stepEnv();
  env2["PET_RDZV_ENDPOINT"] = "head:7";
  applySlurmDefaults({"--rdzv-id=x", "--nnodes", "2:3", "t.py"}, env2, slurm.probe());
  CHECK(env2.at("PET_RDZV_ENDPOINT") == "head:7");
  CHECK(env2.count("PET_RDZV_ID") == 0);
  CHECK(env2.count("PET_NNODES") == 0);

  // A command line that does not parse, or -h: left to the real parse, nothing derived.
  Env env3 = stepEnv();
  CHECK(applySlurmDefaults({"--nnodes=0", "t.py"}, env3, slurm.probe()).variables.empty());
  CHECK(applySlurmDefaults({"-h"}, env3, slurm.probe()).variables.empty());
  CHECK(env3 == stepEnv());
}

TEST_CASE("slurm: lost GPU binding is reported, Slurm's CUDA_VISIBLE_DEVICES is honoured",
          "[launcher][slurm]") {
  FakeSlurm slurm;
  Env env = stepEnv();
  env["SLURM_STEP_GPUS"] = "4,5";
  auto d = deriveSlurmDefaults(env, parsed({"t.py"}), slurm.probe());
  REQUIRE(d.warnings.size() == 1);
  CHECK_THAT(d.warnings[0], Contains("4,5 (SLURM_STEP_GPUS)") && Contains("CUDA_VISIBLE_DEVICES"));
  env["CUDA_VISIBLE_DEVICES"] = "4,5";
  CHECK(deriveSlurmDefaults(env, parsed({"t.py"}), slurm.probe()).warnings.empty());
  // The batch script reads SLURM_JOB_GPUS; a step ignores it (copied from the batch host).
  Env batch = batchEnv();
  batch["SLURM_JOB_GPUS"] = "0";
  CHECK(deriveSlurmDefaults(batch, parsed({"t.py"}), slurm.probe()).warnings.size() == 1);
  Env step = stepEnv();
  step["SLURM_JOB_GPUS"] = "0";
  CHECK(deriveSlurmDefaults(step, parsed({"t.py"}), slurm.probe()).warnings.empty());

  // What gres/gpu exports, on a node with 8 GPU device files: global ids without
  // ConstrainDevices, 0..n-1 with it, one id per task with --gpu-bind, NoDevFiles for a GRES
  // without device files.
  dtrun::test::TempDir dev;
  for (int i = 0; i < 8; ++i)
    dtrun::test::writeFile(dev.path() / ("nvidia" + std::to_string(i)), "");
  dtrun::test::writeFile(dev.path() / "nvidiactl", "");
  CHECK(countVisibleGpus(dev.path(), std::string("4,5")) == 2);
  CHECK(countVisibleGpus(dev.path(), std::string("0,1")) == 2);
  CHECK(countVisibleGpus(dev.path(), std::string("6")) == 1);
  CHECK(countVisibleGpus(dev.path(), std::string("NoDevFiles")) == 0);
  CHECK(countVisibleGpus(dev.path(), std::nullopt) == 8);
  HostProbe host;
  host.devDir = dev.path();
  host.cpuCount = 2;
  Env bound{{"CUDA_VISIBLE_DEVICES", "2,3,7"}, {"SLURM_STEP_GPUS", "2,3,7"}};
  CHECK(parseCommandLine({"--nproc-per-node=gpu", "t.py"}, bound, host).nprocPerNode == 3);
  CHECK(parseCommandLine({"--nproc-per-node=auto", "t.py"}, bound, host).nprocPerNode == 3);
}

TEST_CASE("endpoint check: loopback with several hosts warns, otherwise quiet",
          "[launcher][slurm]") {
  auto config = [](const std::vector<std::string>& args, const Env& env = {}) {
    return parsed(args, env);
  };
  const std::vector<std::string> lo{"127.0.0.1"};
  const std::vector<std::string> lo6{"::1"};
  const std::vector<std::string> lan{"10.0.0.5"};

  // Outside Slurm: several agents allowed and a host name that resolves to loopback (Debian's
  // 127.0.1.1 line for the machine's own name is the classic trap).
  auto multi = config({"--nnodes=2", "--rdzv-endpoint=headnode:29400", "t.py"});
  auto w = loopbackEndpointWarning(multi, lo);
  REQUIRE(w);
  CHECK_THAT(*w, Contains("rendezvous host headnode resolves to 127.0.0.1 (loopback)") &&
                     Contains("--nnodes allows 2 agents") &&
                     Contains("fine when every agent runs on this machine"));
  CHECK(loopbackEndpointWarning(multi, lo6));
  CHECK(loopbackEndpointWarning(multi, {"::ffff:127.0.1.1"}));
  CHECK(loopbackEndpointWarning(multi, {"10.0.0.5", "127.0.1.1"}));
  CHECK_FALSE(loopbackEndpointWarning(multi, lan));
  CHECK_FALSE(loopbackEndpointWarning(multi, {}));  // unresolvable: the join reports it
  // A literal loopback address or "localhost" says "this machine" on purpose: quiet outside
  // Slurm (all agents here), where nothing tells that the job spans several hosts.
  CHECK_FALSE(
      loopbackEndpointWarning(config({"--nnodes=1:3", "--rdzv-endpoint=127.0.0.1:5", "t.py"}), lo));
  CHECK_FALSE(
      loopbackEndpointWarning(config({"--nnodes=2", "--rdzv-endpoint=localhost:5", "t.py"}), lo));

  // One agent, or --standalone: nothing to reach.
  CHECK_FALSE(loopbackEndpointWarning(config({"--rdzv-endpoint=localhost:1", "t.py"}), lo));
  CHECK_FALSE(loopbackEndpointWarning(config({"--standalone", "--nnodes=1:2", "t.py"}), lo));

  // Under Slurm: only when the job spans several hosts.
  Env two = twoNodeEnv();
  auto slurmMulti = config({"--nnodes=2", "--rdzv-endpoint=n1:20000", "t.py"}, two);
  w = loopbackEndpointWarning(slurmMulti, lo);
  REQUIRE(w);
  CHECK_THAT(*w, Contains("this Slurm job spans 2 hosts") && Contains("--rdzv-endpoint"));
  auto slurmOne = config({"--nnodes=2", "--rdzv-endpoint=vm:20000", "t.py"}, stepEnv());
  CHECK_FALSE(loopbackEndpointWarning(slurmOne, lo));

  // The static backend connects to --master-addr.
  auto legacy = config({"--nnodes=2", "--node-rank=1", "--master-addr=headnode", "t.py"});
  CHECK(rendezvousHost(legacy) == "headnode");
  CHECK_THAT(*loopbackEndpointWarning(legacy, lo), Contains("--master-addr"));
}

TEST_CASE("endpoint check: Slurm host counts", "[launcher][slurm]") {
  CHECK(slurmHostCount({{"PATH", "/bin"}}) == std::nullopt);
  CHECK(slurmHostCount(stepEnv()) == 1);
  CHECK(slurmHostCount(twoNodeEnv()) == 2);
  CHECK(slurmHostCount({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "a[1-3],b"}}) == 4);
  CHECK(slurmHostCount({{"SLURM_JOB_ID", "1"},
                        {"SLURM_NNODES", "x"},
                        {"SLURM_JOB_NODELIST", "a[3-1]"},
                        {"SLURM_NODELIST", "c[1-5]"}}) == 5);
  CHECK(slurmHostCount({{"SLURM_JOB_ID", "1"}}) == std::nullopt);
}

TEST_CASE("endpoint check: resolveHost sees loopback for localhost", "[launcher][slurm]") {
  auto addrs = resolveHost("localhost");
  REQUIRE_FALSE(addrs.empty());
  CHECK((std::find(addrs.begin(), addrs.end(), "127.0.0.1") != addrs.end() ||
         std::find(addrs.begin(), addrs.end(), "::1") != addrs.end()));
  CHECK(resolveHost("no-such-host.invalid").empty());
}
