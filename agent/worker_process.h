// WorkerProcess: one worker, started with common/spawn.h and fenced in its own process group.
//
// The child leads its own process group (tini's rule: signals and kills reach its whole tree)
// and has PR_SET_PDEATHSIG(SIGKILL) (a killed agent takes its workers with it); spawnProcess
// resets every signal disposition and the mask and closes every descriptor but the streams and
// those the user passed. Exits are events: the pidfd becomes readable and the io_context runs
// the handler; nothing polls. Owned by WorkerGroup; not copyable.
//
//   spawn --> running --(exit)--> exited
//                |                  ^
//                +--stop(): SIGTERM + SIGCONT to the group, grace, SIGKILL to the group, grace
//                           again, then given up on (abandoned: it counts as exited)
//
// Every wait of a stop is bounded: a SIGSTOPped group gets SIGCONT with the signal (as systemd
// does), since a stopped process acts on nothing but SIGKILL; and a process that SIGKILL does
// not end either (state D: a frozen cgroup, a driver, a dead NFS server) is given up on after a
// second grace, with a line, so that the agent never waits on a worker that cannot act.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/exit_status.h"
#include "common/spawn.h"

namespace dtrun::agent {

class WorkerProcess {
 public:
  using ExitHandler = std::function<void(ExitStatus)>;

  /// Starts `spec` (on `io`'s thread) in a process group of its own with a parent-death
  /// SIGKILL, whatever `spec` says of those two. An exec failure does not throw: the worker then
  /// reports exit code 127 (not found) or 126 (not executable) through `onExit`, with
  /// execError() saying why. `onExit` runs once, on the io thread.
  /// `log` (may be null) gets the lines of a stop that takes long, naming the worker `name`.
  WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec, ExitHandler onExit,
                std::shared_ptr<spdlog::logger> log = nullptr, std::string name = "worker");
  /// Last resort: SIGKILLs the group of a worker still running and reaps it, waiting at most
  /// kDestroyBound (a process SIGKILL cannot end is left to the subreaper's sweep).
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  /// The worker's pid (also its process group id); 0 when the exec failed.
  int pid() const;
  bool running() const;
  const std::optional<ExitStatus>& exitStatus() const;
  /// Why the exec failed ("" when it did not).
  const std::string& execError() const;
  /// Who hears the exit from now on (a standby handed over to its round, agent/standby.h).
  /// No-op once the exit was reported.
  void setExitHandler(ExitHandler onExit);
  /// Sends `signo` to the worker's whole process group (no-op once it exited).
  void signalGroup(int signo);
  /// True once a stop gave up on the worker: SIGKILL did not end it within the second grace.
  /// It then counts as exited (killed by SIGKILL); its zombie is reaped whenever it comes.
  bool abandoned() const;
  /// Sends `first` (and SIGCONT, unless `first` is SIGKILL) to the group now, SIGKILL after
  /// `grace` if the worker is still running, and gives up on it `grace` later; `done` runs on the
  /// io thread once it has exited or was given up on (at once if it already has). A second
  /// stop() while one is under way only adds `done`.
  void stop(int first, std::chrono::milliseconds grace, std::function<void()> done);

  /// How long the destructor waits for a SIGKILLed worker to be reaped.
  static constexpr std::chrono::milliseconds kDestroyBound{2000};

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the async handlers, which may outlive a move
};

}  // namespace dtrun::agent
