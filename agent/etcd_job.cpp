#include "agent/etcd_job.h"

#include <unistd.h>

#include <boost/asio/post.hpp>

#include "common/abort_key.h"
#include "common/decimal.h"
#include "common/duration_text.h"
#include "common/error.h"
#include "common/host_port.h"
#include "common/node_id.h"
#include "rendezvous/etcd/etcd_store.h"
#include "rendezvous/tcp_store.h"

namespace dtrun::agent {

namespace keys = rendezvous::keys;
using rendezvous::etcd::Clock;
using rendezvous::etcd::Compare;
using rendezvous::etcd::EtcdClient;
using rendezvous::etcd::EtcdStore;
using rendezvous::etcd::Op;
using rendezvous::etcd::prefixEnd;
using rendezvous::etcd::WatchEvent;
using std::chrono::milliseconds;

EtcdJob::EtcdJob(boost::asio::io_context& io, EtcdJobOptions options,
                 std::shared_ptr<spdlog::logger> log)
    : RendezvousJob(io, std::move(log)),
      options_(std::move(options)),
      prefix_(keys::jobPrefix(options_.runId) + "/"),
      memberId_(options_.me.member.empty() ? nodeId(options_.me.host, options_.me.pid, makeNonce())
                                           : options_.me.member) {
  options_.me.member = memberId_;  // the rendezvous' claims name this agent as its keys do
  // First contact, bounded by connectTimeout: a wrong endpoint, TLS file or password is one
  // line now rather than a hang.
  const auto ttl = std::chrono::ceil<std::chrono::seconds>(options_.keepAliveInterval *
                                                           options_.keepAliveMaxAttempt);
  {
    auto first = makeClient(options_.connectTimeout);
    lease_ = first->leaseGrant(ttl);
  }
  ops_ = makeClient(options_.quorumTimeout);
  watchClient_ = makeClient(options_.quorumTimeout);
  // One pass over the members per renewal: the keep-alive thread does its own waiting.
  keepAliveClient_ = makeClient(milliseconds(0));

  // A finished job with the same run id whose agents are all gone: its keys are stale (the last
  // agent deletes them, unless it died); clear them so the id can be used again.
  if (finishedAndAlone(*ops_)) {
    const auto removed = ops_->remove(prefix_, prefixEnd(prefix_));
    log_->info("rendezvous: removed {} key(s) of an earlier, finished job with run id '{}'",
               removed, options_.runId);
  }
  startRevision_ = ops_->put(prefix_ + keys::memberKey(memberId_), options_.me.host, lease_) + 1;

  job_ = std::make_shared<rendezvous::PrefixStore>(keys::jobPrefix(options_.runId),
                                                   std::make_shared<EtcdStore>(ops_));
  startRendezvous(job_, options_.me, options_.rendezvous, Runner::kWorkThread);
  keepAliveThread_ = std::thread([this] { keepAliveLoop(); });
  log_->debug("rendezvous: {} as member {} (lease {:x}, TTL {} s)", describe(), memberId_, lease_,
              ttl.count());
}

EtcdJob::~EtcdJob() { close(); }

std::shared_ptr<EtcdClient> EtcdJob::makeClient(milliseconds retryFor) {
  auto o = options_.client;
  o.retryFor = retryFor;
  return std::make_shared<EtcdClient>(o);
}

std::exception_ptr EtcdJob::explain(std::exception_ptr error) const {
  try {
    std::rethrow_exception(error);
  } catch (const rendezvous::etcd::UnreachableError& e) {
    return std::make_exception_ptr(
        ConnectionError(unreachable(options_.quorumTimeout, e.details())));
  } catch (...) {
    return error;
  }
}

std::string EtcdJob::unreachable(milliseconds down, const std::string& details) const {
  return "etcd has been unreachable or without quorum for " + secondsText(down) +
         " (quorum_timeout " + secondsText(options_.quorumTimeout) + "): " + details;
}

std::string EtcdJob::describe() const {
  std::string out = "etcd at ";
  for (std::size_t i = 0; i < options_.client.endpoints.size(); ++i) {
    out += (i ? "," : "") + options_.client.endpoints[i].text();
  }
  return out;
}

void EtcdJob::close() {
  if (!beginClose()) return;
  cv_.notify_all();
  for (auto* c : {&ops_, &watchClient_, &keepAliveClient_}) {
    if (*c) (*c)->interrupt();
  }
  stopRunner();
  recordReader_.cancel();
  for (auto* t : {&watchThread_, &keepAliveThread_}) {
    if (t->joinable()) t->join();
  }
  leaveWorkerStore();
  if (unreachable_) {
    // Every member was just tried for quorum_timeout: trying again would hold the exit for a
    // request timeout per member. The lease lapses by itself.
    log_->debug("rendezvous: leaving {} without revoking the lease (etcd is unreachable)",
                describe());
    return;
  }
  // Leave now: revoking the lease deletes this node's keys, which the others see at once.
  try {
    auto last = makeClient(milliseconds(0));
    std::optional<std::string> status;
    {
      std::lock_guard lock(mutex_);
      status = lastStatus_;
    }
    // How this agent ended, for `dtrun status` (not on the lease: it outlives the agent).
    if (status && !lostReported()) last->put(prefix_ + keys::agentStatusKey(memberId_), *status);
    last->leaseRevoke(lease_);
    if (finishedAndAlone(*last)) {
      keepRecordOnly(*last);
      log_->debug(
          "rendezvous: the job is over and this agent was the last: its keys are deleted "
          "but for its outcome, kept {}",
          secondsText(options_.closeTimeout));
    }
  } catch (const std::exception& e) {
    log_->debug("rendezvous: leaving {}: {} (the lease lapses by itself)", describe(), e.what());
  }
}

bool EtcdJob::finishedAndAlone(EtcdClient& client) {
  Op members = Op::get(prefix_ + keys::kMembersDir);
  members.rangeEnd = prefixEnd(prefix_ + keys::kMembersDir);
  members.countOnly = true;
  const auto seen = client.txn(
      {}, {Op::get(prefix_ + keys::kSucceeded), Op::get(prefix_ + keys::kFinal), members}, {});
  const bool finished = !seen.ranges.at(0).kvs.empty() || !seen.ranges.at(1).kvs.empty();
  return finished && seen.ranges.at(2).count == 0;
}

void EtcdJob::keepRecordOnly(EtcdClient& client) {
  const std::string succeeded = prefix_ + keys::kSucceeded, final = prefix_ + keys::kFinal;
  const auto seen = client.txn({}, {Op::get(succeeded), Op::get(final)}, {});
  const auto ttl = std::max(std::chrono::seconds(1),
                            std::chrono::ceil<std::chrono::seconds>(options_.closeTimeout));
  const std::int64_t lease = client.leaseGrant(ttl);
  std::vector<Op> keep;
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& kvs = seen.ranges.at(i).kvs;
    if (!kvs.empty()) keep.push_back(Op::put(kvs.front().key, kvs.front().value, lease));
  }
  client.txn({}, keep, {});
  // Around the two keys ("final" sorts before "succeeded"): what is before, between and after.
  const std::string after = std::string(1, '\0');
  client.remove(prefix_, final);
  client.remove(final + after, succeeded);
  client.remove(succeeded + after, prefixEnd(prefix_));
}

