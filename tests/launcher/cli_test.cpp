// The command line (launcher/cli.h): torchrun's options in both spellings, abbreviations, PET_*
// fallbacks, the remainder, every value form and every bad value, and the help text.
//
// Where torchrun 1.13 could answer, its answers are written down here (the abbreviation table
// below came from its parser); dtrun follows newest torchrun where the two differ.
#include "launcher/cli.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "common/file_util.h"
#include "launcher/rdzv_args.h"
#include "launcher/version.h"
#include "tests/support/fake_devices.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using dtrun::countVisibleGpus;
using dtrun::agent::ExitCodeScheme;
using dtrun::agent::LaunchConfig;
using dtrun::agent::Std;
using dtrun::agent::WorkerVariables;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

// A machine with no GPU device files and 8 CPUs, so no test depends on the host.
struct FakeHost {
  dtrun::test::TempDir dev;
  HostProbe probe;
  FakeHost() {
    probe.devDir = dev.path();
    probe.sysDir = dev.path();
    probe.cpuCount = 8;
  }
  void addGpus(int n) {
    for (int i = 0; i < n; ++i) {
      dtrun::test::writeFile(dev.path() / ("nvidia" + std::to_string(i)), "");
    }
    // Device files that are not GPUs.
    dtrun::test::writeFile(dev.path() / "nvidiactl", "");
    dtrun::test::writeFile(dev.path() / "nvidia-uvm", "");
    dtrun::test::writeFile(dev.path() / "nvidia-uvm-tools", "");
    std::filesystem::create_directories(dev.path() / "nvidia-caps");
  }
};

LaunchConfig parse(const Args& args, const Env& env = {}) {
  FakeHost host;
  return parseCommandLine(args, env, host.probe);
}

// The UsageError message for a command line that must fail ("" and a test failure otherwise).
std::string usageError(const Args& args, const Env& env = {}, const HostProbe* probe = nullptr) {
  FakeHost host;
  try {
    parseCommandLine(args, env, probe ? *probe : host.probe);
  } catch (const UsageError& e) {
    std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);  // one line
    return msg;
  }
  FAIL_CHECK("no UsageError for the command line");
  return "";
}

Args withScript(Args a) {
  a.push_back("train.py");
  return a;
}

bool isUuid4(const std::string& s) {
  static const std::regex re(
      "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  return std::regex_match(s, re);
}

// The option named by a prefix, or "?" for an ambiguous one, "" for none.
std::string resolvedDest(const std::string& prefix) {
  // --nnodes=1 style: the value is irrelevant; only which option took it matters, which
  // givenOptions tells. A flag rejects "=1", so fall back to the bare prefix for flags.
  for (const Args& a : {Args{prefix + "=1", "train.py"}, Args{prefix, "train.py"}}) {
    try {
      FakeHost host;
      auto cfg = parseCommandLine(a, {}, host.probe);
      if (cfg.givenOptions.size() == 1) return *cfg.givenOptions.begin();
    } catch (const HelpRequested&) {
      return "help";
    } catch (const UsageError& e) {
      std::string msg = e.what();
      if (msg.rfind("ambiguous option", 0) == 0) return "?";
      if (msg.rfind("unrecognized", 0) == 0) return "";
      // A value error names the option that took the value.
      auto end = msg.find(':');
      std::string name = msg.substr(0, end);
      if (name.rfind("--", 0) == 0 && name.find('/') == std::string::npos) {
        std::string dest = name.substr(2);
        std::replace(dest.begin(), dest.end(), '-', '_');
        return dest;
      }
    }
  }
  return "";
}

}  // namespace

