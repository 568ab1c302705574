// The worker environment contract (_start_workers in
// torch/distributed/elastic/agent/server/local_elastic_agent.py): every worker prints its whole
// environment and the test compares it key by key with what torchrun's contract says it must be.
// The comparison with real torchrun 1.13 is e2e:env_vs_torchrun (env_vs_torchrun.py).
#include <catch2/catch.hpp>
#include <regex>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

using Env = std::map<std::string, std::string>;

const std::regex kUuid4("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
const std::string kTorchSignals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

// What Launch gives dtrun, which dtrun must pass on untouched.
Env inheritedEnv(const std::filesystem::path& dir, const Env& extra) {
  Env env = launchBaseEnv();
  env["TMPDIR"] = dir.string();
  env["E2E_DIR"] = (dir / "w").string();
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

// Compares two environments key by key, naming every difference.
void requireSameEnv(const Env& actual, const Env& expected, int localRank) {
  INFO("local rank " << localRank);
  for (const auto& [k, v] : expected) {
    INFO("variable " << k);
    auto it = actual.find(k);
    REQUIRE(it != actual.end());
    CHECK(it->second == v);
  }
  for (const auto& [k, v] : actual) {
    INFO("variable the worker has but should not: " << k << "=" << v);
    CHECK(expected.count(k) == 1);
  }
}

std::map<std::string, std::optional<std::string>> optionalEnv(const Env& env) {
  std::map<std::string, std::optional<std::string>> out;
  for (const auto& [k, v] : env) out[k] = v;
  return out;
}

}  // namespace

TEST_CASE("worker environment: every variable, key by key (--standalone, 2 workers)", "[e2e]") {
  test::TempDir tmp;
  const auto logDir = tmp.path() / "logs";
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--max-restarts=3",
                                  "--log-dir", logDir.string()},
                                 {"env", "connect"}),
                      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.exited());
  REQUIRE(run.exit.code == 0);
  const auto w = tmp.path() / "w";

  std::vector<Env> envs;
  for (int lr = 0; lr < 2; ++lr) envs.push_back(readEnvFile(workerFile(w, "env", 0, lr)));
  REQUIRE(envs[0].count("TORCHELASTIC_RUN_ID") == 1);
  REQUIRE(envs[0].count("MASTER_PORT") == 1);
  const std::string runId = envs[0]["TORCHELASTIC_RUN_ID"];
  const std::string port = envs[0]["MASTER_PORT"];
  // --standalone: a fresh uuid4 run id, and dtrun's own store on a free loopback port, which
  // was accepting connections while the workers ran.
  CHECK(std::regex_match(runId, kUuid4));
  REQUIRE(std::regex_match(port, std::regex("[1-9][0-9]{0,4}")));
  CHECK(std::stoi(port) < 65536);

  for (int lr = 0; lr < 2; ++lr) {
    Env expected = inheritedEnv(tmp.path(), {});
    expected["LOCAL_RANK"] = std::to_string(lr);
    expected["RANK"] = std::to_string(lr);
    expected["GROUP_RANK"] = "0";
    expected["ROLE_RANK"] = std::to_string(lr);
    expected["ROLE_NAME"] = "default";
    expected["LOCAL_WORLD_SIZE"] = "2";
    expected["WORLD_SIZE"] = "2";
    expected["GROUP_WORLD_SIZE"] = "1";
    expected["ROLE_WORLD_SIZE"] = "2";
    expected["MASTER_ADDR"] = "127.0.0.1";
    expected["MASTER_PORT"] = port;
    expected["TORCHELASTIC_RESTART_COUNT"] = "0";
    expected["TORCHELASTIC_MAX_RESTARTS"] = "3";
    expected["TORCHELASTIC_RUN_ID"] = runId;
    expected["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    expected["NCCL_ASYNC_ERROR_HANDLING"] = "1";
    expected["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
    expected["OMP_NUM_THREADS"] = "1";  // nproc > 1 and the launcher had none
    // The error file: <log dir>/<run id>_<8 random>/attempt_<restart>/<local rank>/error.json.
    const std::string errorFile = envs[lr]["TORCHELASTIC_ERROR_FILE"];
    const std::regex errorFileShape(logDir.string() + "/" + runId + "_[a-z0-9_]{8}/attempt_0/" +
                                    std::to_string(lr) + "/error\\.json");
    INFO("TORCHELASTIC_ERROR_FILE=" << errorFile);
    CHECK(std::regex_match(errorFile, errorFileShape));
    expected["TORCHELASTIC_ERROR_FILE"] = errorFile;
    // newest torchrun exports --signals-to-handle; dtrun's default adds SIGUSR1,SIGUSR2.
    const std::string signals = envs[lr]["TORCHELASTIC_SIGNALS_TO_HANDLE"];
    CHECK(signals.rfind(kTorchSignals, 0) == 0);
    expected["TORCHELASTIC_SIGNALS_TO_HANDLE"] = signals;
    requireSameEnv(envs[lr], expected, lr);
    CHECK(test::readFile(workerFile(w, "connect", 0, lr)) == "ok");
  }
  // Both workers of one round share the run directory.
  auto runDir = [](const std::string& errorFile) {
    return std::filesystem::path(errorFile).parent_path().parent_path().parent_path();
  };
  CHECK(runDir(envs[0]["TORCHELASTIC_ERROR_FILE"]) == runDir(envs[1]["TORCHELASTIC_ERROR_FILE"]));
}

TEST_CASE("worker environment: --role, inherited variables and the launcher's own settings",
          "[e2e]") {
  test::TempDir tmp;
  const Env extra{{"FOO", "bar baz"},
                  {"NCCL_ASYNC_ERROR_HANDLING", "0"},
                  {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "2"},
                  {"OMP_NUM_THREADS", "7"},
                  {"PET_MONITOR_INTERVAL", "0.2"}};
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=3", "--role=trainer",
                                  "--signals-to-handle=SIGTERM,SIGUSR1"},
                                 {"env"}),
                      tmp.path(), optionalEnv(extra));
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  for (int lr = 0; lr < 3; ++lr) {
    Env env = readEnvFile(workerFile(tmp.path() / "w", "env", 0, lr));
    INFO("local rank " << lr);
    CHECK(env["ROLE_NAME"] == "trainer");
    CHECK(env["ROLE_RANK"] == std::to_string(lr));
    CHECK(env["ROLE_WORLD_SIZE"] == "3");
    CHECK(env["LOCAL_WORLD_SIZE"] == "3");
    CHECK(env["WORLD_SIZE"] == "3");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "0");
    CHECK(env["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGUSR1");
    // The launcher's values win over torchrun's defaults (os.getenv(name, "1")).
    CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "0");
    CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2");
    CHECK(env["OMP_NUM_THREADS"] == "7");
    CHECK(env["FOO"] == "bar baz");
    CHECK(env["PET_MONITOR_INTERVAL"] == "0.2");
  }
  // torchrun's notice is printed only when it set OMP_NUM_THREADS itself.
  CHECK(run.err.find("Setting OMP_NUM_THREADS") == std::string::npos);
}

