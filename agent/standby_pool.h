// StandbyPool: --prewarm MODULE[,MODULE...]: one standby interpreter per local rank that has
// already imported the modules and waits for its round (agent/standby.h; docs/agent.md, "Warm
// starts"). Io thread only.
//
// start() first runs a probe: the workers' interpreter, with a standby's environment, started
// on a file that exits at once unless dtrun's start-up hook intercepts it. Only an interpreter
// that is seen to run the hook gets standbys, so a standby can never run the script with a
// standby's environment. Then a standby starts for every local rank, while the first rendezvous
// waits for nodes.
//
// At each round's start the agent asks deferStart(): while a standby is still importing, the
// start waits for it (a cold start would pay the same import), at most until
// --prewarm-timeout after that standby started. Then claim() hands each local rank's worker
// to its standby, or says in one line why that rank starts cold (its standby died, was stopped,
// could not take the round), and refill() starts the next standbys in the background.
//
// Deterministic trouble disables prewarming for the rest of the job, in one line: the probe
// failing, an import failing, a standby unfit to become a worker (a Python thread or a GPU
// opened by the imports, a per-round variable read at import time, the -m module imported), a
// standby not ready in time, or three standbys of a rank dying in a row.
//
// Every standby's process group is on the orphan guard's list while it lives (a SIGKILLed agent
// takes it along), and a standby not handed over is killed with the pool (stop()).
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/event_log.h"
#include "agent/launch_config.h"
#include "agent/orphan_guard.h"
#include "agent/standby.h"

namespace dtrun::agent {

/// What the pool needs from the agent besides the launch configuration.
struct StandbyPoolContext {
  std::map<std::string, std::string> extraEnv;  ///< HangWatch::workerEnv(): every worker gets it
  std::vector<int> userFds;                     ///< descriptors every worker keeps
  bool logsDisabled = false;                    ///< --log-dir /dev/null
  const OrphanGuard* guard = nullptr;
};

class StandbyPool {
 public:
  /// Writes the start-up hook into a fresh 0700 directory under $TMPDIR; nothing starts until
  /// start(). `config` and `events` must outlive the pool. Throws dtrun::Error naming the
  /// directory.
  StandbyPool(boost::asio::io_context& io, const LaunchConfig& config, StandbyPoolContext context,
              EventLog& events, std::shared_ptr<spdlog::logger> log);
  /// stop(), and removes the directory.
  ~StandbyPool();
  StandbyPool(const StandbyPool&) = delete;
  StandbyPool& operator=(const StandbyPool&) = delete;

  /// Starts the probe, then (once it passed) one standby per local rank. Never blocks.
  void start();
  /// True when `start` will run later, once no standby is importing any more (ready, gone, or
  /// past --prewarm-timeout); false when the workers can start now. One deferred start at a
  /// time: a second call replaces the first.
  bool deferStart(std::function<void()> start);
  /// Forgets a deferred start (the round is being stopped).
  void cancelDeferred();
  /// The standby of `localRank`, handed `worker`'s round and reporting to `onExit` from now on;
  /// nullptr (after one line saying why, unless prewarming is off) when that rank starts cold.
  std::unique_ptr<WorkerProcess> claim(int localRank, const SpawnSpec& worker,
                                       WorkerProcess::ExitHandler onExit);
  /// Starts a standby for every local rank that has none (after a round started).
  void refill();
  /// Adds the pids of the standbys and the probe (the agent's orphan sweep leaves them alone).
  void addPids(std::set<int>& pids) const;
  /// Kills every standby and the probe; nothing starts any more. Idempotent.
  void stop();

  /// False once prewarming was turned off for this job (or stop()).
  bool enabled() const { return state_ == State::kProbing || state_ == State::kOn; }
  /// The directory the start-up hook is in.
  const std::string& directory() const { return dir_; }

 private:
  enum class State { kIdle, kProbing, kOn, kOff };
  struct Slot {
    std::unique_ptr<Standby> standby;
    std::uint64_t serial = 0;  // which spawn `standby` is: messages of older ones are ignored
    std::string lost;          // why the last standby is gone, for the next round's line
    int deaths = 0;            // standbys that died in a row without a round
  };

  SpawnSpec specFor(int localRank, bool probe) const;
  void onProbeMessage(const StandbyMessage& m);
  void onProbeExit(ExitStatus status);
  void probeDecide();
  void spawn(int localRank);
  void onMessage(int localRank, std::uint64_t serial, const StandbyMessage& m);
  void onReady(int localRank, Standby& s, const std::string& text);
  void reportCost();
  void onStandbyExit(int localRank, std::uint64_t serial, ExitStatus status);
  void onHandedOverMessage(int localRank, std::uint64_t serial, const StandbyMessage& m);
  /// Kills the standby of `localRank` (if any) and forgets it; `why` goes to the event log.
  void drop(int localRank, const std::string& why);
  void release(std::unique_ptr<Standby> standby);
  void disable(const std::string& why);
  bool importing() const;
  void settle();
  void armDeadline();

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  StandbyPoolContext context_;
  EventLog& events_;
  std::shared_ptr<spdlog::logger> log_;
  std::string dir_;
  std::string modules_;  // comma-separated, as given
  State state_ = State::kIdle;
  std::unique_ptr<Standby> probe_;
  bool probeAnswered_ = false;
  bool probeClosed_ = false;
  std::optional<ExitStatus> probeExit_;
  std::vector<Slot> slots_;
  std::uint64_t serial_ = 0;
  // Handed over, by serial, kept until the standby closes its end of the socket (after saying
  // whether it went cold).
  std::map<std::uint64_t, std::unique_ptr<Standby>> handedOver_;
  std::function<void()> deferred_;
  std::uint64_t generation_ = 0;  // a deferred start runs only if nothing cancelled it since
  boost::asio::steady_timer deadline_;
  bool costReported_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtrun::agent