TEST_CASE("defaults follow newest torchrun, with dtrun's c10d and signals", "[launcher][cli]") {
  Env env{{"HOME", "/root"}, {"PATH", "/usr/bin"}};
  auto cfg = parse({"train.py"}, env);
  CHECK(cfg.nprocPerNode == 1);
  CHECK(cfg.rdzv.minNodes == 1);
  CHECK(cfg.rdzv.maxNodes == 1);
  CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
  CHECK(cfg.rdzv.host == "localhost");
  CHECK(cfg.rdzv.port == 0);  // single node: a free port, as newest torchrun
  CHECK(isUuid4(cfg.rdzv.runId));
  CHECK(cfg.rdzv.joinTimeout == 600s);
  CHECK(cfg.rdzv.lastCallTimeout == 30s);
  CHECK(cfg.rdzv.closeTimeout == 30s);
  CHECK(cfg.rdzv.heartbeatTimeout == 5s);
  CHECK(cfg.rdzv.keepAliveInterval == 5s);
  CHECK(cfg.rdzv.keepAliveMaxAttempt == 3);
  CHECK(cfg.rdzv.readTimeout == 60s);
  CHECK(cfg.rdzv.storeTimeout == 600s);  // torch's static_tcp_rendezvous default
  CHECK_FALSE(cfg.rdzv.isHost);
  CHECK(cfg.rdzv.conf.empty());
  CHECK(cfg.rdzv.nodeRank == 0);
  CHECK(cfg.rdzv.masterAddr == "127.0.0.1");
  CHECK_FALSE(cfg.rdzv.masterPort);
  CHECK(cfg.rdzv.localAddr.empty());
  CHECK(cfg.maxRestarts == 0);
  CHECK(cfg.monitorInterval == 100ms);
  CHECK(cfg.startMethod == "spawn");
  CHECK(cfg.eventLogHandler == "null");
  CHECK(cfg.role == "default");
  CHECK(cfg.entrypoint == Args{"python3", "-u", "train.py"});
  CHECK(cfg.entrypointName == "train.py");
  CHECK(cfg.script == "train.py");
  CHECK(cfg.scriptArgs.empty());
  CHECK_FALSE(cfg.module);
  CHECK_FALSE(cfg.noPython);
  CHECK_FALSE(cfg.runPath);
  CHECK_FALSE(cfg.standalone);
  CHECK_FALSE(cfg.logDir);
  CHECK(cfg.redirects.forRank(0) == Std::kNone);
  CHECK(cfg.tee.forRank(5) == Std::kNone);
  CHECK_FALSE(cfg.localRanksFilter);
  CHECK(cfg.duplicateStdoutFilters.empty());
  CHECK(cfg.duplicateStderrFilters.empty());
  CHECK(cfg.signalsToHandle ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  CHECK(cfg.shutdownTimeout == 30s);
  CHECK_FALSE(cfg.virtualLocalRank);
  CHECK(cfg.agentStore);
  CHECK(cfg.eventLog.empty());
  CHECK(cfg.logLinePrefixTemplate.empty());
  CHECK(cfg.logLevel == "warn");
  CHECK_FALSE(cfg.logsSpecs);
  CHECK_FALSE(cfg.numaBinding);
  CHECK_FALSE(cfg.ompNumThreadsSet);
  CHECK(cfg.warnings.empty());
  CHECK(cfg.givenOptions.empty());
  Env expected = env;
  expected["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";
  CHECK(cfg.baseEnv == expected);
}

namespace {

// One option with a good value and a check of where it lands.
struct Case {
  std::string dest;
  std::string value;  // "" for a flag
  std::function<bool(const LaunchConfig&)> landed;
};

std::vector<Case> everyOption() {
  return {
      {"nnodes", "2:4", [](auto& c) { return c.rdzv.minNodes == 2 && c.rdzv.maxNodes == 4; }},
      {"nproc_per_node", "3", [](auto& c) { return c.nprocPerNode == 3; }},
      {"rdzv_backend", "static",
       [](auto& c) { return c.rdzv.backend == dtrun::agent::RendezvousBackend::kStatic; }},
      {"rdzv_endpoint", "head:1234",
       [](auto& c) { return c.rdzv.host == "head" && c.rdzv.port == 1234; }},
      {"rdzv_id", "job7", [](auto& c) { return c.rdzv.runId == "job7"; }},
      {"rdzv_conf", "join_timeout=7", [](auto& c) { return c.rdzv.joinTimeout == 7s; }},
      {"standalone", "", [](auto& c) { return c.standalone; }},
      {"local_addr", "10.1.2.3", [](auto& c) { return c.rdzv.localAddr == "10.1.2.3"; }},
      {"max_restarts", "4", [](auto& c) { return c.maxRestarts == 4; }},
      {"monitor_interval", "2.5", [](auto& c) { return c.monitorInterval == 2500ms; }},
      {"start_method", "fork", [](auto& c) { return c.startMethod == "fork"; }},
      {"event_log_handler", "console", [](auto& c) { return c.eventLogHandler == "console"; }},
      {"role", "trainer", [](auto& c) { return c.role == "trainer"; }},
      {"module", "", [](auto& c) { return c.module; }},
      {"no_python", "", [](auto& c) { return c.noPython; }},
      {"run_path", "", [](auto& c) { return c.runPath; }},
      {"log_dir", "/tmp/logs", [](auto& c) { return c.logDir == "/tmp/logs"; }},
      {"redirects", "3", [](auto& c) { return c.redirects.forRank(1) == Std::kAll; }},
      {"tee", "2", [](auto& c) { return c.tee.forRank(0) == Std::kErr; }},
      {"local_ranks_filter", "0,2",
       [](auto& c) {
         return c.localRanksFilter == std::set<int>{0, 2};
       }},
      {"duplicate_stdout_filters", "a,b",
       [](auto& c) {
         return c.duplicateStdoutFilters == Args{"a", "b"};
       }},
      {"duplicate_stderr_filters", "x",
       [](auto& c) { return c.duplicateStderrFilters == Args{"x"}; }},
      {"logs_specs", "mine", [](auto& c) { return c.logsSpecs == "mine"; }},
      {"numa_binding", "socket", [](auto& c) { return c.numaBinding == "socket"; }},
      {"signals_to_handle", "SIGUSR1",
       [](auto& c) { return c.signalsToHandle == std::vector<int>{SIGUSR1}; }},
      {"shutdown_timeout", "12", [](auto& c) { return c.shutdownTimeout == 12s; }},
      {"virtual_local_rank", "", [](auto& c) { return c.virtualLocalRank; }},
      {"node_rank", "0", [](auto& c) { return c.rdzv.nodeRank == 0; }},
      {"master_addr", "10.9.8.7", [](auto& c) { return c.rdzv.masterAddr == "10.9.8.7"; }},
      {"master_port", "1234", [](auto& c) { return c.rdzv.masterPort == 1234; }},
      {"python", "/opt/py/bin/python", [](auto& c) { return c.python == "/opt/py/bin/python"; }},
      {"no_agent_store", "", [](auto& c) { return !c.agentStore; }},
      {"event_log", "/tmp/ev.jsonl", [](auto& c) { return c.eventLog == "/tmp/ev.jsonl"; }},
      {"log_line_prefix_template", "[${rank}]",
       [](auto& c) { return c.logLinePrefixTemplate == "[${rank}]"; }},
      {"file_timer", "", [](auto& c) { return c.fileTimer; }},
      {"stall_timeout", "2.5", [](auto& c) { return c.stallTimeout == 2500ms; }},
      {"dump_stacks", "", [](auto& c) { return c.dumpStacks; }},
      {"exit_barrier_timeout", "7", [](auto& c) { return c.exitBarrierTimeout == 7s; }},
      {"prewarm", "torch", [](auto& c) { return c.prewarm == Args{"torch"}; }},
      {"prewarm_timeout", "5", [](auto& c) { return c.prewarmTimeout == 5s; }},
      {"log_level", "debug", [](auto& c) { return c.logLevel == "debug"; }},
      {"worker_variables", "deepspeed",
       [](auto& c) { return c.workerVariables == WorkerVariables::kDeepSpeed; }},
      {"exit_code", "worker", [](auto& c) { return c.exitCodes == ExitCodeScheme::kWorker; }},
  };
}

std::string dashed(std::string dest) {
  std::replace(dest.begin(), dest.end(), '_', '-');
  return "--" + dest;
}

}  // namespace

TEST_CASE("every option in both spellings, as --opt value and --opt=value", "[launcher][cli]") {
  for (const auto& c : everyOption()) {
    std::vector<std::string> spellings{dashed(c.dest)};
    if (c.dest.find('_') != std::string::npos) spellings.push_back("--" + c.dest);
    for (const auto& name : spellings) {
      std::vector<Args> forms;
      if (c.value.empty()) {
        forms.push_back({name});
      } else {
        forms.push_back({name, c.value});
        forms.push_back({name + "=" + c.value});
      }
      for (const auto& form : forms) {
        INFO(form[0]);
        auto cfg = parse(withScript(form));
        CHECK(c.landed(cfg));
        CHECK(cfg.givenOptions == std::set<std::string>{c.dest});
        CHECK(cfg.script == "train.py");
      }
    }
  }
}

TEST_CASE("PET_ variables stand in for options, and the command line wins", "[launcher][cli]") {
  for (const auto& c : everyOption()) {
    if (c.dest == "logs_specs" || c.dest == "numa_binding") continue;  // no env action in torch
    // dtrun's conventions for other launchers' front-ends: set on the command line only.
    if (c.dest == "worker_variables" || c.dest == "exit_code") continue;
    std::string var = "PET_" + c.dest;
    std::transform(var.begin(), var.end(), var.begin(), ::toupper);
    if (c.dest == "python") var = "DTRUN_PYTHON";
    if (c.dest == "no_agent_store") var = "DTRUN_NO_AGENT_STORE";
    if (c.dest == "event_log") var = "DTRUN_EVENT_LOG";
    if (c.dest == "log_line_prefix_template") var = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";
    if (c.dest == "log_level") var = "DTRUN_LOG_LEVEL";
    if (c.dest == "file_timer") var = "DTRUN_FILE_TIMER";
    if (c.dest == "stall_timeout") var = "DTRUN_STALL_TIMEOUT";
    if (c.dest == "dump_stacks") var = "DTRUN_DUMP_STACKS";
    if (c.dest == "exit_barrier_timeout") var = "DTRUN_EXIT_BARRIER_TIMEOUT";
    if (c.dest == "prewarm") var = "DTRUN_PREWARM";
    if (c.dest == "prewarm_timeout") var = "DTRUN_PREWARM_TIMEOUT";
    INFO(var);
    auto cfg = parse({"train.py"}, {{var, c.value.empty() ? "1" : c.value}});
    CHECK(c.landed(cfg));
    CHECK(cfg.givenOptions.count(c.dest) == 1);
    CHECK(cfg.baseEnv.count(var) == 1);  // workers still see it, as under torchrun
  }
  SECTION("options torchrun gives no env action are not read from PET_") {
    auto cfg = parse({"train.py"}, {{"PET_LOGS_SPECS", "x"}, {"PET_NUMA_BINDING", "node"}});
    CHECK_FALSE(cfg.logsSpecs);
    CHECK_FALSE(cfg.numaBinding);
  }
  SECTION("the command line overrides the environment") {
    Env env{{"PET_NPROC_PER_NODE", "3"}, {"PET_NNODES", "2"}, {"PET_RDZV_ID", "env"}};
    auto cfg = parse({"--nproc-per-node=5", "--rdzv_id", "cli", "train.py"}, env);
    CHECK(cfg.nprocPerNode == 5);
    CHECK(cfg.rdzv.runId == "cli");
    CHECK(cfg.rdzv.maxNodes == 2);  // not on the command line: from PET_NNODES
  }
  SECTION("a PET_ value is checked like a command-line value and the error names it") {
    CHECK_THAT(usageError({"train.py"}, {{"PET_MAX_RESTARTS", "many"}}),
               StartsWith("PET_MAX_RESTARTS: invalid value 'many'"));
    CHECK_THAT(usageError({"train.py"}, {{"PET_NNODES", ""}}), StartsWith("PET_NNODES:"));
    // The command line wins, so a bad PET_ value it overrides is never looked at.
    CHECK(parse({"--max-restarts", "1", "train.py"}, {{"PET_MAX_RESTARTS", "many"}}).maxRestarts ==
          1);
  }
  SECTION("flags take an integer, as torchrun's check_env") {
    CHECK(parse({"train.py"}, {{"PET_STANDALONE", "1"}}).standalone);
    CHECK_FALSE(parse({"train.py"}, {{"PET_STANDALONE", "0"}}).standalone);
    CHECK(parse({"train.py"}, {{"PET_STANDALONE", "2"}}).standalone);
    CHECK(parse({"train.py"}, {{"PET_STANDALONE", " 1 "}}).standalone);
    CHECK(parse({"train.py"}, {{"PET_STANDALONE", "-1"}}).standalone);
    CHECK(parse({"train.py"}, {{"PET_MODULE", "1"}}).module);
    CHECK(parse({"train.py"}, {{"PET_NO_PYTHON", "1"}}).noPython);
    CHECK(parse({"train.py"}, {{"PET_RUN_PATH", "1"}}).runPath);
    CHECK(parse({"train.py"}, {{"PET_VIRTUAL_LOCAL_RANK", "1"}}).virtualLocalRank);
    CHECK_FALSE(parse({"train.py"}, {{"PET_STANDALONE", "0"}}).givenOptions.count("standalone"));
    CHECK_THAT(usageError({"train.py"}, {{"PET_STANDALONE", "true"}}),
               StartsWith("PET_STANDALONE: invalid value 'true': expected an integer"));
    CHECK_THAT(usageError({"train.py"}, {{"PET_MODULE", ""}}), StartsWith("PET_MODULE:"));
    // A flag on the command line is on whatever the variable says.
    CHECK(parse({"--standalone", "train.py"}, {{"PET_STANDALONE", "0"}}).standalone);
  }
}

TEST_CASE("unique prefixes abbreviate, and a prefix of several options is an error",
          "[launcher][cli]") {
  CHECK(parse({"--nproc", "2", "train.py"}).nprocPerNode == 2);  // both spellings: one option
  CHECK(parse({"--nproc_per", "2", "train.py"}).nprocPerNode == 2);
  CHECK(parse({"--nproc-p=4", "train.py"}).nprocPerNode == 4);
  CHECK(parse({"--stand", "train.py"}).standalone);
  CHECK(parse({"--max", "3", "train.py"}).maxRestarts == 3);
  CHECK(parse({"--mon", "1", "train.py"}).monitorInterval == 1s);
  CHECK(parse({"--rdzv-e=h:9", "train.py"}).rdzv.port == 9);
  CHECK(parse({"--sh", "5", "train.py"}).shutdownTimeout == 5s);
  CHECK(parse({"--pyt", "py", "train.py"}).python == "py");
  CHECK(parse({"--virt", "train.py"}).virtualLocalRank);
  CHECK_THROWS_AS(parse({"--he"}), HelpRequested);

  CHECK(usageError({"--master", "x", "train.py"}) ==
        "ambiguous option: --master could match --master-addr, --master-port");
  CHECK(usageError({"--rdzv", "x", "train.py"}) ==
        "ambiguous option: --rdzv could match --rdzv-backend, --rdzv-endpoint, --rdzv-id, "
        "--rdzv-conf");
  CHECK(usageError({"--st=1", "train.py"}) ==
        "ambiguous option: --st=1 could match --standalone, --start-method, --stall-timeout");
  CHECK_THAT(usageError({"--no", "train.py"}),
             Contains("--no-python") && Contains("--node-rank") && Contains("--no-agent-store"));
  CHECK_THAT(usageError({"--dup", "x", "train.py"}),
             Contains("--duplicate-stdout-filters") && Contains("--duplicate-stderr-filters"));

  SECTION("torchrun 1.13's answers for every prefix of its option names") {
    // From 1.13's argparse parser (`_get_option_tuples` over every prefix; '?' = ambiguous).
    const std::string oracle =
        "--h=help --he=help --hel=help --help=help --l=log_dir --lo=log_dir --log=log_dir "
        "--log_=log_dir --log_d=log_dir --log_di=log_dir --log_dir=log_dir --m=? --ma=? --mas=? "
        "--mast=? --maste=? --master=? --master_=? --master_a=master_addr "
        "--master_ad=master_addr --master_add=master_addr --master_addr=master_addr "
        "--master_p=master_port --master_po=master_port --master_por=master_port "
        "--master_port=master_port --max=max_restarts --max_=max_restarts --max_r=max_restarts "
        "--max_re=max_restarts --max_res=max_restarts --max_rest=max_restarts "
        "--max_resta=max_restarts --max_restar=max_restarts --max_restart=max_restarts "
        "--max_restarts=max_restarts --mo=? --mod=module --modu=module --modul=module "
        "--module=module --mon=monitor_interval --moni=monitor_interval "
        "--monit=monitor_interval --monito=monitor_interval --monitor=monitor_interval "
        "--monitor_=monitor_interval --monitor_i=monitor_interval --monitor_in=monitor_interval "
        "--monitor_int=monitor_interval --monitor_inte=monitor_interval "
        "--monitor_inter=monitor_interval --monitor_interv=monitor_interval "
        "--monitor_interva=monitor_interval --monitor_interval=monitor_interval --n=? "
        "--nn=nnodes --nno=nnodes --nnod=nnodes --nnode=nnodes --nnodes=nnodes --no=? "
        "--no_=no_python --no_p=no_python --no_py=no_python --no_pyt=no_python "
        "--no_pyth=no_python --no_pytho=no_python --no_python=no_python --nod=node_rank "
        "--node=node_rank --node_=node_rank --node_r=node_rank --node_ra=node_rank "
        "--node_ran=node_rank --node_rank=node_rank --np=nproc_per_node --npr=nproc_per_node "
        "--npro=nproc_per_node --nproc=nproc_per_node --nproc_=nproc_per_node "
        "--nproc_p=nproc_per_node --nproc_pe=nproc_per_node --nproc_per=nproc_per_node "
        "--nproc_per_=nproc_per_node --nproc_per_n=nproc_per_node "
        "--nproc_per_no=nproc_per_node --nproc_per_nod=nproc_per_node "
        "--nproc_per_node=nproc_per_node --r=? --rd=? --rdz=? --rdzv=? --rdzv_=? "
        "--rdzv_b=rdzv_backend --rdzv_ba=rdzv_backend --rdzv_bac=rdzv_backend "
        "--rdzv_back=rdzv_backend --rdzv_backe=rdzv_backend --rdzv_backen=rdzv_backend "
        "--rdzv_backend=rdzv_backend --rdzv_c=rdzv_conf --rdzv_co=rdzv_conf "
        "--rdzv_con=rdzv_conf --rdzv_conf=rdzv_conf --rdzv_e=rdzv_endpoint "
        "--rdzv_en=rdzv_endpoint --rdzv_end=rdzv_endpoint --rdzv_endp=rdzv_endpoint "
        "--rdzv_endpo=rdzv_endpoint --rdzv_endpoi=rdzv_endpoint --rdzv_endpoin=rdzv_endpoint "
        "--rdzv_endpoint=rdzv_endpoint --rdzv_i=rdzv_id --rdzv_id=rdzv_id --re=redirects "
        "--red=redirects --redi=redirects --redir=redirects --redire=redirects "
        "--redirec=redirects --redirect=redirects --redirects=redirects --ro=role --rol=role "
        "--role=role --ru=run_path --run=run_path --run_=run_path --run_p=run_path "
        "--run_pa=run_path --run_pat=run_path --run_path=run_path --s=? --st=? --sta=? "
        "--stan=standalone --stand=standalone --standa=standalone --standal=standalone "
        "--standalo=standalone --standalon=standalone --standalone=standalone "
        "--star=start_method --start=start_method --start_=start_method "
        "--start_m=start_method --start_me=start_method --start_met=start_method "
        "--start_meth=start_method --start_metho=start_method --start_method=start_method "
        "--t=tee --te=tee --tee=tee";
    // Prefixes 1.13 resolved that newer options make ambiguous: --local-addr and
    // --local-ranks-filter (newest torchrun), --log-level and --log-line-prefix-template,
    // --no-agent-store (dtrun).
    const std::set<std::string> newlyAmbiguous{"--l", "--lo", "--log", "--log_", "--no_"};
    std::istringstream in(oracle);
    std::string entry;
    int checked = 0;
    while (in >> entry) {
      auto eq = entry.find('=');
      std::string prefix = entry.substr(0, eq);
      std::string dest = entry.substr(eq + 1);
      INFO(prefix);
      std::string ours = resolvedDest(prefix);
      if (dest == "?" || newlyAmbiguous.count(prefix)) {
        CHECK(ours == "?");
      } else {
        CHECK(ours == dest);
        // The same prefix with dashes names the same option.
        std::string dashedPrefix = prefix;
        std::replace(dashedPrefix.begin() + 2, dashedPrefix.end(), '_', '-');
        CHECK(resolvedDest(dashedPrefix) == dest);
      }
      ++checked;
    }
    CHECK(checked == 155);
  }
}

TEST_CASE("option syntax: values, flags, short clusters, --, unknown options", "[launcher][cli]") {
  SECTION("a value may look like a negative number but not like an option") {
    CHECK(parse({"--rdzv-id", "-1", "train.py"}).rdzv.runId == "-1");
    CHECK(parse({"--rdzv-id", "-", "train.py"}).rdzv.runId == "-");
    CHECK(parse({"--rdzv-id", "-a b", "train.py"}).rdzv.runId == "-a b");
    CHECK(usageError({"--rdzv-id", "-x", "train.py"}) ==
          "--rdzv-id: expected a value: --rdzv-id RDZV_ID or --rdzv-id=RDZV_ID");
    CHECK_THAT(usageError({"--nnodes", "--standalone", "train.py"}), StartsWith("--nnodes:"));
    CHECK_THAT(usageError({"--nnodes", "--", "train.py"}), StartsWith("--nnodes:"));
    CHECK_THAT(usageError({"--rdzv_id"}), StartsWith("--rdzv_id: expected a value"));
    CHECK(parse({"--rdzv-id=--x", "train.py"}).rdzv.runId == "--x");
    CHECK(parse({"--rdzv-id=", "train.py"}).rdzv.runId.size() > 30);  // empty: uuid4().int
  }
  SECTION("flags take no value") {
    CHECK(usageError({"--standalone=1", "train.py"}) ==
          "--standalone: takes no value, got '1' (a flag: --standalone)");
    CHECK_THAT(usageError({"-m=1", "train.py"}), StartsWith("-m/--module: takes no value"));
    CHECK_THAT(usageError({"-mx", "train.py"}), StartsWith("-m/--module: takes no value"));
  }
  SECTION("short options: glued values and clusters, as argparse") {
    CHECK(parse({"-r3", "train.py"}).redirects.forRank(0) == Std::kAll);
    CHECK(parse({"-r=2", "train.py"}).redirects.forRank(0) == Std::kErr);
    CHECK(parse({"-r", "1", "train.py"}).redirects.forRank(0) == Std::kOut);
    auto cfg = parse({"-mr3", "train.py"});
    CHECK(cfg.module);
    CHECK(cfg.redirects.forRank(0) == Std::kAll);
    cfg = parse({"-mt", "0:3", "train.py"});
    CHECK(cfg.module);
    CHECK(cfg.tee.forRank(0) == Std::kAll);
    CHECK_THROWS_AS(parse({"-mh"}), HelpRequested);
  }
  SECTION("the last of a repeated option wins") {
    CHECK(parse({"--nnodes", "2", "--nnodes=3", "train.py"}).rdzv.maxNodes == 3);
  }
  SECTION("unknown options and a missing script") {
    CHECK(usageError({"--foo", "train.py"}) == "unrecognized arguments: --foo (see dtrun --help)");
    CHECK_THAT(usageError({"-x", "train.py"}), StartsWith("unrecognized arguments: -x"));
    CHECK_THAT(usageError({"--nproc-per-node=2"}),
               StartsWith("the following arguments are required: training_script"));
    CHECK_THAT(usageError({}), Contains("training_script"));
    CHECK_THAT(usageError({"--"}), Contains("training_script"));
  }
}

TEST_CASE("everything after the training script is the script's, untouched", "[launcher][cli]") {
  auto cfg = parse({"--nproc-per-node", "2", "train.py", "--nproc-per-node", "3", "-h",
                    "--standalone", "--n", "3", "--", "${local_rank}", "--foo=bar"});
  CHECK(cfg.nprocPerNode == 2);
  CHECK_FALSE(cfg.standalone);
  CHECK(cfg.script == "train.py");
  CHECK(cfg.scriptArgs == Args{"--nproc-per-node", "3", "-h", "--standalone", "--n", "3", "--",
                               "${local_rank}", "--foo=bar"});
  CHECK(cfg.entrypoint == Args{"python3", "-u", "train.py"});
  CHECK(cfg.givenOptions == std::set<std::string>{"nproc_per_node"});

  cfg = parse({"--", "--weird.py", "a"});
  CHECK(cfg.script == "--weird.py");
  CHECK(cfg.scriptArgs == Args{"a"});
  cfg = parse({"-1", "a"});  // argparse: a negative number is a positional
  CHECK(cfg.script == "-1");
  cfg = parse({"--no-python", "/bin/echo", "-n", "hi there"});
  CHECK(cfg.entrypoint == Args{"/bin/echo"});
  CHECK(cfg.scriptArgs == Args{"-n", "hi there"});
}

TEST_CASE("nnodes: N or MIN:MAX with 0 < MIN <= MAX", "[launcher][cli]") {
  auto nodes = [](const std::string& v) {
    auto cfg = parse({"--nnodes", v, "--rdzv-endpoint", "h", "train.py"});
    return std::make_pair(cfg.rdzv.minNodes, cfg.rdzv.maxNodes);
  };
  CHECK(nodes("3") == std::make_pair(3, 3));
  CHECK(nodes("1:4") == std::make_pair(1, 4));
  CHECK(nodes("2:2") == std::make_pair(2, 2));
  for (std::string bad : {"0", "-1", "3:2", "0:2", "1:2:3", "a", "", ":2", "2:", "1.5", "2:x"}) {
    INFO(bad);
    CHECK(usageError({"--nnodes", bad, "train.py"}) ==
          "--nnodes: invalid value '" + bad + "': expected N or MIN:MAX with 0 < MIN <= MAX");
  }
}

TEST_CASE("nproc-per-node: int, cpu, gpu, auto", "[launcher][cli]") {
  FakeHost host;
  auto nproc = [&](const std::string& v, const Env& env = {}) {
    return parseCommandLine({"--nproc-per-node", v, "train.py"}, env, host.probe).nprocPerNode;
  };
  CHECK(nproc("4") == 4);
  CHECK(nproc("cpu") == 8);
  CHECK(nproc("auto") == 8);  // no GPU: the CPUs
  CHECK(usageError({"--nproc-per-node", "gpu", "train.py"}, {}, &host.probe) ==
        "--nproc-per-node: gpu: no GPU found (no " + (host.dev.path() / "nvidiaN").string() +
            " device file nor AMD GPU, or CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES hides them); "
            "give a number instead");
  for (std::string bad : {"0", "-1", "two", "", "1.5", "GPU"}) {
    INFO(bad);
    CHECK_THAT(usageError({"--nproc-per-node", bad, "train.py"}),
               StartsWith("--nproc-per-node: ") &&
                       Contains("expected a positive integer, auto, cpu, gpu or xpu") ||
                   Contains("expected an integer from 1"));
  }
  CHECK_THAT(usageError({"--nproc_per_node", "xpu", "train.py"}),
             StartsWith("--nproc_per_node: xpu: no Intel XPU found"));

  host.addGpus(4);
  CHECK(nproc("gpu") == 4);
  CHECK(nproc("auto") == 4);
  CHECK(nproc("cpu") == 8);
  CHECK(nproc("2") == 2);
  // CUDA_VISIBLE_DEVICES, read the way torch reads it (Slurm's GPU binding sets it).
  std::vector<std::pair<std::string, int>> visible{
      {"0,1", 2},
      {"3,2,1,0", 4},
      {"2", 1},
      {"1,5", 1},
      {"5,1", 0},
      {"0,0", 0},
      {"1,2,1", 0},
      {"-1", 0},
      {"0,-1,1", 1},
      {"1gpu,2", 2},
      {" 1 , 2 ", 2},
      {"0,,1", 1},
      {"GPU-aa,GPU-bb", 2},
      {"GPU-aa,GPU-aa", 0},
      {"GPU-aa,1", 1},
      {"MIG-a,MIG-b,MIG-c", 3},
      {"MIG-1,MIG-2,MIG-3,MIG-4,MIG-5", 5},
      {"0,1,2,3,4,5,6,7", 4},
  };
  for (const auto& [cvd, n] : visible) {
    INFO(cvd);
    CHECK(countVisibleGpus(host.dev.path(), cvd) == n);
    if (n > 0) CHECK(nproc("gpu", {{"CUDA_VISIBLE_DEVICES", cvd}}) == n);
  }
  CHECK(countVisibleGpus(host.dev.path(), std::nullopt) == 4);
  CHECK(countVisibleGpus(host.dev.path(), "") == 0);
  CHECK(nproc("auto", {{"CUDA_VISIBLE_DEVICES", ""}}) == 8);  // all hidden: the CPUs
  CHECK_THAT(usageError({"--nproc-per-node", "gpu", "train.py"}, {{"CUDA_VISIBLE_DEVICES", ""}},
                        &host.probe),
             Contains("no GPU found"));
  CHECK(countVisibleGpus(host.dev.path() / "missing", std::nullopt) == 0);
}

TEST_CASE("rdzv-conf: torch's keys and defaults, other keys kept", "[launcher][cli]") {
  auto cfg =
      parse({"--rdzv-conf",
             " join_timeout=10,last_call_timeout=1.5, close_timeout = 2 ,heartbeat_timeout=3,"
             "keep_alive_interval=0.5,keep_alive_max_attempt=7,read_timeout=9,timeout=100,"
             "is_host=yes,use_libuv=0,store_type=tcp,custom=a=b",
             "train.py"});
  const auto& r = cfg.rdzv;
  CHECK(r.joinTimeout == 10s);
  CHECK(r.lastCallTimeout == 1500ms);
  CHECK(r.closeTimeout == 2s);
  CHECK(r.heartbeatTimeout == 3s);
  CHECK(r.keepAliveInterval == 500ms);
  CHECK(r.keepAliveMaxAttempt == 7);
  CHECK(r.readTimeout == 9s);
  CHECK(r.storeTimeout == 100s);
  CHECK(r.isHost == true);
  CHECK(r.conf.size() == 12);
  CHECK(r.conf.at("custom") == "a=b");  // split on the first '='
  CHECK(r.conf.at("close_timeout") == "2");
  CHECK(parse({"--rdzv-conf", "", "train.py"}).rdzv.conf.empty());
  CHECK(parse({"--rdzv-conf", "  ", "train.py"}).rdzv.conf.empty());

  for (std::string yes : {"1", "true", "True", "t", "YES", "y"}) {
    CHECK(parse({"--rdzv-conf=is_host=" + yes, "train.py"}).rdzv.isHost == true);
  }
  for (std::string no : {"0", "false", "F", "no", "N"}) {
    CHECK(parse({"--rdzv-conf=is_host=" + no, "train.py"}).rdzv.isHost == false);
  }

  std::vector<std::pair<std::string, std::string>> bad{
      {"join_timeout=0", "--rdzv-conf join_timeout: invalid value '0'"},
      {"join_timeout=-5", "--rdzv-conf join_timeout: invalid value '-5'"},
      {"last_call_timeout=x", "--rdzv-conf last_call_timeout: invalid value 'x'"},
      {"close_timeout=inf", "--rdzv-conf close_timeout: invalid value 'inf'"},
      {"heartbeat_timeout=nan", "--rdzv-conf heartbeat_timeout: invalid value 'nan'"},
      {"keep_alive_interval=0", "--rdzv-conf keep_alive_interval: invalid value '0'"},
      {"keep_alive_max_attempt=0", "--rdzv-conf keep_alive_max_attempt: invalid value '0'"},
      {"keep_alive_max_attempt=1.5", "--rdzv-conf keep_alive_max_attempt: invalid value"},
      {"read_timeout=0", "--rdzv-conf read_timeout: invalid value '0'"},
      {"timeout=-1", "--rdzv-conf timeout: invalid value '-1'"},
      {"is_host=maybe", "--rdzv-conf is_host: invalid value 'maybe': expected a boolean"},
      {"use_libuv=2", "--rdzv-conf use_libuv: invalid value '2'"},
      {"store_type=file", "--rdzv-conf store_type: invalid value 'file'"},
      {"=1", "--rdzv-conf: invalid value '=1': expected KEY=VALUE"},
      {"a=1,", "--rdzv-conf: invalid value 'a=1,': expected KEY=VALUE"},
      {"a", "--rdzv-conf: key 'a' has no value"},
      {"a= ", "--rdzv-conf: key 'a' has no value"},
  };
  for (const auto& [conf, msg] : bad) {
    INFO(conf);
    CHECK_THAT(usageError({"--rdzv-conf", conf, "train.py"}), StartsWith(msg));
  }
  CHECK_THAT(usageError({"train.py"}, {{"PET_RDZV_CONF", "join_timeout=0"}}),
             StartsWith("PET_RDZV_CONF join_timeout: invalid value '0'"));
}

TEST_CASE("rdzv-endpoint: torch's parse_rendezvous_endpoint", "[launcher][cli]") {
  auto ep = [](const std::string& v) {
    auto cfg = parse({"--rdzv-endpoint", v, "train.py"});
    CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
    return std::make_pair(cfg.rdzv.host, static_cast<int>(cfg.rdzv.port));
  };
  CHECK(ep("head") == std::make_pair(std::string("head"), 29400));
  CHECK(ep("head:1234") == std::make_pair(std::string("head"), 1234));
  CHECK(ep(" node-01.cluster_a:0 ") == std::make_pair(std::string("node-01.cluster_a"), 0));
  CHECK(ep("10.0.0.1:65535") == std::make_pair(std::string("10.0.0.1"), 65535));
  CHECK(ep("[::1]:5") == std::make_pair(std::string("::1"), 5));
  CHECK(ep("[fe80::1]") == std::make_pair(std::string("fe80::1"), 29400));
  CHECK(ep("[::1]") == std::make_pair(std::string("::1"), 29400));
  CHECK(ep("[2001:db8::7]:29401") == std::make_pair(std::string("2001:db8::7"), 29401));
  // torch's rule for an unbracketed IPv6 address: the last ':' starts the port.
  CHECK(ep("fe80::1") == std::make_pair(std::string("fe80:"), 1));

  for (std::string bad :
       {"head:65536", "head:123456", "head:abc", "head:", "head:-1", "head: 1x"}) {
    INFO(bad);
    CHECK(usageError({"--rdzv-endpoint", bad, "train.py"}) ==
          "--rdzv-endpoint: invalid port in '" + bad +
              "': expected HOST[:PORT] or [IPV6][:PORT] with PORT from 0 to 65535");
  }
  for (std::string bad : {"ho st:1", ":1", "a/b:1", "[]:1", "[fe80::1%eth0]:2"}) {
    INFO(bad);
    CHECK_THAT(usageError({"--rdzv-endpoint", bad, "train.py"}),
               StartsWith("--rdzv-endpoint: invalid host in '" + bad + "'"));
  }
  CHECK(parseEndpoint("x", "", 29400).host == "localhost");
  CHECK(parseEndpoint("x", "  ", 7).port == 7);
  CHECK_THROWS_AS(parseEndpoint("x", "", std::nullopt), UsageError);
}

TEST_CASE("backend, endpoint and run id: c10d by default, torchrun's static form kept",
          "[launcher][cli]") {
  SECTION("c10d without an endpoint") {
    auto cfg = parse({"--nnodes", "2", "train.py"});
    CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
    CHECK(cfg.rdzv.host == "localhost");
    CHECK(cfg.rdzv.port == 29400);
    CHECK(cfg.rdzv.runId == "none");
    cfg = parse({"--rdzv-id", "job", "train.py"});
    CHECK(cfg.rdzv.port == 0);
    CHECK(cfg.rdzv.runId == "job");  // an explicit id is kept
    cfg = parse({"--rdzv-endpoint", "head:1", "train.py"});
    CHECK(cfg.rdzv.runId == "none");
    CHECK(cfg.rdzv.port == 1);
  }
  SECTION("run ids") {
    auto id = parse({"--rdzv-id", "", "train.py"}).rdzv.runId;
    CHECK_FALSE(id.empty());
    CHECK(id.find_first_not_of("0123456789") == std::string::npos);  // str(uuid4().int)
    CHECK(usageError({"--rdzv-id", "a/b", "train.py"}) ==
          "--rdzv-id: invalid value 'a/b': expected an id without '/' (it names the log "
          "directory)");
  }
  SECTION("the etcd backend and backends dtrun does not have") {
    // etcd and etcd-v2 are one backend; it needs the members' list.
    CHECK_THAT(usageError({"--rdzv-backend", "etcd", "train.py"}),
               Contains("needs --rdzv-endpoint"));
    CHECK_THAT(usageError({"--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "a:1,,b", "train.py"}),
               Contains("--rdzv-endpoint") && Contains("empty"));
    CHECK_THAT(usageError({"--rdzv-backend", "etcd", "--rdzv-endpoint", "https://a:1", "train.py"}),
               Contains("protocol=https"));
    CHECK_THAT(usageError({"--rdzv-backend", "etcd", "--rdzv-endpoint", "a:1", "--rdzv-conf",
                           "protocol=ftp", "train.py"}),
               Contains("protocol") && Contains("ftp"));
    CHECK_THAT(usageError({"--rdzv-backend", "zookeeper", "train.py"}),
               Contains("expected c10d, static or etcd"));
    CHECK(usageError({"--rdzv_backend", "zk", "train.py"}) ==
          "--rdzv_backend: invalid value 'zk': expected c10d, static or etcd (etcd-v2)");
  }
  SECTION("torchrun's legacy static form stays static") {
    auto cfg = parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                      "--master-port", "1234", "train.py"});
    CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kStatic);
    CHECK(cfg.rdzv.host == "10.0.0.1");
    CHECK(cfg.rdzv.port == 1234);
    CHECK(cfg.rdzv.nodeRank == 1);
    CHECK(cfg.rdzv.runId == "none");
    CHECK(cfg.warnings.empty());
    cfg = parse({"--master-addr", "head", "train.py"});
    CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kStatic);
    CHECK(cfg.rdzv.port == 29500);
    CHECK(parse({"train.py"}, {{"PET_MASTER_PORT", "2000"}}).rdzv.backend ==
          dtrun::agent::RendezvousBackend::kStatic);
    CHECK(parse({"--node-rank", "0", "train.py"}).rdzv.backend ==
          dtrun::agent::RendezvousBackend::kStatic);
    // With an endpoint the legacy options do not choose static.
    cfg = parse({"--master-addr", "head", "--rdzv-endpoint", "e", "train.py"});
    CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
    CHECK(cfg.rdzv.host == "e");
    CHECK(cfg.warnings.size() == 1);
  }
  SECTION("explicit static: endpoint = master_addr:master_port unless --rdzv-endpoint") {
    auto cfg = parse({"--rdzv-backend", "static", "train.py"});
    CHECK(cfg.rdzv.host == "127.0.0.1");
    CHECK(cfg.rdzv.port == 29500);
    CHECK_FALSE(cfg.rdzv.masterPort);
    cfg = parse(
        {"--rdzv-backend", "static", "--master-addr", "[::1]", "--master-port", "7", "train.py"});
    CHECK(cfg.rdzv.host == "::1");
    CHECK(cfg.rdzv.port == 7);
    cfg = parse(
        {"--rdzv-backend", "static", "--rdzv-endpoint", "h:9", "--master-port", "7", "train.py"});
    CHECK(cfg.rdzv.host == "h");
    CHECK(cfg.rdzv.port == 9);
    CHECK(usageError({"--rdzv-backend", "static", "--rdzv-endpoint", "h", "train.py"}) ==
          "--rdzv-endpoint: no port in 'h': expected HOST[:PORT] or [IPV6][:PORT] with PORT from "
          "0 to 65535");
    CHECK_THAT(usageError({"--master-addr", "bad host", "train.py"}),
               StartsWith("--master-addr/--master-port: invalid host"));
  }
  SECTION("static checks") {
    CHECK(usageError({"--rdzv-backend=static", "--nnodes=2", "--node-rank=2", "train.py"}) ==
          "--node-rank: invalid value '2': expected an integer from 0 to 1 (below --nnodes, "
          "static backend)");
    CHECK_THAT(usageError({"--node_rank", "-1", "train.py"}),
               StartsWith("--node_rank: invalid value '-1'"));
    CHECK_THAT(usageError({"--master-port", "0", "--nnodes", "2", "train.py"}),
               StartsWith("--master-port: port 0 with several nodes"));
    CHECK(parse({"--master-port", "0", "train.py"}).rdzv.port == 0);  // one node: fine
    // The same for c10d: only the agent that binds port 0 would know the port.
    CHECK(usageError({"--nnodes", "1:2", "--rdzv-endpoint", "localhost:0", "train.py"}) ==
          "--rdzv-endpoint: port 0 with several nodes: the other nodes cannot find it; expected "
          "a port from 1 to 65535");
    CHECK(parse({"--rdzv-endpoint", "localhost:0", "train.py"}).rdzv.port == 0);
    CHECK_THAT(usageError({"--master-port", "65536", "train.py"}),
               StartsWith("--master-port: invalid value '65536'"));
    CHECK_THAT(usageError({"--master-addr", "", "train.py"}), StartsWith("--master-addr:"));
    auto cfg = parse({"--rdzv-backend=static", "--nnodes=2", "train.py"});
    REQUIRE(cfg.warnings.size() == 1);
    CHECK_THAT(cfg.warnings[0], Contains("--node-rank not given"));
    cfg = parse({"--rdzv-backend=static", "--nnodes=1:2", "--node-rank=1", "train.py"});
    REQUIRE(cfg.warnings.size() == 1);
    CHECK_THAT(cfg.warnings[0], Contains("waits for all 2 nodes"));
  }
  SECTION("legacy options with c10d are ignored, with a warning") {
    auto cfg = parse({"--rdzv-backend", "c10d", "--master-addr", "x", "train.py"});
    CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
    CHECK(cfg.rdzv.port == 0);
    REQUIRE(cfg.warnings.size() == 1);
    CHECK_THAT(cfg.warnings[0], Contains("only used by the static rendezvous backend"));
  }
}

