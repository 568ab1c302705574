// OrphanGuard: a tiny process that outlives a killed agent just long enough to kill its workers.
//
// PR_SET_PDEATHSIG takes the workers down with a SIGKILLed agent, but not their own children
// (data loaders, shells' background jobs), which would live on holding GPUs. So the launcher forks
// this guard first thing, before any thread or socket exists. The agent tells it, through a pipe,
// every worker process group it starts and ends; when the pipe reaches end-of-file (the agent
// exited, however it died) the guard SIGKILLs every group still listed and exits. It ignores
// terminal signals and holds no other descriptor, so it neither dies early nor keeps anything
// open. It is forked twice, so it is not dtrun's child (its comm is "dtrun-guard"; its command
// line is dtrun's).
#pragma once

namespace dtrun::agent {

class OrphanGuard {
 public:
  /// No guard: add()/remove() do nothing.
  OrphanGuard() = default;
  /// Forks the guard. Call while the process has one thread. Throws dtrun::Error.
  static OrphanGuard start();
  OrphanGuard(OrphanGuard&& other) noexcept;
  OrphanGuard& operator=(OrphanGuard&& other) noexcept;
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;
  /// Closes the pipe: the guard kills what is still listed and exits.
  ~OrphanGuard();

  /// A worker process group exists now. One write(2), any thread.
  void add(int pgid) const;
  /// That group is gone (stopped and swept). One write(2), any thread.
  void remove(int pgid) const;
  /// The guard's pid (0 without a guard).
  int pid() const { return pid_; }

 private:
  int fd_ = -1;
  int pid_ = 0;
};

}  // namespace dtrun::agent
