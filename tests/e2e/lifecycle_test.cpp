// A job's life with real processes: a failure and a restart, restarts used up and torch's
// ChildFailedError report, error files, workers that cannot be executed, and bad command lines.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <regex>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

namespace fs = std::filesystem;

const std::string kNoTracebackHint =
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";

// The report block, after checking torch's width rule: borders and section lines are
// min(60, the longest line of the title and the failures) wide.
std::vector<std::string> reportLines(const std::string& stderrText) {
  auto block = failureReport(stderrText);
  if (block.size() < 3) return block;
  std::size_t longest = 0;
  for (std::size_t i = 1; i + 1 < block.size(); ++i) {
    if (block[i].find_first_not_of("=-") != std::string::npos) {
      longest = std::max(longest, block[i].size());
    }
  }
  const std::size_t width = std::min<std::size_t>(60, longest);
  CHECK(block.front() == std::string(width, '='));
  CHECK(block[2] == std::string(width, '-'));
  return block;
}

// The worker_exited events of one round, by local rank.
std::map<int, nlohmann::json> exitsOfRound(const std::vector<nlohmann::json>& events, int round) {
  std::map<int, nlohmann::json> out;
  for (const auto& e : eventsNamed(events, "worker_exited")) {
    if (e.at("round") == round) out[e.at("local_rank").get<int>()] = e;
  }
  return out;
}

std::vector<int> roundsJoined(const std::vector<nlohmann::json>& events) {
  std::vector<int> rounds;
  for (const auto& e : eventsNamed(events, "rendezvous_done")) rounds.push_back(e.at("round"));
  return rounds;
}

}  // namespace

TEST_CASE("a worker that fails once is restarted and the job succeeds", "[e2e]") {
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  const auto w = tmp.path() / "w";
  // Round 0: rank 1 exits 3 once rank 0 has written its files; round 1: both succeed.
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--max-restarts=1",
                                  "--event-log", events.string()},
                                 {"pid", "env", "rank1,restart0:wait=env.0.0",
                                  "rank1,restart0:exit=3", "restart0:sleep"}),
                      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.exited());
  CHECK(run.exit.code == 0);
  CHECK(run.err.find("FAILED") == std::string::npos);

  auto ev = readEvents(events);
  CHECK(roundsJoined(ev) == std::vector<int>{0, 1});
  auto round0 = exitsOfRound(ev, 0);
  REQUIRE(round0.size() == 2);
  CHECK(round0[1]["exit_code"] == 3);
  CHECK(round0[0]["signal"] == SIGTERM);  // stopped by the agent
  auto round1 = exitsOfRound(ev, 1);
  REQUIRE(round1.size() == 2);
  CHECK(round1[0]["exit_code"] == 0);
  CHECK(round1[1]["exit_code"] == 0);
  CHECK_FALSE(eventsNamed(ev, "restart_decided").empty());
  auto shutdown = eventsNamed(ev, "shutdown");
  REQUIRE(shutdown.size() == 1);
  CHECK(shutdown[0]["reason"] == "succeeded");

  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    auto env0 = readEnvFile(workerFile(w, "env", 0, lr));
    auto env1 = readEnvFile(workerFile(w, "env", 1, lr));
    CHECK(env0["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(env1["TORCHELASTIC_RESTART_COUNT"] == "1");
    CHECK(env1["TORCHELASTIC_MAX_RESTARTS"] == "1");
    CHECK(env1["TORCHELASTIC_ERROR_FILE"].find("/attempt_1/" + std::to_string(lr) +
                                               "/error.json") != std::string::npos);
    // The same store serves both rounds (the worker store prefix changes with the count).
    CHECK(env0["MASTER_PORT"] == env1["MASTER_PORT"]);
    int pid0 = readPid(workerFile(w, "pid", 0, lr));
    int pid1 = readPid(workerFile(w, "pid", 1, lr));
    CHECK(pid0 != pid1);
    CHECK_FALSE(test::processAlive(pid0));
  }
}

