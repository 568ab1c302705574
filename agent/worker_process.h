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
//                +--stop(): SIGTERM group, grace, SIGKILL group
#pragma once

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
  WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec, ExitHandler onExit);
  /// Last resort: SIGKILLs the group of a worker still running and reaps it.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  /// The worker's pid (also its process group id); 0 when the exec failed.
  int pid() const;
  bool running() const;
  const std::optional<ExitStatus>& exitStatus() const;
  /// Why the exec failed ("" when it did not).
  const std::string& execError() const;
  /// Sends `signo` to the worker's whole process group (no-op once it exited).
  void signalGroup(int signo);
  /// Sends `first` to the group now and SIGKILL after `grace` if the worker is still running;
  /// `done` runs on the io thread once it has exited (at once if it already has). A second
  /// stop() while one is under way only adds `done`.
  void stop(int first, std::chrono::milliseconds grace, std::function<void()> done);

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the async handlers, which may outlive a move
};

}  // namespace dtrun::agent
