// Observer: what the agent shows of itself while it runs and when it ends (docs/observe.md).
//
//   - the history of its event-log records (RunHistory), which every other view reads;
//   - its status for `dtrun status`, published through the job link when its state changes;
//   - the Prometheus endpoint (--metrics-port), served on the agent's io_context;
//   - at the end: the job_ended record, the summary line, the termination message.
//
// Io thread only. The agent hands it every record (EventLog's observer) and calls afterEvent()
// after each event the policy handled.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/event_log.h"
#include "agent/job_link.h"
#include "agent/launch_config.h"
#include "agent/metrics.h"
#include "agent/metrics_server.h"
#include "agent/policy.h"
#include "agent/run_history.h"

namespace dtrun::agent {

/// Reads the hosted store's counters on its thread and hands them to the callback there.
using StoreStatsFn = std::function<void(std::function<void(StoreSample)>)>;

class Observer {
 public:
  /// Nothing starts before start(). Every reference must outlive the observer.
  Observer(boost::asio::io_context& io, const LaunchConfig& config, std::string hostname,
           JobLink& job, const Policy& policy, std::shared_ptr<spdlog::logger> log);
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  /// The hosted store's counters for the metrics (only the node that serves the job's store).
  void setStoreStats(StoreStatsFn stats) { storeStats_ = std::move(stats); }
  /// Seconds since the workers' last sign of progress; nullopt while none run.
  void setProgress(std::function<std::optional<double>()> since) { progress_ = std::move(since); }

  /// EventLog's observer: folds every record into the history.
  void onRecord(std::string_view event, const nlohmann::json& fields,
                std::chrono::system_clock::time_point when);
  /// Starts the metrics endpoint when asked for, and says where it is (one log line, a
  /// metrics_listening record). Throws ConfigError when it cannot bind.
  void start(EventLog& events);
  /// After each event: publishes this agent's status when its state or round changed.
  void afterEvent();
  /// The run is over with `outcome` and `exitCode`: the job_ended record, the summary line on
  /// stderr, the termination message, the last status (before the job link closes).
  void finished(EventLog& events, const JobOutcome& outcome, int exitCode);

  const RunHistory& history() const { return history_; }

 private:
  void publish(const std::string& state, const std::string& outcome = {});
  MetricsSnapshot snapshot() const;
  void serveMetrics(MetricsServer::Respond respond);

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  std::string hostname_;
  JobLink& job_;
  const Policy& policy_;
  std::shared_ptr<spdlog::logger> log_;
  RunHistory history_;
  std::unique_ptr<MetricsServer> metrics_;
  std::string metricsAddress_;
  StoreStatsFn storeStats_;
  std::function<std::optional<double>()> progress_;
  bool joined_ = false;  // a rendezvous_done was recorded: the round is meaningful
  std::optional<Policy::State> publishedState_;
  std::int64_t publishedRound_ = -1;
};

/// A run that ended before its agent could run (the store could not be bound or reached, a bad
/// file), whose error line the caller logged: the termination message, and the exit code.
int endBeforeAgent(const LaunchConfig& config, const JobOutcome& outcome);

/// The outcome of an exception that ended a run before or outside its agent.
JobOutcome outcomeOf(const std::exception& e);

}  // namespace dtrun::agent
