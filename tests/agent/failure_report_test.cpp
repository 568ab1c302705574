#include "agent/failure_report.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>

#include "agent/error_file.h"
#include "common/error.h"
#include "tests/support/test_support.h"

using dtrun::agent::buildProcessFailure;
using dtrun::agent::FailedExit;
using dtrun::agent::formatFailureReport;
using dtrun::agent::ProcessFailure;
using dtrun::test::readFile;
using dtrun::test::TempDir;
using dtrun::test::writeFile;
using namespace std::chrono;

namespace {

// Golden reports captured from real torchrun 1.13 (Debian python3-torch, through
// scripts/bench/torchrun_anchor.py), `--standalone --nproc_per_node 2 --log_dir <dir>`: the text
// after "ChildFailedError: \n" up to the closing border. Machine TZ was UTC, host "localhost".
// Variable parts kept as captured (pids, times); error-file paths are @ERROR_FILE_<local rank>@.
// w_plain.py: rank 1 raises, no @record (torchrun -t 3 --log_dir).
const char* kTorchPlain = R"(============================================================
w_plain.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_04:14:07
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 9924)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================)";

// w_rec.py: the same under @record, so with an error file.
const char* kTorchRecord = R"(============================================================
w_rec.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_04:14:11
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 9936)
  error_file: @ERROR_FILE_1@
  traceback : Traceback (most recent call last):
    File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper
      return f(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^
    File "/tmp/tro/w_rec.py", line 8, in main
      raise ValueError("boom on rank 1")
  ValueError: boom on rank 1
  
============================================================)";

// w_sig.py: rank 0 SIGKILLs itself.
const char* kTorchSignal = R"(======================================================
w_sig.py FAILED
------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_04:14:21
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 10033)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 10033
======================================================)";

// w_both.py: both ranks raise under @record, rank 0 1.5 s later (listed first, not root).
const char* kTorchTwoFailures = R"(============================================================
w_both.py FAILED
------------------------------------------------------------
Failures:
[0]:
  time      : 2026-11-30_04:14:29
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 10193)
  error_file: @ERROR_FILE_0@
  traceback : Traceback (most recent call last):
    File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper
      return f(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^
    File "/tmp/tro/w_both.py", line 8, in main
      raise RuntimeError("second")
  RuntimeError: second
  
------------------------------------------------------------
Root Cause (first observed failure):
[1]:
  time      : 2026-11-30_04:14:28
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 10194)
  error_file: @ERROR_FILE_1@
  traceback : Traceback (most recent call last):
    File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper
      return f(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^
    File "/tmp/tro/w_both.py", line 9, in main
      raise ValueError("first")
  ValueError: first
  
============================================================)";

// error.json written by w_rec.py rank 1 (torch 1.13 @record), verbatim.
const char* kRecordRank1 =
    R"({"message": {"message": "ValueError: boom on rank 1", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 346, in wrapper\n    return f(*args, **kwargs)\n           ^^^^^^^^^^^^^^^^^^\n  File \"/tmp/tro/w_rec.py\", line 8, in main\n    raise ValueError(\"boom on rank 1\")\nValueError: boom on rank 1\n", "timestamp": "1796012051"}}})";

// error.json written by w_both.py rank 0 (torch 1.13 @record), verbatim.
const char* kBothRank0 =
    R"({"message": {"message": "RuntimeError: second", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 346, in wrapper\n    return f(*args, **kwargs)\n           ^^^^^^^^^^^^^^^^^^\n  File \"/tmp/tro/w_both.py\", line 8, in main\n    raise RuntimeError(\"second\")\nRuntimeError: second\n", "timestamp": "1796012069"}}})";

// error.json written by w_both.py rank 1 (torch 1.13 @record), verbatim.
const char* kBothRank1 =
    R"({"message": {"message": "ValueError: first", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 346, in wrapper\n    return f(*args, **kwargs)\n           ^^^^^^^^^^^^^^^^^^\n  File \"/tmp/tro/w_both.py\", line 9, in main\n    raise ValueError(\"first\")\nValueError: first\n", "timestamp": "1796012068"}}})";

