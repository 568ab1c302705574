// -r/--redirects and --log-dir: torchrun's layout <log dir>/<run id>_<8 random>/attempt_<n>/
// <local rank>/{stdout,stderr}.log, a redirected stream in its file only, per-rank maps, and a
// fresh attempt directory for every round. (Console tee and prefixes: log_forwarding_test.cpp.)
#include <catch2/catch.hpp>
#include <regex>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

namespace fs = std::filesystem;

// The one run directory dtrun made in `logDir`; checks its name against the run id.
fs::path runDirOf(const fs::path& logDir, const std::string& runId) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(logDir)) dirs.push_back(e.path());
  REQUIRE(dirs.size() == 1);
  INFO("run directory " << dirs[0]);
  CHECK(std::regex_match(dirs[0].filename().string(), std::regex(runId + "_[a-z0-9_]{8}")));
  return dirs[0];
}

}  // namespace

TEST_CASE("redirects -r 3: both streams of every worker go to its files, not to the console",
          "[e2e]") {
  test::TempDir tmp;
  const auto logDir = tmp.path() / "logs";
  auto run = runDtrun(
      withWorker({"--standalone", "--nproc-per-node=2", "-r", "3", "--log-dir", logDir.string(),
                  "--rdzv-id=ignored-with-standalone"},
                 {"env", "out=to stdout from ${local_rank}", "err=to stderr from ${local_rank}"}),
      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  const auto runId = readEnvFile(workerFile(tmp.path() / "w", "env", 0, 0))["TORCHELASTIC_RUN_ID"];
  const auto runDir = runDirOf(logDir, runId);
  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    const auto rankDir = runDir / "attempt_0" / std::to_string(lr);
    CHECK(test::readFile(rankDir / "stdout.log") == "to stdout from " + std::to_string(lr) + "\n");
    CHECK(test::readFile(rankDir / "stderr.log") == "to stderr from " + std::to_string(lr) + "\n");
  }
  CHECK(run.out.find("to stdout from") == std::string::npos);
  CHECK(run.err.find("to stderr from") == std::string::npos);
}

TEST_CASE("redirects -r 0:1,1:2 per rank: what is not redirected reaches the console", "[e2e]") {
  test::TempDir tmp;
  const auto logDir = tmp.path() / "logs";
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--redirects=0:1,1:2",
                                  "--log-dir", logDir.string()},
                                 {"env", "out=out of ${local_rank}", "err=err of ${local_rank}"}),
                      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  const auto runId = readEnvFile(workerFile(tmp.path() / "w", "env", 0, 0))["TORCHELASTIC_RUN_ID"];
  const auto attempt = runDirOf(logDir, runId) / "attempt_0";
  CHECK(test::readFile(attempt / "0" / "stdout.log") == "out of 0\n");
  CHECK_FALSE(fs::exists(attempt / "0" / "stderr.log"));
  CHECK(test::readFile(attempt / "1" / "stderr.log") == "err of 1\n");
  CHECK_FALSE(fs::exists(attempt / "1" / "stdout.log"));
  CHECK(run.out.find("out of 0") == std::string::npos);
  CHECK(run.out.find("out of 1") != std::string::npos);
  CHECK(run.err.find("err of 0") != std::string::npos);
  CHECK(run.err.find("err of 1") == std::string::npos);
}

TEST_CASE("redirects -r 3 across a restart: one attempt directory per round", "[e2e]") {
  test::TempDir tmp;
  const auto logDir = tmp.path() / "logs";
  auto run = runDtrun(
      withWorker({"--standalone", "--nproc-per-node=2", "-r3", "--max-restarts=1", "--log-dir",
                  logDir.string()},
                 {"env", "out=round ${local_rank}", "mark=ready", "rank1,restart0:wait=ready.0.0",
                  "rank1,restart0:exit=3", "restart0:sleep"}),
      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  const auto runId = readEnvFile(workerFile(tmp.path() / "w", "env", 0, 0))["TORCHELASTIC_RUN_ID"];
  const auto runDir = runDirOf(logDir, runId);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int lr = 0; lr < 2; ++lr) {
      INFO("attempt " << attempt << ", local rank " << lr);
      CHECK(test::readFile(runDir / ("attempt_" + std::to_string(attempt)) / std::to_string(lr) /
                           "stdout.log") == "round " + std::to_string(lr) + "\n");
    }
  }
}

}  // namespace dtrun::e2e
