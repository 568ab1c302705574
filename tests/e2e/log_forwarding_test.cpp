// Worker output through the agent (docs/logs-and-reports.md): -t/--tee with torchrun's
// "[<role><local rank>]:" console prefix, prefix templates, --local-ranks-filter, whole lines
// only on the console, and the last stderr lines in the failure report when a worker wrote no
// error file. These need the LogForwarder wired into the agent; this file is its own executable
// (e2e_log_tests), registered in ctest with -DDTRUN_E2E_LOG_TESTS=ON.
#include <catch2/catch.hpp>
#include <regex>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

namespace fs = std::filesystem;

// The attempt directory of the one run in `logDir`.
fs::path attemptDir(const fs::path& logDir, int attempt) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(logDir)) dirs.push_back(e.path());
  REQUIRE(dirs.size() == 1);
  return dirs[0] / ("attempt_" + std::to_string(attempt));
}

bool hasLine(const std::string& text, const std::string& line) {
  for (const auto& l : splitLines(text)) {
    if (l == line) return true;
  }
  return false;
}

// The report's traceback: its "  traceback : " line and the indented lines after it, up to the
// closing border, without the indentation.
std::vector<std::string> reportTraceback(const std::string& err) {
  auto report = failureReport(err);
  std::vector<std::string> out;
  bool in = false;
  for (std::size_t i = 0; i + 1 < report.size(); ++i) {
    const auto& l = report[i];
    if (!in && l.rfind("  traceback : ", 0) == 0) {
      in = true;
      out.push_back(l.substr(14));
    } else if (in) {
      out.push_back(l.rfind("  ", 0) == 0 ? l.substr(2) : l);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("tee -t 3: every line on the console with torchrun's prefix, and in the files",
          "[e2e][logs]") {
  test::TempDir tmp;
  const auto logDir = tmp.path() / "logs";
  auto run = runDtrun(
      withWorker({"--standalone", "--nproc-per-node=2", "-t", "3", "--log-dir", logDir.string()},
                 {"out=hello from ${local_rank}", "err=oops from ${local_rank}"}),
      tmp.path());
  INFO("dtrun stdout:\n" << run.out << "\ndtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  for (int lr = 0; lr < 2; ++lr) {
    const std::string r = std::to_string(lr);
    CHECK(hasLine(run.out, "[default" + r + "]:hello from " + r));
    CHECK(hasLine(run.err, "[default" + r + "]:oops from " + r));
    // The files hold the raw lines.
    CHECK(test::readFile(attemptDir(logDir, 0) / r / "stdout.log") == "hello from " + r + "\n");
    CHECK(test::readFile(attemptDir(logDir, 0) / r / "stderr.log") == "oops from " + r + "\n");
  }
}

TEST_CASE("tee per rank (--tee=0:1) and --role in the prefix", "[e2e][logs]") {
  test::TempDir tmp;
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--tee=0:1",
                                  "--role=trainer", "--log-dir", (tmp.path() / "logs").string()},
                                 {"out=line of ${local_rank}"}),
                      tmp.path());
  INFO("dtrun stdout:\n" << run.out);
  REQUIRE(run.exit.code == 0);
  CHECK(hasLine(run.out, "[trainer0]:line of 0"));
  CHECK(hasLine(run.out, "line of 1"));  // not teed: straight to the console, no prefix
  CHECK_FALSE(hasLine(run.out, "[trainer1]:line of 1"));
}

