// HangWatch: the agent's ways of seeing a hung worker (docs/hangs.md) in one mechanism: torch's
// file timer (--file-timer, the FIFO the workers' FileTimerClient writes deadlines to), the
// stall watch (--stall-timeout, agent/stall_watch.h) and the Python stack dumps asked for before
// a hung worker is killed (--dump-stacks). It reports what it sees; the policy decides.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/failure_report.h"
#include "agent/file_timer.h"
#include "agent/launch_config.h"
#include "agent/stack_dump.h"
#include "agent/stall_watch.h"

namespace dtrun::agent {

/// How long hung workers may take to write their Python stacks before they are killed anyway.
inline constexpr std::chrono::milliseconds kStackBound{2000};

class HangWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    /// The file timer's question: which worker of the running group `pid` belongs to.
    std::function<std::optional<int>(int pid)> ownerOf;
    /// A file-timer deadline of worker `localRank` passed (the hang as the report shows it).
    std::function<void(int localRank, Hang hang)> onTimerExpired;
    /// --stall-timeout passed without a sign of life from the group.
    StallWatch::StalledHandler onStalled;
    /// The group's latest output that the agent saw (forwarded streams, redirected files).
    StallWatch::LastSign lastOutput;
  };

  /// Nothing starts until start(). `config` must outlive this.
  HangWatch(boost::asio::io_context& io, const LaunchConfig& config, Hooks hooks,
            std::shared_ptr<spdlog::logger> log);
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  /// Before the first rendezvous: creates the timer FIFO and the stack-dump hook as configured.
  /// Throws (ConfigError, dtrun::Error) naming what cannot be served: this node's set-up error.
  void start();
  /// Idempotent: the FIFO removed, the watch cancelled.
  void stop();

  /// What every worker gets besides torchrun's environment: TORCHELASTIC_TIMER_FILE, the
  /// stack-dump hook on PYTHONPATH and its variables.
  std::map<std::string, std::string> workerEnv() const;
  /// A new group started now: the last group's timers and dumps dropped, the stall watch armed.
  void groupStarted();
  /// The group's start is postponed (or it is gone): no stall report until groupStarted().
  void groupPaused() { stall_.cancel(); }
  /// Worker `localRank` exited: its timers are dropped.
  void workerExited(int localRank);
  /// Asks `pids` for their Python stacks when --dump-stacks is on (within kStackBound), then
  /// calls `then` with the text ("" when none was asked for or none answered). At once without
  /// stack dumps.
  void stacksThen(std::vector<int> pids, std::function<void(std::string)> then);
  /// Seconds since the group's last sign of life (output or timer request); nullopt while no
  /// group runs.
  std::optional<double> secondsQuiet() const { return stall_.secondsQuiet(); }
  /// The timer server's counters (nullptr without --file-timer).
  const FileTimerServer* timer() const { return timer_.get(); }

 private:
  std::optional<Clock::time_point> lastSign() const;

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  Hooks hooks_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<FileTimerServer> timer_;
  std::unique_ptr<StackDump> stacks_;
  StallWatch stall_;
};

}  // namespace dtrun::agent
