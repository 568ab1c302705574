// dtrun --hostfile's plan (launcher/multi_host_plan.h) from whole command lines: which hosts,
// how many workers, what each host's agent is told, what travels in its environment, and the
// command lines handed to ssh, checked by a real /bin/sh where quoting matters.
#include "launcher/multi_host_plan.h"

#include <catch2/catch.hpp>
#include <cstdio>

#include "launcher/cli.h"
#include "launcher/shell_words.h"
#include "tests/launcher/launcher_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

struct Fixture {
  dtrun::test::TempDir dir;
  HostProbe probe = testing::fakeProbe(dir.path(), dir.path() / "work dir");
  Fixture() {
    std::filesystem::create_directories(probe.workDir);
    dtrun::test::writeFile(hostfile(), "# two hosts\nnode-a slots=2\nnode-b slots=4\n");
  }
  std::string hostfile() const { return (dir.path() / "hosts").string(); }

  Invocation invoke(const Args& args, const Env& env = {}) const {
    ParsedOptions parsed = mainParser().parse(args);
    mainParser().applyEnvironment(parsed, env);
    return resolveInvocation(mainParser(), parsed, env, probe);
  }
  std::string error(const Args& args, const Env& env = {}) const {
    return testing::usageErrorOf([&] { invoke(args, env); });
  }
};

// What /bin/sh makes of a command line: one word per line.
std::vector<std::string> shellWords(const std::string& commandLine) {
  std::string script = "for w in " + commandLine + "; do printf '%s\\n' \"$w\"; done";
  FILE* p = ::popen(("/bin/sh -c " + shellQuote(script)).c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[256];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  std::vector<std::string> words;
  std::size_t start = 0;
  for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
    words.push_back(out.substr(start, nl - start));
  }
  return words;
}

}  // namespace

TEST_CASE("hostfile plan: hosts, ranks, workers, rendezvous, agent options", "[launcher][hosts]") {
  Fixture f;
  auto inv = f.invoke({"--hostfile", f.hostfile(), "--max-restarts=2", "-t", "3", "--master-port",
                       "29999", "train.py", "--lr", "0.1", "${local_rank}"});
  REQUIRE(inv.multiHost);
  const auto& plan = *inv.multiHost;
  CHECK(plan.hosts == std::vector<HostSlots>{{"node-a", {0, 1}}, {"node-b", {0, 1, 2, 3}}});
  CHECK(plan.masterAddr == "node-a");  // the first host, as the hostfile names it
  CHECK(plan.masterPort == 29999);
  CHECK(plan.remoteDtrun == "/opt/dtrun/bin/dtrun");
  CHECK(plan.workDir == f.probe.workDir);
  CHECK(plan.sshCommand == Args{"ssh"});
  CHECK(plan.agentArgv(1) == Args{"/opt/dtrun/bin/dtrun", "--max-restarts=2", "--tee=3",
                                  "--rdzv-backend=static", "--nnodes=2", "--node-rank=1",
                                  "--master-addr=node-a", "--master-port=29999",
                                  "--nproc-per-node=4", "--stop-on-stdin-close", "--", "train.py",
                                  "--lr", "0.1", "${local_rank}"});
  CHECK(plan.agentArgv(0)[5] == "--node-rank=0");
  CHECK(plan.agentArgv(0)[8] == "--nproc-per-node=2");
  CHECK(plan.shutdownTimeout == std::chrono::seconds(30));
  // The default port is torch's 29500, as DeepSpeed's.
  CHECK(f.invoke({"-H", f.hostfile(), "t.py"}).multiHost->masterPort == 29500);
  CHECK(f.invoke({"-H", f.hostfile(), "--master_addr", "10.0.0.1", "t.py"}).multiHost->masterAddr ==
        "10.0.0.1");
}

TEST_CASE("hostfile plan: PET_ and dtrun variables reach the agents as options",
          "[launcher][hosts]") {
  Fixture f;
  auto plan = *f.invoke({"--hostfile", f.hostfile(), "-m", "pkg.train"},
                        {{"PET_MAX_RESTARTS", "4"}, {"DTRUN_PYTHON", "/usr/bin/python3"}})
                   .multiHost;
  auto argv = plan.agentArgv(0);
  CHECK(std::count(argv.begin(), argv.end(), "--max-restarts=4") == 1);
  CHECK(std::count(argv.begin(), argv.end(), "--module") == 1);
  CHECK(std::count(argv.begin(), argv.end(), "--python=/usr/bin/python3") == 1);
  CHECK(argv.back() == "pkg.train");
}