TEST_CASE("prefix templates: --log-line-prefix-template and the torchrun variable", "[e2e][logs]") {
  test::TempDir tmp;
  SECTION("option") {
    auto run = runDtrun(
        withWorker({"--standalone", "--nproc-per-node=2", "-t", "1",
                    "--log-line-prefix-template=${role_name}|${rank}|${local_rank}|${restart}> "},
                   {"out=x${local_rank}"}),
        tmp.path());
    INFO("dtrun stdout:\n" << run.out);
    REQUIRE(run.exit.code == 0);
    CHECK(hasLine(run.out, "default|0|0|0> x0"));
    CHECK(hasLine(run.out, "default|1|1|0> x1"));
  }
  SECTION("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") {
    auto run = runDtrun(
        withWorker({"--standalone", "--nproc-per-node=2", "-t", "1"}, {"out=y${local_rank}"}),
        tmp.path(), {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank ${rank}]: "}});
    INFO("dtrun stdout:\n" << run.out);
    REQUIRE(run.exit.code == 0);
    CHECK(hasLine(run.out, "[rank 0]: y0"));
    CHECK(hasLine(run.out, "[rank 1]: y1"));
  }
}

TEST_CASE("local ranks filter (--local-ranks-filter): only the chosen ranks reach the console",
          "[e2e][logs]") {
  test::TempDir tmp;
  const auto logDir = tmp.path() / "logs";
  SECTION("with tee: the files keep everything") {
    auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=3", "-t", "3",
                                    "--local-ranks-filter=1", "--log-dir", logDir.string()},
                                   {"out=visible? ${local_rank}", "err=e ${local_rank}"}),
                        tmp.path());
    INFO("dtrun stdout:\n" << run.out << "\ndtrun stderr:\n" << run.err);
    REQUIRE(run.exit.code == 0);
    CHECK(hasLine(run.out, "[default1]:visible? 1"));
    CHECK(hasLine(run.err, "[default1]:e 1"));
    CHECK(run.out.find("visible? 0") == std::string::npos);
    CHECK(run.out.find("visible? 2") == std::string::npos);
    CHECK(run.err.find("e 0") == std::string::npos);
    CHECK(test::readFile(attemptDir(logDir, 0) / "0" / "stdout.log") == "visible? 0\n");
    CHECK(test::readFile(attemptDir(logDir, 0) / "2" / "stderr.log") == "e 2\n");
  }
  SECTION("without tee: the other ranks' output is dropped") {
    auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--local-ranks-filter=0"},
                                   {"out=plain ${local_rank}"}),
                        tmp.path());
    INFO("dtrun stdout:\n" << run.out);
    REQUIRE(run.exit.code == 0);
    CHECK(hasLine(run.out, "plain 0"));
    CHECK(run.out.find("plain 1") == std::string::npos);
  }
}

TEST_CASE("teed lines of different workers never interleave mid-line", "[e2e][logs]") {
  test::TempDir tmp;
  constexpr int kWorkers = 4;
  constexpr int kLines = 3000;
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=4", "-t", "1", "--log-dir",
                                  (tmp.path() / "logs").string()},
                                 {"lines=" + std::to_string(kLines)}),
                      tmp.path());
  REQUIRE(run.exit.code == 0);
  // Each console line is one whole worker line: its prefix, its rank, a number, 180 x's.
  const std::regex line("\\[default([0-3])\\]:([0-3]):([0-9]+):x{180}");
  std::vector<int> next(kWorkers, 0);
  int bad = 0;
  for (const auto& l : splitLines(run.out)) {
    std::smatch m;
    if (!std::regex_match(l, m, line) || m[1] != m[2]) {
      if (++bad <= 3) UNSCOPED_INFO("bad console line: " << l.substr(0, 240));
      continue;
    }
    const int w = std::stoi(m[1]);
    // Lines of one worker arrive in order, none lost.
    if (std::stoi(m[3]) != next[static_cast<std::size_t>(w)]) ++bad;
    ++next[static_cast<std::size_t>(w)];
  }
  CHECK(bad == 0);
  CHECK(next == std::vector<int>(kWorkers, kLines));
}

TEST_CASE("the report shows the last stderr lines of a worker that wrote no error file",
          "[e2e][logs]") {
  test::TempDir tmp;
  // 25 lines, so the report's tail (20 lines) starts at the 6th.
  std::vector<std::string> steps;
  for (int i = 1; i <= 24; ++i) steps.push_back("rank1:err=progress line " + std::to_string(i));
  steps.push_back("rank1:err=ValueError: the real reason");
  steps.push_back("rank1:exit=1");
  steps.push_back("sleep");
  std::vector<std::string> expected;
  for (int i = 6; i <= 24; ++i) expected.push_back("progress line " + std::to_string(i));
  expected.push_back("ValueError: the real reason");

  SECTION("stderr on the console") {
    auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2"}, steps), tmp.path());
    INFO("dtrun stderr:\n" << run.err);
    REQUIRE(run.exit.code == 1);
    CHECK(reportTraceback(run.err) == expected);
    // The worker's lines also reached the console as it wrote them.
    CHECK(run.err.find("progress line 1\n") != std::string::npos);
  }
  SECTION("stderr redirected to its file") {
    auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "-r", "2", "--log-dir",
                                    (tmp.path() / "logs").string()},
                                   steps),
                        tmp.path());
    INFO("dtrun stderr:\n" << run.err);
    REQUIRE(run.exit.code == 1);
    CHECK(reportTraceback(run.err) == expected);
  }
  SECTION("a death by signal keeps torch's signal line on top") {
    auto run = runDtrun(
        withWorker({"--standalone", "--nproc-per-node=1"}, {"pid", "err=last words", "raise=SEGV"}),
        tmp.path());
    INFO("dtrun stderr:\n" << run.err);
    REQUIRE(run.exit.code == 1);
    const int pid = readPid(workerFile(tmp.path() / "w", "pid", 0, 0));
    CHECK(reportTraceback(run.err) ==
          std::vector<std::string>{"Signal 11 (SIGSEGV) received by PID " + std::to_string(pid),
                                   "last words"});
  }
}

}  // namespace dtrun::e2e
