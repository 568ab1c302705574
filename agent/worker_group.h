// WorkerGroup: the workers of one round on this node. All or nothing: a stop ends every one.
// Io thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "agent/worker_process.h"

namespace dtrun::agent {

/// One worker to start: its local rank and what to run.
struct WorkerSpec {
  int localRank = 0;
  int rank = 0;
  SpawnSpec spawn;
};

class WorkerGroup {
 public:
  /// Called once per worker, on the io thread, when it exits.
  using ExitHandler = std::function<void(int localRank, ExitStatus status)>;

  explicit WorkerGroup(boost::asio::io_context& io) : io_(io) {}
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// A process already running `spec` to take as its worker (a standby, agent/standby_pool.h),
  /// reporting its exit to the handler given; nullptr: spawn it.
  using Adopt = std::function<std::unique_ptr<WorkerProcess>(const WorkerSpec& spec,
                                                             WorkerProcess::ExitHandler onExit)>;

  /// Spawns every worker (the group must be empty or fully exited), or takes what `adopt`
  /// offers for it.
  void start(const std::vector<WorkerSpec>& specs, ExitHandler onExit, const Adopt& adopt = {});
  /// Sends `signo` to every running worker's process group.
  void signalAll(int signo);
  /// `first` to every running worker's group, SIGKILL after `grace`; `done` once all exited.
  void stop(int first, std::chrono::milliseconds grace, std::function<void()> done);
  /// Stops one worker as stop() does (`first` to its group, SIGKILL after `grace`); nothing
  /// once it exited or for an unknown local rank.
  void stopOne(int localRank, int first, std::chrono::milliseconds grace);
  /// SIGKILLs every worker's process group, exited leaders included: what is left in a group
  /// once its worker is gone are grandchildren dtrun must not leave behind.
  void sweep();
  /// The process group ids of this round's workers.
  std::vector<int> groups() const;
  /// Forgets the exited workers (before a new start()).
  void clear() { workers_.clear(); }

  bool anyRunning() const;
  std::size_t size() const { return workers_.size(); }
  const WorkerProcess& worker(int localRank) const { return *workers_.at(localRank); }
  /// The pids of running workers (for the orphan sweep).
  std::set<int> runningPids() const;

 private:
  boost::asio::io_context& io_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
};

}  // namespace dtrun::agent
