// WorkerStreams: where each worker's stdout and stderr go, by torchrun's rules. A redirected
// stream (--redirects) goes to its log file only; a tee'd one (--tee) to the file and, prefixed,
// to the console; --local-ranks-filter silences the console of the other ranks. The streams
// torchrun leaves alone pass through the forwarder too (agent/log_forwarder.h), so that lines
// never interleave mid-line and stderr's last lines are at hand for the failure report.
//
// One round at a time: route() each worker's streams before it is spawned, then, when it
// exits, closeOut() and takeErr() (or closeErr()) take what is left in its pipes.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/launch_config.h"
#include "agent/log_dir.h"
#include "agent/log_forwarder.h"
#include "common/fd.h"
#include "common/spawn.h"
#include "rendezvous/dynamic_rendezvous.h"

namespace dtrun::agent {

class WorkerStreams {
 public:
  /// `config` and `logDir` must outlive this; `hostname` goes into the line prefixes.
  WorkerStreams(boost::asio::io_context& io, const LaunchConfig& config, const LogDir& logDir,
                std::string hostname);
  WorkerStreams(const WorkerStreams&) = delete;
  WorkerStreams& operator=(const WorkerStreams&) = delete;

  /// A new round of `nproc` workers: forgets the last round's streams (already closed).
  void reset(int nproc);
  /// Sets `spawn`'s stdoutFd and stderrFd for worker `localRank` of `round`: a log file opened
  /// for appending, or a forwarded pipe's write end; the descriptors go to `childEnds`, which
  /// the caller closes once the worker is spawned (the forwarder sees EOF only then). With
  /// --log-dir /dev/null a redirected stream keeps the console. Throws dtrun::Error naming a
  /// log file that cannot be opened.
  void route(const rendezvous::RoundInfo& round, int localRank, SpawnSpec& spawn,
             std::vector<UniqueFd>& childEnds);
  /// The worker exited: what is already in its stdout pipe goes out, the pipe closes.
  void closeOut(int localRank);
  /// The same for its stderr, without keeping the lines.
  void closeErr(int localRank);
  /// For the failure report: its stderr's last lines, from the forwarded pipe (drained and
  /// closed) or, for a redirected stderr, from its log file. `done` runs on the io thread, or at
  /// once for a file.
  void takeErr(const rendezvous::RoundInfo& round, int localRank, LogForwarder::DrainHandler done);
  /// When any worker last wrote to a forwarded stream (nullopt: never).
  std::optional<std::chrono::steady_clock::time_point> lastOutput() const {
    return forwarder_.lastOutput();
  }
  /// The latest modification of the round's redirected log files, on the steady clock (those
  /// bytes do not pass through the agent). nullopt: none written.
  std::optional<std::chrono::steady_clock::time_point> lastFileWrite(
      const rendezvous::RoundInfo& round) const;
  /// Shutdown: every open stream drained without waiting and closed.
  void closeAll() { forwarder_.closeAll(); }
  std::size_t openStreams() const { return forwarder_.openStreams(); }

 private:
  const LaunchConfig& config_;
  const LogDir& logDir_;
  std::string hostname_;
  LogForwarder forwarder_;
  std::vector<std::optional<LogForwarder::StreamId>> out_;
  std::vector<std::optional<LogForwarder::StreamId>> err_;
};

}  // namespace dtrun::agent
