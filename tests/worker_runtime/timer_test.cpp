// The native timer client (dtrun/worker/timer.h and its C API) against a FIFO this test reads
// itself: the lines must be torch's FileTimerRequest.to_json(), byte for byte where torch fixes
// the bytes. (Against dtrun's server: tests/agent; against torch's server: tests/interop.)
#include "dtrun/worker/timer.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "dtrun/worker/c_api.h"
#include "tests/support/test_support.h"

using dtrun::worker::formatTimerRequest;
using dtrun::worker::TimerClient;
using dtrun::worker::TimerScope;
using namespace std::chrono_literals;

namespace {

// A FIFO read by the test: O_RDWR, so it always has a reader and never reports EOF.
struct Fifo {
  dtrun::test::TempDir dir;
  std::string path = (dir.path() / "timer.fifo").string();
  int fd = -1;
  Fifo() {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    REQUIRE(fd >= 0);
  }
  ~Fifo() { ::close(fd); }
  // Every complete line written so far (the client's writes are done when its call returns).
  std::vector<nlohmann::json> lines() {
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) all.append(buf, static_cast<std::size_t>(n));
    std::vector<nlohmann::json> out;
    std::size_t start = 0;
    for (auto nl = all.find('\n'); nl != std::string::npos; nl = all.find('\n', start)) {
      out.push_back(nlohmann::json::parse(all.substr(start, nl - start)));
      start = nl + 1;
    }
    CHECK(start == all.size());  // nothing but whole lines
    return out;
  }
};

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct EnvGuard {
  std::string name;
  explicit EnvGuard(const char* n, const char* value) : name(n) {
    if (value) {
      ::setenv(n, value, 1);
    } else {
      ::unsetenv(n);
    }
  }
  ~EnvGuard() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("timer client: requests are torch's FileTimerRequest.to_json()", "[timer]") {
  // The strings torch 1.13 writes for the same values.
  CHECK(
      formatTimerRequest(12, "a", 1796103379.4112952, 9) ==
      R"({"version": 1, "pid": 12, "scope_id": "a", "expiration_time": 1796103379.4112952, "signal": 9})");
  CHECK(formatTimerRequest(12, "a", -1, 0) ==
        R"({"version": 1, "pid": 12, "scope_id": "a", "expiration_time": -1, "signal": 0})");
  CHECK(
      formatTimerRequest(7, "train.py#12", 1700000000.0, 15) ==
      R"({"version": 1, "pid": 7, "scope_id": "train.py#12", "expiration_time": 1700000000.0, "signal": 15})");
  // Python's repr() of other floats.
  CHECK(formatTimerRequest(1, "s", 0.001, 9).find(R"("expiration_time": 0.001,)") !=
        std::string::npos);
  CHECK(formatTimerRequest(1, "s", 1e22, 9).find(R"("expiration_time": 1e+22,)") !=
        std::string::npos);
  CHECK(formatTimerRequest(1, "s", 1.5e-5, 9).find(R"("expiration_time": 1.5e-05,)") !=
        std::string::npos);
  CHECK(formatTimerRequest(1, "s", 0, 9).find(R"("expiration_time": 0.0,)") != std::string::npos);
  // json.dumps escapes quotes, control characters and everything past ASCII.
  CHECK(
      formatTimerRequest(1, "q\"\n\xc3\xa9", 1.5, 9) ==
      R"({"version": 1, "pid": 1, "scope_id": "q\"\n\u00e9", "expiration_time": 1.5, "signal": 9})");
}

TEST_CASE("timer client: acquire, release and the RAII scope write one line each", "[timer]") {
  Fifo fifo;
  TimerClient client(fifo.path);
  client.acquire("step", std::chrono::system_clock::now() + 60s);
  client.release("step");
  {
    TimerScope scope(client, "block", 2.5s);
    CHECK(scope.scope() == "block");
  }
  auto lines = fifo.lines();
  REQUIRE(lines.size() == 4);
  CHECK(lines[0]["version"] == 1);
  CHECK(lines[0]["pid"] == ::getpid());
  CHECK(lines[0]["scope_id"] == "step");
  CHECK(lines[0]["expiration_time"].get<double>() == Approx(now() + 60).margin(5));
  CHECK(lines[0]["signal"] == 9);
  CHECK(lines[1]["scope_id"] == "step");
  CHECK(lines[1]["expiration_time"] == -1);
  CHECK(lines[1]["signal"] == 0);
  CHECK(lines[2]["scope_id"] == "block");
  CHECK(lines[2]["expiration_time"].get<double>() == Approx(now() + 2.5).margin(5));
  CHECK(lines[3]["scope_id"] == "block");
  CHECK(lines[3]["expiration_time"] == -1);

  // Another signal, or none (report only).
  TimerClient(fifo.path, SIGTERM).acquire("t", std::chrono::system_clock::now());
  TimerClient(fifo.path, 0).acquire("z", std::chrono::system_clock::now());
  lines = fifo.lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["signal"] == SIGTERM);
  CHECK(lines[1]["signal"] == 0);
  CHECK(lines[1]["expiration_time"].get<double>() > 0);  // an acquire, never a release
}