TEST_CASE("standalone overrides the rendezvous options", "[launcher][cli]") {
  auto cfg = parse({"--standalone", "--rdzv-backend", "static", "--rdzv-endpoint", "h:1",
                    "--rdzv-id", "mine", "train.py"});
  CHECK(cfg.standalone);
  CHECK(cfg.rdzv.backend == dtrun::agent::RendezvousBackend::kC10d);
  CHECK(cfg.rdzv.host == "localhost");
  CHECK(cfg.rdzv.port == 0);
  CHECK(isUuid4(cfg.rdzv.runId));
  REQUIRE(cfg.warnings.size() == 1);
  CHECK_THAT(cfg.warnings[0], Contains("--standalone ignores"));
  CHECK(parse({"--standalone", "train.py"}).warnings.empty());
  CHECK(parse({"--standalone", "--master-addr", "x", "train.py"}).rdzv.backend ==
        dtrun::agent::RendezvousBackend::kC10d);
  // With MIN 1 it runs alone after the last call; with MIN > 1 it could never start.
  auto alone = parse({"--standalone", "--nnodes", "1:2", "train.py"});
  REQUIRE(alone.warnings.size() == 1);
  CHECK_THAT(alone.warnings[0], Contains("runs on this node alone"));
  CHECK_THAT(usageError({"--standalone", "--nnodes", "2", "train.py"}),
             StartsWith("--standalone with --nnodes 2:2: a standalone job is one node"));
  CHECK(parse({"--standalone", "train.py"}).rdzv.runId !=
        parse({"--standalone", "train.py"}).rdzv.runId);
}

