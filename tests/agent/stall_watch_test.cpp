#include "agent/stall_watch.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <optional>

#include "tests/support/run_until.h"

using dtrun::agent::StallWatch;
using dtrun::test::runUntil;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Report {
  std::int64_t lastSignMs = 0;
  std::chrono::milliseconds quiet{0};
  Clock::time_point at;
};

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TEST_CASE("StallWatch: a group with no sign of life is reported once its timeout passed",
          "[stall]") {
  boost::asio::io_context io;
  std::vector<Report> reports;
  StallWatch watch(
      io, 100ms, [] { return std::optional<Clock::time_point>{}; },
      [&](std::int64_t last, std::chrono::milliseconds quiet) {
        reports.push_back({last, quiet, Clock::now()});
      });
  CHECK_FALSE(watch.secondsQuiet().has_value());  // no group yet
  const auto armedMs = nowMs();
  const auto armedAt = Clock::now();
  watch.arm();
  REQUIRE(runUntil(
      io, [&] { return !reports.empty(); }, 10s));
  CHECK(reports[0].quiet >= 100ms);
  CHECK(reports[0].at - armedAt >= 100ms);
  // The last sign of life is the group's start, on the wall clock.
  CHECK(reports[0].lastSignMs >= armedMs - 50);
  CHECK(reports[0].lastSignMs <= armedMs + 50);
  // Once per group: still quiet, still armed, never reported again until the next arm().
  CHECK(watch.armed());
  REQUIRE(watch.secondsQuiet().has_value());
  CHECK(*watch.secondsQuiet() >= 0.1);
  io.restart();
  io.run_for(300ms);
  CHECK(reports.size() == 1);
  watch.arm();
  REQUIRE(runUntil(
      io, [&] { return reports.size() == 2; }, 10s));
}

TEST_CASE("StallWatch: each sign of life moves the deadline", "[stall]") {
  boost::asio::io_context io;
  std::optional<Clock::time_point> last;
  std::optional<Report> report;
  StallWatch watch(
      io, 150ms, [&] { return last; },
      [&](std::int64_t lastMs, std::chrono::milliseconds quiet) {
        report = Report{lastMs, quiet, Clock::now()};
      });
  const auto armedAt = Clock::now();
  watch.arm();
  // Output 100 ms after the start, then silence: the report comes 150 ms after the output.
  boost::asio::steady_timer output(io, 100ms);
  output.async_wait([&](boost::system::error_code) { last = Clock::now(); });
  REQUIRE(runUntil(
      io, [&] { return report.has_value(); }, 10s));
  REQUIRE(last.has_value());
  CHECK(report->at - *last >= 150ms);
  CHECK(report->at - armedAt >= 250ms);
  CHECK(report->quiet >= 150ms);
}

TEST_CASE("StallWatch: cancelled, or without a timeout, it never reports", "[stall]") {
  boost::asio::io_context io;
  int reports = 0;
  StallWatch off(
      io, std::nullopt, [] { return std::optional<Clock::time_point>{}; },
      [&](std::int64_t, std::chrono::milliseconds) { ++reports; });
  StallWatch cancelled(
      io, 50ms, [] { return std::optional<Clock::time_point>{}; },
      [&](std::int64_t, std::chrono::milliseconds) { ++reports; });
  off.arm();
  cancelled.arm();
  cancelled.cancel();
  CHECK_FALSE(cancelled.secondsQuiet().has_value());
  // Without a timeout the quiet time is still known (the metrics show it).
  REQUIRE(off.secondsQuiet().has_value());
  io.run_for(300ms);  // six of the cancelled watch's timeouts
  CHECK(reports == 0);
}
