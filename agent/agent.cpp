#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/error_file.h"
#include "common/devices.h"
#include "common/error.h"
#include "common/signals.h"

namespace dtrun::agent {
namespace {

constexpr int kStderrTailLines = 20;

bool terminating(int signo) {
  return signo == SIGTERM || signo == SIGINT || signo == SIGHUP || signo == SIGQUIT;
}

std::string signalList(const std::vector<int>& signals) {
  std::string s;
  for (int sig : signals) {
    if (!s.empty()) s += ",";
    s += signalName(sig);
  }
  return s;
}

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
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != self || state == 'Z') continue;
    found.push_back(static_cast<int>(pid));
  }
  ::closedir(proc);
  return found;
}

}  // namespace

Agent::Agent(boost::asio::io_context& io, const LaunchConfig& config, JobLink& job,
             AgentContext context, std::shared_ptr<spdlog::logger> log)
    : io_(io),
      config_(config),
      job_(job),
      context_(std::move(context)),
      log_(std::move(log)),
      logDir_(config.logDir, config.rdzv.runId),
      // --event-log-handler console: torchrun's console handler prints each event on stderr.
      events_(config.eventLog, config.eventLogHandler == "console" ? STDERR_FILENO : -1),
      workers_(io),
      forwarder_(io),
      signals_(io),
      sigchld_(io, SIGCHLD),
      finishTimer_(io),
      abortTimer_(io) {}

const char* Agent::name(State s) {
  switch (s) {
    case State::kJoining:
      return "joining";
    case State::kRunning:
      return "running";
    case State::kStopping:
      return "stopping";
    case State::kDoneWaiting:
      return "done_waiting";
    case State::kIdle:
      return "idle";
    case State::kFinishing:
      return "finishing";
    case State::kFinished:
      return "finished";
  }
  return "?";
}

void Agent::transition(State next) {
  if (next == state_) return;
  log_->debug("agent: {} -> {}", name(state_), name(next));
  if (state_ == State::kRunning || state_ == State::kDoneWaiting) advanceAsked_ = false;
  state_ = next;
}

int Agent::run() {
  // Orphans of our workers (daemonised grandchildren) are re-parented to us instead of init, so
  // the stop sweep can end them: nothing dtrun started outlives it.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  armSignals();
  armSigchld();
  log_->info("agent: log directory set to: {}",
             logDir_.runDir().empty() ? "<none>" : logDir_.runDir());
  job_.watch([this] { onEpoch(); }, [this](std::string why) { onStoreLost(why); });
  join();
  io_.run();
  return exitCode_;
}

void Agent::armSignals() {
  for (int sig : config_.signalsToHandle) {
    boost::system::error_code ec;
    signals_.add(sig, ec);
    if (ec) log_->warn("agent: cannot handle signal {}: {}", sig, ec.message());
  }
  signals_.async_wait([this](auto ec, int signo) {
    if (ec) return;
    onSignal(signo);
    if (state_ != State::kFinished) armSignals();
  });
}

void Agent::join() {
  transition(State::kJoining);
  log_->info("agent: [{}] rendezvous'ing worker group", config_.role);
  job_.join([this](Result<rendezvous::RoundInfo> r) {
    if (state_ != State::kJoining) return;
    if (!r.ok()) {
      log_->error("rendezvous failed: {}", r.message());
      events_.record("shutdown", {{"reason", "rendezvous_failed"}, {"error", r.message()}});
      finish(1);
      return;
    }
    onJoined(*r.value);
  });
}

void Agent::onJoined(const rendezvous::RoundInfo& round) {
  round_ = round;
  haveRound_ = true;
  localFailures_.clear();
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : round.nodes) nodes.push_back(n);
  events_.record("rendezvous_done", {{"round", round.round},
                                     {"group_rank", round.groupRank},
                                     {"group_world_size", round.groupWorldSize},
                                     {"rank_offset", round.rankOffset},
                                     {"world_size", round.worldSize},
                                     {"nodes", nodes}});
  job_.workerStore(round, [this](Result<WorkerStore> r) {
    if (state_ != State::kJoining) return;
    if (!r.ok()) {
      log_->error("could not agree on MASTER_ADDR:MASTER_PORT: {}", r.message());
      finish(1);
      return;
    }
    startWorkers(r.value->addr, r.value->port);
  });
}