// Reports generated by torch 1.13's own ChildFailedError/ProcessFailure classes in Python for
// inputs no real run produces on demand (TZ=UTC, host "localhost").
// Ranks 4, 5, 6 at timestamps 1700000005, 1700000003, 1700000003: the tie goes to rank 5.
const char* kTorchTie =
    "============================================================\n"
    "tie.py FAILED\n"
    "------------------------------------------------------------\n"
    "Failures:\n"
    "[0]:\n"
    "  time      : 2023-11-14_22:13:25\n"
    "  host      : localhost\n"
    "  rank      : 4 (local_rank: 0)\n"
    "  exitcode  : 2 (pid: 11)\n"
    "  error_file: <N/A>\n"
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    "[2]:\n"
    "  time      : 2023-11-14_22:13:23\n"
    "  host      : localhost\n"
    "  rank      : 6 (local_rank: 2)\n"
    "  exitcode  : -15 (pid: 13)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 15 (SIGTERM) received by PID 13\n"
    "------------------------------------------------------------\n"
    "Root Cause (first observed failure):\n"
    "[1]:\n"
    "  time      : 2023-11-14_22:13:23\n"
    "  host      : localhost\n"
    "  rank      : 5 (local_rank: 1)\n"
    "  exitcode  : -6 (pid: 12)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 6 (SIGABRT) received by PID 12\n"
    "============================================================";
// Entrypoint "\u00e9" * 45: the width counts code points (52), not bytes (97).
const char* kTorchWideTitle =
    "====================================================\n"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9 FAILED\n"
    "----------------------------------------------------\n"
    "Failures:\n"
    "  <NO_OTHER_FAILURES>\n"
    "----------------------------------------------------\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2023-11-14_22:13:20\n"
    "  host      : localhost\n"
    "  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : -9 (pid: 1)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 9 (SIGKILL) received by PID 1\n"
    "====================================================";

// Pins the local time zone to UTC (the goldens' zone) for one test.
class UtcZone {
 public:
  UtcZone() {
    if (const char* tz = std::getenv("TZ")) old_ = tz;
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
  ~UtcZone() {
    if (old_) {
      ::setenv("TZ", old_->c_str(), 1);
    } else {
      ::unsetenv("TZ");
    }
    ::tzset();
  }
  UtcZone(const UtcZone&) = delete;
  UtcZone& operator=(const UtcZone&) = delete;

 private:
  std::optional<std::string> old_;
};

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

system_clock::time_point at(std::int64_t epochSeconds) {
  return system_clock::time_point{seconds(epochSeconds)};
}

// The error-file path torchrun would have given local rank `lr`, under `dir`.
std::string errorFileIn(const TempDir& dir, int lr) {
  auto rankDir = dir.path() / "attempt_0" / std::to_string(lr);
  std::filesystem::create_directories(rankDir);
  return (rankDir / "error.json").string();
}

const std::vector<std::string> kPlainTail = {
    "Traceback (most recent call last):",
    "  File \"/tmp/tro/w_plain.py\", line 5, in <module>",
    "    raise ValueError(\"boom on rank 1\")",
    "ValueError: boom on rank 1",
};

}  // namespace

TEST_CASE("report matches torchrun: exit code, no error file", "[agent][report][golden]") {
  UtcZone utc;
  TempDir dir;
  auto f = buildProcessFailure({.localRank = 1,
                                .rank = 1,
                                .pid = 9924,
                                .exitCode = 1,
                                .host = "localhost",
                                .errorFile = errorFileIn(dir, 1),  // never written
                                .observedAt = at(1796012047) + milliseconds(640),
                                .stderrTail = {}});
  CHECK(f.errorFile.empty());
  CHECK_FALSE(f.fromErrorFile);
  CHECK(f.timestampMs == 1796012047640);
  CHECK(formatFailureReport("w_plain.py", {f}) == kTorchPlain);
}

TEST_CASE("report matches torchrun: @record error file", "[agent][report][golden]") {
  UtcZone utc;
  TempDir dir;
  auto path = errorFileIn(dir, 1);
  writeFile(path, kRecordRank1);
  auto f = buildProcessFailure({.localRank = 1,
                                .rank = 1,
                                .pid = 9936,
                                .exitCode = 1,
                                .host = "localhost",
                                .errorFile = path,
                                .observedAt = at(1796012053),
                                // An error file wins over the tail: torch's text exactly.
                                .stderrTail = {"Traceback (most recent call last):", "..."}});
  CHECK(f.errorFile == path);
  CHECK(f.fromErrorFile);
  CHECK(f.timestampMs == 1796012051000);  // the file's timestamp, not the observed time
  CHECK(formatFailureReport("w_rec.py", {f}) == replaced(kTorchRecord, "@ERROR_FILE_1@", path));
}

TEST_CASE("report matches torchrun: death by signal", "[agent][report][golden]") {
  UtcZone utc;
  TempDir dir;
  auto f = buildProcessFailure({.localRank = 0,
                                .rank = 0,
                                .pid = 10033,
                                .exitCode = -9,
                                .host = "localhost",
                                .errorFile = errorFileIn(dir, 0),
                                .observedAt = at(1796012061),
                                .stderrTail = {}});
  CHECK(f.message == "Signal 9 (SIGKILL) received by PID 10033");
  CHECK(formatFailureReport("w_sig.py", {f}) == kTorchSignal);  // 54 wide, not 60
}