void EtcdJob::readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) {
  if (stopping()) return;
  if (unreachable_) {
    recordReader_.fail("etcd is unreachable", std::move(done));
    return;
  }
  // A client of its own: the ops thread may be stuck on members that went silent.
  recordReader_.read(
      [this] {
        return std::make_shared<rendezvous::PrefixStore>(
            keys::jobPrefix(options_.runId),
            std::make_shared<rendezvous::etcd::EtcdStore>(makeClient(milliseconds(0))));
      },
      std::move(done));
}

rendezvous::JobState EtcdJob::readState(std::int64_t round) {
  // DynamicRendezvous::state's snapshot in one read-only transaction: its counters are read
  // there with ADD 0, which on etcd would be a write (a raft round) for every missing key, and
  // every agent reads the state after every change.
  const std::vector<std::string> names = {keys::kRound,
                                          keys::kFinal,
                                          keys::goneKey(round),
                                          keys::roundKey(round, keys::kWaiting),
                                          keys::roundKey(round, keys::kDone),
                                          keys::kRestarts,
                                          keys::kSucceeded,
                                          keys::roundKey(round, keys::kAdvance)};
  // Counters are a key plus its increments (rendezvous/etcd/etcd_store.h): each read spans
  // [K, counterEnd(K)).
  std::vector<Op> reads;
  for (const auto& n : names)
    reads.push_back(Op::scan(prefix_ + n, EtcdStore::counterEnd(prefix_ + n)));
  const auto r = ops_->txn({}, reads, {});
  const auto value = [&](std::size_t i) -> std::optional<std::string> {
    if (i >= r.ranges.size() || r.ranges[i].kvs.empty()) return std::nullopt;
    return r.ranges[i].kvs.front().value;
  };
  const auto number = [&](std::size_t i) -> std::int64_t {
    return i < r.ranges.size() ? EtcdStore::counterValue(prefix_ + names[i], r.ranges[i]) : 0;
  };
  rendezvous::JobState s;
  s.round = number(0);
  s.final = value(1);
  s.gone = number(2);
  s.waiting = number(3);
  s.done = number(4);
  s.restarts = number(5);
  if (const auto succeeded = value(6)) {
    s.succeeded = parseDecimal(*succeeded).value_or(-1);
  }
  if (s.round > round) {
    if (auto claim = keys::parseClaim(value(7).value_or(""))) {
      s.endedBy = keys::openedValue(claim->reason);
    }
  }
  return s;
}

}  // namespace dtrun::agent
