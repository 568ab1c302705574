// End-to-end test helpers: start the real dtrun binary on a command line, wait for it with a
// deadline, send it signals, and read what its workers (tests/e2e/e2e_worker.cpp) and its event
// log left in the test's directory. Every Launch gets its own directory, TMPDIR and free port
// (--standalone), so tests run in parallel.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::e2e {

/// The dtrun binary under test and the helper worker (paths from CMake).
std::string dtrunBin();
std::string workerBin();

/// How a process ended: `code` for a normal exit, else `signal`.
struct Exit {
  int code = -1;
  int signal = 0;
  bool exited() const { return signal == 0; }
};

/// Plenty for anything on a loaded 2-core machine; only ever a limit, never an expectation.
inline constexpr std::chrono::seconds kDeadline{60};

/// One dtrun process. Its stdout and stderr go to files in `dir`; its environment is the
/// test's, without PET_*, DTRUN_*, TORCHELASTIC_* and OMP_NUM_THREADS (so the caller's shell
/// cannot change the outcome), plus TMPDIR=dir (dtrun's default log directory lands there),
/// E2E_DIR=dir/w (the workers' files) and `env` (a nullopt value removes the variable).
/// The destructor SIGKILLs and reaps it if it still runs.
class Launch {
 public:
  Launch(const std::vector<std::string>& args, const std::filesystem::path& dir,
         const std::map<std::string, std::optional<std::string>>& env = {});
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  pid_t pid() const { return pid_; }
  /// Waits until dtrun exits (reaping it) or `timeout` passes (nullopt). Blocking.
  std::optional<Exit> wait(std::chrono::milliseconds timeout = kDeadline);
  /// kill(pid, signo) while it has not been reaped.
  void signal(int signo);
  /// What dtrun wrote so far.
  std::string out() const;
  std::string err() const;
  /// The directory the workers write to ($E2E_DIR).
  std::filesystem::path workDir() const { return dir_ / "w"; }

 private:
  std::filesystem::path dir_;
  std::filesystem::path outPath_;
  std::filesystem::path errPath_;
  pid_t pid_ = -1;
  std::optional<Exit> exit_;
};

/// Runs dtrun to the end (FAILs the test when it outlives `timeout`).
struct Finished {
  Exit exit;
  std::string out;
  std::string err;
};
Finished runDtrun(const std::vector<std::string>& args, const std::filesystem::path& dir,
                  const std::map<std::string, std::optional<std::string>>& env = {},
                  std::chrono::milliseconds timeout = kDeadline);

/// dtrun's arguments to run e2e_worker with `steps`: `options`, --no-python, the worker, steps.
std::vector<std::string> withWorker(std::vector<std::string> options,
                                    const std::vector<std::string>& steps);

/// Every JSON line of an --event-log file (empty when it does not exist).
std::vector<nlohmann::json> readEvents(const std::filesystem::path& file);
/// The events named `name`, in file order.
std::vector<nlohmann::json> eventsNamed(const std::vector<nlohmann::json>& all,
                                        const std::string& name);

/// A worker file of e2e_worker: <dir>/<what>.<restart>.<localRank>.
std::filesystem::path workerFile(const std::filesystem::path& dir, const std::string& what,
                                 int restart, int localRank);
/// Waits until that file exists; false after `timeout`.
bool waitForFile(const std::filesystem::path& p, std::chrono::milliseconds timeout = kDeadline);
/// The first number in a worker file (a pid), or -1.
int readPid(const std::filesystem::path& p);
/// The environment an `env` step wrote.
std::map<std::string, std::string> readEnvFile(const std::filesystem::path& p);
/// The signal numbers a `trap`/`onsig` handler recorded, in order.
std::vector<int> readSignals(const std::filesystem::path& p);

/// The test's own environment as a map (what dtrun will pass on to its workers, minus what
/// Launch removes).
std::map<std::string, std::string> launchBaseEnv();

/// Pids of the live (non-zombie) children of `pid`, from /proc/<pid>/task/*/children.
std::vector<int> childrenOf(pid_t pid);
/// The process's name (/proc/<pid>/comm), "" when it is gone.
std::string processName(pid_t pid);

/// torch's ChildFailedError block in dtrun's stderr: from the first line made only of '=' to
/// the next identical line, both included; empty when there is none.
std::vector<std::string> failureReport(const std::string& stderrText);

/// The lines of `text`, without terminators.
std::vector<std::string> splitLines(const std::string& text);

}  // namespace dtrun::e2e
