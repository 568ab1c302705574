// Every exit code 0..255 and the deaths by signal, each in a dtrun run of its own, reported
// as they happened: dtrun's exit code (0 or 1), the event log and the report's exitcode line.
// The runs go four at a time; each has its own directory and free port.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <thread>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

struct Outcome {
  std::optional<Exit> exit;
  std::string err;
  std::vector<nlohmann::json> events;
  int workerPid = -1;
  std::string error;  // what went wrong in the run itself (no assertions off the main thread)
};

// Runs `steps(i)` for i in [0, n) in dtrun, `parallel` at a time; Catch2 is not thread-safe,
// so the threads only collect and the caller checks.
std::vector<Outcome> runMany(int n, const std::function<std::vector<std::string>(int)>& steps,
                             int parallel = 4) {
  std::vector<Outcome> out(static_cast<std::size_t>(n));
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i = next++; i < n; i = next++) {
      Outcome& o = out[static_cast<std::size_t>(i)];
      try {
        test::TempDir tmp;
        const auto events = tmp.path() / "events.jsonl";
        Launch dtrun(
            withWorker({"--standalone", "--nproc-per-node=1", "--event-log", events.string()},
                       steps(i)),
            tmp.path());
        o.exit = dtrun.wait();
        o.err = dtrun.err();
        o.events = readEvents(events);
        o.workerPid = readPid(workerFile(dtrun.workDir(), "pid", 0, 0));
      } catch (const std::exception& e) {
        o.error = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  return out;
}

// The report's exitcode and traceback lines ("" when absent).
std::string reportLine(const std::string& err, const std::string& start) {
  for (const auto& l : splitLines(err)) {
    if (l.rfind(start, 0) == 0) return l;
  }
  return "";
}

}  // namespace

TEST_CASE("exit codes 0..255 are reported as they are", "[e2e]") {
  auto outcomes = runMany(256, [](int code) {
    return std::vector<std::string>{"pid", "exit=" + std::to_string(code)};
  });
  for (int code = 0; code < 256; ++code) {
    const Outcome& o = outcomes[static_cast<std::size_t>(code)];
    INFO("worker exit code " << code << "\ndtrun stderr:\n" << o.err);
    REQUIRE(o.error.empty());
    REQUIRE(o.exit);
    REQUIRE(o.exit->exited());
    CHECK(o.exit->code == (code == 0 ? 0 : 1));
    auto exits = eventsNamed(o.events, "worker_exited");
    REQUIRE(exits.size() == 1);
    CHECK(exits[0]["exit_code"] == code);
    CHECK(exits[0]["signal"].is_null());
    CHECK(exits[0]["pid"] == o.workerPid);
    // What the agent decided, from its record: success, or a failure (and its report).
    auto shutdown = eventsNamed(o.events, "shutdown");
    REQUIRE(shutdown.size() == 1);
    CHECK(shutdown[0]["reason"] == (code == 0 ? "succeeded" : "failed"));
    if (code == 0) {
      CHECK(o.err.find("FAILED") == std::string::npos);
    } else {
      CHECK(reportLine(o.err, "  exitcode  : ") == "  exitcode  : " + std::to_string(code) +
                                                       " (pid: " + std::to_string(o.workerPid) +
                                                       ")");
    }
  }
}

TEST_CASE("deaths by signal are reported as -N with the signal's name", "[e2e]") {
  // Every signal whose default action ends the process (Python's names, as torch prints them).
  const std::vector<std::pair<int, std::string>> signals{
      {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
      {SIGILL, "SIGILL"},       {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},
      {SIGBUS, "SIGBUS"},       {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
      {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
      {SIGSTKFLT, "SIGSTKFLT"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
      {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGIO, "SIGIO"},
      {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},   {SIGRTMIN, "SIGRTMIN"},
      {SIGRTMAX, "SIGRTMAX"}};
  auto outcomes = runMany(static_cast<int>(signals.size()), [&](int i) {
    return std::vector<std::string>{
        "pid", "raise=" + std::to_string(signals[static_cast<std::size_t>(i)].first)};
  });
  for (std::size_t i = 0; i < signals.size(); ++i) {
    const auto& [sig, name] = signals[i];
    const Outcome& o = outcomes[i];
    INFO("worker killed by " << name << "\ndtrun stderr:\n" << o.err);
    REQUIRE(o.error.empty());
    REQUIRE(o.exit);
    CHECK(o.exit->code == 1);
    auto exits = eventsNamed(o.events, "worker_exited");
    REQUIRE(exits.size() == 1);
    CHECK(exits[0]["signal"] == sig);
    CHECK(exits[0]["exit_code"].is_null());
    auto shutdown = eventsNamed(o.events, "shutdown");
    REQUIRE(shutdown.size() == 1);
    CHECK(shutdown[0]["reason"] == "failed");
    const std::string pid = std::to_string(o.workerPid);
    CHECK(reportLine(o.err, "  exitcode  : ") ==
          "  exitcode  : -" + std::to_string(sig) + " (pid: " + pid + ")");
    CHECK(reportLine(o.err, "  traceback : ") ==
          "  traceback : Signal " + std::to_string(sig) + " (" + name + ") received by PID " + pid);
  }
}

}  // namespace dtrun::e2e