TEST_CASE("report matches torchrun: two failures, the earlier one is root",
          "[agent][report][golden]") {
  UtcZone utc;
  TempDir dir;
  auto path0 = errorFileIn(dir, 0);
  auto path1 = errorFileIn(dir, 1);
  writeFile(path0, kBothRank0);
  writeFile(path1, kBothRank1);
  std::vector<ProcessFailure> failures;
  failures.push_back(buildProcessFailure({.localRank = 0,
                                          .rank = 0,
                                          .pid = 10193,
                                          .exitCode = 1,
                                          .host = "localhost",
                                          .errorFile = path0,
                                          .observedAt = at(1796012070),
                                          .stderrTail = {}}));
  failures.push_back(buildProcessFailure({.localRank = 1,
                                          .rank = 1,
                                          .pid = 10194,
                                          .exitCode = 1,
                                          .host = "localhost",
                                          .errorFile = path1,
                                          .observedAt = at(1796012070),
                                          .stderrTail = {}}));
  CHECK(dtrun::agent::rootCauseIndex(failures) == 1);
  CHECK(formatFailureReport("w_both.py", failures) ==
        replaced(replaced(kTorchTwoFailures, "@ERROR_FILE_0@", path0), "@ERROR_FILE_1@", path1));
}

TEST_CASE("report matches torch's formatter: ties and code-point widths",
          "[agent][report][golden]") {
  UtcZone utc;
  auto make = [](int lr, int rank, int pid, int code, std::int64_t ts) {
    return buildProcessFailure({.localRank = lr,
                                .rank = rank,
                                .pid = pid,
                                .exitCode = code,
                                .host = "localhost",
                                .errorFile = "",
                                .observedAt = at(ts),
                                .stderrTail = {}});
  };
  CHECK(
      formatFailureReport("tie.py", {make(0, 4, 11, 2, 1700000005), make(1, 5, 12, -6, 1700000003),
                                     make(2, 6, 13, -15, 1700000003)}) == kTorchTie);
  std::string title;
  for (int i = 0; i < 45; ++i) title += "\xc3\xa9";
  CHECK(formatFailureReport(title, {make(0, 0, 1, -9, 1700000000)}) == kTorchWideTitle);
  CHECK(formatFailureReport("x", {}).empty());
}

TEST_CASE("report shows the stderr tail when there is no error file", "[agent][report]") {
  UtcZone utc;
  auto f = buildProcessFailure({.localRank = 1,
                                .rank = 1,
                                .pid = 9924,
                                .exitCode = 1,
                                .host = "localhost",
                                .errorFile = "",
                                .observedAt = at(1796012047),
                                .stderrTail = kPlainTail});
  CHECK(f.message ==
        "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html");
  CHECK(f.stderrTail == kPlainTail);
  // The same layout as torch's @record report; width 51 from the longest tail line.
  CHECK(formatFailureReport("w_plain.py", {f}) ==
        "===================================================\n"
        "w_plain.py FAILED\n"
        "---------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "---------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-11-30_04:14:07\n"
        "  host      : localhost\n"
        "  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : 1 (pid: 9924)\n"
        "  error_file: <N/A>\n"
        "  traceback : Traceback (most recent call last):\n"
        "    File \"/tmp/tro/w_plain.py\", line 5, in <module>\n"
        "      raise ValueError(\"boom on rank 1\")\n"
        "  ValueError: boom on rank 1\n"
        "===================================================");

  // A signal keeps torch's line on top of the tail.
  auto sig = buildProcessFailure({.localRank = 0,
                                  .rank = 0,
                                  .pid = 77,
                                  .exitCode = -6,
                                  .host = "localhost",
                                  .errorFile = "",
                                  .observedAt = at(1796012047),
                                  .stderrTail = {"terminate called after throwing 'x'"}});
  CHECK(dtrun::agent::tracebackText(sig) ==
        "Signal 6 (SIGABRT) received by PID 77\nterminate called after throwing 'x'");
  CHECK(formatFailureReport("a.out", {sig})
            .find("  traceback : Signal 6 (SIGABRT) received by PID 77\n"
                  "  terminate called after throwing 'x'\n====") != std::string::npos);
}

