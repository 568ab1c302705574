#include "agent/worker_group.h"

#include <signal.h>

#include <boost/asio/post.hpp>

namespace dtrun::agent {

void WorkerGroup::start(const std::vector<WorkerSpec>& specs, ExitHandler onExit,
                        const Adopt& adopt) {
  workers_.clear();
  workers_.reserve(specs.size());
  for (const auto& spec : specs) {
    int lr = spec.localRank;
    WorkerProcess::ExitHandler exited = [onExit, lr](ExitStatus s) { onExit(lr, s); };
    std::unique_ptr<WorkerProcess> w = adopt ? adopt(spec, exited) : nullptr;
    workers_.push_back(w ? std::move(w)
                         : std::make_unique<WorkerProcess>(io_, spec.spawn, std::move(exited)));
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
    w->stop(first, grace, [remaining, shared] {
      if (--*remaining == 0 && *shared) (*shared)();
    });
  }
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