void Agent::startWorkers(const std::string& masterAddr, std::uint16_t masterPort) {
  const auto attempt = static_cast<int>(round_.round);
  logDir_.prepareAttempt(attempt, config_.nprocPerNode);
  std::vector<WorkerSpec> specs;
  std::vector<UniqueFd> childEnds;  // closed once the workers are spawned
  outStreams_.assign(config_.nprocPerNode, std::nullopt);
  errStreams_.assign(config_.nprocPerNode, std::nullopt);
  for (int lr = 0; lr < config_.nprocPerNode; ++lr) {
    WorkerSpec spec;
    spec.localRank = lr;
    spec.rank = round_.rankOffset + lr;
    spec.spawn.argv = workerArgv(lr);
    spec.spawn.env = workerEnv(lr, masterAddr, masterPort);
    spec.spawn.keepFds = context_.userFds;
    routeStreams(lr, spec.spawn, childEnds);
    specs.push_back(std::move(spec));
  }
  transition(State::kRunning);
  log_->info("agent: [{}] starting worker group: round {}, ranks {}..{} of {}, master {}:{}",
             config_.role, round_.round, round_.rankOffset,
             round_.rankOffset + config_.nprocPerNode - 1, round_.worldSize, masterAddr,
             masterPort);
  workers_.start(specs, [this](int lr, ExitStatus s) { onWorkerExit(lr, s); });
  if (context_.guard) {
    for (int g : workers_.groups()) context_.guard->add(g);
  }
  childEnds.clear();  // the workers hold their ends now; ours must close for EOF to come
  for (int lr = 0; lr < config_.nprocPerNode; ++lr) {
    events_.record("worker_started", {{"round", round_.round},
                                      {"local_rank", lr},
                                      {"rank", round_.rankOffset + lr},
                                      {"pid", workers_.worker(lr).pid()}});
  }
  // Something may have happened while we were starting (a failure elsewhere, a node leaving).
  queryState();
}