TEST_CASE("redirects and tee: 0-3 or a local-rank map", "[launcher][cli]") {
  auto cfg = parse({"-r", "0:1,1:2,12:3", "--tee", "3", "train.py"});
  CHECK_FALSE(cfg.redirects.all);
  CHECK(cfg.redirects.forRank(0) == Std::kOut);
  CHECK(cfg.redirects.forRank(1) == Std::kErr);
  CHECK(cfg.redirects.forRank(12) == Std::kAll);  // newest torchrun: one digit only
  CHECK(cfg.redirects.forRank(2) == Std::kNone);
  CHECK(cfg.tee.all == Std::kAll);
  CHECK(parse({"-t", "0:0", "train.py"}).tee.forRank(0) == Std::kNone);
  CHECK(parse({"-r", "1:1,1:2", "train.py"}).redirects.forRank(1) == Std::kErr);  // last wins
  for (std::string bad :
       {"4", "-1", "0:4", "a", "0:1,", ",0:1", "0-1", "", "01", "0:1:2", "a:1", " 1", "0:"}) {
    INFO(bad);
    CHECK_THAT(usageError({"--redirects=" + bad, "train.py"}),
               StartsWith("--redirects: invalid value '" + bad + "': expected 0 (none)"));
    CHECK_THAT(usageError({"-t" + std::string(bad.empty() ? "=" : "") + bad, "train.py"}),
               StartsWith("-t/--tee: invalid value"));
  }
}