TEST_CASE("hostfile plan: filters and limits", "[launcher][hosts]") {
  Fixture f;
  auto hosts = [&](const Args& more) {
    Args a{"--hostfile", f.hostfile()};
    a.insert(a.end(), more.begin(), more.end());
    a.push_back("t.py");
    return f.invoke(a).multiHost->hosts;
  };
  CHECK(hosts({"--include", "node-b:1,3"}) == std::vector<HostSlots>{{"node-b", {1, 3}}});
  CHECK(hosts({"-e", "node-a"}) == std::vector<HostSlots>{{"node-b", {0, 1, 2, 3}}});
  CHECK(hosts({"--num_nodes", "1"}) == std::vector<HostSlots>{{"node-a", {0, 1}}});
  CHECK(hosts({"--num-accelerators", "1"}) ==
        std::vector<HostSlots>{{"node-a", {0}}, {"node-b", {0}}});
  auto plan = *f.invoke({"--hostfile", f.hostfile(), "-i", "node-b:2", "t.py"}).multiHost;
  CHECK(plan.masterAddr == "node-b");
  CHECK_THAT(plan.remoteCommand(0), Contains(" CUDA_VISIBLE_DEVICES=2 "));
  CHECK(plan.agentArgv(0)[2] == "--nnodes=1");
  CHECK(f.error({"--hostfile", f.hostfile(), "-i", "node-a", "--num-gpus", "1", "t.py"}) ==
        "--num-gpus: not with -i/--include (DeepSpeed's rule: choose hosts one way)");
}

TEST_CASE("hostfile plan: what cannot go with --hostfile, and hostfile options without it",
          "[launcher][hosts]") {
  Fixture f;
  const std::string hf = f.hostfile();
  for (const Args& extra : std::vector<Args>{{"--nnodes", "2"},
                                             {"--nproc-per-node", "2"},
                                             {"--node_rank", "1"},
                                             {"--rdzv-endpoint", "h:1"},
                                             {"--rdzv-backend", "c10d"},
                                             {"--rdzv-id", "x"},
                                             {"--standalone"}}) {
    Args a{"--hostfile", hf};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("t.py");
    INFO(extra[0]);
    CHECK_THAT(f.error(a), StartsWith(extra[0] + ": not with --hostfile"));
  }
  CHECK_THAT(f.error({"--hostfile", hf, "t.py"}, {{"PET_NNODES", "3"}}),
             StartsWith("PET_NNODES: not with --hostfile"));
  CHECK(f.error({"--include", "a", "t.py"}) == "--include: only with --hostfile FILE");
  CHECK(f.error({"-i", "a", "t.py"}) == "-i/--include: only with --hostfile FILE");
  CHECK(f.error({"--ssh-command", "ssh", "t.py"}) == "--ssh-command: only with --hostfile FILE");
  // Exact names only: torchrun's --h (help) and prefixes keep their meaning.
  CHECK_THROWS_AS(f.invoke({"--h"}), HelpRequested);
  CHECK_THAT(f.error({"--hostf", hf, "t.py"}), StartsWith("unrecognized arguments: --hostf"));
  CHECK_THAT(f.error({"--hostfile", (f.dir.path() / "missing").string(), "t.py"}),
             StartsWith("--hostfile: cannot read ") && EndsWith("No such file or directory"));
  dtrun::test::writeFile(f.dir.path() / "bad", "node-a slots=2\nnode-b\n");
  CHECK(f.error({"-H", (f.dir.path() / "bad").string(), "t.py"}) ==
        (f.dir.path() / "bad").string() + ":2: expected 'HOST slots=N', got 'node-b'");
  CHECK(f.error({"-H", hf, "--master-port=0", "t.py"}) ==
        "--master-port: invalid value '0': expected an integer from 1 to 65535");
  CHECK(f.error({"-H", hf, "--ssh-command", "ssh 'oops", "t.py"}) ==
        "--ssh-command: unterminated single quote in 'ssh 'oops'");
}

TEST_CASE("hostfile plan: the environment every host gets", "[launcher][hosts]") {
  Fixture f;
  dtrun::test::TempDir home;
  dtrun::test::writeFile(home.path() / ".dtrun_env", "FROM_HOME=1\nBOTH=home\n");
  dtrun::test::writeFile(f.probe.workDir / ".dtrun_env", "# here\nBOTH=cwd\nexport SECRET='a b'\n");
  Env env{{"HOME", home.path().string()},
          {"PATH", "/venv/bin:/usr/bin"},
          {"LD_LIBRARY_PATH", "/opt/lib"},
          {"PYTHONPATH", "/src"},
          {"NCCL_SOCKET_IFNAME", "eth0"},
          {"TORCH_DISTRIBUTED_DEBUG", "INFO"},
          {"CUDA_HOME", "/usr/local/cuda"},
          {"CUDA_VISIBLE_DEVICES", "5"},
          {"OMP_NUM_THREADS", "2"},
          {"UCX_TLS", "rc"},
          {"FI_PROVIDER", "efa"},
          {"SSH_AUTH_SOCK", "/tmp/agent"},
          {"SHELL", "/bin/bash"}};
  auto plan = *f.invoke({"--hostfile", f.hostfile(), "t.py"}, env).multiHost;
  CHECK(plan.exportedEnv == Env{{"BOTH", "cwd"},
                                {"CUDA_HOME", "/usr/local/cuda"},
                                {"FI_PROVIDER", "efa"},
                                {"FROM_HOME", "1"},
                                {"LD_LIBRARY_PATH", "/opt/lib"},
                                {"NCCL_SOCKET_IFNAME", "eth0"},
                                {"OMP_NUM_THREADS", "2"},
                                {"PATH", "/venv/bin:/usr/bin"},
                                {"PYTHONPATH", "/src"},
                                {"SECRET", "a b"},
                                {"TORCH_DISTRIBUTED_DEBUG", "INFO"},
                                {"UCX_TLS", "rc"}});
  dtrun::test::writeFile(home.path() / ".dtrun_env", "broken line\n");
  CHECK(f.error({"--hostfile", f.hostfile(), "t.py"}, env) ==
        (home.path() / ".dtrun_env").string() +
            ":1: expected KEY=VALUE with KEY a variable name, got 'broken line'");
}