TEST_CASE("timer client: TORCHELASTIC_TIMER_FILE and torch's unnamed scope", "[timer]") {
  Fifo fifo;
  {
    EnvGuard unset("TORCHELASTIC_TIMER_FILE", nullptr);
    CHECK_THROWS_WITH(TimerClient::fromEnvironment(),
                      Catch::Contains("TORCHELASTIC_TIMER_FILE is not set"));
  }
  EnvGuard set("TORCHELASTIC_TIMER_FILE", fifo.path.c_str());
  CHECK(TimerClient::fromEnvironment().path() == fifo.path);
  const int line = __LINE__ + 2;
  {
    TimerScope scope(30s);  // named after this file and line, as torch's expires() names it
    CHECK(scope.scope() == std::string(__FILE__) + "#" + std::to_string(line));
  }
  { TimerScope named("named", 30s); }
  auto lines = fifo.lines();
  REQUIRE(lines.size() == 4);
  CHECK(lines[0]["scope_id"] == std::string(__FILE__) + "#" + std::to_string(line));
  CHECK(lines[2]["scope_id"] == "named");
}

TEST_CASE("timer client: no server, a stuck server, an oversized request", "[timer]") {
  dtrun::test::TempDir dir;
  const std::string missing = (dir.path() / "missing").string();
  CHECK_THROWS_AS(TimerClient(missing).acquire("s", std::chrono::system_clock::now()),
                  dtrun::ConnectionError);
  // A FIFO nobody reads (the launcher died): torch's BrokenPipeError, without blocking.
  const std::string orphan = (dir.path() / "orphan.fifo").string();
  REQUIRE(::mkfifo(orphan.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(TimerClient(orphan).release("s"),
                    Catch::Contains("no file-timer server reads " + orphan));

  // A server that stopped reading: its buffer fills, and the client gives up after a bound.
  Fifo stuck;
  std::string junk(4096, 'x');
  while (::write(stuck.fd, junk.data(), junk.size()) > 0) {
  }
  CHECK_THROWS_AS(TimerClient(stuck.path).acquire("s", std::chrono::system_clock::now()),
                  dtrun::TimeoutError);

  Fifo fifo;
  CHECK_THROWS_WITH(
      TimerClient(fifo.path).acquire(std::string(5000, 's'), std::chrono::system_clock::now()),
      Catch::Contains("PIPE_BUF"));
  CHECK(fifo.lines().empty());
}

TEST_CASE("timer client: the C API", "[timer]") {
  Fifo fifo;
  dtrun_timer* t = nullptr;
  REQUIRE(dtrun_timer_open(&t, fifo.path.c_str(), 9) == DTRUN_OK);
  CHECK(dtrun_timer_acquire(t, "c-step", 10.0) == DTRUN_OK);
  CHECK(dtrun_timer_release(t, "c-step") == DTRUN_OK);
  CHECK(dtrun_timer_acquire(t, nullptr, 1.0) == DTRUN_ERR_CONFIG);
  CHECK_THAT(dtrun_timer_error(t), Catch::Contains("scope is NULL"));
  dtrun_timer_close(t);
  auto lines = fifo.lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["scope_id"] == "c-step");
  CHECK(lines[0]["expiration_time"].get<double>() == Approx(now() + 10).margin(5));
  CHECK(lines[1]["expiration_time"] == -1);

  {
    EnvGuard unset("TORCHELASTIC_TIMER_FILE", nullptr);
    dtrun_timer* none = nullptr;
    CHECK(dtrun_timer_open(&none, nullptr, 9) == DTRUN_ERR_CONFIG);
    CHECK_THAT(dtrun_timer_error(none), Catch::Contains("TORCHELASTIC_TIMER_FILE"));
    CHECK(dtrun_timer_acquire(none, "s", 1.0) == DTRUN_ERR_CONFIG);
    dtrun_timer_close(none);
  }
  dtrun::test::TempDir dir;
  const std::string orphan = (dir.path() / "orphan.fifo").string();
  REQUIRE(::mkfifo(orphan.c_str(), 0600) == 0);
  dtrun_timer* gone = nullptr;
  REQUIRE(dtrun_timer_open(&gone, orphan.c_str(), 9) == DTRUN_OK);
  CHECK(dtrun_timer_acquire(gone, "s", 1.0) == DTRUN_ERR_CONNECTION);
  dtrun_timer_close(gone);
}