TEST_CASE("signals-to-handle: signal names", "[launcher][cli]") {
  auto signals = [](const std::string& v) {
    return parse({"--signals-to-handle", v, "train.py"}).signalsToHandle;
  };
  CHECK(signals("SIGTERM,SIGINT,SIGHUP,SIGQUIT") ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(signals("SIGTERM,SIGUSR1") == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK(signals(" term, usr2 ,SIGTERM") == std::vector<int>{SIGTERM, SIGUSR2});
  CHECK(signals("SIGWINCH,SIGCONT,SIGPWR") == std::vector<int>{SIGWINCH, SIGCONT, SIGPWR});
  auto cfg = parse({"--signals_to_handle=SIGUSR2,SIGINT", "train.py"});
  CHECK(cfg.baseEnv.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGUSR2,SIGINT");

  CHECK(usageError({"--signals-to-handle", "SIGTERM,SIGFOO", "train.py"}) ==
        "--signals-to-handle: unknown signal 'SIGFOO' in 'SIGTERM,SIGFOO': expected a comma list "
        "of signal names such as SIGTERM,SIGUSR1");
  for (std::string bad : {"", "SIGTERM,,SIGINT", "15", "SIG"}) {
    INFO(bad);
    CHECK_THAT(usageError({"--signals-to-handle=" + bad, "train.py"}),
               StartsWith("--signals-to-handle: unknown signal"));
  }
  for (std::string refused : {"SIGKILL", "SIGSTOP", "SIGCHLD", "SIGSEGV", "bus"}) {
    INFO(refused);
    CHECK_THAT(usageError({"--signals-to-handle", refused, "train.py"}),
               StartsWith("--signals-to-handle: SIG"));
  }
}

TEST_CASE("shutdown timeout: the option, then TORCH_ELASTIC_SHUTDOWN_TIMEOUT, then 30 s",
          "[launcher][cli]") {
  CHECK(parse({"train.py"}).shutdownTimeout == 30s);
  Env env{{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "5"}};
  CHECK(parse({"train.py"}, env).shutdownTimeout == 5s);
  env["PET_SHUTDOWN_TIMEOUT"] = "7";
  CHECK(parse({"train.py"}, env).shutdownTimeout == 7s);
  CHECK(parse({"--shutdown-timeout", "9", "train.py"}, env).shutdownTimeout == 9s);
  CHECK(parse({"--shutdown-timeout", "0", "train.py"}).shutdownTimeout == 0s);
  CHECK(parse({"--shutdown-timeout", "1.5", "train.py"}).shutdownTimeout == 1500ms);
  CHECK_THAT(usageError({"train.py"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}}),
             StartsWith("TORCH_ELASTIC_SHUTDOWN_TIMEOUT: invalid value 'soon'"));
  CHECK_THAT(usageError({"--shutdown-timeout", "-1", "train.py"}),
             StartsWith("--shutdown-timeout: invalid value '-1': expected a number of seconds "
                        ">= 0"));
}

TEST_CASE("what to run: python, -m, --no-python, --run-path", "[launcher][cli]") {
  auto cfg = parse({"-m", "pkg.train", "--lr", "1"});
  CHECK(cfg.entrypoint == Args{"python3", "-u", "-m", "pkg.train"});
  CHECK(cfg.scriptArgs == Args{"--lr", "1"});
  CHECK(cfg.entrypointName == "pkg.train");
  cfg = parse({"--no-python", "./a.out", "x"});
  CHECK(cfg.entrypoint == Args{"./a.out"});
  CHECK(cfg.entrypointName == "./a.out");
  CHECK(usageError({"-m", "--no-python", "train.py"}) ==
        "Don't use both the '--no-python' flag and the '--module' flag at the same time.");
  CHECK_THAT(usageError({"train.py"}, {{"PET_MODULE", "1"}, {"PET_NO_PYTHON", "1"}}),
             StartsWith("Don't use both"));
  // --run-path takes precedence over --no-python and -m, as in torchrun.
  cfg = parse({"--run-path", "--no-python", "-m", "/abs/train.py"});
  CHECK(cfg.entrypoint == Args{"python3", "-u", "/abs/train.py"});
  CHECK(cfg.entrypointName == "run_script_path");

  SECTION("the interpreter: --python, DTRUN_PYTHON, PYTHON_EXEC, python3") {
    Env env{{"PYTHON_EXEC", "/usr/bin/python3.11"}};
    CHECK(parse({"train.py"}, env).entrypoint[0] == "/usr/bin/python3.11");
    env["DTRUN_PYTHON"] = "/venv/bin/python";
    CHECK(parse({"train.py"}, env).entrypoint[0] == "/venv/bin/python");
    CHECK(parse({"--python", "py3", "train.py"}, env).entrypoint[0] == "py3");
    CHECK(parse({"--python", "py3", "--no-python", "t"}, env).entrypoint == Args{"t"});
    CHECK_THAT(usageError({"--python=", "train.py"}), StartsWith("--python: expected"));
    CHECK_THAT(usageError({"train.py"}, {{"DTRUN_PYTHON", ""}}), StartsWith("DTRUN_PYTHON:"));
  }
}

TEST_CASE("OMP_NUM_THREADS=1 for several workers unless set, and the worker env",
          "[launcher][cli]") {
  Env env{{"A", "1"}, {"PET_NNODES", "1"}};
  auto cfg = parse({"--nproc-per-node", "2", "train.py"}, env);
  CHECK(cfg.ompNumThreadsSet);
  CHECK(cfg.baseEnv.at("OMP_NUM_THREADS") == "1");
  CHECK(cfg.baseEnv.at("A") == "1");
  CHECK(cfg.baseEnv.at("PET_NNODES") == "1");
  CHECK(cfg.baseEnv.size() == 4);

  env["OMP_NUM_THREADS"] = "4";
  cfg = parse({"--nproc-per-node", "2", "train.py"}, env);
  CHECK_FALSE(cfg.ompNumThreadsSet);
  CHECK(cfg.baseEnv.at("OMP_NUM_THREADS") == "4");
  env["OMP_NUM_THREADS"] = "";  // set, if empty: torchrun leaves it alone too
  CHECK_FALSE(parse({"--nproc-per-node", "2", "train.py"}, env).ompNumThreadsSet);

  cfg = parse({"train.py"});
  CHECK_FALSE(cfg.ompNumThreadsSet);
  CHECK(cfg.baseEnv.count("OMP_NUM_THREADS") == 0);
  CHECK_THAT(std::string(kOmpNumThreadsNotice),
             Contains("Setting OMP_NUM_THREADS environment variable for each process to be 1"));
}

TEST_CASE("logs: --log-dir, filters, the prefix template", "[launcher][cli]") {
  CHECK_FALSE(parse({"--log-dir", "", "train.py"}).logDir);
  CHECK(parse({"--log-dir", "/dev/null", "train.py"}).logDir == "/dev/null");

  CHECK(parse({"--local-ranks-filter", "3, 1", "train.py"}).localRanksFilter ==
        std::set<int>{1, 3});
  CHECK_FALSE(parse({"--local-ranks-filter", "", "train.py"}).localRanksFilter);
  for (std::string bad : {"a", "0,", "-1", "1.0", ",", "0;1"}) {
    INFO(bad);
    CHECK(usageError({"--local-ranks-filter", bad, "train.py"}) ==
          "--local-ranks-filter: invalid value '" + bad +
              "': expected a comma list of local ranks such as 0,1,2");
  }

  CHECK(parse({"--duplicate-stdout-filters", "a,,b,c", "train.py"}).duplicateStdoutFilters ==
        Args{"a,b", "c"});
  CHECK(parse({"--duplicate-stderr-filters", "x,,,y,", "train.py"}).duplicateStderrFilters ==
        Args{"x,", "y"});
  CHECK(parse({"--duplicate-stdout-filters", "", "train.py"}).duplicateStdoutFilters.empty());
  CHECK(splitEscapedCommaList("apple,orange") == Args{"apple", "orange"});
  CHECK(splitEscapedCommaList(",,") == Args{","});

  SECTION("prefix template from the option or torch's variable") {
    Env env{{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${role_name}${rank}]:"}};
    CHECK(parse({"train.py"}, env).logLinePrefixTemplate == "[${role_name}${rank}]:");
    CHECK(parse({"--log-line-prefix-template", "${host}:${node_rank}:${restart}:$local_rank $$ ",
                 "train.py"},
                env)
              .logLinePrefixTemplate == "${host}:${node_rank}:${restart}:$local_rank $$ ");
    CHECK(parse({"--log-line-prefix-template", "cost $5 ${", "train.py"}).logLinePrefixTemplate ==
          "cost $5 ${");
    CHECK(usageError({"--log-line-prefix-template", "[${rnak}]", "train.py"}) ==
          "--log-line-prefix-template: unknown placeholder 'rnak' in '[${rnak}]': expected "
          "${role_name}, ${rank}, ${local_rank}, ${host}, ${node_rank} or ${restart}");
    CHECK_THAT(usageError({"train.py"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "$who"}}),
               StartsWith("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: unknown placeholder 'who'"));
  }
}

TEST_CASE("the remaining options: values and choices", "[launcher][cli]") {
  CHECK(parse({"--monitor-interval", "0.5", "train.py"}).monitorInterval == 500ms);
  CHECK(parse({"--monitor-interval", "1e-4", "train.py"}).monitorInterval == 1ms);
  CHECK(parse({"--role", "", "train.py"}).role.empty());
  CHECK(parse({"--max-restarts", "0", "train.py"}).maxRestarts == 0);

  std::vector<std::pair<Args, std::string>> bad{
      {{"--max-restarts", "-1"}, "--max-restarts: invalid value '-1': expected an integer from 0"},
      {{"--max_restarts", "1.5"}, "--max_restarts: invalid value '1.5'"},
      {{"--monitor-interval", "0"},
       "--monitor-interval: invalid value '0': expected a number of "
       "seconds > 0 such as 30 or 0.5"},
      {{"--monitor-interval", "fast"}, "--monitor-interval: invalid value 'fast'"},
      {{"--start-method", "thread"},
       "--start-method: invalid choice 'thread': expected spawn, "
       "fork or forkserver"},
      {{"--event-log-handler", "mine"},
       "--event-log-handler: invalid value 'mine': expected "
       "null, console or dynamic_rendezvous"},
      {{"--numa-binding", "numa"},
       "--numa-binding: invalid choice 'numa': expected node, "
       "socket, exclusive or core-complex"},
      {{"--log-level", "loud"},
       "--log-level: invalid value 'loud': expected trace, debug, info, "
       "warn, error, critical or off"},
      {{"--shutdown-timeout", "x"}, "--shutdown-timeout: invalid value 'x'"},
      {{"--nproc_per_node", "0"}, "--nproc_per_node: invalid value '0'"},
  };
  for (const auto& [args, msg] : bad) {
    INFO(args[0] << " " << args[1]);
    CHECK_THAT(usageError(withScript(args)), StartsWith(msg));
  }
  for (std::string mode : {"node", "socket", "exclusive", "core-complex"}) {
    CHECK(parse({"--numa-binding", mode, "train.py"}).numaBinding == mode);
  }
  for (std::string method : {"spawn", "fork", "forkserver"}) {
    CHECK(parse({"--start-method", method, "train.py"}).startMethod == method);
  }
  auto cfg = parse({"--logs-specs", "custom", "train.py"});
  CHECK(cfg.logsSpecs == "custom");
  REQUIRE(cfg.warnings.size() == 1);
  CHECK_THAT(cfg.warnings[0], Contains("no torchrun.logs_specs plugins"));
}

TEST_CASE("dtrun's own options and variables", "[launcher][cli]") {
  SECTION("agent store: on unless --no-agent-store or torch's opt-out") {
    CHECK(parse({"train.py"}).agentStore);
    CHECK_FALSE(parse({"--no-agent-store", "train.py"}).agentStore);
    CHECK_FALSE(parse({"train.py"}, {{"DTRUN_NO_AGENT_STORE", "1"}}).agentStore);
    CHECK(parse({"train.py"}, {{"DTRUN_NO_AGENT_STORE", "0"}}).agentStore);
    CHECK_FALSE(parse({"train.py"}, {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}}).agentStore);
    CHECK(parse({"train.py"}, {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}}).agentStore);
    CHECK(parse({"train.py"}, {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "true"}}).agentStore);
  }
  SECTION("log level: --log-level, DTRUN_LOG_LEVEL, torch's LOGLEVEL, warn") {
    CHECK(parse({"train.py"}, {{"LOGLEVEL", "INFO"}}).logLevel == "info");
    CHECK(parse({"train.py"}, {{"LOGLEVEL", "WARNING"}}).logLevel == "warn");
    auto cfg = parse({"train.py"}, {{"LOGLEVEL", "20"}});
    CHECK(cfg.logLevel == "warn");
    CHECK(cfg.warnings.size() == 1);
    CHECK(parse({"train.py"}, {{"LOGLEVEL", "INFO"}, {"DTRUN_LOG_LEVEL", "Debug"}}).logLevel ==
          "debug");
    CHECK(parse({"--log-level=ERR", "train.py"}, {{"DTRUN_LOG_LEVEL", "debug"}}).logLevel ==
          "error");
    CHECK(parse({"--log-level", "off", "train.py"}).logLevel == "off");
    CHECK(parse({"--log-level", "fatal", "train.py"}).logLevel == "critical");
    CHECK_THAT(usageError({"train.py"}, {{"DTRUN_LOG_LEVEL", "chatty"}}),
               StartsWith("DTRUN_LOG_LEVEL: invalid value 'chatty'"));
  }
  SECTION("event log") {
    CHECK(parse({"train.py"}, {{"DTRUN_EVENT_LOG", "/tmp/e"}}).eventLog == "/tmp/e");
    // Exactly --event-log is dtrun's; torchrun's --event-log-handler needs more letters.
    auto cfg = parse({"--event-log", "f", "--event-log-h", "console", "train.py"});
    CHECK(cfg.eventLog == "f");
    CHECK(cfg.eventLogHandler == "console");
  }
}