TEST_CASE("restarts used up (--max-restarts=2): exit 1 and torch's ChildFailedError report",
          "[e2e]") {
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  const auto w = tmp.path() / "w";
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--max-restarts=2",
                                  "--event-log", events.string()},
                                 {"pid", "env", "rank1:exit=3", "sleep"}),
                      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.exited());
  CHECK(run.exit.code == 1);

  auto ev = readEvents(events);
  CHECK(roundsJoined(ev) == std::vector<int>{0, 1, 2});
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    CHECK(readEnvFile(workerFile(w, "env", round, 1))["TORCHELASTIC_RESTART_COUNT"] ==
          std::to_string(round));
  }
  CHECK_FALSE(fs::exists(workerFile(w, "pid", 3, 1)));
  auto shutdown = eventsNamed(ev, "shutdown");
  REQUIRE_FALSE(shutdown.empty());
  CHECK(shutdown.back()["reason"] == "failed");

  // The layout of ChildFailedError.format_msg (torch/distributed/elastic/multiprocessing/
  // errors/__init__.py), line by line, for the last round's failure.
  const int pid = readPid(workerFile(w, "pid", 2, 1));
  auto report = reportLines(run.err);
  REQUIRE(report.size() == 15);
  CHECK(report[1] == workerBin() + " FAILED");
  CHECK(report[3] == "Failures:");
  CHECK(report[4] == "  <NO_OTHER_FAILURES>");
  CHECK(report[5] == report[2]);
  CHECK(report[6] == "Root Cause (first observed failure):");
  CHECK(report[7] == "[0]:");
  CHECK(std::regex_match(report[8],
                         std::regex("  time      : \\d{4}-\\d\\d-\\d\\d_\\d\\d:\\d\\d:\\d\\d")));
  CHECK(std::regex_match(report[9], std::regex("  host      : \\S+")));
  CHECK(report[10] == "  rank      : 1 (local_rank: 1)");
  CHECK(report[11] == "  exitcode  : 3 (pid: " + std::to_string(pid) + ")");
  CHECK(report[12] == "  error_file: <N/A>");
  CHECK(report[13] == "  traceback : " + kNoTracebackHint);
  CHECK(report[14] == report[0]);
}

TEST_CASE("no restart allowed (--max-restarts=0): the first failure ends the job", "[e2e]") {
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  auto run =
      runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--event-log", events.string()},
                          {"rank0:exit=1", "sleep"}),
               tmp.path());
  REQUIRE(run.exit.exited());
  CHECK(run.exit.code == 1);
  CHECK(roundsJoined(readEvents(events)) == std::vector<int>{0});
  auto report = reportLines(run.err);
  REQUIRE(report.size() == 15);
  CHECK(report[10] == "  rank      : 0 (local_rank: 0)");
}

TEST_CASE("the report shows the worker's error file and dtrun writes its own", "[e2e]") {
  test::TempDir tmp;
  const auto w = tmp.path() / "w";
  const auto agentErrorFile = tmp.path() / "agent_error.json";
  auto run = runDtrun(
      withWorker({"--standalone", "--nproc-per-node=2"},
                 {"pid", "env", "rank1:errorfile=boom from rank one", "rank1:exit=5", "sleep"}),
      tmp.path(), {{"TORCHELASTIC_ERROR_FILE", agentErrorFile.string()}});
  INFO("dtrun stderr:\n" << run.err);
  CHECK(run.exit.code == 1);
  const auto workerErrorFile = readEnvFile(workerFile(w, "env", 0, 1))["TORCHELASTIC_ERROR_FILE"];
  const int pid = readPid(workerFile(w, "pid", 0, 1));
  auto report = reportLines(run.err);
  REQUIRE(report.size() == 17);
  CHECK(report[10] == "  rank      : 1 (local_rank: 1)");
  CHECK(report[11] == "  exitcode  : 5 (pid: " + std::to_string(pid) + ")");
  CHECK(report[12] == "  error_file: " + workerErrorFile);
  // py_callstack, every line after the first indented by two more spaces.
  CHECK(report[13] == "  traceback : Traceback (most recent call last):");
  CHECK(report[14] == "    File \"e2e_worker\", line 1, in <module>");
  CHECK(report[15] == "  RuntimeError: boom from rank one");
  CHECK(report[16] == report[0]);

  // torch's @record on the agent: the root cause's file, with errorCode = the exit code.
  REQUIRE(fs::exists(agentErrorFile));
  auto doc = nlohmann::json::parse(test::readFile(agentErrorFile));
  CHECK(doc["message"]["message"] == "RuntimeError: boom from rank one");
  CHECK(doc["message"]["errorCode"] == 5);
}

