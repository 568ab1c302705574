#include "agent/hang_watch.h"

#include <algorithm>

namespace dtrun::agent {
namespace {

std::int64_t epochMs(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

HangWatch::HangWatch(boost::asio::io_context& io, const LaunchConfig& config, Hooks hooks,
                     std::shared_ptr<spdlog::logger> log)
    : io_(io),
      config_(config),
      hooks_(std::move(hooks)),
      log_(std::move(log)),
      stall_(
          io, config.stallTimeout, [this] { return lastSign(); }, hooks_.onStalled) {}

void HangWatch::start() {
  if (config_.fileTimer && !timer_) {
    timer_ = std::make_unique<FileTimerServer>(
        io_, config_.timerFile, hooks_.ownerOf,
        [this](const TimerExpiry& e) {
          Hang hang;
          hang.kind = "timer";
          hang.scopeId = e.scopeId;
          hang.pid = e.pid;
          hang.deadlineMs = epochMs(e.deadline);
          hang.overstayMs = e.overstay.count();
          hang.signal = e.signal;
          hooks_.onTimerExpired(e.owner, std::move(hang));
        },
        log_);
    timer_->start();
  }
  if (config_.dumpStacks && !stacks_) stacks_ = std::make_unique<StackDump>(io_);
}

void HangWatch::stop() {
  stall_.cancel();
  if (timer_) timer_->stop();
}

std::map<std::string, std::string> HangWatch::workerEnv() const {
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

void HangWatch::groupStarted() {
  if (timer_) timer_->clear();  // a new group: nothing of the last one's stays armed
  if (stacks_) stacks_->prune();
  stall_.arm();
}

void HangWatch::workerExited(int localRank) {
  if (timer_) timer_->clearOwner(localRank);
}

void HangWatch::stacksThen(std::vector<int> pids, std::function<void(std::string)> then) {
  if (!stacks_) {
    then({});
    return;
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  stacks_->collect(std::move(pids), kStackBound, std::move(then));
}

std::optional<HangWatch::Clock::time_point> HangWatch::lastSign() const {
  std::optional<Clock::time_point> last = hooks_.lastOutput ? hooks_.lastOutput() : std::nullopt;
  if (timer_) {
    if (auto t = timer_->lastRequest(); t && (!last || *t > *last)) last = t;
  }
  return last;
}

}  // namespace dtrun::agent
