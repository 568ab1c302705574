#include "agent/hang_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/null_sink.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <optional>
#include <sstream>

#include "tests/agent/round_util.h"
#include "tests/support/run_until.h"

using dtrun::agent::Hang;
using dtrun::agent::HangWatch;
using dtrun::agent::LaunchConfig;
using dtrun::agent::testing::envTestConfig;
using dtrun::test::runUntil;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<spdlog::logger> quietLog() {
  return std::make_shared<spdlog::logger>("agent", std::make_shared<spdlog::sinks::null_sink_mt>());
}

// torch's FileTimerClient: one JSON line on the FIFO, from this process.
void requestTimer(const std::string& fifo, const std::string& scope, double expiration) {
  std::ostringstream s;
  s.precision(17);
  s << R"({"version": 1, "pid": )" << ::getpid() << R"(, "scope_id": ")" << scope
    << R"(", "expiration_time": )" << expiration << R"(, "signal": )" << SIGKILL << "}\n";
  const std::string line = s.str();
  int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  ::close(fd);
}

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Seen {
  std::optional<std::pair<int, Hang>> timer;
  std::optional<Clock::time_point> stalledAt;
};

HangWatch::Hooks hooks(Seen& seen, std::optional<int> owner = 0) {
  return HangWatch::Hooks{
      [owner](int pid) { return pid == ::getpid() ? owner : std::nullopt; },
      [&seen](int localRank, Hang hang) { seen.timer.emplace(localRank, std::move(hang)); },
      [&seen](std::int64_t, std::chrono::milliseconds) { seen.stalledAt = Clock::now(); },
      [] { return std::optional<Clock::time_point>{}; }};
}

}  // namespace

TEST_CASE("HangWatch: a worker's file-timer deadline that passes is reported as its hang",
          "[hangs]") {
  LaunchConfig config = envTestConfig(2);
  config.fileTimer = true;
  boost::asio::io_context io;
  Seen seen;
  HangWatch watch(io, config, hooks(seen, 1), quietLog());
  watch.start();
  const auto env = watch.workerEnv();
  REQUIRE(env.count("TORCHELASTIC_TIMER_FILE") == 1);
  REQUIRE(watch.timer() != nullptr);
  requestTimer(env.at("TORCHELASTIC_TIMER_FILE"), "train.py#12", nowSeconds() + 0.05);
  REQUIRE(runUntil(
      io, [&] { return seen.timer.has_value(); }, 10s));
  CHECK(seen.timer->first == 1);
  const Hang& hang = seen.timer->second;
  CHECK(hang.kind == "timer");
  CHECK(hang.scopeId == "train.py#12");
  CHECK(hang.pid == ::getpid());
  CHECK(hang.signal == SIGKILL);
  CHECK(hang.overstayMs >= 0);
  watch.stop();
  CHECK(::access(env.at("TORCHELASTIC_TIMER_FILE").c_str(), F_OK) != 0);
}

TEST_CASE("HangWatch: a timer request is a sign of life for the stall watch", "[hangs]") {
  LaunchConfig config = envTestConfig(1);
  config.fileTimer = true;
  config.stallTimeout = 300ms;
  boost::asio::io_context io;
  Seen seen;
  HangWatch watch(io, config, hooks(seen), quietLog());
  watch.start();
  CHECK_FALSE(watch.secondsQuiet().has_value());  // no group yet
  const auto fifo = watch.workerEnv().at("TORCHELASTIC_TIMER_FILE");
  watch.groupStarted();
  // 200 ms into the group: a timer for an hour from now (a step that is still running).
  std::optional<Clock::time_point> requestedAt;
  boost::asio::steady_timer later(io, 200ms);
  later.async_wait([&](boost::system::error_code) {
    requestedAt = Clock::now();
    requestTimer(fifo, "step", nowSeconds() + 3600);
  });
  REQUIRE(runUntil(
      io, [&] { return seen.stalledAt.has_value(); }, 10s));
  REQUIRE(requestedAt.has_value());
  CHECK(*seen.stalledAt - *requestedAt >= 300ms);
  CHECK_FALSE(seen.timer.has_value());
  // A paused group (a start waiting for standbys) is not watched.
  watch.groupStarted();
  watch.groupPaused();
  CHECK_FALSE(watch.secondsQuiet().has_value());
  watch.stop();
}

TEST_CASE("HangWatch: the workers get the stack-dump hook, without it no stacks are asked for",
          "[hangs]") {
  boost::asio::io_context io;
  Seen seen;
  {
    LaunchConfig config = envTestConfig(1);
    config.dumpStacks = true;
    config.baseEnv["PYTHONPATH"] = "/opt/project";
    HangWatch watch(io, config, hooks(seen), quietLog());
    watch.start();
    const auto env = watch.workerEnv();
    REQUIRE(env.count("DTRUN_STACK_DUMP_DIR") == 1);
    REQUIRE(env.count("PYTHONPATH") == 1);
    // The hook's directory first, the user's path kept after it.
    CHECK(env.at("PYTHONPATH").rfind(env.at("DTRUN_STACK_DUMP_DIR"), 0) == 0);
    CHECK(env.at("PYTHONPATH").find("/opt/project") != std::string::npos);
    CHECK(env.count("TORCHELASTIC_TIMER_FILE") == 0);  // no --file-timer
  }
  LaunchConfig plain = envTestConfig(1);
  HangWatch watch(io, plain, hooks(seen), quietLog());
  watch.start();
  CHECK(watch.workerEnv().empty());
  CHECK(watch.timer() == nullptr);
  std::optional<std::string> text;
  watch.stacksThen({::getpid()}, [&](std::string t) { text = std::move(t); });
  REQUIRE(text.has_value());  // at once, nothing signalled
  CHECK(text->empty());
}