TEST_CASE("a worker that cannot be executed: 127 when missing, 126 when not executable", "[e2e]") {
  test::TempDir tmp;
  const auto notExecutable = tmp.path() / "not_executable";
  test::writeFile(notExecutable, "#!/bin/sh\nexit 0\n");
  ::chmod(notExecutable.c_str(), 0644);
  // GENERATE runs the case once per value, each time with a new TempDir: build paths here.
  const int kind = GENERATE(range(0, 5));
  std::vector<std::string> args;
  int code = 127;
  switch (kind) {
    case 0:
      args = {"--no-python", (tmp.path() / "no_such_binary").string()};
      break;
    case 1:
      args = {"--no-python", "e2e-no-such-command-in-path"};
      break;
    case 2:
      args = {"--python", (tmp.path() / "no_such_python").string(), "train.py"};
      break;
    case 3:
      args = {"--no-python", notExecutable.string()};
      code = 126;
      break;
    default:
      args = {"--no-python", tmp.path().string()};  // a directory
      code = 126;
      break;
  }
  INFO("dtrun " << Catch::Detail::stringify(args));
  const auto events = tmp.path() / "events.jsonl";
  std::vector<std::string> all{"--standalone", "--nproc-per-node=2", "--event-log",
                               events.string()};
  all.insert(all.end(), args.begin(), args.end());
  auto run = runDtrun(all, tmp.path() / "run");
  INFO("dtrun stderr:\n" << run.err);
  CHECK(run.exit.code == 1);
  auto report = reportLines(run.err);
  REQUIRE(report.size() >= 15);
  CHECK(report[11].rfind("  exitcode  : " + std::to_string(code) + " (pid: ", 0) == 0);
  auto exits = eventsNamed(readEvents(events), "worker_exited");
  REQUIRE_FALSE(exits.empty());
  CHECK(exits[0]["exit_code"] == code);
}

TEST_CASE("bad options: exit 2, the usage line and one line naming the problem", "[e2e]") {
  test::TempDir tmp;
  struct Case {
    std::vector<std::string> options;
    std::map<std::string, std::optional<std::string>> env;
    std::string names;  // what the error line must mention
  };
  auto c = GENERATE(
      Case{{"--nproc-per-node=abc"}, {}, "--nproc-per-node: invalid value 'abc'"},
      Case{{"--nproc_per_node", "0"}, {}, "--nproc_per_node"},
      Case{{"--max-restarts=-1"}, {}, "--max-restarts: invalid value '-1'"},
      Case{{"--nnodes=3:2"}, {}, "--nnodes: invalid value '3:2'"},
      Case{{"--monitor-interval=0"}, {}, "--monitor-interval"},
      Case{{"--shutdown-timeout=soon"}, {}, "--shutdown-timeout"},
      Case{{"-r", "7"}, {}, "-r/--redirects: invalid value '7'"}, Case{{"--tee=0:9"}, {}, "--tee"},
      Case{{"--rdzv-conf=join_timeout"}, {}, "--rdzv-conf"},
      Case{{"--rdzv-endpoint=host:99999"}, {}, "--rdzv-endpoint"},
      Case{{"--signals-to-handle=SIGNOPE"}, {}, "SIGNOPE"},
      Case{{"--bogus-option"}, {}, "unrecognized arguments: --bogus-option"},
      Case{{"--master"}, {}, "ambiguous option: --master"}, Case{{"-m"}, {}, "--no-python"},
      Case{{"--standalone"}, {{"PET_NPROC_PER_NODE", "many"}}, "PET_NPROC_PER_NODE"},
      Case{{}, {{"PET_STANDALONE", "true"}}, "PET_STANDALONE"});
  INFO("dtrun " << Catch::Detail::stringify(c.options) << " --no-python e2e_worker mark=ran");
  // Everything goes before --no-python, so the worker would run if the line were accepted.
  auto run = runDtrun(withWorker(c.options, {"mark=ran"}), tmp.path(), c.env);
  INFO("dtrun stderr:\n" << run.err);
  CHECK(run.exit.code == 2);
  auto lines = splitLines(run.err);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].rfind("usage: dtrun ", 0) == 0);
  CHECK(lines[1].rfind("dtrun: error: ", 0) == 0);
  CHECK(lines[1].find(c.names) != std::string::npos);
  CHECK(run.out.empty());
  CHECK_FALSE(fs::exists(workerFile(tmp.path() / "w", "ran", 0, 0)));
}

TEST_CASE("no training script: exit 2 and the missing argument named", "[e2e]") {
  test::TempDir tmp;
  auto run = runDtrun({"--standalone", "--nproc-per-node=2"}, tmp.path());
  CHECK(run.exit.code == 2);
  CHECK(run.err.find("dtrun: error: the following arguments are required: training_script") !=
        std::string::npos);
}

}  // namespace dtrun::e2e
