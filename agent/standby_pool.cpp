#include "agent/standby_pool.h"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <filesystem>

#include "agent/standby_bootstrap_text.h"
#include "agent/worker_env.h"
#include "common/error.h"
#include "common/file_util.h"

namespace dtrun::agent {
namespace {

// A rank whose standbys keep dying without ever taking a round stops getting new ones.
constexpr int kMaxDeathsInARow = 3;

// Run by the probe's interpreter only if dtrun's start-up hook did not intercept it first.
constexpr const char* kProbeScript =
    "# Written by dtrun (--prewarm): runs only when the interpreter skipped dtrun's start-up "
    "hook.\nraise SystemExit(3)\n";

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ",") + i;
  return out;
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double mib(std::uint64_t kib) { return static_cast<double>(kib) / 1024.0; }

}  // namespace

StandbyPool::StandbyPool(boost::asio::io_context& io, const LaunchConfig& config,
                         StandbyPoolContext context, EventLog& events,
                         std::shared_ptr<spdlog::logger> log)
    : io_(io),
      config_(config),
      context_(std::move(context)),
      events_(events),
      log_(std::move(log)),
      modules_(joined(config.prewarm)),
      slots_(static_cast<std::size_t>(config.nprocPerNode)),
      deadline_(io) {
  dir_ = makePrivateTempDir("dtrun-prewarm", "prewarm");
  writeWholeFile(dir_ + "/sitecustomize.py", kStandbyBootstrap, 0600, "prewarm hook");
  writeWholeFile(dir_ + "/dtrun_prewarm_probe.py", kProbeScript, 0600, "prewarm probe");
}