TEST_CASE("buildProcessFailure survives a malformed error file", "[agent][report]") {
  UtcZone utc;
  TempDir dir;
  auto path = errorFileIn(dir, 0);
  writeFile(path, "{\"message\": {\"message\": ");  // the worker died mid-write
  ProcessFailure f;
  REQUIRE_NOTHROW(f = buildProcessFailure({.localRank = 0,
                                           .rank = 3,
                                           .pid = 5,
                                           .exitCode = 1,
                                           .host = "h",
                                           .errorFile = path,
                                           .observedAt = at(1796012047),
                                           .stderrTail = {"RuntimeError: real cause"}}));
  CHECK(f.errorFile == path);
  CHECK_FALSE(f.fromErrorFile);
  CHECK(f.timestampMs == 1796012047000);
  CHECK(f.message.find(path) != std::string::npos);
  auto report = formatFailureReport("t.py", {f});
  CHECK(report.find("  error_file: " + path + "\n") != std::string::npos);
  CHECK(report.find("\n  RuntimeError: real cause\n") != std::string::npos);
}

TEST_CASE("buildProcessFailure reads the string error format", "[agent][report]") {
  TempDir dir;
  auto path = errorFileIn(dir, 2);
  writeFile(path, R"({"message": "NCCL error: unhandled system error", "timestamp": 1796000000})");
  auto f = buildProcessFailure({.localRank = 2,
                                .rank = 2,
                                .pid = 5,
                                .exitCode = 3,
                                .host = "h",
                                .errorFile = path,
                                .observedAt = at(1796012047),
                                .stderrTail = {}});
  CHECK(f.fromErrorFile);
  CHECK(f.message == "NCCL error: unhandled system error");
  CHECK(f.timestampMs == 1796000000000);
  CHECK(dtrun::agent::tracebackText(f) == f.message);
}

TEST_CASE("ProcessFailure JSON round trip", "[agent][report]") {
  ProcessFailure f{.localRank = 3,
                   .rank = 11,
                   .pid = 4242,
                   .exitCode = -11,
                   .host = "node-7",
                   .errorFile = "/logs/r_abc/attempt_1/3/error.json",
                   .timestampMs = 1796012047123,
                   .message = "Traceback...\nValueError: \xc3\xa9",
                   .fromErrorFile = true,
                   .stderrTail = {"a", "", "b\tc"},
                   .hang = std::nullopt};
  nlohmann::json j = f;
  auto text = j.dump();
  CHECK(nlohmann::json::parse(text).get<ProcessFailure>() == f);
  CHECK_FALSE(j.contains("hang"));
  f.hang = dtrun::agent::Hang{.kind = "timer",
                              .scopeId = "step",
                              .pid = 4243,
                              .deadlineMs = 1796012046000,
                              .overstayMs = 12,
                              .signal = 9,
                              .stacks = "Python stacks of pid 4243:\n  File \"t.py\""};
  CHECK(nlohmann::json::parse(nlohmann::json(f).dump()).get<ProcessFailure>() == f);
  // An older record without the optional fields still loads.
  auto minimal =
      nlohmann::json::parse(R"({"localRank":0,"rank":1,"pid":2,"exitCode":3,"timestampMs":4})")
          .get<ProcessFailure>();
  CHECK(minimal.rank == 1);
  CHECK(minimal.stderrTail.empty());
  CHECK_THROWS_AS(nlohmann::json::parse(R"({"rank":1})").get<ProcessFailure>(),
                  nlohmann::json::exception);
}

TEST_CASE("buildProcessFailure makes worker bytes valid UTF-8", "[agent][report]") {
  auto f = buildProcessFailure({.localRank = 0,
                                .rank = 0,
                                .pid = 1,
                                .exitCode = 1,
                                .host = "h",
                                .errorFile = "",
                                .observedAt = at(1),
                                .stderrTail = {"bad \xff\xfe bytes", "ok \xc3\xa9"}});
  CHECK(f.stderrTail[0] == "bad \xef\xbf\xbd\xef\xbf\xbd bytes");
  CHECK(f.stderrTail[1] == "ok \xc3\xa9");
  CHECK_NOTHROW(nlohmann::json(f).dump());
}

TEST_CASE("writeAgentErrorFile copies the root's file with errorCode", "[agent][report]") {
  TempDir dir;
  auto workerFile = errorFileIn(dir, 1);
  writeFile(workerFile, kRecordRank1);
  auto agentFile = (dir.path() / "agent_error.json").string();
  writeFile(agentFile, "stale");
  auto root = buildProcessFailure({.localRank = 1,
                                   .rank = 1,
                                   .pid = 9936,
                                   .exitCode = 1,
                                   .host = "localhost",
                                   .errorFile = workerFile,
                                   .observedAt = at(1796012053),
                                   .stderrTail = {}});
  dtrun::agent::writeAgentErrorFile(agentFile, root);
  // What torch's dump_error_file writes: json.dumps of the worker's document plus errorCode.
  std::string expected = kRecordRank1;
  expected.replace(expected.size() - 3, 3, R"(}, "errorCode": 1}})");
  CHECK(readFile(agentFile) == expected);
}