TEST_CASE("version: --version prints the version and the commit, before the script only",
          "[launcher][cli]") {
  std::string text;
  try {
    parse({"--nnodes", "2", "--version", "train.py"});
  } catch (const HelpRequested& h) {
    text = h.text();
  }
  CHECK(text == versionText() + "\n");
  CHECK_THAT(text, StartsWith("dtrun "));
  CHECK_THAT(text, Contains(" (commit "));
  // After the script it is the script's, and not a prefix of anything of dtrun's.
  CHECK(parse({"train.py", "--version"}).scriptArgs == Args{"--version"});
  CHECK_THAT(usageError({"--vers", "train.py"}), Contains("unrecognized arguments: --vers"));
}

TEST_CASE("worker variables and exit code: the conventions of other launchers", "[launcher][cli]") {
  auto cfg = parse({"train.py"});
  CHECK(cfg.workerVariables == WorkerVariables::kTorchrun);
  CHECK(cfg.exitCodes == ExitCodeScheme::kTorchrun);
  CHECK(parse({"--worker-variables=torchrun", "train.py"}).workerVariables ==
        WorkerVariables::kTorchrun);
  CHECK(parse({"--exit-code=torchrun", "train.py"}).exitCodes == ExitCodeScheme::kTorchrun);
  // None: the launcher's environment only, so none of torchrun's additions either.
  auto none = parse({"--worker-variables=none", "train.py"}, {{"PATH", "/bin"}});
  CHECK(none.workerVariables == WorkerVariables::kNone);
  CHECK(none.baseEnv == Env{{"PATH", "/bin"}});
  CHECK(usageError({"--worker-variables=none", "--nproc-per-node=2", "train.py"}) ==
        "--worker-variables none: workers without a rank cannot tell each other apart; it "
        "starts one process (--nproc-per-node 1)");
  CHECK(usageError({"--worker-variables=mpi", "train.py"}) ==
        "--worker-variables: invalid value 'mpi': expected torchrun, deepspeed or none");
  CHECK(usageError({"--exit-code=first", "train.py"}) ==
        "--exit-code: invalid value 'first': expected torchrun or worker");
}

