#include "agent/local_job.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/abort_key.h"
#include "common/free_port.h"

namespace dtrun::agent {

LocalJob::LocalJob(boost::asio::io_context& io, LocalJobOptions options)
    : io_(io), options_(std::move(options)) {}

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
  rendezvous::RoundInfo r;
  r.round = round_;
  r.groupRank = 0;
  r.groupWorldSize = 1;
  r.rankOffset = 0;
  r.worldSize = options_.nproc;
  later([done = std::move(done), r] { done(Result<rendezvous::RoundInfo>::success(r)); });
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
  rendezvous::JobRecord o;
  o.final = final_;
  later([done = std::move(done), o] { done(Result<rendezvous::JobRecord>::success(o)); });
}

void LocalJob::state(std::int64_t round, std::function<void(Result<rendezvous::JobState>)> done) {
  rendezvous::JobState s;
  s.round = round_;
  s.final = final_;
  s.done = done_.count(round) ? done_[round] : 0;
  s.restarts = restarts_;
  later([done = std::move(done), s] { done(Result<rendezvous::JobState>::success(s)); });
}

void LocalJob::reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                             std::function<void(Result<bool>)> done) {
  failures_[round].push_back(std::move(failureJson));
  // As the shared rendezvous: the first report of the current round decides; a failure restart
  // past --max-restarts makes the job final instead of opening a round.
  const bool decided = round == round_ && !final_;
  if (decided) {
    if (++restarts_ > maxRestarts) {
      final_ = nlohmann::json{{"reason", "max_restarts"},
                              {"round", round},
                              {"restarts", restarts_ - 1},
                              {"max_restarts", maxRestarts}}
                   .dump();
    } else {
      ++round_;
    }
  }
  changed();
  later([done = std::move(done), decided] { done(Result<bool>::success(decided)); });
}

void LocalJob::advance(std::int64_t round, std::function<void(Result<bool>)> done) {
  // Membership never changes when nobody else can join; a request still opens the next round.
  const bool decided = round == round_ && !final_;
  if (decided) ++round_;
  changed();
  later([done = std::move(done), decided] { done(Result<bool>::success(decided)); });
}

void LocalJob::markDone(std::int64_t round, int, std::function<void(Result<std::int64_t>)> done) {
  const std::int64_t n = ++done_[round];
  changed();
  later([done = std::move(done), n] { done(Result<std::int64_t>::success(n)); });
}

void LocalJob::failures(std::int64_t round,
                        std::function<void(Result<std::vector<std::string>>)> done) {
  auto list = failures_[round];
  later([done = std::move(done), list = std::move(list)] {
    done(Result<std::vector<std::string>>::success(list));
  });
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
