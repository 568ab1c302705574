#include "agent/observer.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cstdio>

#include "agent/termination_log.h"
#include "common/error.h"
#include "rendezvous/job_status.h"
#include "rendezvous/tcp_store.h"

namespace dtrun::agent {
namespace {

constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";

std::int64_t epochMs(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// The policy's states as `dtrun status` names them.
std::string publishedName(Policy::State s) {
  switch (s) {
    case Policy::State::kDoneWaiting:
      return "done";
    case Policy::State::kIdle:
      return "waiting";
    default:
      return Policy::name(s);
  }
}

// How an agent that finished with `o` is shown.
std::string finalName(Outcome o) {
  switch (o) {
    case Outcome::kSucceeded:
    case Outcome::kFinishedWithoutThisNode:
      return "done";
    case Outcome::kWorkersFailed:
    case Outcome::kHung:
    case Outcome::kFailedElsewhere:
      return "failed";
    case Outcome::kJobLost:
      return "lost";
    default:
      return "left";
  }
}

}  // namespace

Observer::Observer(boost::asio::io_context& io, const LaunchConfig& config, std::string hostname,
                   JobLink& job, const Policy& policy, std::shared_ptr<spdlog::logger> log)
    : io_(io),
      config_(config),
      hostname_(std::move(hostname)),
      job_(job),
      policy_(policy),
      log_(std::move(log)) {}

void Observer::onRecord(std::string_view event, const nlohmann::json& fields,
                        std::chrono::system_clock::time_point when) {
  if (event == "rendezvous_done") joined_ = true;
  history_.onRecord(event, fields, when);
}

void Observer::start(EventLog& events) {
  if (!config_.metricsPort) return;
  metrics_ = std::make_unique<MetricsServer>(
      io_, config_.metricsHost, *config_.metricsPort,
      [this](MetricsServer::Respond respond) { serveMetrics(std::move(respond)); });
  const auto ep = metrics_->endpoint();
  const std::string host =
      ep.address().is_v6() ? "[" + ep.address().to_string() + "]" : ep.address().to_string();
  metricsAddress_ = host + ":" + std::to_string(ep.port());
  // Once, and where a user with the default log level sees it: with port 0 it is the only way
  // to learn the port besides the event log and `dtrun status`.
  log_->warn("agent: metrics at http://{}/metrics (liveness: /healthz)", metricsAddress_);
  events.record("metrics_listening",
                {{"address", metricsAddress_}, {"url", "http://" + metricsAddress_ + "/metrics"}});
}

void Observer::afterEvent() {
  const Policy::State state = policy_.state();
  const std::int64_t round = joined_ ? policy_.round().round : -1;
  if (publishedState_ == state && publishedRound_ == round) return;
  publishedState_ = state;
  publishedRound_ = round;
  publish(publishedName(state));
}

void Observer::publish(const std::string& state, const std::string& outcome) {
  rendezvous::AgentStatus s;
  s.host = hostname_;
  s.pid = static_cast<int>(::getpid());
  s.nproc = config_.nprocPerNode;
  s.role = config_.role;
  s.state = state;
  s.round = joined_ ? policy_.round().round : -1;
  s.groupRank = joined_ ? policy_.round().groupRank : -1;
  s.sinceMs = epochMs(std::chrono::system_clock::now());
  s.maxRestarts = config_.maxRestarts;
  s.keepAliveMs = config_.rdzv.keepAliveInterval.count();
  s.metrics = metricsAddress_;
  s.outcome = outcome;
  job_.publishStatus(nlohmann::json(s).dump());
}

MetricsSnapshot Observer::snapshot() const {
  MetricsSnapshot s;
  s.runId = config_.rdzv.runId;
  s.host = hostname_;
  s.state = publishedName(policy_.state());
  if (joined_) {
    s.round = policy_.round().round;
    s.worldSize = policy_.round().worldSize;
    s.groupRank = policy_.round().groupRank;
  }
  if (progress_) s.secondsSinceProgress = progress_();
  s.process = readProcessSample();
  return s;
}

void Observer::serveMetrics(MetricsServer::Respond respond) {
  MetricsSnapshot snap = snapshot();
  if (!storeStats_) {
    respond(200, kTextFormat, renderMetrics(history_, snap));
    return;
  }
  // The store lives on its own thread: its counters are read there and brought back here.
  storeStats_([this, snap = std::move(snap), respond = std::move(respond)](StoreSample s) mutable {
    boost::asio::post(io_, [this, snap = std::move(snap), respond = std::move(respond),
                            s = std::move(s)]() mutable {
      snap.store = std::move(s);
      respond(200, kTextFormat, renderMetrics(history_, snap));
    });
  });
}

namespace {

// The termination message: the outcome and why, then the summary's facts.
void writeTerminationMessage(const LaunchConfig& config, const JobOutcome& outcome,
                             const RunHistory& history, RunHistory::Time now) {
  const std::string path = terminationLogPath(config.terminationLog);
  if (path.empty()) return;
  const std::string message =
      terminationMessage(outcome, history.summary(config.rdzv.runId, outcome, now, false));
  if (const std::string error = writeTerminationLog(path, message); !error.empty()) {
    std::fprintf(stderr, "dtrun: %s\n", error.c_str());
  }
}

}  // namespace

void Observer::finished(EventLog& events, const JobOutcome& outcome, int exitCode) {
  const auto now = std::chrono::system_clock::now();
  events.record("job_ended", history_.summaryJson(outcome, exitCode, now));
  // The summary is for people and for schedulers' logs: the last line, whatever the log level.
  std::fprintf(stderr, "%s\n", history_.summary(config_.rdzv.runId, outcome, now).c_str());
  std::fflush(stderr);
  writeTerminationMessage(config_, outcome, history_, now);
  publish(finalName(outcome.kind), std::string(outcomeName(outcome.kind)));
  if (metrics_) metrics_->close();
}

int endBeforeAgent(const LaunchConfig& config, const JobOutcome& outcome) {
  // The error line already said it, and bad input is one line: no summary on stderr.
  const RunHistory none;
  writeTerminationMessage(config, outcome, none, none.started());
  return exitCodeFor(outcome, config.exitCodes);
}

JobOutcome outcomeOf(const std::exception& e) {
  JobOutcome o{Outcome::kError, 0, e.what()};
  if (dynamic_cast<const ConfigError*>(&e)) {
    o.kind = Outcome::kConfigError;
  } else if (dynamic_cast<const ConnectionError*>(&e) || dynamic_cast<const TimeoutError*>(&e) ||
             dynamic_cast<const rendezvous::StoreAuthError*>(&e)) {
    o.kind = Outcome::kRendezvousFailed;  // the store or etcd was never reached
  }
  return o;
}

}  // namespace dtrun::agent
