#include "agent/log_dir.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/error.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using dtrun::agent::LogDir;
using dtrun::test::TempDir;
using dtrun::test::writeFile;

namespace {

// Sets an environment variable for one scope (tests run one at a time in this process).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(
      std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("LogDir makes torchrun's layout under --log-dir", "[agent][logdir]") {
  TempDir tmp;
  fs::path base = tmp.path() / "logs" / "nested";  // missing parents are created
  LogDir logs(base.string(), "none");
  CHECK(fs::is_directory(base));
  CHECK(logs.baseDir() == base.string());
  CHECK(fs::is_empty(base));  // nothing more until workers start
  CHECK_FALSE(logs.created());
  CHECK(logs.runDir().empty());
  CHECK(logs.errorFilePath(0, 0).empty());
  logs.prepareAttempt(0, 3);
  CHECK(logs.created());
  fs::path run = logs.runDir();
  CHECK(run.parent_path() == base);
  CHECK(std::regex_match(run.filename().string(), std::regex("none_[a-z0-9_]{8}")));
  struct stat st {};
  REQUIRE(::stat(run.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);  // mkdtemp's mode

  CHECK(entries(run) == 1);
  CHECK(entries(run / "attempt_0") == 3);
  for (int lr = 0; lr < 3; ++lr) {
    fs::path rank = run / "attempt_0" / std::to_string(lr);
    CHECK(fs::is_directory(rank));
    CHECK(fs::is_empty(rank));
    CHECK(logs.rankDir(0, lr) == rank.string());
    CHECK(logs.stdoutPath(0, lr) == (rank / "stdout.log").string());
    CHECK(logs.stderrPath(0, lr) == (rank / "stderr.log").string());
    CHECK(logs.errorFilePath(0, lr) == (rank / "error.json").string());
  }
  CHECK(logs.attemptDir(2) == (run / "attempt_2").string());
  CHECK(logs.filteredStdoutPath(1) == (run / "attempt_1" / "filtered_stdout.log").string());
  CHECK(logs.filteredStderrPath(1) == (run / "attempt_1" / "filtered_stderr.log").string());
}

TEST_CASE("LogDir::prepareAttempt starts every attempt from empty dirs", "[agent][logdir]") {
  TempDir tmp;
  LogDir logs(tmp.path().string(), "job");
  logs.prepareAttempt(0, 2);
  writeFile(logs.errorFilePath(0, 1), "{}");
  writeFile(logs.stdoutPath(0, 0), "old");
  fs::create_directories(fs::path(logs.attemptDir(0)) / "5" / "deep");

  logs.prepareAttempt(1, 2);  // a restart: attempt_0 stays for the post-mortem
  CHECK(fs::exists(logs.errorFilePath(0, 1)));
  CHECK(entries(logs.attemptDir(1)) == 2);

  logs.prepareAttempt(0, 2);  // the same attempt again (membership change): wiped
  CHECK(entries(logs.attemptDir(0)) == 2);
  CHECK_FALSE(fs::exists(logs.errorFilePath(0, 1)));
  CHECK_FALSE(fs::exists(logs.stdoutPath(0, 0)));
  CHECK(fs::is_empty(logs.rankDir(0, 0)));
}

TEST_CASE("LogDir gives each agent its own run dir", "[agent][logdir]") {
  TempDir tmp;
  LogDir a(tmp.path().string(), "r");
  LogDir b(tmp.path().string(), "r");
  a.prepareAttempt(0, 1);
  b.prepareAttempt(0, 1);
  CHECK(a.runDir() != b.runDir());
  CHECK(entries(tmp.path()) == 2);
}

TEST_CASE("LogDir without --log-dir uses a torchelastic_ temp dir", "[agent][logdir]") {
  TempDir tmp;
  ScopedEnv env("TMPDIR", tmp.path().string());
  for (const std::optional<std::string>& base :
       {std::optional<std::string>(), std::optional<std::string>("")}) {
    const auto before = entries(tmp.path());
    LogDir logs(base, "abc");
    CHECK(logs.baseDir().empty());  // made with the first attempt, not before
    CHECK(entries(tmp.path()) == before);
    logs.prepareAttempt(0, 1);
    fs::path b = logs.baseDir();
    CHECK(b.parent_path() == tmp.path());
    CHECK(std::regex_match(b.filename().string(), std::regex("torchelastic_[a-z0-9_]{8}")));
    CHECK(fs::path(logs.runDir()).parent_path() == b);
    CHECK(std::regex_match(fs::path(logs.runDir()).filename().string(),
                           std::regex("abc_[a-z0-9_]{8}")));
  }
  CHECK(entries(tmp.path()) == 2);
}

TEST_CASE("LogDir removes its own temp dir only when nothing was written", "[agent][logdir]") {
  TempDir tmp;
  ScopedEnv env("TMPDIR", tmp.path().string());
  LogDir empty(std::nullopt, "job");
  empty.prepareAttempt(0, 2);
  CHECK(empty.removeIfEmpty());
  CHECK_FALSE(fs::exists(empty.baseDir()));

  LogDir used(std::nullopt, "job");
  used.prepareAttempt(0, 2);
  std::ofstream(used.errorFilePath(0, 1)) << "{}";
  CHECK_FALSE(used.removeIfEmpty());
  CHECK(fs::exists(used.errorFilePath(0, 1)));

  // A --log-dir the user gave is never removed, even when empty.
  TempDir given;
  LogDir mine(given.path().string(), "job");
  mine.prepareAttempt(0, 1);
  std::ofstream(mine.stdoutPath(0, 0)) << "x";
  mine.prepareAttempt(1, 2);  // a restart: attempt_1 stays empty, attempt_0 holds a log
  CHECK_FALSE(mine.removeIfEmpty());
  CHECK(fs::exists(mine.stdoutPath(0, 0)));
  CHECK_FALSE(fs::exists(mine.attemptDir(1)));  // what stayed empty is taken back
  CHECK(fs::is_directory(given.path()));

  // An agent that never started workers made nothing and leaves nothing.
  LogDir never(std::nullopt, "job");
  CHECK_FALSE(never.removeIfEmpty());
  LogDir neverGiven(given.path().string(), "job2");
  CHECK_FALSE(neverGiven.removeIfEmpty());
  CHECK(entries(given.path()) == 1);  // only mine's run dir
}

TEST_CASE("LogDir rejects a --log-dir that is a file", "[agent][logdir]") {
  TempDir tmp;
  fs::path file = tmp.path() / "plain";
  writeFile(file, "x");
  try {
    LogDir logs(file.string(), "r");
    FAIL("no exception");
  } catch (const dtrun::ConfigError& e) {
    CHECK(std::string(e.what()).find(file.string()) != std::string::npos);
  }
  // A file in the middle of the path too.
  CHECK_THROWS_AS(LogDir((file / "sub").string(), "r"), dtrun::ConfigError);
}

TEST_CASE("LogDir with /dev/null makes nothing", "[agent][logdir]") {
  TempDir tmp;
  ScopedEnv env("TMPDIR", tmp.path().string());
  LogDir logs(std::string("/dev/null"), "r");
  CHECK(logs.disabled());
  CHECK(logs.runDir().empty());
  logs.prepareAttempt(0, 4);
  CHECK(logs.errorFilePath(0, 0).empty());
  CHECK(logs.stdoutPath(0, 0).empty());
  CHECK(logs.stderrPath(0, 0).empty());
  CHECK(logs.filteredStdoutPath(0).empty());
  CHECK(fs::is_empty(tmp.path()));  // not even a temp dir
}
