#include "tests/e2e/e2e_support.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "tests/support/test_support.h"

extern char** environ;

namespace dtrun::e2e {
namespace fs = std::filesystem;

std::string dtrunBin() { return DTRUN_BIN; }
std::string workerBin() { return E2E_WORKER_BIN; }

std::map<std::string, std::string> launchBaseEnv() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    std::string key(*e, static_cast<std::size_t>(eq - *e));
    if (key.rfind("PET_", 0) == 0 || key.rfind("DTRUN_", 0) == 0 ||
        key.rfind("TORCHELASTIC_", 0) == 0 || key == "OMP_NUM_THREADS" || key == "LOGLEVEL" ||
        key == "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" || key == "PYTHON_EXEC" ||
        key == "TORCH_DISABLE_SHARE_RDZV_TCP_STORE") {
      continue;
    }
    env[key] = eq + 1;
  }
  return env;
}

Launch::Launch(const std::vector<std::string>& args, const fs::path& dir,
               const std::map<std::string, std::optional<std::string>>& env)
    : dir_(dir), outPath_(dir / "dtrun.out"), errPath_(dir / "dtrun.err") {
  fs::create_directories(dir_ / "w");
  auto vars = launchBaseEnv();
  vars["TMPDIR"] = dir_.string();
  vars["E2E_DIR"] = (dir_ / "w").string();
  std::vector<std::string> envStrings = test::envEntries(std::move(vars), env);
  std::vector<char*> envp;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argStrings{dtrunBin()};
  argStrings.insert(argStrings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argStrings) argv.push_back(s.data());
  argv.push_back(nullptr);

  // posix_spawn: safe from the threads some tests use. dtrun gets a clean signal state and a
  // process group of its own, as it would from a shell.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, outPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, errPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  int rc = ::posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw std::runtime_error("cannot start " + argStrings[0] + ": " + std::strerror(rc));
  }
}

Launch::~Launch() {
  if (pid_ > 0 && !exit_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::optional<Exit> Launch::wait(std::chrono::milliseconds timeout) {
  if (exit_) return exit_;
  test::pollUntil(
      [&] {
        int status = 0;
        pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r != pid_) return false;
        Exit e;
        if (WIFSIGNALED(status)) {
          e.signal = WTERMSIG(status);
        } else {
          e.code = WEXITSTATUS(status);
        }
        exit_ = e;
        return true;
      },
      timeout);
  return exit_;
}

void Launch::signal(int signo) {
  if (!exit_) ::kill(pid_, signo);
}

std::string Launch::out() const { return test::readFile(outPath_); }
std::string Launch::err() const { return test::readFile(errPath_); }

Finished runDtrun(const std::vector<std::string>& args, const fs::path& dir,
                  const std::map<std::string, std::optional<std::string>>& env,
                  std::chrono::milliseconds timeout) {
  Launch launch(args, dir, env);
  auto exit = launch.wait(timeout);
  if (!exit) {
    FAIL("dtrun did not finish within " << timeout.count() << " ms; stderr:\n" << launch.err());
  }
  return Finished{*exit, launch.out(), launch.err()};
}

std::vector<std::string> withWorker(std::vector<std::string> options,
                                    const std::vector<std::string>& steps) {
  options.push_back("--no-python");
  options.push_back(workerBin());
  options.insert(options.end(), steps.begin(), steps.end());
  return options;
}

std::vector<nlohmann::json> readEvents(const fs::path& file) {
  std::vector<nlohmann::json> events;
  for (const auto& line : splitLines(test::readFile(file))) {
    if (!line.empty()) events.push_back(nlohmann::json::parse(line));
  }
  return events;
}

std::vector<nlohmann::json> eventsNamed(const std::vector<nlohmann::json>& all,
                                        const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& e : all) {
    if (e.value("event", "") == name) out.push_back(e);
  }
  return out;
}

fs::path workerFile(const fs::path& dir, const std::string& what, int restart, int localRank) {
  return dir / (what + "." + std::to_string(restart) + "." + std::to_string(localRank));
}

bool waitForFile(const fs::path& p, std::chrono::milliseconds timeout) {
  return test::pollUntil([&] { return fs::exists(p); }, timeout);
}

int readPid(const fs::path& p) {
  std::istringstream in(test::readFile(p));
  int pid = -1;
  in >> pid;
  return pid;
}

std::map<std::string, std::string> readEnvFile(const fs::path& p) {
  std::map<std::string, std::string> env;
  std::string all = test::readFile(p);
  std::size_t start = 0;
  while (start < all.size()) {
    std::size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    std::string entry = all.substr(start, end - start);
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    start = end + 1;
  }
  return env;
}

std::vector<int> readSignals(const fs::path& p) {
  std::vector<int> out;
  std::istringstream in(test::readFile(p));
  int s = 0;
  while (in >> s) out.push_back(s);
  return out;
}

std::vector<int> childrenOf(pid_t pid) {
  std::vector<int> out;
  fs::path task = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : fs::directory_iterator(task, ec)) {
    std::istringstream in(test::readFile(t.path() / "children"));
    int child = 0;
    while (in >> child) {
      if (test::processAlive(child)) out.push_back(child);
    }
  }
  return out;
}

std::string processName(pid_t pid) {
  std::string name = test::readFile("/proc/" + std::to_string(pid) + "/comm");
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

std::vector<std::string> failureReport(const std::string& stderrText) {
  std::vector<std::string> block;
  for (const auto& l : splitLines(stderrText)) {
    const bool border = !l.empty() && l.find_first_not_of('=') == std::string::npos;
    if (block.empty() && !border) continue;
    block.push_back(l);
    if (block.size() > 1 && l == block.front()) break;
  }
  return block;
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace dtrun::e2e
