#include "agent/worker_streams.h"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <optional>

#include "tests/agent/round_util.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using dtrun::SpawnSpec;
using dtrun::UniqueFd;
using dtrun::agent::LaunchConfig;
using dtrun::agent::LogDir;
using dtrun::agent::Std;
using dtrun::agent::WorkerStreams;
using dtrun::agent::testing::envTestConfig;
using dtrun::agent::testing::roundOf;
using dtrun::test::readFile;
using dtrun::test::runUntil;
using dtrun::test::TempDir;

namespace {

// What a worker would write on its descriptor `fd` (the routed one, before the spawn).
void writeAs(int fd, const std::string& text) {
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
}

bool isFifo(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

bool isRegular(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

// One node of two workers; the console of local rank 0 is silenced (--local-ranks-filter 1) so
// the test's own stderr stays clean.
LaunchConfig quietConfig(const TempDir& dir) {
  LaunchConfig c = envTestConfig(2);
  c.logDir = dir.path().string();
  c.localRanksFilter = std::set<int>{1};
  return c;
}

}  // namespace

TEST_CASE(
    "WorkerStreams: a redirected stream goes to its log file only, the other through the "
    "forwarder",
    "[streams]") {
  TempDir dir;
  LaunchConfig config = quietConfig(dir);
  config.redirects.all = Std::kOut;
  LogDir logDir(config.logDir, config.rdzv.runId);
  logDir.prepareAttempt(0, 2);
  boost::asio::io_context io;
  WorkerStreams streams(io, config, logDir, "node-a");
  streams.reset(2);
  const auto round = roundOf(0);
  SpawnSpec spawn;
  std::vector<UniqueFd> ends;
  streams.route(round, 0, spawn, ends);
  REQUIRE(ends.size() == 2);
  CHECK(isRegular(spawn.stdoutFd));
  CHECK(isFifo(spawn.stderrFd));
  CHECK(streams.openStreams() == 1);
  writeAs(spawn.stdoutFd, "to the file\n");
  CHECK(readFile(logDir.stdoutPath(0, 0)) == "to the file\n");
  // Bytes that do not pass the agent still count as a sign of life.
  const auto seen = streams.lastFileWrite(round);
  REQUIRE(seen.has_value());
  CHECK(*seen <= std::chrono::steady_clock::now());
  CHECK(*seen > std::chrono::steady_clock::now() - std::chrono::seconds(60));
  ends.clear();
  streams.closeOut(0);
  streams.closeErr(0);
  CHECK(streams.openStreams() == 0);
}

TEST_CASE("WorkerStreams: a tee'd stderr reaches its file and its last lines the report",
          "[streams]") {
  TempDir dir;
  LaunchConfig config = quietConfig(dir);
  config.tee.all = Std::kErr;
  LogDir logDir(config.logDir, config.rdzv.runId);
  logDir.prepareAttempt(1, 2);
  boost::asio::io_context io;
  WorkerStreams streams(io, config, logDir, "node-a");
  streams.reset(2);
  const auto round = roundOf(1);
  SpawnSpec spawn;
  std::vector<UniqueFd> ends;
  streams.route(round, 0, spawn, ends);
  CHECK(isFifo(spawn.stdoutFd));
  CHECK(isFifo(spawn.stderrFd));
  CHECK(streams.openStreams() == 2);
  CHECK_FALSE(streams.lastOutput().has_value());
  writeAs(spawn.stderrFd, "Traceback (most recent call last):\nValueError: boom\n");
  ends.clear();  // the worker is gone
  streams.closeOut(0);
  std::optional<std::vector<std::string>> tail;
  streams.takeErr(round, 0, [&](std::vector<std::string> lines) { tail = std::move(lines); });
  REQUIRE(runUntil(io, [&] { return tail.has_value(); }));
  CHECK(*tail ==
        std::vector<std::string>{"Traceback (most recent call last):", "ValueError: boom"});
  CHECK(readFile(logDir.stderrPath(1, 0)) ==
        "Traceback (most recent call last):\nValueError: boom\n");
  CHECK(streams.lastOutput().has_value());
  CHECK(streams.openStreams() == 0);
}

TEST_CASE("WorkerStreams: a redirected stderr's last lines come from its file", "[streams]") {
  TempDir dir;
  LaunchConfig config = quietConfig(dir);
  config.redirects.all = Std::kAll;
  LogDir logDir(config.logDir, config.rdzv.runId);
  logDir.prepareAttempt(0, 2);
  boost::asio::io_context io;
  WorkerStreams streams(io, config, logDir, "node-a");
  streams.reset(2);
  SpawnSpec spawn;
  std::vector<UniqueFd> ends;
  streams.route(roundOf(0), 1, spawn, ends);
  CHECK(streams.openStreams() == 0);  // nothing passes the agent
  writeAs(spawn.stderrFd, "first\nlast\n");
  ends.clear();
  std::optional<std::vector<std::string>> tail;
  streams.takeErr(roundOf(0), 1, [&](std::vector<std::string> lines) { tail = std::move(lines); });
  REQUIRE(tail.has_value());  // at once: a file, no pipe to drain
  CHECK(*tail == std::vector<std::string>{"first", "last"});
}

TEST_CASE("WorkerStreams: with --log-dir /dev/null a redirected stream goes to the console",
          "[streams]") {
  LaunchConfig config = envTestConfig(1);
  config.logDir = "/dev/null";
  config.redirects.all = Std::kAll;
  LogDir logDir(config.logDir, config.rdzv.runId);
  logDir.prepareAttempt(0, 1);
  boost::asio::io_context io;
  WorkerStreams streams(io, config, logDir, "node-a");
  streams.reset(1);
  SpawnSpec spawn;
  std::vector<UniqueFd> ends;
  streams.route(roundOf(0, 0, 1, 1), 0, spawn, ends);
  // No file to redirect to: both streams pass the forwarder to the console, as without -r.
  CHECK(isFifo(spawn.stdoutFd));
  CHECK(isFifo(spawn.stderrFd));
  CHECK(streams.openStreams() == 2);
  CHECK_FALSE(streams.lastFileWrite(roundOf(0, 0, 1, 1)).has_value());
  ends.clear();
  streams.closeAll();
}