TEST_CASE("help groups the options as torchrun does, dtrun's last", "[launcher][cli]") {
  std::string help;
  try {
    parse({"--nnodes", "2", "-h", "train.py"});
  } catch (const HelpRequested& h) {
    help = h.text();
  }
  REQUIRE_FALSE(help.empty());
  CHECK(help == helpText());
  CHECK_THROWS_AS(parse({"--help"}), HelpRequested);
  CHECK_THROWS_AS(parse({"--h"}), HelpRequested);
  // After the script, --help is the script's: dtrun starts it with --help as its argument.
  const auto script = parse({"train.py", "--help"});
  CHECK(script.script == "train.py");
  CHECK(script.scriptArgs == std::vector<std::string>{"--help"});

  CHECK_THAT(help, StartsWith(usageText()));
  std::vector<std::string> sections{
      "positional arguments:",
      "options:",
      "Worker/node size related arguments:",
      "Rendezvous related arguments:",
      "User-code launch related arguments:",
      "Backwards compatible parameters with caffe2.distributed.launch:",
      "dtrun options:"};
  std::vector<std::size_t> at;
  for (const auto& s : sections) {
    INFO(s);
    auto pos = help.find("\n" + s + "\n");
    REQUIRE(pos != std::string::npos);
    at.push_back(pos);
  }
  CHECK(std::is_sorted(at.begin(), at.end()));
  auto section = [&](std::size_t i) {
    return help.substr(at[i], i + 1 < at.size() ? at[i + 1] - at[i] : std::string::npos);
  };
  auto listed = [&](std::size_t i, const std::string& option) {
    return section(i).find("\n  " + option) != std::string::npos;
  };
  CHECK(listed(1, "-h, --help"));
  for (std::string o : {"--nnodes NNODES", "--nproc-per-node NPROC_PER_NODE"}) CHECK(listed(2, o));
  for (std::string o : {"--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf",
                        "--standalone", "--local-addr"}) {
    CHECK(listed(3, o));
  }
  for (std::string o :
       {"--max-restarts", "--monitor-interval", "--start-method", "--event-log-handler", "--role",
        "-m, --module", "--no-python", "--run-path", "--log-dir", "-r, --redirects", "-t, --tee",
        "--local-ranks-filter", "--duplicate-stdout-filters", "--duplicate-stderr-filters",
        "--logs-specs", "--numa-binding", "--signals-to-handle", "--shutdown-timeout",
        "--virtual-local-rank"}) {
    INFO(o);
    CHECK(listed(4, o));
  }
  for (std::string o : {"--node-rank", "--master-addr", "--master-port"}) CHECK(listed(5, o));
  for (std::string o : {"--python PATH", "--no-agent-store", "--event-log FILE",
                        "--log-line-prefix-template", "--log-level"}) {
    INFO(o);
    CHECK(listed(6, o));
  }
  for (std::string mention : {"PET_", "--nproc_per_node", "DTRUN_PYTHON", "SIGUSR1",
                              "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "Exit codes"}) {
    CHECK_THAT(help, Contains(mention));
  }
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK(line.size() <= 100);
    CHECK((line.empty() || line.back() != ' '));
  }
}

