// Test helpers: poll-with-deadline instead of sleeps (tini's busy_wait), temporary directories,
// and a way to run a command and capture its output.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

/// Ends the current Catch2 test case as skipped, saying why on its output: ctest reports it as
/// skipped (the SKIP_REGULAR_EXPRESSION of dtrun_catch_tests in tests/CMakeLists.txt), and
/// -w NoAssertions does not take it for a case that asserts nothing.
#define DTRUN_SKIP(why)       \
  do {                        \
    WARN("SKIPPED: " << why); \
    SUCCEED("skipped");       \
    return;                   \
  } while (false)

namespace dtrun::test {

/// Polls `cond` every few milliseconds until it is true (returns true) or `timeout` passes
/// (returns false). Deadlines are generous: the machines are shared and noisy.
bool pollUntil(const std::function<bool()>& cond,
               std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// Ends the test process with exit status 1, after saying on stderr that `what` did not finish
/// within `timeout`, unless destroyed first. For the calls that have no deadline of their own
/// (a wait without a timeout): a broken store then fails its test in seconds, instead of hanging
/// until ctest's timeout.
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds timeout, std::string what);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable disarmed_;
  bool done_ = false;
  std::thread thread_;  // last: it starts once the members it uses exist
};

/// `vars` with `overlay` applied (a value replaces or adds, nullopt removes), as the "KEY=value"
/// entries of a child's environment.
std::vector<std::string> envEntries(
    std::map<std::string, std::string> vars,
    const std::map<std::string, std::optional<std::string>>& overlay);

/// A fresh directory under $TMPDIR, removed with everything in it when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Whole contents of a file ("" when it does not exist).
std::string readFile(const std::filesystem::path& p);
void writeFile(const std::filesystem::path& p, const std::string& contents);

/// True while `pid` exists and is not a zombie.
bool processAlive(int pid);

}  // namespace dtrun::test