TEST_CASE("hostfile plan: the remote command survives the remote shell", "[launcher][hosts]") {
  Fixture f;
  Env env{{"PATH", "/usr/bin"}, {"NCCL_WEIRD", "it's $HOME `x` \"q\" \\ ;&|"}};
  auto plan = *f.invoke({"--hostfile", f.hostfile(), "--ssh-command",
                         "ssh -F '/etc/my cfg' -p 2222", "--remote-dtrun", "/r/dtrun", "train.py",
                         "a b", "it's", "$HOME", "${local_rank}", "*"},
                        env)
                   .multiHost;
  CHECK(plan.sshCommand == Args{"ssh", "-F", "/etc/my cfg", "-p", "2222"});
  auto argv = plan.sshArgv(1);
  CHECK(Args(argv.begin(), argv.begin() + 8) ==
        Args{"ssh", "-F", "/etc/my cfg", "-p", "2222", "-o", "BatchMode=yes", "node-b"});
  REQUIRE(argv.size() == 9);
  const std::string& remote = argv[8];
  CHECK_THAT(remote, StartsWith("cd " + shellQuote(f.probe.workDir.string()) + " && exec env "));

  // The words a remote sh sees, once the "cd ... && exec" part is taken off.
  auto words = shellWords(remote.substr(remote.find("&& exec ") + 8));
  Args expected{"env", "NCCL_WEIRD=it's $HOME `x` \"q\" \\ ;&|", "PATH=/usr/bin",
                "CUDA_VISIBLE_DEVICES=0,1,2,3"};
  auto agent = plan.agentArgv(1);
  expected.insert(expected.end(), agent.begin(), agent.end());
  CHECK(words == expected);
  CHECK(agent.front() == "/r/dtrun");
  CHECK(Args(agent.end() - 6, agent.end()) ==
        Args{"train.py", "a b", "it's", "$HOME", "${local_rank}", "*"});

  // The check: no prompt, a connect timeout, then the directory and dtrun.
  auto check = plan.checkArgv(0);
  CHECK(Args(check.begin() + 5, check.begin() + 10) ==
        Args{"-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "node-a"});
  CHECK(check.back() == "cd " + shellQuote(f.probe.workDir.string()) +
                            " 2>/dev/null || exit 3; test -x /r/dtrun || exit 4");
  // Another program than ssh gets no OpenSSH options.
  auto other =
      *f.invoke({"--hostfile", f.hostfile(), "--ssh-command", "/usr/bin/rsh", "t.py"}).multiHost;
  CHECK(other.sshArgv(0).size() == 3);
  CHECK(other.checkArgv(0).size() == 3);
}

TEST_CASE("shell words: split as sh splits, quote so sh reads them back", "[launcher][hosts]") {
  CHECK(splitShellWords("--x", "ssh  -F\tcfg") == Args{"ssh", "-F", "cfg"});
  CHECK(splitShellWords("--x", "a\\ b 'c d' \"e \\\"f\\\" \\x\" g''h") ==
        Args{"a b", "c d", "e \"f\" \\x", "gh"});
  CHECK_THROWS_WITH(splitShellWords("--x", "  "), "--x: expected a command, got '  '");
  CHECK_THROWS_WITH(splitShellWords("--x", "a \"b"), "--x: unterminated double quote in 'a \"b'");
  CHECK_THROWS_WITH(splitShellWords("--x", "a\\"), "--x: a backslash ends the text in 'a\\'");
  CHECK(shellQuote("plain-word_1.2:3,4@5%+=/") == "plain-word_1.2:3,4@5%+=/");
  CHECK(shellQuote("") == "''");
  CHECK(shellQuote("it's") == "'it'\\''s'");
  Args tricky{"", "a b", "it's", "$(date)", "`id`", "\\", "\"", "*", "~", "!x", "\t", "#c"};
  CHECK(shellWords(shellJoin(tricky)) == tricky);
}
