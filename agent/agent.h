// Agent: the per-node elastic agent's mechanism. The decisions are the Policy's (agent/
// policy.h): every event goes to the policy, and the agent carries out the actions it returns
// with its mechanisms: the workers (WorkerGroup, StandbyPool), the job (JobLink), the workers'
// output (WorkerStreams, LogDir), the hang watch (HangWatch), the orphans (Reaper), the failure
// report (FailureCollector), signals, timers and the event log. What is left here is the
// wiring: which mechanism each action runs, and which event each mechanism's news becomes.
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
#include "agent/failure_collector.h"
#include "agent/hang_watch.h"
#include "agent/job_actions.h"
#include "agent/job_link.h"
#include "agent/launch_config.h"
#include "agent/log_dir.h"
#include "agent/observer.h"
#include "agent/orphan_guard.h"
#include "agent/policy.h"
#include "agent/reaper.h"
#include "agent/standby_pool.h"
#include "agent/worker_group.h"
#include "agent/worker_streams.h"

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

  // The actions that take more than one mechanism.
  void startWorkers(const rendezvous::RoundInfo& round, const WorkerStore& store);
  void onWorkerExit(int localRank, ExitStatus status);
  /// Which worker of this round `pid` belongs to (the file timer's check of who asked).
  std::optional<int> ownerOf(int pid) const;
  /// `signo` to each hung worker's group (SIGKILL after the grace), Python stacks first when
  /// asked.
  void killHung(const action::KillHung& a);
  void collectFailure(int localRank, ExitStatus status);
  void stopWorkers(int signo, std::optional<std::string> abortReason);
  /// After the round's workers exited: ends their process groups and adopted orphans.
  void sweep();
  /// Ends the run: `code` is what run() returns; `outcome` goes to the summary and the metrics.
  void finish(int code, const JobOutcome& outcome);
  /// The processes whose exit status is not the reaper's: workers and standbys.
  std::set<int> ownedPids() const;
  void armSignals();

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
  WorkerStreams streams_;
  FailureCollector failures_;
  HangWatch hangs_;  // the file timer, the stall watch, the stack dumps (docs/hangs.md)
  Reaper reaper_;
  JobActions jobActions_;  // the job's side of the policy's actions
  /// The current round, as started.
  rendezvous::RoundInfo round_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer finishTimer_;
  boost::asio::steady_timer abortTimer_;
  boost::asio::steady_timer exitBarrierTimer_;
  // --prewarm: a standby interpreter per local rank that takes the next round's worker.
  std::unique_ptr<StandbyPool> standbys_;
  std::set<int> hungRanks_;  // local ranks of this round dtrun is ending as hung

  std::deque<Event> pending_;
  bool dispatching_ = false;
  bool finished_ = false;
};

}  // namespace dtrun::agent
