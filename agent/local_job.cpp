#include "agent/local_job.h"

#include <spdlog/sinks/null_sink.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "common/abort_key.h"
#include "common/free_port.h"
#include "rendezvous/job_record.h"

namespace dtrun::agent {

namespace {

rendezvous::NodeInfo thisNode(const LocalJobOptions& o) {
  rendezvous::NodeInfo n;
  n.host = "localhost";
  n.addr = o.localAddr;
  n.pid = static_cast<int>(::getpid());
  n.nproc = o.nproc;
  n.role = o.role;
  return n;
}

rendezvous::RendezvousSettings oneNode() {
  rendezvous::RendezvousSettings s;
  s.minNodes = 1;
  s.maxNodes = 1;
  return s;
}

}  // namespace

LocalJob::LocalJob(boost::asio::io_context& io, LocalJobOptions options)
    : io_(io),
      options_(std::move(options)),
      store_(std::make_shared<rendezvous::InMemoryStore>()),
      // Its log lines would only repeat what the agent says of a one-node job.
      rdzv_(std::make_unique<rendezvous::DynamicRendezvous>(
          store_, thisNode(options_), oneNode(), nullptr,
          std::make_shared<spdlog::logger>("local-rendezvous",
                                           std::make_shared<spdlog::sinks::null_sink_mt>()))) {}

template <typename T, typename F>
void LocalJob::answer(F work, std::function<void(Result<T>)> done, bool changes) {
  Result<T> r;
  try {
    r.value = work();
  } catch (...) {
    r.error = std::current_exception();
  }
  if (changes) changed();  // the watch first, as a shared store's epoch would wake it
  later([done = std::move(done), r = std::move(r)] { done(r); });
}

void LocalJob::later(std::function<void()> f) {
  boost::asio::post(io_, [this, f = std::move(f)] {
    if (!closed_) f();
  });
}

void LocalJob::changed() {
  later([this] {
    if (onChange_) onChange_();
  });
}

void LocalJob::watch(std::function<void()> onChange, std::function<void(std::string)>) {
  // Nothing here can be lost: the job is this process.
  onChange_ = std::move(onChange);
}

void LocalJob::join(std::function<void(Result<rendezvous::RoundInfo>)> done) {
  answer<rendezvous::RoundInfo>([this] { return rdzv_->join(); }, std::move(done));
}

void LocalJob::workerStore(const rendezvous::RoundInfo&,
                           std::function<void(Result<WorkerStore>)> done) {
  Result<WorkerStore> r;
  try {
    r.value = options_.agentStore ? options_.workerStore
                                  : WorkerStore{options_.localAddr, pickFreePort()};
  } catch (...) {
    r.error = std::current_exception();
  }
  later([done = std::move(done), r = std::move(r)] { done(r); });
}

void LocalJob::readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) {
  answer<rendezvous::JobRecord>([this] { return rendezvous::readJobRecord(*store_); },
                                std::move(done));
}

void LocalJob::state(std::int64_t round, std::function<void(Result<rendezvous::JobState>)> done) {
  answer<rendezvous::JobState>([this, round] { return rdzv_->state(round); }, std::move(done));
}

void LocalJob::reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                             std::function<void(Result<bool>)> done) {
  answer<bool>(
      [this, round, &failureJson, maxRestarts] {
        rdzv_->reportFailure(round, failureJson);
        return rdzv_->advance(round, rendezvous::AdvanceReason::kFailure, maxRestarts);
      },
      std::move(done), true);
}

void LocalJob::advance(std::int64_t round, std::function<void(Result<bool>)> done) {
  // Membership never changes when nobody else can join; a request still opens the next round.
  answer<bool>(
      [this, round] { return rdzv_->advance(round, rendezvous::AdvanceReason::kMembership, 0); },
      std::move(done), true);
}

void LocalJob::markDone(std::int64_t round, int groupWorldSize,
                        std::function<void(Result<std::int64_t>)> done) {
  answer<std::int64_t>(
      [this, round, groupWorldSize] { return rdzv_->markDone(round, groupWorldSize); },
      std::move(done), true);
}

void LocalJob::failures(std::int64_t round,
                        std::function<void(Result<std::vector<std::string>>)> done) {
  answer<std::vector<std::string>>([this, round] { return rdzv_->failures(round); },
                                   std::move(done));
}

void LocalJob::abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) {
  if (!options_.setKey) {
    later(std::move(done));
    return;
  }
  // The key as a TcpStore client writes it (its "/" prefix), which worker_runtime watches.
  options_.setKey("/" + worker::abortKey(round), reason.substr(0, worker::kMaxAbortReasonBytes),
                  [this, done = std::move(done)] { later(done); });
}

}  // namespace dtrun::agent
