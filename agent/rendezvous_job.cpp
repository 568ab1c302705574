#include "agent/rendezvous_job.h"

#include <boost/asio/post.hpp>

namespace dtrun::agent {

RendezvousJob::RendezvousJob(boost::asio::io_context& io, std::shared_ptr<spdlog::logger> log)
    : io_(io), log_(std::move(log)) {}

void RendezvousJob::startRendezvous(std::shared_ptr<rendezvous::Store> job, rendezvous::NodeInfo me,
                                    rendezvous::RendezvousSettings settings, Runner runner) {
  rdzv_ = std::make_unique<rendezvous::DynamicRendezvous>(
      std::move(job), std::move(me), std::move(settings),
      [this](std::int64_t round) { registerMember(round); }, log_, [this] { return stopping(); });
  if (runner == Runner::kWorkThread) queue_ = std::make_unique<WorkQueue>();
}

void RendezvousJob::deliver(std::function<void()> f) {
  if (stopping_) return;
  boost::asio::post(io_, [this, f = std::move(f)] {
    if (!stopping_) f();
  });
}

void RendezvousJob::changed() {
  deliver([this] {
    if (onChange_) onChange_();
  });
}

void RendezvousJob::lost(const std::string& why) {
  if (stopping_ || lostReported_.exchange(true)) return;
  // Posted: the agent closes this link in answer, which must not happen inside the handler of
  // the connection or watch that found the loss.
  deliver([this, why] {
    if (onLost_) onLost_(why);
  });
}

bool RendezvousJob::beginClose() {
  if (stopping_.exchange(true)) return false;
  if (queue_) queue_->cancel();  // no new call runs; the one in progress delivers nothing
  return true;
}

void RendezvousJob::stopRunner() {
  if (queue_) queue_->stop();
}

void RendezvousJob::post(std::function<void()> job) {
  if (queue_) queue_->post(std::move(job));
}

void RendezvousJob::watch(std::function<void()> onChange, std::function<void(std::string)> onLost) {
  if (watching_) return;
  watching_ = true;
  onChange_ = std::move(onChange);
  onLost_ = std::move(onLost);
  startWatching();
}

rendezvous::JobState RendezvousJob::readState(std::int64_t round) { return rdzv_->state(round); }

void RendezvousJob::join(std::function<void(Result<rendezvous::RoundInfo>)> done) {
  beforeJoin();
  run<rendezvous::RoundInfo>([this] { return rdzv_->join(); }, std::move(done));
}

void RendezvousJob::state(std::int64_t round,
                          std::function<void(Result<rendezvous::JobState>)> done) {
  run<rendezvous::JobState>([this, round] { return readState(round); }, std::move(done));
}

void RendezvousJob::reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                                  std::function<void(Result<bool>)> done) {
  run<bool>(
      [this, round, failureJson = std::move(failureJson), maxRestarts] {
        rdzv_->reportFailure(round, failureJson);
        const bool decided =
            rdzv_->advance(round, rendezvous::AdvanceReason::kFailure, maxRestarts);
        afterWrite();
        return decided;
      },
      std::move(done));
}

void RendezvousJob::advance(std::int64_t round, std::function<void(Result<bool>)> done) {
  run<bool>(
      [this, round] {
        const bool opened = rdzv_->advance(round, rendezvous::AdvanceReason::kMembership, 0);
        afterWrite();
        return opened;
      },
      std::move(done));
}

void RendezvousJob::markDone(std::int64_t round, int groupWorldSize,
                             std::function<void(Result<std::int64_t>)> done) {
  run<std::int64_t>(
      [this, round, groupWorldSize] {
        const std::int64_t n = rdzv_->markDone(round, groupWorldSize);
        afterWrite();
        return n;
      },
      std::move(done));
}

void RendezvousJob::failures(std::int64_t round,
                             std::function<void(Result<std::vector<std::string>>)> done) {
  run<std::vector<std::string>>([this, round] { return rdzv_->failures(round); }, std::move(done));
}

}  // namespace dtrun::agent
