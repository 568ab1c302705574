// Standby: one prewarmed interpreter (--prewarm), from its start to the hand-over to a round.
//
// A standby is a fresh process started by spawnProcess with its local rank's worker command
// line, its own process group and the parent-death SIGKILL (it is a WorkerProcess from the
// start, so its pid, group and pidfd are the worker's once it is handed over). Its
// sitecustomize (agent/standby_bootstrap.py) imports the modules asked for and talks to the
// agent over a SOCK_SEQPACKET socketpair, one packet per message:
//
//   standby -> agent   "P"          probe: this interpreter runs dtrun's start-up hook
//                      "R <n>"      ready: imports done, <n> native threads besides the main one
//                      "U <why>"    unfit to become a worker (and it exits)
//                      "E <why>"    an import failed (and it exits)
//                      "F <why>"    after the hand-over: it restarts itself cold (exec)
//   agent -> standby   "H<roles>"   the hand-over, with one descriptor per role letter: 0, 1, 2
//                                   (the worker's streams), e (a memfd holding the round's whole
//                                   environment), o, r (what the imports wrote on stdout, stderr)
//
// While it imports, its stdout and stderr are a pipe or a memfd of the agent's (see
// PreloadStream), so nothing reaches the console or a log before its round; the standby writes
// that output to the worker's streams at the hand-over. The socket reaching end-of-file after
// the hand-over means the standby closed its end: the script runs.
//
//   spawn --> preloading --("R")--> ready --handOver()--> handed over (a WorkerProcess now)
//                 |                   |
//                 +--("U", "E", exit, drop)--> gone
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/log_forwarder.h"
#include "agent/standby_env.h"
#include "agent/worker_process.h"

namespace dtrun::agent {

/// A message from a standby: its letter and the text after it.
struct StandbyMessage {
  char kind = 0;  ///< 'P', 'R', 'U', 'E', 'F'; 0: the socket reached end-of-file
  std::string text;
};

/// A process's memory, from /proc/<pid>/smaps_rollup (0 when unreadable).
struct MemoryUse {
  std::uint64_t rssKib = 0;
  std::uint64_t pssKib = 0;
};

/// /proc/<pid>/smaps_rollup's Rss and Pss. Blocking (procfs); any thread.
MemoryUse memoryOf(int pid);

class Standby {
 public:
  using MessageHandler = std::function<void(const StandbyMessage&)>;

  /// Starts `spec` (argv, environment, cwd, stdin and kept descriptors as the worker's; the
  /// control socket's number is added to its environment as DTRUN_STANDBY_FD) with its stdout
  /// and stderr as `out` and `err` say. `onMessage` runs on the io thread for every message and
  /// once for end-of-file; `onExit` once if the process exits before it is handed over. An exec
  /// failure is reported through `onExit` (exit code 126 or 127, execError()). Throws
  /// dtrun::Error when a pipe, memfd or socket cannot be made. Io thread.
  Standby(boost::asio::io_context& io, SpawnSpec spec, PreloadStream out, PreloadStream err,
          MessageHandler onMessage, WorkerProcess::ExitHandler onExit);
  /// Kills a standby that was not handed over (its group, SIGKILL) and reaps it.
  ~Standby();
  Standby(const Standby&) = delete;
  Standby& operator=(const Standby&) = delete;

  int pid() const { return pid_; }
  bool ready() const { return ready_; }
  /// Marks it ready (the owner got "R").
  void setReady() { ready_ = true; }
  std::chrono::steady_clock::time_point started() const { return started_; }
  /// Why an exec failed ("" when it did not).
  const std::string& execError() const;

  /// Reads the messages already sent, at once, and hands them to the message handler (before
  /// acting on an exit: what the standby said just before it is not lost). Io thread; returns
  /// false when the socket reached end-of-file or the handler dropped this standby.
  bool receive();
  /// Why this standby cannot take a round now ("" when it can): not ready, stopped or traced
  /// (procfs), gone, or started for another command line or working directory. Blocking
  /// (procfs).
  std::string unusable(const SpawnSpec& worker) const;
  /// Gives the standby `worker`'s environment and streams (as spawnProcess would: -1 is this
  /// process's descriptor, kSpawnDevNull /dev/null) and returns its process, which reports its
  /// exit to `onExit` from now on. nullptr when unusable() or the send fails, with `why` saying
  /// so. Never blocks. Io thread.
  std::unique_ptr<WorkerProcess> handOver(const SpawnSpec& worker,
                                          WorkerProcess::ExitHandler onExit, std::string& why);

 private:
  void read();

  SpawnSpec spec_;
  std::unique_ptr<WorkerProcess> process_;
  int pid_ = 0;
  bool ready_ = false;
  std::chrono::steady_clock::time_point started_;
  boost::asio::posix::stream_descriptor control_;
  UniqueFd outCapture_;  // what the standby's stdout writes, readable (pipe read end or memfd)
  UniqueFd errCapture_;
  MessageHandler onMessage_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtrun::agent
