#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "agent/error_file.h"
#include "agent/line_prefix.h"
#include "agent/line_tail.h"
#include "agent/process_tree.h"
#include "agent/worker_env.h"
#include "common/error.h"

namespace dtrun::agent {
namespace {

// How long a hung worker may take to write its Python stacks before it is killed anyway.
constexpr std::chrono::milliseconds kStackBound(2000);

std::int64_t epochMs(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// std::visit over the action variant with one lambda per alternative.
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

// Live children of this process that are not current workers: orphans our workers left behind,
// which we adopted as child subreaper. A scan of /proc: only at the end of a round.
std::vector<int> adoptedChildren(const std::set<int>& workers) {
  std::vector<int> found;
  const int self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || workers.count(static_cast<int>(pid))) continue;
    auto stat = readProcStat(static_cast<int>(pid));
    if (!stat || stat->ppid != self || stat->state == 'Z') continue;
    found.push_back(static_cast<int>(pid));
  }
  ::closedir(proc);
  return found;
}

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
      forwarder_(io),
      signals_(io),
      sigchld_(io, SIGCHLD),
      finishTimer_(io),
      abortTimer_(io),
      exitBarrierTimer_(io),
      stallTimer_(io) {
  events_.setObserver([this](std::string_view event, const nlohmann::json& fields,
                             std::chrono::system_clock::time_point when) {
    observer_.onRecord(event, fields, when);
  });
  events_.setSource({{"host", context_.hostname}, {"agent_pid", static_cast<int>(::getpid())}});
  observer_.setStoreStats(context_.storeStats);
  observer_.setProgress([this] { return secondsSinceProgress(); });
}

int Agent::run() {
  // Orphans of our workers (daemonised grandchildren) are re-parented to us instead of init, so
  // the stop sweep can end them: nothing dtrun started outlives it.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  armSignals();
  armSigchld();
  if (logDir_.disabled()) log_->info("agent: log directory set to: <none>");
  // Before joining: a FIFO that cannot be served is this node's set-up error, not the job's.
  if (config_.fileTimer) {
    timer_ = std::make_unique<FileTimerServer>(
        io_, config_.timerFile, [this](int pid) { return ownerOf(pid); },
        [this](const TimerExpiry& e) { onTimerExpired(e); }, log_);
    timer_->start();
  }
  if (config_.dumpStacks) stacks_ = std::make_unique<StackDump>(io_);
  if (!config_.prewarm.empty()) {
    // Now, so that the standbys import while the first rendezvous waits.
    standbys_ = std::make_unique<StandbyPool>(
        io_, config_,
        StandbyPoolContext{hangEnv(), context_.userFds, logDir_.disabled(), context_.guard},
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

template <typename T>
std::function<void(Result<T>)> Agent::guarded(std::function<void(Result<T>)> done) {
  return [this, done = std::move(done)](Result<T> r) {
    if (!finished_) done(std::move(r));
  };
}

void Agent::execute(Action& action) {
  std::visit(
      Overloaded{
          [&](action::Join&) {
            events_.record("rendezvous_started");
            job_.join(guarded<rendezvous::RoundInfo>([this](Result<rendezvous::RoundInfo> r) {
              if (r.ok()) {
                dispatch(event::Joined{*r.value});
                return;
              }
              event::JoinFailed failed{r.message(), std::nullopt, {}};
              try {
                std::rethrow_exception(r.error);
              } catch (const rendezvous::JobOverError& over) {
                failed.over = over.record();
                failed.failures = parseFailures(over.record().failures);
              } catch (const TimeoutError&) {
              } catch (const ConnectionError&) {
                failed.lost = true;  // the store or etcd went away: the job was lost
              } catch (...) {
              }
              dispatch(std::move(failed));
            }));
          },
          [&](action::GetWorkerStore&) {
            job_.workerStore(policy_.round(), guarded<WorkerStore>([this](Result<WorkerStore> r) {
                               if (r.ok()) {
                                 dispatch(event::WorkerStoreReady{*r.value});
                               } else {
                                 dispatch(event::WorkerStoreFailed{r.message()});
                               }
                             }));
          },
          [&](action::StartWorkers& a) { startWorkers(a.round, a.store); },
          [&](action::CollectFailure& a) { collectFailure(a.localRank, a.status); },
          [&](action::ReportFailure& a) {
            const std::int64_t round = a.round;
            job_.reportFailure(round, nlohmann::json(a.failure).dump(), config_.maxRestarts,
                               guarded<bool>([this, round](Result<bool> r) {
                                 if (!r.ok()) {
                                   log_->error("could not report the failure: {}", r.message());
                                   return;
                                 }
                                 events_.record("restart_decided", {{"round", round},
                                                                    {"reason", "worker_failure"},
                                                                    {"decided_here", *r.value}});
                               }));
          },
          [&](action::StopWorkers& a) { stopWorkers(a.signo, std::move(a.abortReason)); },
          [&](action::SignalWorkers& a) { workers_.signalAll(a.signo); },
          [&](action::Sweep&) { sweep(); },
          [&](action::MarkDone& a) {
            job_.markDone(a.round, a.groupWorldSize,
                          guarded<std::int64_t>([this](Result<std::int64_t> r) {
                            if (!r.ok()) log_->warn("could not report success: {}", r.message());
                            dispatch(event::DoneReported{r.ok()});
                          }));
          },
          [&](action::QueryState& a) {
            job_.state(a.round,
                       guarded<rendezvous::JobState>([this](Result<rendezvous::JobState> r) {
                         if (r.ok()) {
                           dispatch(event::StateRead{*r.value});
                         } else {
                           dispatch(event::JobLost{job_.describe() + ": " + r.message()});
                         }
                       }));
          },
          [&](action::Advance& a) {
            job_.advance(a.round, guarded<bool>([this](Result<bool> r) {
                           if (!r.ok()) log_->warn("could not start a new round: {}", r.message());
                         }));
          },
          [&](action::ReadFailures& a) { readFailures(a.round); },
          [&](action::PrintReport& a) { printReport(a.failures); },
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
          [&](action::ReadJobRecord&) {
            job_.readRecord(guarded<rendezvous::JobRecord>([this](Result<rendezvous::JobRecord> r) {
              event::JobRecordRead read;
              if (r.ok()) {
                read.failures = parseFailures(r.value->failures);
                read.record = std::move(*r.value);
              } else {
                read.error = r.message();
              }
              dispatch(std::move(read));
            }));
          },
          [&](action::CloseJob&) { job_.close(); },
          [&](action::Finish& a) { finish(a.code, a.outcome); },
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
    stallTimer_.cancel();  // the last group's watch; this one's starts with the workers
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
  outStreams_.assign(config_.nprocPerNode, std::nullopt);
  errStreams_.assign(config_.nprocPerNode, std::nullopt);
  for (int lr = 0; lr < config_.nprocPerNode; ++lr) {
    WorkerSpec spec;
    spec.localRank = lr;
    spec.rank = round.rankOffset + lr;
    spec.spawn.argv = workerArgv(config_, lr);
    spec.spawn.env =
        workerEnv(config_, round, lr, store, logDir_.errorFilePath(attempt, lr), hangEnv());
    spec.spawn.keepFds = context_.userFds;
    routeStreams(round, lr, spec.spawn, childEnds);
    specs.push_back(std::move(spec));
  }
  if (timer_) timer_->clear();  // a new group: nothing of the last one's stays armed
  hungRanks_.clear();
  if (stacks_) stacks_->prune();
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
  armStallWatch();
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

void Agent::routeStreams(const rendezvous::RoundInfo& round, int lr, SpawnSpec& spawn,
                         std::vector<UniqueFd>& childEnds) {
  // torchrun's rules: a redirected stream goes to its file only; a tee'd one to the file and,
  // prefixed, to the console; --local-ranks-filter silences the console of the others. dtrun
  // also passes the streams that torchrun leaves alone through the forwarder, so lines never
  // interleave mid-line and stderr's last lines are at hand for the report.
  const int attempt = static_cast<int>(round.round);
  const int tee = static_cast<int>(config_.tee.forRank(lr));
  const bool onConsole = !config_.localRanksFilter || config_.localRanksFilter->count(lr) != 0;
  const LinePrefixVars vars = linePrefixVars(config_, round, lr, context_.hostname);
  for (int bit : {static_cast<int>(Std::kOut), static_cast<int>(Std::kErr)}) {
    const bool isOut = bit == static_cast<int>(Std::kOut);
    const std::string file =
        isOut ? logDir_.stdoutPath(attempt, lr) : logDir_.stderrPath(attempt, lr);
    int& childFd = isOut ? spawn.stdoutFd : spawn.stderrFd;
    auto& streamId = isOut ? outStreams_[lr] : errStreams_[lr];
    if (streamToFileOnly(config_, lr, static_cast<Std>(bit))) {
      if (file.empty()) {
        childFd = -1;  // --log-dir /dev/null: nowhere to redirect to; keep the console
      } else {
        UniqueFd fd(
            ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (!fd) throw Error("cannot open " + file + ": " + std::strerror(errno));
        childFd = fd.get();
        childEnds.push_back(std::move(fd));
        continue;
      }
    }
    StreamOptions o;
    o.consoleFd = onConsole ? (isOut ? 1 : 2) : -1;
    if ((tee & bit) || !config_.logLinePrefixTemplate.empty()) {
      o.prefix = makeLinePrefix(config_.logLinePrefixTemplate, vars);
    }
    if (tee & bit) o.teeFile = file;
    o.filters = isOut ? config_.duplicateStdoutFilters : config_.duplicateStderrFilters;
    if (!o.filters.empty()) {
      o.filterFile =
          isOut ? logDir_.filteredStdoutPath(attempt) : logDir_.filteredStderrPath(attempt);
    }
    o.tailLines = isOut ? 0 : kDefaultTailLines;
    auto opened = forwarder_.open(std::move(o));
    streamId = opened.id;
    childFd = opened.writeEnd.get();
    childEnds.push_back(std::move(opened.writeEnd));
  }
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
  reapOrphans();  // an orphan's zombie may have waited behind this worker's
  if (timer_) timer_->clearOwner(localRank);
  // The worker is gone: take what is left in its pipes (a grandchild may still hold them).
  if (auto out = std::exchange(outStreams_[localRank], std::nullopt)) {
    forwarder_.drainAndClose(*out, [](std::vector<std::string>) {});
  }
  dispatch(event::WorkerExited{localRank, status});
  // Unless the policy collected it for a failure report, stderr goes the same way.
  if (auto err = std::exchange(errStreams_[localRank], std::nullopt)) {
    forwarder_.drainAndClose(*err, [](std::vector<std::string>) {});
  }
}

void Agent::collectFailure(int localRank, ExitStatus status) {
  const auto& w = workers_.worker(localRank);
  log_->error("agent: failed ({}) local_rank: {} (pid: {}) of {}", status.describe(), localRank,
              w.pid(), config_.entrypointName);
  FailedExit exit;
  exit.localRank = localRank;
  exit.rank = round_.rankOffset + localRank;
  exit.pid = w.pid();
  exit.exitCode = status.torchExitCode();
  exit.host = context_.hostname;
  exit.errorFile = logDir_.errorFilePath(static_cast<int>(round_.round), localRank);
  exit.observedAt = std::chrono::system_clock::now();
  auto done = [this, exit, execError = w.execError()](std::vector<std::string> tail) mutable {
    exit.stderrTail = std::move(tail);
    if (!execError.empty()) exit.stderrTail.push_back(execError);
    if (!finished_) dispatch(event::FailureCollected{buildProcessFailure(exit)});
  };
  if (auto err = std::exchange(errStreams_[localRank], std::nullopt)) {
    forwarder_.drainAndClose(*err, std::move(done));
  } else {
    done(tailFile(logDir_.stderrPath(static_cast<int>(round_.round), localRank)));
  }
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

void Agent::sweep() {
  workers_.sweep();
  // Daemonised grandchildren that left the worker's process group: ours as subreaper. With no
  // worker running, waitid() says at once whether this process has any child left at all; only
  // then is /proc scanned for them.
  std::set<int> keep = workers_.runningPids();
  if (standbys_) standbys_->addPids(keep);
  siginfo_t info{};
  const bool noChildren = keep.empty() &&
                          ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 &&
                          errno == ECHILD;
  if (!noChildren) {
    for (int pid : adoptedChildren(keep)) ::kill(pid, SIGKILL);
    reapOrphans();
  }
  if (context_.guard) {
    for (int g : workers_.groups()) context_.guard->remove(g);
  }
}

void Agent::readFailures(std::int64_t round) {
  job_.failures(
      round, guarded<std::vector<std::string>>([this](Result<std::vector<std::string>> r) {
        if (!r.ok()) {
          log_->warn("could not read the job's failures: {}", r.message());
        }
        dispatch(
            event::FailuresRead{parseFailures(r.ok() ? *r.value : std::vector<std::string>{})});
      }));
}

std::vector<ProcessFailure> Agent::parseFailures(const std::vector<std::string>& records) const {
  std::vector<ProcessFailure> failures;
  for (const auto& f : records) {
    try {
      failures.push_back(nlohmann::json::parse(f).get<ProcessFailure>());
    } catch (const std::exception& e) {
      log_->warn("unreadable failure record: {}", e.what());
    }
  }
  return failures;
}

void Agent::printReport(const std::vector<ProcessFailure>& failures) {
  std::fprintf(stderr, "%s\n", formatFailureReport(config_.entrypointName, failures).c_str());
  std::fflush(stderr);
  if (auto it = config_.baseEnv.find("TORCHELASTIC_ERROR_FILE");
      it != config_.baseEnv.end() && !it->second.empty()) {
    try {
      writeAgentErrorFile(it->second, failures[rootCauseIndex(failures)]);
    } catch (const std::exception& e) {
      log_->warn("could not write the agent's error file: {}", e.what());
    }
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
  stallTimer_.cancel();
  if (timer_) timer_->stop();
  if (standbys_) standbys_->stop();
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  sigchld_.cancel(ignored);
  job_.close();
  io_.stop();
}

void Agent::reapOrphans() {
  // Only adopted orphans (and a guard that died): a stray waitpid(-1) would steal a worker's
  // status from its WorkerProcess. So peek (WNOWAIT) at one exited child at a time and reap it
  // only when it is not a worker; a worker's zombie is left to its own handler, which calls
  // this again after reaping it.
  std::set<int> workers = workers_.runningPids();
  if (standbys_) standbys_->addPids(workers);  // standbys report their own exits too
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (workers.count(info.si_pid)) return;
    ::waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

void Agent::armSigchld() {
  sigchld_.async_wait([this](auto ec, int) {
    if (ec || finished_) return;
    reapOrphans();
    armSigchld();
  });
}

}  // namespace dtrun::agent

namespace dtrun::agent {

std::map<std::string, std::string> Agent::hangEnv() const {
  std::map<std::string, std::string> env;
  if (timer_) env["TORCHELASTIC_TIMER_FILE"] = timer_->path();
  if (stacks_) {
    if (auto it = config_.baseEnv.find("PYTHONPATH"); it != config_.baseEnv.end()) {
      env["PYTHONPATH"] = it->second;
    }
    stacks_->addTo(env);
  }
  return env;
}

std::optional<int> Agent::ownerOf(int pid) const {
  std::map<int, int> roots;
  for (std::size_t lr = 0; lr < workers_.size(); ++lr) {
    const auto& w = workers_.worker(static_cast<int>(lr));
    if (w.running() && w.pid() > 0) roots[w.pid()] = static_cast<int>(lr);
  }
  return agent::ownerOf(pid, roots);
}

void Agent::onTimerExpired(const TimerExpiry& e) {
  Hang hang;
  hang.kind = "timer";
  hang.scopeId = e.scopeId;
  hang.pid = e.pid;
  hang.deadlineMs = epochMs(e.deadline);
  hang.overstayMs = e.overstay.count();
  hang.signal = e.signal;
  dispatch(event::TimerExpired{e.owner, std::move(hang)});
}

void Agent::killHung(const action::KillHung& a) {
  hungRanks_.insert(a.localRanks.begin(), a.localRanks.end());
  auto kill = [this, ranks = a.localRanks, signo = a.signo] {
    for (int lr : ranks) workers_.stopOne(lr, signo, config_.shutdownTimeout);
  };
  if (!a.stacks || !stacks_) {
    kill();
    return;
  }
  std::vector<int> pids = a.stackPids;
  for (int lr : a.localRanks) {
    if (lr >= 0 && lr < static_cast<int>(workers_.size()))
      pids.push_back(workers_.worker(lr).pid());
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  stacks_->collect(pids, kStackBound, [this, kill, ranks = a.localRanks](std::string text) {
    if (finished_) return;
    if (!text.empty()) dispatch(event::StacksCollected{ranks, std::move(text)});
    kill();
  });
}

void Agent::armStallWatch() {
  groupStarted_ = std::chrono::steady_clock::now();  // also the metrics' start of progress
  if (!config_.stallTimeout) return;
  stallTimer_.expires_at(groupStarted_ + *config_.stallTimeout);
  stallTimer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !finished_) onStallWatch();
  });
}

std::optional<double> Agent::secondsSinceProgress() const {
  if (policy_.state() != Policy::State::kRunning) return std::nullopt;
  auto last = groupStarted_;
  if (auto t = forwarder_.lastOutput()) last = std::max(last, *t);
  if (timer_) {
    if (auto t = timer_->lastRequest()) last = std::max(last, *t);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count();
}

void Agent::onStallWatch() {
  if (policy_.state() != Policy::State::kRunning) return;  // the next start re-arms it
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  // The last sign of life: the group's start, any forwarded output, any timer request, and the
  // files the redirected streams write without the agent.
  Clock::time_point last = groupStarted_;
  if (auto t = forwarder_.lastOutput()) last = std::max(last, *t);
  if (timer_) {
    if (auto t = timer_->lastRequest()) last = std::max(last, *t);
  }
  const int attempt = static_cast<int>(round_.round);
  const auto sysNow = std::chrono::system_clock::now();
  for (int lr = 0; lr < config_.nprocPerNode; ++lr) {
    for (const auto& path : {logDir_.stdoutPath(attempt, lr), logDir_.stderrPath(attempt, lr)}) {
      struct stat st {};
      if (path.empty() || ::stat(path.c_str(), &st) != 0) continue;
      const auto mtime = std::chrono::system_clock::time_point(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec));
      last = std::max(last, now - std::chrono::duration_cast<Clock::duration>(sysNow - mtime));
    }
  }
  const auto quiet = now - last;
  if (quiet >= *config_.stallTimeout) {
    const auto lastSys =
        sysNow - std::chrono::duration_cast<std::chrono::system_clock::duration>(quiet);
    dispatch(event::Stalled{epochMs(lastSys),
                            std::chrono::duration_cast<std::chrono::milliseconds>(quiet)});
    return;
  }
  stallTimer_.expires_at(last + *config_.stallTimeout);
  stallTimer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !finished_) onStallWatch();
  });
}

}  // namespace dtrun::agent
