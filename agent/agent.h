// Agent: the per-node elastic agent's mechanism. The decisions are the Policy's (agent/
// policy.h): every event goes to the policy, and the agent carries out the actions it returns
// with its mechanisms: the workers (WorkerGroup), the job (JobLink), their output
// (LogForwarder, LogDir), signals, timers, the event log and the failure report.
//
// One io_context, one thread: every handler runs there, so nothing here needs a lock. A JobLink
// that blocks keeps that off this thread and posts its results back (agent/job_link.h).
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/event_log.h"
#include "agent/file_timer.h"
#include "agent/job_link.h"
#include "agent/launch_config.h"
#include "agent/log_dir.h"
#include "agent/log_forwarder.h"
#include "agent/observer.h"
#include "agent/orphan_guard.h"
#include "agent/policy.h"
#include "agent/stack_dump.h"
#include "agent/standby_pool.h"
#include "agent/worker_group.h"

namespace dtrun::agent {

/// What the launcher worked out before the agent starts.
struct AgentContext {
  std::string hostname;                ///< this node's name in reports (torch: socket.getfqdn())
  const OrphanGuard* guard = nullptr;  ///< told about every worker process group
  /// Descriptors besides 0, 1, 2 that the user handed dtrun: every worker gets them too, and
  /// nothing else of dtrun's.
  std::vector<int> userFds;
  /// The node that serves the job's store: its counters, for the metrics.
  StoreStatsFn storeStats;
};

class Agent {
 public:
  /// Nothing starts until run(). `config` and `job` must outlive the agent.
  Agent(boost::asio::io_context& io, const LaunchConfig& config, JobLink& job, AgentContext context,
        std::shared_ptr<spdlog::logger> log);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs the job on this node until it ends; returns dtrun's exit code (--exit-codes:
  /// agent/outcome.h). Blocks the calling thread, which runs the io_context.
  int run();

 private:
  /// Hands `e` to the policy and carries out what it asks; events raised meanwhile wait their
  /// turn, so the policy always sees one event at a time.
  void dispatch(Event e);
  void execute(Action& a);

  // The mechanisms, one per action.
  void startWorkers(const rendezvous::RoundInfo& round, const WorkerStore& store);
  /// Opens the forwarded streams of one worker; fills the descriptors its spawn spec gets.
  void routeStreams(const rendezvous::RoundInfo& round, int localRank, SpawnSpec& spawn,
                    std::vector<UniqueFd>& childEnds);
  void onWorkerExit(int localRank, ExitStatus status);
  /// What every worker of this node gets besides torchrun's environment: the file timer's
  /// FIFO, the stack-dump set-up.
  std::map<std::string, std::string> hangEnv() const;
  /// Which worker of this round `pid` belongs to (the file timer's check of who asked).
  std::optional<int> ownerOf(int pid) const;
  void onTimerExpired(const TimerExpiry& e);
  /// `signo` to each hung worker's group (SIGKILL after the grace), Python stacks first when
  /// asked.
  void killHung(const action::KillHung& a);
  /// --stall-timeout: wakes when the group may have been quiet for that long, and says so.
  void armStallWatch();
  void onStallWatch();
  void collectFailure(int localRank, ExitStatus status);
  void stopWorkers(int signo, std::optional<std::string> abortReason);
  /// After the round's workers exited: ends their process groups and adopted orphans.
  void sweep();
  void reapOrphans();
  void readFailures(std::int64_t round);
  /// The job's failure records (JSON each) as reports; an unreadable one is logged and skipped.
  std::vector<ProcessFailure> parseFailures(const std::vector<std::string>& records) const;
  void printReport(const std::vector<ProcessFailure>& failures);
  /// Ends the run: `code` is what run() returns; `outcome` goes to the summary and the metrics.
  void finish(int code, const JobOutcome& outcome);
  /// Seconds since the workers' last output or timer request (or their start); nullopt while
  /// they do not run.
  std::optional<double> secondsSinceProgress() const;
  void armSignals();
  void armSigchld();
  /// Runs `done` with the result on this thread, unless the agent finished meanwhile.
  template <typename T>
  std::function<void(Result<T>)> guarded(std::function<void(Result<T>)> done);

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  JobLink& job_;
  AgentContext context_;
  std::shared_ptr<spdlog::logger> log_;
  Policy policy_;
  LogDir logDir_;
  EventLog events_;
  Observer observer_;  // status, metrics, summary (agent/observer.h)
  WorkerGroup workers_;
  LogForwarder forwarder_;
  /// The current round (as started) and its forwarded stream ids per local rank.
  rendezvous::RoundInfo round_;
  std::vector<std::optional<LogForwarder::StreamId>> outStreams_;
  std::vector<std::optional<LogForwarder::StreamId>> errStreams_;
  boost::asio::signal_set signals_;
  boost::asio::signal_set sigchld_;
  boost::asio::steady_timer finishTimer_;
  boost::asio::steady_timer abortTimer_;
  boost::asio::steady_timer exitBarrierTimer_;
  // Hangs (docs/hangs.md): the file timer, the stack dumps, the stall watch.
  std::unique_ptr<FileTimerServer> timer_;
  std::unique_ptr<StackDump> stacks_;
  boost::asio::steady_timer stallTimer_;
  std::chrono::steady_clock::time_point groupStarted_;
  // --prewarm: a standby interpreter per local rank that takes the next round's worker.
  std::unique_ptr<StandbyPool> standbys_;
  std::set<int> hungRanks_;  // local ranks of this round dtrun is ending as hung

  std::deque<Event> pending_;
  bool dispatching_ = false;
  bool finished_ = false;
};

}  // namespace dtrun::agent