TEST_CASE("writeAgentErrorFile without a worker file records the report's text",
          "[agent][report]") {
  TempDir dir;
  auto agentFile = (dir.path() / "agent_error.json").string();
  auto root = buildProcessFailure({.localRank = 1,
                                   .rank = 1,
                                   .pid = 9924,
                                   .exitCode = 1,
                                   .host = "localhost",
                                   .errorFile = "",
                                   .observedAt = at(1796012047),
                                   .stderrTail = kPlainTail});
  dtrun::agent::writeAgentErrorFile(agentFile, root);
  auto back = dtrun::agent::readErrorFile(agentFile);
  REQUIRE(back);
  REQUIRE(back->valid);
  CHECK(back->timestampS == 1796012047);
  CHECK(back->message == dtrun::agent::tracebackText(root));
  CHECK(back->document["message"]["message"] == "ValueError: boom on rank 1");
  CHECK(back->document["message"]["errorCode"] == 1);

  auto sig = buildProcessFailure({.localRank = 0,
                                  .rank = 0,
                                  .pid = 8,
                                  .exitCode = -9,
                                  .host = "h",
                                  .errorFile = "",
                                  .observedAt = at(1796012047),
                                  .stderrTail = {}});
  dtrun::agent::writeAgentErrorFile(agentFile, sig);
  back = dtrun::agent::readErrorFile(agentFile);
  REQUIRE(back);
  CHECK(back->document["message"]["message"] == "Signal 9 (SIGKILL) received by PID 8");
  CHECK(back->document["message"]["errorCode"] == -9);
}

TEST_CASE("a hang leads the report: what hung, the stderr tail, the Python stacks",
          "[agent][report]") {
  UtcZone utc;
  auto f = buildProcessFailure({.localRank = 1,
                                .rank = 5,
                                .pid = 4242,
                                .exitCode = -9,
                                .host = "node-1",
                                .errorFile = "",
                                .observedAt = at(1796012048),
                                .stderrTail = {"step 7", "loading shard 3"}});
  f.hang = dtrun::agent::Hang{.kind = "timer",
                              .scopeId = "train.py#42",
                              .pid = 4250,
                              .deadlineMs = 1796012047250,
                              .overstayMs = 4,
                              .signal = 9,
                              .stacks = ""};
  CHECK(dtrun::agent::describeHang(*f.hang) ==
        "hung: timer \"train.py#42\" of pid 4250 passed its deadline 2026-11-30_04:14:07.250 by "
        "0.004 s; dtrun sent SIGKILL to its process group");
  CHECK(dtrun::agent::tracebackText(f) ==
        dtrun::agent::describeHang(*f.hang) +
            "\nSignal 9 (SIGKILL) received by PID 4242\nstep 7\nloading shard 3");
  f.hang->stacks = "Python stacks of pid 4250:\n  File \"train.py\", line 9 in load";
  auto report = formatFailureReport("train.py", {f});
  CHECK(report.find("  traceback : hung: timer \"train.py#42\"") != std::string::npos);
  CHECK(report.find("\n  loading shard 3\n  Python stacks of pid 4250:\n"
                    "    File \"train.py\", line 9 in load\n====") != std::string::npos);

  // A stall names the silence, and a timer without a signal says nothing was sent.
  dtrun::agent::Hang stall{.kind = "stall",
                           .scopeId = "",
                           .pid = 0,
                           .deadlineMs = 1796012047000,
                           .overstayMs = 600000,
                           .signal = 15,
                           .stacks = ""};
  CHECK(dtrun::agent::describeHang(stall) ==
        "hung: no output and no timer activity from the worker group for 600.000 s (since "
        "2026-11-30_04:14:07.000); dtrun sent SIGTERM to its process group");
  stall.kind = "timer";
  stall.signal = 0;
  CHECK_THAT(dtrun::agent::describeHang(stall), Catch::EndsWith("; it asked for no signal"));

  // The agent's own error file summarises the hang.
  TempDir dir;
  auto path = (dir.path() / "agent.json").string();
  dtrun::agent::writeAgentErrorFile(path, f);
  auto doc = nlohmann::json::parse(readFile(path));
  CHECK(doc["message"]["message"] == dtrun::agent::describeHang(*f.hang));
  CHECK(doc["message"]["errorCode"] == -9);
}