TEST_CASE("worker environment: OMP_NUM_THREADS=1 and its notice only when nproc > 1", "[e2e]") {
  test::TempDir tmp;
  SECTION("one worker: not set") {
    auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=1"}, {"env"}), tmp.path());
    REQUIRE(run.exit.code == 0);
    Env env = readEnvFile(workerFile(tmp.path() / "w", "env", 0, 0));
    CHECK(env.count("OMP_NUM_THREADS") == 0);
    CHECK(run.err.find("Setting OMP_NUM_THREADS") == std::string::npos);
  }
  SECTION("two workers: set, with torchrun's notice") {
    auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2"}, {"env"}), tmp.path());
    REQUIRE(run.exit.code == 0);
    for (int lr = 0; lr < 2; ++lr) {
      CHECK(readEnvFile(workerFile(tmp.path() / "w", "env", 0, lr))["OMP_NUM_THREADS"] == "1");
    }
    CHECK(run.err.find("Setting OMP_NUM_THREADS environment variable for each process to be 1 "
                       "in default") != std::string::npos);
  }
}

TEST_CASE("worker environment: --no-agent-store is torchrun 1.13's rank-0-hosts-the-store mode",
          "[e2e]") {
  test::TempDir tmp;
  auto run = runDtrun(
      withWorker({"--standalone", "--nproc-per-node=2", "--no-agent-store"}, {"env", "connect"}),
      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  Env env0 = readEnvFile(workerFile(tmp.path() / "w", "env", 0, 0));
  Env env1 = readEnvFile(workerFile(tmp.path() / "w", "env", 0, 1));
  CHECK(env0["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  CHECK(env1["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  // One MASTER_ADDR:MASTER_PORT for the group, a free port that rank 0 would serve: nothing
  // (not dtrun's store) listens there.
  CHECK_FALSE(env0["MASTER_ADDR"].empty());
  CHECK(env0["MASTER_ADDR"] == env1["MASTER_ADDR"]);
  CHECK(env0["MASTER_PORT"] == env1["MASTER_PORT"]);
  CHECK(test::readFile(workerFile(tmp.path() / "w", "connect", 0, 0)).rfind("fail", 0) == 0);
}

TEST_CASE("worker arguments: passed untouched, ${local_rank} substituted", "[e2e]") {
  test::TempDir tmp;
  // torchrun-looking options after the script belong to the script.
  const std::vector<std::string> steps{
      "args", "mark=lr${local_rank}", "--nproc-per-node=5", "--max_restarts=9", "-m", "-x y  z",
      "",     "mark=lit$$x"};
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2"}, steps), tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  const auto w = tmp.path() / "w";
  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    std::string expected;
    for (auto s : steps) {
      if (s == "mark=lr${local_rank}") s = "mark=lr" + std::to_string(lr);
      if (s == "mark=lit$$x") s = "mark=lit$x";  // string.Template: "$$" -> "$"
      expected += s + '\0';
    }
    CHECK(test::readFile(workerFile(w, "args", 0, lr)) == expected);
    CHECK(std::filesystem::exists(workerFile(w, "lr" + std::to_string(lr), 0, lr)));
  }
}

}  // namespace dtrun::e2e
