// Reaper: the workers' orphans. The agent is the child subreaper of its process tree, so a
// worker's daemonised grandchild (one that left the worker's process group) is re-parented to
// the agent instead of init; the reaper reaps such orphans' zombies as they exit and, at the end
// of a round, ends the ones still alive: nothing dtrun started outlives it.
//
// Processes whose exit status belongs to someone else (the running workers, the standbys, each
// watched by its own WorkerProcess) are never reaped or signalled here: `Owned` names them.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstddef>
#include <functional>
#include <set>
#include <vector>

namespace dtrun::agent {

/// Live children of this process whose pid is not in `owned`: orphans adopted as subreaper
/// (zombies excluded). Scans /proc: for the end of a round only.
std::vector<int> adoptedChildren(const std::set<int>& owned);

class Reaper {
 public:
  using Owned = std::function<std::set<int>()>;

  /// Nothing happens until start(). `owned` is asked on every reap.
  Reaper(boost::asio::io_context& io, Owned owned);
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  /// Makes this process the child subreaper and reaps adopted orphans on every SIGCHLD.
  void start();
  /// No more SIGCHLD handling (the subreaper setting stays for the process's life).
  void stop();

  /// Reaps the zombies of exited children that are not owned, one at a time: it peeks at an
  /// exited child (waitid WNOWAIT) and stops at an owned one, whose status its owner collects
  /// (and which calls this again after). Never blocks.
  void reap();

  /// The end of a round: SIGKILLs every live adopted orphan, then reaps. When no owned process
  /// runs and this process has no child at all, returns at once without the /proc scan.
  /// Returns how many processes were sent SIGKILL.
  std::size_t sweep();

 private:
  void arm();

  Owned owned_;
  boost::asio::signal_set sigchld_;
  bool running_ = false;
};

}  // namespace dtrun::agent
