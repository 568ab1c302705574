// Agent: the per-node elastic agent. It rendezvouses, starts the local workers, watches them and
// the job, and restarts, stops or finishes. One io_context, one thread; store calls go through
// C10dJob's threads and come back as posted handlers.
//
//   joining --(round closed)--> running --(all local workers exit 0)--> done_waiting
//      ^                           |                                         |
//      |                 (worker fails | round advanced |          (every node done)
//      |                  final | signal | store lost)                       v
//      |                           v                                     finishing
//      +-----(round advanced)--- stopping --(workers gone)--> idle           |
//                                                               \            v
//                                              (final | signal | lost) --> finished
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/event_log.h"
#include "agent/failure_report.h"
#include "agent/job_link.h"
#include "agent/launch_config.h"
#include "agent/log_dir.h"
#include "agent/log_forwarder.h"
#include "agent/orphan_guard.h"
#include "agent/worker_group.h"

namespace dtrun::agent {

/// What the launcher worked out before the agent starts.
struct AgentContext {
  std::string hostname;                ///< this node's name in reports (torch: socket.getfqdn())
  const OrphanGuard* guard = nullptr;  ///< told about every worker process group
  /// Descriptors besides 0, 1, 2 that the user handed dtrun: every worker gets them too, and
  /// nothing else of dtrun's.
  std::vector<int> userFds;
};

class Agent {
 public:
  /// Nothing starts until run(). `config` and `job` must outlive the agent.
  Agent(boost::asio::io_context& io, const LaunchConfig& config, JobLink& job, AgentContext context,
        std::shared_ptr<spdlog::logger> log);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs the job on this node until it ends; returns dtrun's exit code (0 success, 1 failure).
  /// Blocks the calling thread, which runs the io_context.
  int run();

 private:
  enum class State { kJoining, kRunning, kStopping, kDoneWaiting, kIdle, kFinishing, kFinished };
  static const char* name(State s);
  void transition(State next);

  void join();
  void onJoined(const rendezvous::RoundInfo& round);
  void startWorkers(const std::string& masterAddr, std::uint16_t masterPort);
  std::vector<std::string> workerEnv(int localRank, const std::string& masterAddr,
                                     std::uint16_t masterPort) const;
  std::vector<std::string> workerArgv(int localRank) const;
  /// Opens the forwarded streams of one worker; fills the fds its spawn spec gets.
  void routeStreams(int localRank, SpawnSpec& spawn, std::vector<UniqueFd>& childEnds);
  void onWorkerExit(int localRank, ExitStatus status);
  void onWorkerFailed(int localRank, ExitStatus status, std::vector<std::string> stderrTail);
  void onEpoch();
  void queryState();
  void onState(const rendezvous::JobState& s);
  void stopWorkers(int signo, std::function<void()> then);
  /// Sets the round's abort key for native workers, then stopWorkers(SIGTERM) once the store
  /// has it, or after a short bound if the store is slow.
  void abortAndStop(const std::string& reason, std::function<void()> then);
  /// After the round's workers exited: ends their process groups and adopted orphans.
  void sweepWorkers();
  void onSignal(int signo);
  void onStoreLost(const std::string& why);
  void finishFailed(const std::string& finalJson);
  void finish(int code);
  void reapOrphans();
  void armSigchld();
  void armSignals();

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  JobLink& job_;
  AgentContext context_;
  std::shared_ptr<spdlog::logger> log_;
  LogDir logDir_;
  EventLog events_;
  WorkerGroup workers_;
  LogForwarder forwarder_;
  /// Forwarded stream ids per local rank of the current round (stdout, stderr).
  std::vector<std::optional<LogForwarder::StreamId>> outStreams_;
  std::vector<std::optional<LogForwarder::StreamId>> errStreams_;
  boost::asio::signal_set signals_;
  boost::asio::signal_set sigchld_;
  boost::asio::steady_timer finishTimer_;
  boost::asio::steady_timer abortTimer_;

  State state_ = State::kJoining;
  rendezvous::RoundInfo round_;
  bool haveRound_ = false;
  bool queryInFlight_ = false;
  bool requery_ = false;
  bool advanceAsked_ = false;  // one membership advance request per round
  bool shuttingDown_ = false;  // a terminating signal arrived
  std::vector<ProcessFailure> localFailures_;
  int exitCode_ = 1;
};

}  // namespace dtrun::agent