TEST_CASE("randomUuid4 makes version-4 UUIDs", "[launcher][cli]") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto u = randomUuid4();
    CHECK(isUuid4(u));
    seen.insert(u);
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("virtual local rank needs an entry of the launcher's CUDA_VISIBLE_DEVICES per worker",
          "[launcher][cli]") {
  // torchrun maps local rank N to entry N and refuses a rank without one; dtrun refuses first.
  CHECK(usageError({"--virtual-local-rank", "--nproc-per-node=2", "train.py"},
                   {{"CUDA_VISIBLE_DEVICES", "3"}}) ==
        "--virtual-local-rank: 2 workers per node but CUDA_VISIBLE_DEVICES=3 lists 1 device(s): "
        "each worker needs an entry of its own");
  CHECK_THAT(usageError({"--nproc-per-node=3", "train.py"},
                        {{"CUDA_VISIBLE_DEVICES", "0,1"}, {"PET_VIRTUAL_LOCAL_RANK", "1"}}),
             StartsWith("PET_VIRTUAL_LOCAL_RANK: 3 workers per node"));
  CHECK(parse({"--virtual-local-rank", "--nproc-per-node=2", "train.py"},
              {{"CUDA_VISIBLE_DEVICES", "3,5"}})
            .virtualLocalRank);
  // Without the variable every local rank is its own device, as in torchrun.
  CHECK(parse({"--virtual-local-rank", "--nproc-per-node=4", "train.py"}).nprocPerNode == 4);
  // Without --virtual-local-rank nothing is mapped, so nothing is refused.
  CHECK(parse({"--nproc-per-node=2", "train.py"}, {{"CUDA_VISIBLE_DEVICES", "3"}}).nprocPerNode ==
        2);
}

TEST_CASE("stop-on-stdin-close is dtrun's own, exact name only", "[launcher][cli]") {
  CHECK(parse({"--stop-on-stdin-close", "train.py"}).stopOnStdinClose);
  CHECK(parse({"--stop_on_stdin_close", "train.py"}).stopOnStdinClose);
  CHECK_FALSE(parse({"train.py"}).stopOnStdinClose);
  CHECK_THAT(usageError({"--stop-on", "train.py"}),
             StartsWith("unrecognized arguments: --stop-on"));
}

TEST_CASE("nproc-per-node gpu, xpu, auto count as torchrun 2.x does", "[launcher][cli]") {
  auto nproc = [](const dtrun::test::FakeDeviceTree& m, const std::string& v, const Env& env = {}) {
    HostProbe probe;
    probe.devDir = m.dev();
    probe.sysDir = m.sys();
    probe.cpuCount = 16;
    return parseCommandLine({"--nproc-per-node", v, "train.py"}, env, probe).nprocPerNode;
  };
  dtrun::test::FakeDeviceTree nvidia, amd, intel, none;
  nvidia.addNvidia(8);
  amd.addAmd(4);
  intel.addRenderNode(128, "xe");
  CHECK(nproc(nvidia, "gpu") == 8);
  CHECK(nproc(nvidia, "auto") == 8);
  CHECK(nproc(amd, "gpu") == 4);
  CHECK(nproc(amd, "auto", {{"HIP_VISIBLE_DEVICES", "0,1,2"}}) == 3);
  CHECK(nproc(intel, "xpu") == 1);
  CHECK(nproc(intel, "auto") == 1);  // torch.accelerator: CUDA/ROCm, else XPU, else CPUs
  CHECK(nproc(none, "auto") == 16);
  CHECK_THROWS_WITH(nproc(amd, "xpu"), StartsWith("--nproc-per-node: xpu: no Intel XPU found"));
  CHECK_THROWS_WITH(nproc(intel, "gpu"), StartsWith("--nproc-per-node: gpu: no GPU found"));
}

TEST_CASE("hang options: torchrun's file-timer variables, stalls, stacks", "[launcher][cli]") {
  auto off = parse({"train.py"});
  CHECK_FALSE(off.fileTimer);
  CHECK_FALSE(off.stallTimeout);
  CHECK_FALSE(off.dumpStacks);
  CHECK(off.exitBarrierTimeout == 300s);
  // TORCHELASTIC_ENABLE_FILE_TIMER: exactly "1" turns it on, as in torchrun; the path comes from
  // TORCHELASTIC_TIMER_FILE, which workers also see unchanged.
  auto on = parse({"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
                                 {"TORCHELASTIC_TIMER_FILE", "/tmp/wd"}});
  CHECK(on.fileTimer);
  CHECK(on.timerFile == "/tmp/wd");
  CHECK_FALSE(parse({"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"}}).fileTimer);
  CHECK_FALSE(parse({"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}).fileTimer);
  CHECK(parse({"--file-timer", "train.py"}).timerFile.empty());
  CHECK_THAT(usageError({"--stall-timeout", "0", "train.py"}), StartsWith("--stall-timeout"));
  CHECK_THAT(usageError({"--stall-timeout", "soon", "train.py"}), StartsWith("--stall-timeout"));
  CHECK(parse({"--exit-barrier-timeout", "0", "train.py"}).exitBarrierTimeout == 0s);
  // Stacks of what? Said once, not an error.
  auto lonely = parse({"--dump-stacks", "train.py"});
  REQUIRE(lonely.warnings.size() == 1);
  CHECK_THAT(lonely.warnings[0], Contains("--dump-stacks does nothing"));
  CHECK(parse({"--dump-stacks", "--stall-timeout", "60", "train.py"}).warnings.empty());
}

TEST_CASE("prewarm option: module names, and refused where a standby cannot stand in",
          "[launcher][cli]") {
  auto off = parse({"train.py"});
  CHECK(off.prewarm.empty());
  CHECK(off.prewarmTimeout == 60s);
  CHECK(parse({"--prewarm", "torch,numpy.linalg,my_model", "train.py"}).prewarm ==
        Args{"torch", "numpy.linalg", "my_model"});
  CHECK(parse({"--prewarm", "torch", "--run-path", "--no-python", "train.py"}).prewarm ==
        Args{"torch"});  // --run-path runs Python whatever --no-python says
  CHECK(parse({"train.py"}, {{"DTRUN_PREWARM", ""}}).prewarm.empty());
  CHECK_THAT(usageError({"--prewarm", "torch", "--no-python", "train.sh"}),
             StartsWith("--prewarm with --no-python: the workers are not Python interpreters"));
  CHECK_THAT(usageError({"--prewarm", "torch", "-m", "torch", "x"}),
             StartsWith("--prewarm: 'torch' is the -m module, which runs as __main__"));
  for (const std::string bad : {"torch,", "a b", "1st", "torch..nn", ".x", "os/path"}) {
    INFO(bad);
    CHECK_THAT(usageError({"--prewarm", bad, "train.py"}),
               StartsWith("--prewarm: invalid value '" + bad + "'"));
  }
  CHECK_THAT(usageError({"train.py"}, {{"DTRUN_PREWARM", "x-y"}}),
             StartsWith("DTRUN_PREWARM: invalid value 'x-y': 'x-y' is not a module name"));
  CHECK_THAT(usageError({"--prewarm", "torch", "--prewarm-timeout", "0", "train.py"}),
             StartsWith("--prewarm-timeout"));
  auto lonely = parse({"--prewarm-timeout", "5", "train.py"});
  REQUIRE(lonely.warnings.size() == 1);
  CHECK_THAT(lonely.warnings[0], Contains("--prewarm-timeout does nothing without --prewarm"));
}

TEST_CASE("rdzv-conf token_file, or DTRUN_RDZV_TOKEN_FILE: the store's secret, read up front",
          "[launcher][cli]") {
  dtrun::test::TempDir dir;
  const std::string good = (dir.path() / "token").string();
  dtrun::writeWholeFile(good, "0123456789abcdef-secret\n", 0600, "token");
  const std::string other = (dir.path() / "other").string();
  dtrun::writeWholeFile(other, "fedcba9876543210-other\n", 0600, "token");
  const Args endpoint = {"--nnodes=2", "--rdzv-endpoint=127.0.0.1:29400"};
  auto args = [&](Args extra) {
    Args a = endpoint;
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("train.py");
    return a;
  };
  CHECK(parse(args({"--rdzv-conf=token_file=" + good})).rdzv.token == "0123456789abcdef-secret");
  CHECK(parse(args({}), {{"DTRUN_RDZV_TOKEN_FILE", good}}).rdzv.token == "0123456789abcdef-secret");
  // The option wins over the variable; no token at all by default.
  CHECK(parse(args({"--rdzv-conf=token_file=" + other}), {{"DTRUN_RDZV_TOKEN_FILE", good}})
            .rdzv.token == "fedcba9876543210-other");
  CHECK(parse(args({})).rdzv.token.empty());
  // The static backend's store takes it too.
  CHECK(parse({"--nnodes=2", "--node-rank=0", "--master-addr=127.0.0.1", "--master-port=29500",
               "--rdzv-backend=static", "--rdzv-conf=token_file=" + good, "train.py"})
            .rdzv.token == "0123456789abcdef-secret");

  // Bad files are usage errors naming where the path came from.
  CHECK_THAT(usageError(args({"--rdzv-conf=token_file=" + good + ".missing"})),
             Contains("--rdzv-conf token_file " + good + ".missing"));
  CHECK_THAT(usageError(args({}), {{"DTRUN_RDZV_TOKEN_FILE", (dir.path() / "nope").string()}}),
             Contains("DTRUN_RDZV_TOKEN_FILE"));
  ::chmod(other.c_str(), 0644);
  CHECK_THAT(usageError(args({"--rdzv-conf=token_file=" + other})), Contains("chmod 600"));
  CHECK_THAT(usageError(args({"--rdzv-conf=token_file="})), Contains("token_file"));
  // etcd has its own authentication: the option is an error there, the variable is ignored.
  const Args etcd = {"--nnodes=2", "--rdzv-backend=etcd", "--rdzv-endpoint=127.0.0.1:2379"};
  Args withConf = etcd;
  withConf.push_back("--rdzv-conf=token_file=" + good);
  withConf.push_back("train.py");
  CHECK_THAT(usageError(withConf), Contains("etcd has its own"));
  Args plain = etcd;
  plain.push_back("train.py");
  auto cfg = parse(plain, {{"DTRUN_RDZV_TOKEN_FILE", good}});
  CHECK(cfg.rdzv.token.empty());
  CHECK_THAT(cfg.warnings.back(), Contains("ignored by the etcd backend"));
}