StandbyPool::~StandbyPool() {
  stop();
  *alive_ = false;
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

SpawnSpec StandbyPool::specFor(int localRank, bool probe) const {
  StandbyEnvironment split = standbyEnvironment(config_, localRank, context_.extraEnv);
  auto& env = split.known;
  // The hook's directory first on PYTHONPATH; the worker's own value is restored in os.environ
  // before the imports (and the directory taken off sys.path).
  if (auto it = env.find("PYTHONPATH"); it != env.end()) {
    env["DTRUN_STANDBY_PYTHONPATH"] = it->second;
    it->second = it->second.empty() ? dir_ : dir_ + ":" + it->second;
  } else {
    env["PYTHONPATH"] = dir_;
  }
  env["DTRUN_STANDBY_MODULES"] = modules_;
  env["DTRUN_STANDBY_ROUND_VARS"] = joined(split.perRound);
  env["DTRUN_STANDBY_MAIN_MODULE"] = config_.module ? config_.script : "";
  std::vector<std::string> keep;
  for (int fd : context_.userFds) keep.push_back(std::to_string(fd));
  env["DTRUN_STANDBY_KEEP_FDS"] = joined(keep);
  if (probe) env["DTRUN_STANDBY_PROBE"] = "1";
  SpawnSpec s;
  s.argv = workerArgv(config_, localRank);
  if (probe) s.argv = {s.argv.front(), "-u", dir_ + "/dtrun_prewarm_probe.py"};
  s.env.emplace();
  for (const auto& [k, v] : env) s.env->push_back(k + "=" + v);
  s.keepFds = context_.userFds;
  return s;
}

void StandbyPool::start() {
  if (state_ != State::kIdle) return;
  state_ = State::kProbing;
  try {
    probe_ = std::make_unique<Standby>(
        io_, specFor(0, true), PreloadStream::kPipe, PreloadStream::kPipe,
        [this](const StandbyMessage& m) { onProbeMessage(m); },
        [this](ExitStatus s) { onProbeExit(s); });
  } catch (const std::exception& e) {
    disable(e.what());
  }
}

void StandbyPool::onProbeMessage(const StandbyMessage& m) {
  if (m.kind == 'P') probeAnswered_ = true;
  if (m.kind == 0) probeClosed_ = true;
  probeDecide();
}

void StandbyPool::onProbeExit(ExitStatus status) {
  probeExit_ = status;
  probeDecide();
}

void StandbyPool::probeDecide() {
  // Both the socket's end (so that an answer sent just before the exit is not missed) and the
  // exit status (for the line saying why) are needed.
  if (state_ != State::kProbing || !probeClosed_ || !probeExit_) return;
  const std::string python = config_.entrypoint.empty() ? config_.python : config_.entrypoint[0];
  std::string execError = probe_ ? probe_->execError() : "";
  release(std::move(probe_));
  if (!execError.empty()) return disable(execError);
  if (!probeAnswered_ || !probeExit_->success()) {
    return disable("the workers' interpreter " + python + " did not run dtrun's start-up hook (" +
                   probeExit_->describe() +
                   "): it ignores PYTHONPATH or sitecustomize (-I, -E, -S, or a wrapper that "
                   "adds them)");
  }
  state_ = State::kOn;
  refill();
  if (deferred_) armDeadline();
}

void StandbyPool::spawn(int localRank) {
  Slot& slot = slots_[static_cast<std::size_t>(localRank)];
  const std::uint64_t serial = ++serial_;
  slot.serial = serial;
  try {
    slot.standby = std::make_unique<Standby>(
        io_, specFor(localRank, false),
        preloadStream(config_, context_.logsDisabled, localRank, Std::kOut),
        preloadStream(config_, context_.logsDisabled, localRank, Std::kErr),
        [this, localRank, serial](const StandbyMessage& m) { onMessage(localRank, serial, m); },
        [this, localRank, serial](ExitStatus s) { onStandbyExit(localRank, serial, s); });
  } catch (const std::exception& e) {
    slot.standby.reset();
    return disable(e.what());
  }
  const int pid = slot.standby->pid();
  if (context_.guard) context_.guard->add(pid);
  events_.record("standby_started", {{"local_rank", localRank}, {"pid", pid}});
}

void StandbyPool::onMessage(int localRank, std::uint64_t serial, const StandbyMessage& m) {
  if (auto it = handedOver_.find(serial); it != handedOver_.end()) {
    return onHandedOverMessage(localRank, serial, m);
  }
  Slot& slot = slots_[static_cast<std::size_t>(localRank)];
  if (slot.serial != serial || !slot.standby) return;
  const int pid = slot.standby->pid();
  switch (m.kind) {
    case 'R':
      return onReady(localRank, *slot.standby, m.text);
    case 'U':
      return disable("the standby of local rank " + std::to_string(localRank) + " (pid " +
                     std::to_string(pid) + ") cannot become a worker: " + m.text);
    case 'E':
      return disable(m.text);
    default:
      return;  // end-of-file before a hand-over: the process is exiting, its exit says how
  }
}

void StandbyPool::onReady(int localRank, Standby& s, const std::string& text) {
  s.setReady();
  const double took = seconds(std::chrono::steady_clock::now() - s.started());
  const MemoryUse mem = memoryOf(s.pid());
  log_->info(
      "prewarm: the standby of local rank {} (pid {}) imported {} in {:.2f} s: {:.1f} MiB "
      "resident, {:.1f} MiB proportional",
      localRank, s.pid(), modules_, took, mib(mem.rssKib), mib(mem.pssKib));
  events_.record("standby_ready", {{"local_rank", localRank},
                                   {"pid", s.pid()},
                                   {"modules", modules_},
                                   {"preload_ms", static_cast<std::int64_t>(took * 1000)},
                                   {"rss_kib", mem.rssKib},
                                   {"pss_kib", mem.pssKib},
                                   {"native_threads", std::atoi(text.c_str())}});
  if (!costReported_) reportCost();
  settle();
}

void StandbyPool::reportCost() {
  // Once per job, when every local rank has its standby: what prewarming costs this node.
  MemoryUse total;
  for (const auto& slot : slots_) {
    if (!slot.standby || !slot.standby->ready()) return;
    const MemoryUse m = memoryOf(slot.standby->pid());
    total.rssKib += m.rssKib;
    total.pssKib += m.pssKib;
  }
  costReported_ = true;
  log_->warn(
      "prewarm: {} standby interpreter(s) with {} imported hold {:.1f} MiB resident "
      "({:.1f} MiB proportional) besides the workers",
      slots_.size(), modules_, mib(total.rssKib), mib(total.pssKib));
  events_.record("prewarm_cost", {{"standbys", slots_.size()},
                                  {"modules", modules_},
                                  {"rss_kib", total.rssKib},
                                  {"pss_kib", total.pssKib}});
}

void StandbyPool::onStandbyExit(int localRank, std::uint64_t serial, ExitStatus status) {
  Slot& slot = slots_[static_cast<std::size_t>(localRank)];
  if (slot.serial != serial || !slot.standby) return;
  // What it said before it ended (an import's error, "unfit") decides, not the exit alone.
  slot.standby->receive();
  if (slot.serial != serial || !slot.standby) return;
  const int pid = slot.standby->pid();
  const bool wasReady = slot.standby->ready();
  const std::string execError = slot.standby->execError();
  if (pid > 0) ::kill(-pid, SIGKILL);  // what the imports may have started in its group
  if (context_.guard) context_.guard->remove(pid);
  release(std::move(slot.standby));
  events_.record(
      "standby_exited",
      {{"local_rank", localRank},
       {"pid", pid},
       {"exit_code", status.signal ? nlohmann::json(nullptr) : nlohmann::json(status.code)},
       {"signal", status.signal ? nlohmann::json(*status.signal) : nlohmann::json(nullptr)}});
  if (state_ != State::kOn) return settle();
  if (!execError.empty()) return disable(execError);
  slot.lost = "its standby (pid " + std::to_string(pid) + ") ended with " + status.describe() +
              (wasReady ? " while it waited for the round" : " while it imported " + modules_);
  log_->info("prewarm: local rank {}: {}", localRank, slot.lost);
  if (++slot.deaths >= kMaxDeathsInARow) {
    return disable("the standbys of local rank " + std::to_string(localRank) + " died " +
                   std::to_string(slot.deaths) + " times in a row (last: " + slot.lost + ")");
  }
  settle();
}

std::unique_ptr<WorkerProcess> StandbyPool::claim(int localRank, const SpawnSpec& worker,
                                                  WorkerProcess::ExitHandler onExit) {
  if (state_ != State::kOn || localRank < 0 || localRank >= static_cast<int>(slots_.size())) {
    return nullptr;
  }
  Slot& slot = slots_[static_cast<std::size_t>(localRank)];
  auto fallback = [&](const std::string& why) {
    log_->warn("prewarm: local rank {} starts cold: {}", localRank, why);
    events_.record("prewarm_fallback", {{"local_rank", localRank}, {"reason", why}});
  };
  if (!slot.standby) {
    fallback(slot.lost.empty() ? std::string("it has no standby") : slot.lost);
    slot.lost.clear();
    return nullptr;
  }
  std::string why;
  const int pid = slot.standby->pid();
  auto process = slot.standby->handOver(worker, std::move(onExit), why);
  if (!process) {
    fallback("its standby (pid " + std::to_string(pid) + ") " + why);
    drop(localRank, why);
    return nullptr;
  }
  slot.deaths = 0;
  handedOver_[slot.serial] = std::move(slot.standby);
  return process;
}

void StandbyPool::onHandedOverMessage(int localRank, std::uint64_t serial,
                                      const StandbyMessage& m) {
  auto it = handedOver_.find(serial);
  const int pid = it->second->pid();
  if (m.kind == 'F') {
    log_->warn("prewarm: local rank {} (pid {}) restarted itself cold at its hand-over: {}",
               localRank, pid, m.text);
    events_.record(
        "prewarm_fallback",
        {{"local_rank", localRank}, {"pid", pid}, {"reason", m.text}, {"after_handover", true}});
  }
  if (m.kind == 0) {
    release(std::move(it->second));
    handedOver_.erase(it);
  }
}

void StandbyPool::refill() {
  if (state_ != State::kOn) return;
  for (int lr = 0; lr < static_cast<int>(slots_.size()); ++lr) {
    if (!slots_[static_cast<std::size_t>(lr)].standby) spawn(lr);
    if (state_ != State::kOn) return;
  }
}

void StandbyPool::drop(int localRank, const std::string& why) {
  Slot& slot = slots_[static_cast<std::size_t>(localRank)];
  if (!slot.standby) return;
  const int pid = slot.standby->pid();
  slot.standby.reset();  // kills its group and reaps it
  if (context_.guard) context_.guard->remove(pid);
  events_.record("standby_stopped", {{"local_rank", localRank}, {"pid", pid}, {"reason", why}});
}

void StandbyPool::release(std::unique_ptr<Standby> standby) {
  // Never destroyed from inside one of its own handlers.
  if (standby) boost::asio::post(io_, [s = std::shared_ptr<Standby>(std::move(standby))] {});
}

void StandbyPool::disable(const std::string& why) {
  if (state_ == State::kOff) return;
  state_ = State::kOff;
  log_->warn("prewarm: off for the rest of this job, workers start cold: {}", why);
  events_.record("prewarm_disabled", {{"reason", why}});
  if (probe_) release(std::move(probe_));
  for (int lr = 0; lr < static_cast<int>(slots_.size()); ++lr) drop(lr, "prewarming is off");
  settle();
}

void StandbyPool::stop() {
  const bool wasOff = state_ == State::kOff;
  state_ = State::kOff;
  cancelDeferred();
  probe_.reset();
  if (!wasOff) {
    for (int lr = 0; lr < static_cast<int>(slots_.size()); ++lr) drop(lr, "the agent stops");
  }
  handedOver_.clear();
}

void StandbyPool::addPids(std::set<int>& pids) const {
  if (probe_ && probe_->pid() > 0) pids.insert(probe_->pid());
  for (const auto& slot : slots_) {
    if (slot.standby && slot.standby->pid() > 0) pids.insert(slot.standby->pid());
  }
}

bool StandbyPool::importing() const {
  if (state_ == State::kProbing) return true;
  if (state_ != State::kOn) return false;
  for (const auto& slot : slots_) {
    if (slot.standby && !slot.standby->ready()) return true;
  }
  return false;
}

bool StandbyPool::deferStart(std::function<void()> start) {
  if (!importing()) return false;
  const std::uint64_t generation = ++generation_;
  deferred_ = [this, generation, start = std::move(start)] {
    if (generation == generation_) start();
  };
  armDeadline();
  return true;
}

void StandbyPool::cancelDeferred() {
  ++generation_;
  deferred_ = nullptr;
  deadline_.cancel();
}

void StandbyPool::settle() {
  if (!deferred_ || importing()) return;
  deadline_.cancel();
  boost::asio::post(io_, std::exchange(deferred_, nullptr));
}

void StandbyPool::armDeadline() {
  // The earliest moment a standby still importing overstays --prewarm-timeout.
  std::optional<std::chrono::steady_clock::time_point> first;
  auto consider = [&](const Standby& s) {
    const auto due = s.started() + config_.prewarmTimeout;
    if (!first || due < *first) first = due;
  };
  if (probe_) consider(*probe_);
  for (const auto& slot : slots_) {
    if (slot.standby && !slot.standby->ready()) consider(*slot.standby);
  }
  if (!first) return;
  deadline_.expires_at(*first);
  deadline_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive || !deferred_) return;
    const auto now = std::chrono::steady_clock::now();
    const double limit = seconds(config_.prewarmTimeout);
    if (probe_ && probe_->started() + config_.prewarmTimeout <= now) {
      return disable("the probe of the workers' interpreter did not finish within " +
                     fmt::format("{:.1f}", limit) + " s (--prewarm-timeout)");
    }
    for (std::size_t lr = 0; lr < slots_.size(); ++lr) {
      const auto& s = slots_[lr].standby;
      if (s && !s->ready() && s->started() + config_.prewarmTimeout <= now) {
        return disable("the standby of local rank " + std::to_string(lr) + " (pid " +
                       std::to_string(s->pid()) + ") had not imported " + modules_ + " after " +
                       fmt::format("{:.1f}", limit) + " s (--prewarm-timeout)");
      }
    }
    armDeadline();
  });
}

}  // namespace dtrun::agent
