#include "agent/event_log.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "tests/support/test_support.h"

using dtrun::agent::EventLog;
using dtrun::agent::formatUtcIso8601Ms;
using dtrun::test::readFile;
using dtrun::test::TempDir;
using namespace std::chrono;

namespace {

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// 2026-11-30T04:14:28.123Z
const system_clock::time_point kWhen{milliseconds(1796012068123)};

}  // namespace

TEST_CASE("formatUtcIso8601Ms", "[agent][eventlog]") {
  CHECK(formatUtcIso8601Ms(kWhen) == "2026-11-30T04:14:28.123Z");
  CHECK(formatUtcIso8601Ms(system_clock::time_point{}) == "1970-01-01T00:00:00.000Z");
  CHECK(formatUtcIso8601Ms(system_clock::time_point{milliseconds(-1)}) ==
        "1969-12-31T23:59:59.999Z");
}

TEST_CASE("EventLog::formatLine puts event, time and ts first", "[agent][eventlog]") {
  nlohmann::json fields = {
      {"pid", 4242}, {"local_rank", 1}, {"exit_code", -9}, {"event", "ignored"}, {"ts", "ignored"}};
  CHECK(EventLog::formatLine("worker_exited", fields, kWhen) ==
        R"({"event":"worker_exited","time":"2026-11-30T04:14:28.123Z","ts":1796012068.123,)"
        R"("exit_code":-9,"local_rank":1,"pid":4242})");
  CHECK(EventLog::formatLine("shutdown", nlohmann::json::object(), kWhen) ==
        R"({"event":"shutdown","time":"2026-11-30T04:14:28.123Z","ts":1796012068.123})");
  // A non-object is kept, not dropped; an invalid UTF-8 byte becomes U+FFFD (in UTF-8), so the
  // line stays one valid JSON object.
  CHECK(EventLog::formatLine("x", 5, kWhen).find(R"("value":5)") != std::string::npos);
  std::string line;
  REQUIRE_NOTHROW(line = EventLog::formatLine("x", {{"path", "bad\xff"}}, kWhen));
  CHECK(line.find("\"path\":\"bad\xef\xbf\xbd\"") != std::string::npos);
  CHECK(line.find('\xff') == std::string::npos);
  CHECK(nlohmann::json::parse(line)["path"] == "bad\xef\xbf\xbd");
}

TEST_CASE("EventLog appends one line per event", "[agent][eventlog]") {
  TempDir dir;
  auto path = (dir.path() / "events.jsonl").string();
  {
    EventLog log(path);
    REQUIRE(log.enabled());
    CHECK(log.record("rendezvous_done", {{"round", 0}, {"world_size", 2}}));
    CHECK(log.record("worker_started", {{"pid", 10}, {"local_rank", 0}}));
  }
  {
    EventLog again(path);  // a second agent or run appends, never truncates
    EventLog moved = std::move(again);
    CHECK_FALSE(again.enabled());
    CHECK(moved.record("shutdown"));
  }
  auto lines = splitLines(readFile(path));
  REQUIRE(lines.size() == 3);
  auto first = nlohmann::json::parse(lines[0]);
  CHECK(first["event"] == "rendezvous_done");
  CHECK(first["world_size"] == 2);
  CHECK(first["time"].get<std::string>().size() == 24);
  auto ts = first["ts"].get<double>();
  auto now = duration<double>(system_clock::now().time_since_epoch()).count();
  CHECK(ts <= now);
  CHECK(ts > now - 600);
  CHECK(nlohmann::json::parse(lines[1])["pid"] == 10);
  CHECK(nlohmann::json::parse(lines[2])["event"] == "shutdown");
}

TEST_CASE("EventLog disabled is a no-op", "[agent][eventlog]") {
  EventLog none;
  CHECK_FALSE(none.enabled());
  CHECK_FALSE(none.record("worker_started", {{"pid", 1}}));
  EventLog empty("");
  CHECK_FALSE(empty.enabled());
  CHECK_FALSE(empty.record("shutdown"));
}

TEST_CASE("EventLog names a file it cannot open", "[agent][eventlog]") {
  TempDir dir;
  auto bad = (dir.path() / "missing" / "events.jsonl").string();
  try {
    EventLog log(bad);
    FAIL("no exception");
  } catch (const dtrun::ConfigError& e) {
    CHECK(std::string(e.what()).find(bad) != std::string::npos);
  }
  CHECK_THROWS_AS(EventLog(dir.path().string()), dtrun::ConfigError);  // a directory
}

TEST_CASE("EventLog lines from concurrent processes never interleave", "[agent][eventlog]") {
  TempDir dir;
  auto path = (dir.path() / "events.jsonl").string();
  constexpr int kWriters = 6;
  constexpr int kLines = 300;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        EventLog log(path);
        std::string padding(3000 + 500 * w, static_cast<char>('a' + w));  // > PIPE_BUF-ish
        for (int i = 0; i < kLines; ++i) {
          if (!log.record("tick", {{"writer", w}, {"i", i}, {"pad", padding}})) rc = 1;
        }
      } catch (...) {
        rc = 2;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  auto lines = splitLines(readFile(path));
  REQUIRE(lines.size() == kWriters * kLines);
  std::vector<int> next(kWriters, 0);
  for (const auto& line : lines) {
    auto j = nlohmann::json::parse(line);  // throws (fails) on a torn line
    int w = j["writer"];
    CHECK(j["i"] == next[w]);  // each writer's lines in its own order
    ++next[w];
    CHECK(j["pad"].get<std::string>() == std::string(3000 + 500 * w, static_cast<char>('a' + w)));
  }
}

TEST_CASE("EventLog with a console: every line there too, one write each", "[agent][eventlog]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  TempDir dir;
  const auto path = (dir.path() / "events.jsonl").string();
  {
    EventLog both(path, fds[1]);
    CHECK(both.enabled());
    CHECK(both.record("worker_started", {{"rank", 0}}, kWhen));
    EventLog consoleOnly("", fds[1]);
    CHECK(consoleOnly.enabled());
    CHECK(consoleOnly.record("shutdown", {{"reason", "succeeded"}}, kWhen));
  }
  ::close(fds[1]);  // the logs never close the console: this is the last writer
  std::string console;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) console.append(buf, n);
  ::close(fds[0]);
  const std::string started = EventLog::formatLine("worker_started", {{"rank", 0}}, kWhen);
  const std::string shutdown = EventLog::formatLine("shutdown", {{"reason", "succeeded"}}, kWhen);
  CHECK(console == started + "\n" + shutdown + "\n");
  CHECK(readFile(path) == started + "\n");
}

TEST_CASE("EventLog refuses a planted symlink and keeps events to the user", "[agent][eventlog]") {
  TempDir dir;
  const auto victim = dir.path() / "victim";
  { std::ofstream(victim) << "precious\n"; }
  const auto path = dir.path() / "events.jsonl";
  std::filesystem::create_symlink(victim, path);
  CHECK_THROWS_WITH(EventLog(path.string()), Catch::Matchers::Contains("--event-log") &&
                                                 Catch::Matchers::Contains("symbolic link"));
  CHECK(readFile(victim.string()) == "precious\n");
  std::filesystem::remove(path);
  { EventLog log(path.string()); }
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}