void Agent::routeStreams(int lr, SpawnSpec& spawn, std::vector<UniqueFd>& childEnds) {
  // torchrun's rules (spec §5.10): a redirected stream goes to its file only; a tee'd one to the
  // file and, prefixed, to the console; --local-ranks-filter silences the console of the
  // others. dtrun also passes the streams that torchrun leaves alone through the forwarder, so
  // lines never interleave mid-line and stderr's last lines are at hand for the report.
  const int attempt = static_cast<int>(round_.round);
  const int redirect = static_cast<int>(config_.redirects.forRank(lr));
  const int tee = static_cast<int>(config_.tee.forRank(lr));
  const bool onConsole = !config_.localRanksFilter || config_.localRanksFilter->count(lr) != 0;
  LinePrefixVars vars;
  vars.roleName = config_.role;
  vars.rank = round_.rankOffset + lr;
  vars.localRank = lr;
  vars.host = context_.hostname;
  vars.nodeRank = round_.groupRank;
  vars.restart = attempt;
  for (int bit : {static_cast<int>(Std::kOut), static_cast<int>(Std::kErr)}) {
    const bool isOut = bit == static_cast<int>(Std::kOut);
    const std::string file =
        isOut ? logDir_.stdoutPath(attempt, lr) : logDir_.stderrPath(attempt, lr);
    int& childFd = isOut ? spawn.stdoutFd : spawn.stderrFd;
    auto& streamId = isOut ? outStreams_[lr] : errStreams_[lr];
    if ((redirect & bit) && !(tee & bit)) {
      if (file.empty()) {
        childFd = -1;  // --log-dir /dev/null: nowhere to redirect to; keep the console
      } else {
        UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
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

std::vector<std::string> Agent::workerArgv(int localRank) const {
  std::vector<std::string> argv;
  for (const auto& a : config_.entrypoint) argv.push_back(a);
  for (const auto& a : config_.scriptArgs) {
    argv.push_back(safeSubstitute(a, {{"local_rank", std::to_string(localRank)}}));
  }
  return argv;
}

std::vector<std::string> Agent::workerEnv(int localRank, const std::string& masterAddr,
                                          std::uint16_t masterPort) const {
  std::map<std::string, std::string> env = config_.baseEnv;
  const int nproc = config_.nprocPerNode;
  const int rank = round_.rankOffset + localRank;
  // Role ranks: the prefix sum over nodes of the same role, in group rank order.
  int roleRank = rank;
  int roleWorldSize = round_.worldSize;
  bool allKnown = round_.mixedRoles && !round_.nodes.empty();
  for (const auto& n : round_.nodes) allKnown = allKnown && n.pid != 0;
  if (allKnown) {
    roleRank = localRank;
    roleWorldSize = 0;
    for (int g = 0; g < static_cast<int>(round_.nodes.size()); ++g) {
      if (round_.nodes[g].role != config_.role) continue;
      roleWorldSize += round_.nodes[g].nproc;
      if (g < round_.groupRank) roleRank += round_.nodes[g].nproc;
    }
  }
  env["LOCAL_RANK"] = std::to_string(config_.virtualLocalRank ? 0 : localRank);
  env["RANK"] = std::to_string(rank);
  env["GROUP_RANK"] = std::to_string(round_.groupRank);
  env["ROLE_RANK"] = std::to_string(roleRank);
  env["ROLE_NAME"] = config_.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(nproc);
  env["WORLD_SIZE"] = std::to_string(round_.worldSize);
  env["GROUP_WORLD_SIZE"] = std::to_string(round_.groupWorldSize);
  env["ROLE_WORLD_SIZE"] = std::to_string(roleWorldSize);
  env["MASTER_ADDR"] = masterAddr;
  env["MASTER_PORT"] = std::to_string(masterPort);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(round_.round);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(config_.maxRestarts);
  env["TORCHELASTIC_RUN_ID"] = config_.rdzv.runId;
  env["TORCHELASTIC_USE_AGENT_STORE"] = config_.agentStore ? "True" : "False";
  // (TORCH_)NCCL_ASYNC_ERROR_HANDLING: baseEnv holds the name the workers' torch reads, as the
  // launcher chose it (launcher/torch_probe.h).
  env["TORCHELASTIC_ERROR_FILE"] = logDir_.errorFilePath(static_cast<int>(round_.round), localRank);
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = signalList(config_.signalsToHandle);
  if (config_.virtualLocalRank) {
    // Each worker sees only its own device, as LOCAL_RANK 0 (newest torchrun).
    std::string device = std::to_string(localRank);
    if (auto it = config_.baseEnv.find("CUDA_VISIBLE_DEVICES"); it != config_.baseEnv.end()) {
      const auto ids = parseVisibleDevices(it->second).entries();
      if (localRank < static_cast<int>(ids.size())) device = ids[localRank];
    }
    env["CUDA_VISIBLE_DEVICES"] = device;
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
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
       {"signal", status.signal ? nlohmann::json(*status.signal) : nlohmann::json(nullptr)}});
  if (!w.execError().empty()) log_->error("worker {}: {}", localRank, w.execError());
  reapOrphans();  // an orphan's zombie may have waited behind this worker's
  // The worker is gone: take what is left in its pipes (a grandchild may still hold them).
  if (auto out = std::exchange(outStreams_[localRank], std::nullopt)) {
    forwarder_.drainAndClose(*out, [](std::vector<std::string>) {});
  }
  if (state_ != State::kRunning) {
    if (auto err = std::exchange(errStreams_[localRank], std::nullopt)) {
      forwarder_.drainAndClose(*err, [](std::vector<std::string>) {});
    }
    return;  // expected: we are stopping them
  }
  if (status.success()) {
    if (auto err = std::exchange(errStreams_[localRank], std::nullopt)) {
      forwarder_.drainAndClose(*err, [](std::vector<std::string>) {});
    }
    if (workers_.anyRunning()) return;
    sweepWorkers();
    log_->info("agent: [{}] local worker group finished (SUCCEEDED); waiting for the other nodes",
               config_.role);
    transition(State::kDoneWaiting);
    job_.markDone(round_.round, round_.groupWorldSize, [this](Result<std::int64_t> r) {
      if (!r.ok()) log_->warn("could not report success: {}", r.message());
    });
    return;
  }
  // A failure. Stop the rest of the group first (all or nothing), then read what the worker
  // left on stderr for the report.
  transition(State::kStopping);
  const int rank = round_.rankOffset + localRank;
  if (auto err = std::exchange(errStreams_[localRank], std::nullopt)) {
    forwarder_.drainAndClose(*err, [this, localRank, status](std::vector<std::string> tail) {
      onWorkerFailed(localRank, status, std::move(tail));
    });
  } else {
    onWorkerFailed(localRank, status,
                   tailFile(logDir_.stderrPath(static_cast<int>(round_.round), localRank)));
  }
  abortAndStop("rank " + std::to_string(rank) + " on " + context_.hostname + " failed with " +
                   status.describe(),
               [this] {
                 transition(State::kIdle);
                 queryState();
               });
}

void Agent::onWorkerFailed(int localRank, ExitStatus status, std::vector<std::string> stderrTail) {
  // Record the failure job-wide and let the job's state decide what comes next.
  const auto& w = workers_.worker(localRank);
  const int rank = round_.rankOffset + localRank;
  log_->error("agent: failed ({}) local_rank: {} (pid: {}) of {}", status.describe(), localRank,
              w.pid(), config_.entrypointName);
  FailedExit exit;
  exit.localRank = localRank;
  exit.rank = rank;
  exit.pid = w.pid();
  exit.exitCode = status.torchExitCode();
  exit.host = context_.hostname;
  exit.errorFile = logDir_.errorFilePath(static_cast<int>(round_.round), localRank);
  exit.observedAt = std::chrono::system_clock::now();
  exit.stderrTail = std::move(stderrTail);
  if (!w.execError().empty()) exit.stderrTail.push_back(w.execError());
  ProcessFailure failure = buildProcessFailure(exit);
  localFailures_.push_back(failure);
  const std::int64_t failedRound = round_.round;
  job_.reportFailure(round_.round, nlohmann::json(failure).dump(), config_.maxRestarts,
                     [this, failedRound](Result<bool> r) {
                       if (!r.ok()) {
                         log_->error("could not report the failure: {}", r.message());
                         return;
                       }
                       events_.record("restart_decided", {{"round", failedRound},
                                                          {"reason", "worker_failure"},
                                                          {"decided_here", *r.value}});
                     });
}

void Agent::stopWorkers(int signo, std::function<void()> then) {
  workers_.stop(signo, config_.shutdownTimeout, [this, then = std::move(then)] {
    sweepWorkers();
    if (then) then();
  });
}

void Agent::abortAndStop(const std::string& reason, std::function<void()> then) {
  // Native workers blocked in a collective on a dead peer return at once when they see the key;
  // SIGTERM then finds them out of NCCL. The bound keeps a slow store from delaying the stop.
  auto started = std::make_shared<bool>(false);
  auto stop = [this, started, then = std::move(then)]() mutable {
    if (*started) return;
    *started = true;
    abortTimer_.cancel();
    stopWorkers(SIGTERM, std::move(then));
  };
  auto shared = std::make_shared<decltype(stop)>(std::move(stop));
  abortTimer_.expires_after(std::chrono::milliseconds(200));
  abortTimer_.async_wait([shared](boost::system::error_code ec) {
    if (!ec) (*shared)();
  });
  job_.abortWorkers(round_.round, reason, [shared] { (*shared)(); });
}

void Agent::sweepWorkers() {
  workers_.sweep();
  // Daemonised grandchildren that left the worker's process group: ours as subreaper. With no
  // worker running, waitid() says at once whether this process has any child left at all; only
  // then is /proc scanned for them.
  std::set<int> keep = workers_.runningPids();
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

void Agent::onEpoch() { queryState(); }

void Agent::queryState() {
  if (!haveRound_ || state_ == State::kJoining || state_ == State::kFinished) return;
  if (queryInFlight_) {
    requery_ = true;
    return;
  }
  queryInFlight_ = true;
  job_.state(round_.round, [this](Result<rendezvous::JobState> r) {
    queryInFlight_ = false;
    if (!r.ok()) {
      onStoreLost(r.message());
      return;
    }
    onState(*r.value);
    if (requery_) {
      requery_ = false;
      queryState();
    }
  });
}

void Agent::onState(const rendezvous::JobState& s) {
  if (state_ == State::kJoining || state_ == State::kFinished || shuttingDown_) return;
  if (s.final) {
    finishFailed(*s.final);
    return;
  }
  if (state_ == State::kFinishing) {
    // This node serves the store: leave once every other member has disconnected.
    if (s.gone >= round_.groupWorldSize - 1) finish(0);
    return;
  }
  if (s.round > round_.round) {
    if (state_ == State::kStopping) return;  // we come back here when the workers are gone
    log_->warn("agent: [{}] round {} is over; restarting into round {}", config_.role, round_.round,
               s.round);
    events_.record("restart_decided", {{"round", round_.round}, {"next_round", s.round}});
    transition(State::kStopping);
    abortAndStop("round " + std::to_string(round_.round) + " is over", [this] { join(); });
    return;
  }
  if (state_ == State::kDoneWaiting && s.done >= round_.groupWorldSize) {
    events_.record("shutdown", {{"reason", "succeeded"}, {"round", round_.round}});
    if (job_.servesOthers() && round_.groupWorldSize > 1) {
      // The others still need the store to see that the job is done; wait for them to go,
      // but not for ever.
      transition(State::kFinishing);
      finishTimer_.expires_after(config_.rdzv.closeTimeout);
      finishTimer_.async_wait([this](auto ec) {
        if (!ec) finish(0);
      });
      queryState();
      return;
    }
    finish(0);
    return;
  }
  const bool roomForLate = s.waiting > 0 && round_.groupWorldSize < config_.rdzv.maxNodes;
  if ((s.gone > 0 || roomForLate) && !advanceAsked_ &&
      (state_ == State::kRunning || state_ == State::kDoneWaiting || state_ == State::kIdle)) {
    advanceAsked_ = true;
    log_->warn("agent: [{}] {}; starting a new round", config_.role,
               s.gone > 0 ? "a node left the job" : "a new node is waiting to join");
    job_.advance(round_.round, [this](Result<bool> r) {
      if (!r.ok()) log_->warn("could not start a new round: {}", r.message());
    });
  }
}

void Agent::finishFailed(const std::string& finalJson) {
  if (state_ == State::kFinished || state_ == State::kFinishing) return;
  transition(State::kFinishing);
  const std::int64_t round = nlohmann::json::parse(finalJson).value("round", round_.round);
  stopWorkers(SIGTERM, [this, round] {
    job_.failures(round, [this](Result<std::vector<std::string>> r) {
      std::vector<ProcessFailure> failures;
      if (r.ok()) {
        for (const auto& f : *r.value) {
          try {
            failures.push_back(nlohmann::json::parse(f).get<ProcessFailure>());
          } catch (const std::exception& e) {
            log_->warn("unreadable failure record: {}", e.what());
          }
        }
      }
      if (failures.empty()) failures = localFailures_;
      std::sort(failures.begin(), failures.end(),
                [](const auto& a, const auto& b) { return a.rank < b.rank; });
      if (!failures.empty()) {
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
      events_.record("shutdown", {{"reason", "failed"}, {"round", round_.round}});
      finish(1);
    });
  });
}

void Agent::onSignal(int signo) {
  if (!terminating(signo)) {
    // SIGUSR1/SIGUSR2 and the like (Slurm's preemption warning): pass them on, keep running.
    log_->warn("agent: forwarding signal {} to the workers", signalName(signo));
    workers_.signalAll(signo);
    return;
  }
  if (shuttingDown_) {
    log_->warn("agent: second {}: killing the workers now", signalName(signo));
    workers_.signalAll(SIGKILL);
    return;
  }
  shuttingDown_ = true;
  // Workers dying of the signal we forward are not failures: leave the running state first.
  if (state_ == State::kRunning || state_ == State::kDoneWaiting) transition(State::kStopping);
  log_->warn("agent: received {} death signal, shutting down workers", signalName(signo));
  events_.record("shutdown", {{"reason", "signal"}, {"signal", signo}});
  // The rendezvous stays open: our connection closing tells the other nodes we left.
  stopWorkers(signo, [this] { finish(1); });
}

void Agent::onStoreLost(const std::string& why) {
  if (state_ == State::kFinished) return;
  if (state_ == State::kFinishing && job_.servesOthers()) return;
  log_->error("agent: lost the rendezvous {}: {}", job_.describe(), why);
  events_.record("shutdown", {{"reason", "store_lost"}, {"error", why}});
  shuttingDown_ = true;
  // The workers we stop now are not failures.
  if (state_ == State::kRunning || state_ == State::kDoneWaiting) transition(State::kStopping);
  job_.close();
  stopWorkers(SIGTERM, [this] { finish(1); });
}

void Agent::finish(int code) {
  if (state_ == State::kFinished) return;
  transition(State::kFinished);
  exitCode_ = code;
  logDir_.removeIfEmpty();
  finishTimer_.cancel();
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
  const std::set<int> workers = workers_.runningPids();
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (workers.count(info.si_pid)) return;
    ::waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

void Agent::armSigchld() {
  sigchld_.async_wait([this](auto ec, int) {
    if (ec || state_ == State::kFinished) return;
    reapOrphans();
    armSigchld();
  });
}

}  // namespace dtrun::agent
