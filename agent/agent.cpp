#include "agent/agent.h"

#include <unistd.h>

#include <set>
#include <typeinfo>

#include "agent/process_tree.h"
#include "agent/worker_env.h"
#include "common/error.h"

namespace dtrun::agent {
namespace {

// std::visit over the action variant with one lambda per alternative.
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

// How a worker ended, for the event log, the metrics and the timeline.
std::string workerOutcome(const ExitStatus& status, bool hung, Policy::State state) {
  if (status.success()) return "succeeded";
  if (hung) return "hung";
  // While running, an exit is the worker's own failure; otherwise dtrun was stopping it.
  return state == Policy::State::kRunning ? "failed" : "stopped";
}

PolicySettings policySettings(const LaunchConfig& config, const AgentContext& context,
                              const JobLink& job) {
  PolicySettings s;
  s.role = config.role;
  s.hostname = context.hostname;
  s.entrypointName = config.entrypointName;
  s.nprocPerNode = config.nprocPerNode;
  s.maxRestarts = config.maxRestarts;
  s.maxNodes = config.rdzv.maxNodes;
  s.closeTimeout = config.rdzv.closeTimeout;
  s.servesOthers = job.servesOthers();
  s.dumpStacks = config.dumpStacks;
  s.exitBarrierTimeout = config.exitBarrierTimeout;
  s.exitCodes = config.exitCodes;
  return s;
}

}  // namespace

Agent::Agent(boost::asio::io_context& io, const LaunchConfig& config, JobLink& job,
             AgentContext context, std::shared_ptr<spdlog::logger> log)
    : io_(io),
      config_(config),
      job_(job),
      context_(std::move(context)),
      log_(std::move(log)),
      policy_(policySettings(config, context_, job), log_),
      logDir_(config.logDir, config.rdzv.runId),
      // --event-log-handler console: torchrun's console handler prints each event on stderr.
      events_(config.eventLog, config.eventLogHandler == "console" ? STDERR_FILENO : -1),
      observer_(io, config, context_.hostname, job, policy_, log_),
      workers_(io, log_),
      streams_(io, config, logDir_, context_.hostname),
      failures_(config, logDir_, streams_, context_.hostname, log_),
      hangs_(io, config,
             HangWatch::Hooks{[this](int pid) { return ownerOf(pid); },
                              [this](int localRank, Hang hang) {
                                dispatch(event::TimerExpired{localRank, std::move(hang)});
                              },
                              [this](std::int64_t lastSignMs, std::chrono::milliseconds quiet) {
                                dispatch(event::Stalled{lastSignMs, quiet});
                              },
                              [this]() -> std::optional<std::chrono::steady_clock::time_point> {
                                auto last = streams_.lastOutput();
                                if (auto t = streams_.lastFileWrite(round_);
                                    t && (!last || *t > *last)) {
                                  last = t;
                                }
                                return last;
                              }},
             log_),
      reaper_(io, [this] { return ownedPids(); }),
      jobActions_(job, failures_, events_, config.maxRestarts, log_,
                  [this](Event e) { dispatch(std::move(e)); }),
      signals_(io),
      finishTimer_(io),
      abortTimer_(io),
      exitBarrierTimer_(io) {
  events_.setObserver([this](std::string_view event, const nlohmann::json& fields,
                             std::chrono::system_clock::time_point when) {
    observer_.onRecord(event, fields, when);
  });
  events_.setSource({{"host", context_.hostname}, {"agent_pid", static_cast<int>(::getpid())}});
  observer_.setStoreStats(context_.storeStats);
  observer_.setProgress([this]() -> std::optional<double> {
    if (policy_.state() != Policy::State::kRunning) return std::nullopt;
    return hangs_.secondsQuiet();
  });
}

int Agent::run() {
  // Orphans of our workers (daemonised grandchildren) are re-parented to us instead of init, so
  // the stop sweep can end them: nothing dtrun started outlives it.
  reaper_.start();
  armSignals();
  if (logDir_.disabled()) log_->info("agent: log directory set to: <none>");
  // Before joining: a FIFO that cannot be served is this node's set-up error, not the job's.
  hangs_.start();
  if (!config_.prewarm.empty()) {
    // Now, so that the standbys import while the first rendezvous waits.
    standbys_ =
        std::make_unique<StandbyPool>(io_, config_,
                                      StandbyPoolContext{hangs_.workerEnv(), context_.userFds,
                                                         logDir_.disabled(), context_.guard},
                                      events_, log_);
    standbys_->start();
  }
  observer_.start(events_);
  job_.watch([this] { dispatch(event::JobChanged{}); },
             [this](std::string why) { dispatch(event::JobLost{job_.describe() + ": " + why}); });
  dispatch(event::Start{});
  io_.run();
  return policy_.exitCode();
}

void Agent::dispatch(Event e) {
  pending_.push_back(std::move(e));
  if (dispatching_) return;
  dispatching_ = true;
  while (!pending_.empty() && !finished_) {
    Event next = std::move(pending_.front());
    pending_.pop_front();
    for (Action& a : policy_.handle(next)) {
      if (finished_) break;
      execute(a);
    }
    if (!finished_) observer_.afterEvent();
  }
  pending_.clear();
  dispatching_ = false;
}

void Agent::execute(Action& action) {
  if (jobActions_.run(action, policy_.round())) return;
  std::visit(
      Overloaded{
          [&](action::StartWorkers& a) { startWorkers(a.round, a.store); },
          [&](action::CollectFailure& a) { collectFailure(a.localRank, a.status); },
          [&](action::StopWorkers& a) { stopWorkers(a.signo, std::move(a.abortReason)); },
          [&](action::SignalWorkers& a) { workers_.signalAll(a.signo); },
          [&](action::Sweep&) { sweep(); },
          [&](action::PrintReport& a) { failures_.report(a.failures); },
          [&](action::StartFinishTimer& a) {
            finishTimer_.expires_after(a.after);
            finishTimer_.async_wait([this](boost::system::error_code ec) {
              if (!ec) dispatch(event::FinishTimerExpired{});
            });
          },
          [&](action::Record& a) { events_.record(a.name, a.fields); },
          [&](action::KillHung& a) { killHung(a); },
          [&](action::StartExitBarrier& a) {
            exitBarrierTimer_.expires_after(a.after);
            exitBarrierTimer_.async_wait([this](boost::system::error_code ec) {
              if (!ec) dispatch(event::ExitBarrierExpired{});
            });
          },
          [&](action::Finish& a) { finish(a.code, a.outcome); },
          // The job's actions were JobActions' above; nothing else is left.
          [&](auto& other) { log_->error("agent: no mechanism for {}", typeid(other).name()); },
      },
      action);
}

void Agent::armSignals() {
  for (int sig : config_.signalsToHandle) {
    boost::system::error_code ec;
    signals_.add(sig, ec);
    if (ec) log_->warn("agent: cannot handle signal {}: {}", sig, ec.message());
  }
  signals_.async_wait([this](auto ec, int signo) {
    if (ec || finished_) return;
    dispatch(event::Signal{signo});
    if (!finished_) armSignals();
  });
}

void Agent::startWorkers(const rendezvous::RoundInfo& round, const WorkerStore& store) {
  // --prewarm: a standby still importing is waited for (a cold start would pay that import
  // again), within --prewarm-timeout.
  if (standbys_ && standbys_->deferStart([this, round, store] { startWorkers(round, store); })) {
    hangs_.groupPaused();  // the last group's watch; this one's starts with the workers
    return;
  }
  round_ = round;
  const auto attempt = static_cast<int>(round.round);
  const bool firstTree = !logDir_.created();
  logDir_.prepareAttempt(attempt, config_.nprocPerNode);
  if (firstTree && logDir_.created()) {
    log_->info("agent: log directory set to: {}", logDir_.runDir());
  }
  std::vector<WorkerSpec> specs;
  std::vector<UniqueFd> childEnds;  // closed once the workers are spawned
  streams_.reset(config_.nprocPerNode);
  const auto extraEnv = hangs_.workerEnv();
  for (int lr = 0; lr < config_.nprocPerNode; ++lr) {
    WorkerSpec spec;
    spec.localRank = lr;
    spec.rank = round.rankOffset + lr;
    spec.spawn.argv = workerArgv(config_, lr);
    spec.spawn.env =
        workerEnv(config_, round, lr, store, logDir_.errorFilePath(attempt, lr), extraEnv);
    spec.spawn.keepFds = context_.userFds;
    streams_.route(round, lr, spec.spawn, childEnds);
    specs.push_back(std::move(spec));
  }
  hungRanks_.clear();
  std::vector<bool> warm(specs.size(), false);
  WorkerGroup::Adopt adopt;
  if (standbys_) {
    adopt = [this, &warm](const WorkerSpec& spec, WorkerProcess::ExitHandler onExit) {
      auto standby = standbys_->claim(spec.localRank, spec.spawn, std::move(onExit));
      warm[static_cast<std::size_t>(spec.localRank)] = standby != nullptr;
      return standby;
    };
  }
  workers_.start(
      specs, [this](int lr, ExitStatus s) { onWorkerExit(lr, s); }, adopt);
  hangs_.groupStarted();
  if (context_.guard) {
    for (int g : workers_.groups()) context_.guard->add(g);
  }
  childEnds.clear();  // the workers hold their ends now; ours must close for EOF to come
  for (int lr = 0; lr < config_.nprocPerNode; ++lr) {
    events_.record("worker_started",
                   {{"round", round.round},
                    {"local_rank", lr},
                    {"rank", round.rankOffset + lr},
                    {"pid", workers_.worker(lr).pid()},
                    {"standby", static_cast<bool>(warm[static_cast<std::size_t>(lr)])}});
  }
  if (standbys_) standbys_->refill();  // the next round's standbys, in the background
}

void Agent::onWorkerExit(int localRank, ExitStatus status) {
  const auto& w = workers_.worker(localRank);
  events_.record(
      "worker_exited",
      {{"round", round_.round},
       {"local_rank", localRank},
       {"rank", round_.rankOffset + localRank},
       {"pid", w.pid()},
       {"exit_code", status.signal ? nlohmann::json(nullptr) : nlohmann::json(status.code)},
       {"signal", status.signal ? nlohmann::json(*status.signal) : nlohmann::json(nullptr)},
       {"outcome", workerOutcome(status, hungRanks_.count(localRank) != 0, policy_.state())}});
  if (!w.execError().empty()) log_->error("worker {}: {}", localRank, w.execError());
  reaper_.reap();  // an orphan's zombie may have waited behind this worker's
  hangs_.workerExited(localRank);
  // The worker is gone: take what is left in its pipes (a grandchild may still hold them).
  streams_.closeOut(localRank);
  dispatch(event::WorkerExited{localRank, status});
  // Unless the policy collected it for a failure report, stderr goes the same way.
  streams_.closeErr(localRank);
}

void Agent::collectFailure(int localRank, ExitStatus status) {
  const auto& w = workers_.worker(localRank);
  failures_.collect(round_, FailedWorker{localRank, w.pid(), status, w.execError()},
                    [this](ProcessFailure failure) {
                      if (!finished_) dispatch(event::FailureCollected{std::move(failure)});
                    });
}

void Agent::stopWorkers(int signo, std::optional<std::string> abortReason) {
  if (standbys_) standbys_->cancelDeferred();  // a start still waiting for standbys
  auto stop = [this, signo] {
    workers_.stop(signo, config_.shutdownTimeout, [this] {
      sweep();
      if (!finished_) dispatch(event::WorkersStopped{});
    });
  };
  if (!abortReason) {
    stop();
    return;
  }
  // Native workers blocked in a collective on a dead peer return at once when they see the
  // round's abort key; the signal then finds them out of NCCL. The bound keeps a slow store from
  // delaying the stop.
  auto once = std::make_shared<std::function<void()>>(std::move(stop));
  auto fire = [once] {
    if (auto f = std::exchange(*once, nullptr)) f();
  };
  abortTimer_.expires_after(kAbortBound);
  abortTimer_.async_wait([fire](boost::system::error_code ec) {
    if (!ec) fire();
  });
  job_.abortWorkers(round_.round, *abortReason, [this, fire] {
    abortTimer_.cancel();
    fire();
  });
}

std::set<int> Agent::ownedPids() const {
  std::set<int> owned = workers_.runningPids();
  if (standbys_) standbys_->addPids(owned);  // standbys report their own exits too
  return owned;
}

void Agent::sweep() {
  workers_.sweep();
  // Daemonised grandchildren that left the worker's process group: ours as subreaper.
  reaper_.sweep();
  if (context_.guard) {
    for (int g : workers_.groups()) context_.guard->remove(g);
  }
}

void Agent::finish(int code, const JobOutcome& outcome) {
  if (finished_) return;
  finished_ = true;
  log_->debug("agent: finished ({}) with exit code {}", outcomeName(outcome.kind), code);
  observer_.finished(events_, outcome, code);
  logDir_.removeIfEmpty();
  finishTimer_.cancel();
  abortTimer_.cancel();
  exitBarrierTimer_.cancel();
  hangs_.stop();
  jobActions_.stop();
  if (standbys_) standbys_->stop();
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  reaper_.stop();
  job_.close();
  io_.stop();
}

std::optional<int> Agent::ownerOf(int pid) const {
  std::map<int, int> roots;
  for (std::size_t lr = 0; lr < workers_.size(); ++lr) {
    const auto& w = workers_.worker(static_cast<int>(lr));
    if (w.running() && w.pid() > 0) roots[w.pid()] = static_cast<int>(lr);
  }
  return agent::ownerOf(pid, roots);
}

void Agent::killHung(const action::KillHung& a) {
  hungRanks_.insert(a.localRanks.begin(), a.localRanks.end());
  auto kill = [this, ranks = a.localRanks, signo = a.signo] {
    for (int lr : ranks) workers_.stopOne(lr, signo, config_.shutdownTimeout);
  };
  if (!a.stacks) {
    kill();
    return;
  }
  std::vector<int> pids = a.stackPids;
  for (int lr : a.localRanks) {
    if (lr >= 0 && lr < static_cast<int>(workers_.size()))
      pids.push_back(workers_.worker(lr).pid());
  }
  hangs_.stacksThen(std::move(pids), [this, kill, ranks = a.localRanks](std::string text) {
    if (finished_) return;
    if (!text.empty()) dispatch(event::StacksCollected{ranks, std::move(text)});
    kill();
  });
}

}  // namespace dtrun::agent
