#include "agent/worker_group.h"

#include <signal.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "agent/process_tree.h"
#include "common/duration_text.h"
#include "common/signals.h"

namespace dtrun::agent {

void WorkerGroup::start(const std::vector<WorkerSpec>& specs, ExitHandler onExit,
                        const Adopt& adopt) {
  workers_.clear();
  workers_.reserve(specs.size());
  for (const auto& spec : specs) {
    int lr = spec.localRank;
    WorkerProcess::ExitHandler exited = [onExit, lr](ExitStatus s) { onExit(lr, s); };
    std::unique_ptr<WorkerProcess> w = adopt ? adopt(spec, exited) : nullptr;
    workers_.push_back(
        w ? std::move(w)
          : std::make_unique<WorkerProcess>(
                io_, spec.spawn, std::move(exited), log_,
                "local_rank " + std::to_string(lr) + " (rank " + std::to_string(spec.rank) + ")"));
  }
}

void WorkerGroup::signalAll(int signo) {
  for (auto& w : workers_) w->signalGroup(signo);
}

void WorkerGroup::stop(int first, std::chrono::milliseconds grace, std::function<void()> done) {
  auto remaining = std::make_shared<std::size_t>(0);
  for (auto& w : workers_) {
    if (w->running()) ++*remaining;
  }
  if (*remaining == 0) {
    if (done) boost::asio::post(io_, std::move(done));
    return;
  }
  auto shared = std::make_shared<std::function<void()>>(std::move(done));
  for (auto& w : workers_) {
    if (!w->running()) continue;
    w->stop(first, grace, [this, remaining, shared] {
      if (--*remaining != 0) return;
      noticeTimer_.cancel();
      if (*shared) (*shared)();
    });
  }
  if (log_) {
    const auto first_notice =
        std::max(std::min(kStopNotice, grace / 2), std::chrono::milliseconds(100));
    armStopNotice(first, grace, std::chrono::steady_clock::now(), first_notice);
  }
}

void WorkerGroup::armStopNotice(int first, std::chrono::milliseconds grace,
                                std::chrono::steady_clock::time_point started,
                                std::chrono::milliseconds after) {
  noticeTimer_.expires_after(after);
  noticeTimer_.async_wait([this, first, grace, started](boost::system::error_code ec) {
    if (ec || !anyRunning()) return;
    std::string waiting;
    for (std::size_t lr = 0; lr < workers_.size(); ++lr) {
      const auto& w = *workers_[lr];
      if (!w.running()) continue;
      auto st = readProcStat(w.pid());
      waiting += fmt::format("{}local_rank {} (pid {}, {})", waiting.empty() ? "" : ", ", lr,
                             w.pid(), st ? describeProcState(st->state) : "gone");
    }
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    const std::string next =
        first == SIGKILL  ? "given up on " + secondsText(grace) + " after SIGKILL"
        : elapsed < grace ? "SIGKILL in " + secondsText(grace - elapsed)
                          : "SIGKILL was sent; given up on " + secondsText(2 * grace) + " after " +
                                signalName(first);
    log_->warn("agent: stopping the workers ({} {} ago): still waiting for {}; {}",
               signalName(first), secondsText(elapsed), waiting, next);
    armStopNotice(first, grace, started, kStopNoticeEvery);
  });
}

void WorkerGroup::stopOne(int localRank, int first, std::chrono::milliseconds grace) {
  if (localRank < 0 || localRank >= static_cast<int>(workers_.size())) return;
  auto& w = *workers_[static_cast<std::size_t>(localRank)];
  if (w.running()) w.stop(first, grace, nullptr);
}

void WorkerGroup::sweep() {
  for (int g : groups()) ::kill(-g, SIGKILL);
}

std::vector<int> WorkerGroup::groups() const {
  std::vector<int> out;
  for (const auto& w : workers_) {
    if (w->pid() > 0) out.push_back(w->pid());
  }
  return out;
}

bool WorkerGroup::anyRunning() const {
  for (const auto& w : workers_) {
    if (w->running()) return true;
  }
  return false;
}

std::set<int> WorkerGroup::runningPids() const {
  std::set<int> pids;
  for (const auto& w : workers_) {
    if (w->running() && w->pid() > 0) pids.insert(w->pid());
  }
  return pids;
}

}  // namespace dtrun::agent
