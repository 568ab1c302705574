#include "agent/etcd_job.h"

#include <unistd.h>

#include <boost/asio/post.hpp>

#include "common/abort_key.h"
#include "common/decimal.h"
#include "common/error.h"
#include "common/host_port.h"
#include "common/node_id.h"
#include "rendezvous/etcd/etcd_store.h"
#include "rendezvous/tcp_store.h"

namespace dtrun::agent {

using rendezvous::DynamicRendezvous;
namespace keys = rendezvous::keys;
using rendezvous::etcd::Clock;
using rendezvous::etcd::Compare;
using rendezvous::etcd::EtcdClient;
using rendezvous::etcd::EtcdStore;
using rendezvous::etcd::Op;
using rendezvous::etcd::prefixEnd;
using rendezvous::etcd::WatchEvent;
using std::chrono::milliseconds;

namespace {

// The key a round's non-host agents wait on in the worker store: never set, so the wait ends
// only when the connection does.
constexpr char kNeverSet[] = "dtrun/etcd/host-watch";
// While etcd does not answer, the keep-alive thread repeats its warning this often.
constexpr milliseconds kOutageNotice(10000);

std::string seconds(milliseconds d) {
  const auto s = std::to_string(d.count() / 1000.0);
  return s.substr(0, s.find('.') + 2) + " s";
}

struct HostStore {
  WorkerStore store;
  std::string member;  // the host's member id
  int fd = -1;         // a connection to it (non-hosts)
};

// A client of a round's worker store, bounded by `timeout`.
rendezvous::TcpStoreOptions workerStoreClient(const WorkerStore& ws, milliseconds timeout) {
  rendezvous::TcpStoreOptions o;
  o.host = ws.addr;
  o.port = ws.port;
  o.connectTimeout = timeout;
  o.timeout = timeout;
  return o;
}

// "addr:port member" as the host puts it at r<R>/store.
HostStore parseHostStore(std::int64_t round, const std::string& value) {
  const std::string what = "round " + std::to_string(round) + ": the worker store '" + value +
                           "' in etcd is not 'host:port member'";
  const auto space = value.find(' ');
  if (space == std::string::npos) throw ProtocolError(what);
  HostStore h;
  h.store = workerStoreOf(std::string_view(value).substr(0, space), what);
  h.member = value.substr(space + 1);
  return h;
}

}  // namespace

EtcdJob::EtcdJob(boost::asio::io_context& io, EtcdJobOptions options,
                 std::shared_ptr<spdlog::logger> log)
    : io_(io),
      options_(std::move(options)),
      log_(std::move(log)),
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
  rdzv_ = std::make_unique<DynamicRendezvous>(
      job_, options_.me, options_.rendezvous, [this](std::int64_t round) { registerMember(round); },
      log_, [this] { return stopping_.load(); });
  queue_ = std::make_unique<WorkQueue>(io_);
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

template <typename T, typename F>
void EtcdJob::ops(F work, std::function<void(Result<T>)> done) {
  queue_->run<T>(
      [this, work = std::move(work)]() mutable -> T {
        try {
          return work();
        } catch (const rendezvous::etcd::UnreachableError& e) {
          throw ConnectionError(unreachable(options_.quorumTimeout, e.details()));
        }
      },
      std::move(done));
}

std::string EtcdJob::unreachable(milliseconds down, const std::string& details) const {
  return "etcd has been unreachable or without quorum for " + seconds(down) + " (quorum_timeout " +
         seconds(options_.quorumTimeout) + "): " + details;
}

std::string EtcdJob::describe() const {
  std::string out = "etcd at ";
  for (std::size_t i = 0; i < options_.client.endpoints.size(); ++i) {
    out += (i ? "," : "") + options_.client.endpoints[i].text();
  }
  return out;
}

void EtcdJob::close() {
  if (stopping_.exchange(true)) return;
  if (queue_) queue_->cancel();  // no result is posted from now on
  cv_.notify_all();
  for (auto* c : {&ops_, &watchClient_, &keepAliveClient_}) {
    if (*c) (*c)->interrupt();
  }
  if (queue_) queue_->stop();
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
    if (status && !lostReported_) last->put(prefix_ + keys::agentStatusKey(memberId_), *status);
    last->leaseRevoke(lease_);
    if (finishedAndAlone(*last)) {
      keepRecordOnly(*last);
      log_->debug(
          "rendezvous: the job is over and this agent was the last: its keys are deleted "
          "but for its outcome, kept {}",
          seconds(options_.closeTimeout));
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
  if (stopping_) return;
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

void EtcdJob::registerMember(std::int64_t round) {
  ops_->put(prefix_ + keys::aliveKey(round, memberId_), options_.me.host, lease_);
}

void EtcdJob::changed() {
  boost::asio::post(io_, [this] {
    if (!stopping_ && onChange_) onChange_();
  });
}

void EtcdJob::lost(const std::string& why) {
  if (stopping_ || lostReported_.exchange(true)) return;
  boost::asio::post(io_, [this, why] {
    if (!stopping_ && onLost_) onLost_(why);
  });
}

void EtcdJob::watch(std::function<void()> onChange, std::function<void(std::string)> onLost) {
  if (watching_) return;
  watching_ = true;
  onChange_ = std::move(onChange);
  onLost_ = std::move(onLost);
  watchThread_ = std::thread([this] { watchLoop(startRevision_); });
}

void EtcdJob::countGone(EtcdClient& client, std::int64_t round, const std::string& id) {
  const std::string mark = prefix_ + keys::goneMarkKey(round, id);
  const std::string gone = prefix_ + keys::goneKey(round);
  for (;;) {
    const auto read = client.txn({Compare::missing(mark)}, {Op::get(gone)}, {});
    if (!read.succeeded) return;  // another agent counted it
    std::int64_t n = 0, revision = 0;
    if (!read.ranges.empty() && !read.ranges[0].kvs.empty()) {
      const auto& kv = read.ranges[0].kvs[0];
      n = EtcdStore::counterValue(gone, read.ranges[0]);
      revision = kv.modRevision;
    }
    if (client
            .txn({Compare::missing(mark), Compare::modRevision(gone, revision)},
                 {Op::put(mark, "1"), Op::put(gone, std::to_string(n + 1))}, {})
            .succeeded) {
      log_->info("rendezvous: member {} of round {} is gone (its lease ended)", id, round);
      return;
    }
  }
}

void EtcdJob::watchLoop(std::int64_t fromRevision) {
  const std::string epoch = prefix_ + keys::kEpoch;  // "epoch" has no sibling
                                                     // key it is a prefix of
  const std::string succeeded = prefix_ + keys::kSucceeded, final = prefix_ + keys::kFinal;
  std::int64_t revision = fromRevision;
  while (!stopping_) {
    try {
      auto w = watchClient_->watch(prefix_, prefixEnd(prefix_), revision);
      for (;;) {
        auto events = w->next(Clock::time_point::max());
        revision = w->nextRevision();
        bool change = false;
        for (const auto& e : *events) {
          if (e.kv.key.rfind(epoch, 0) == 0) {  // the epoch or one of its increments
            change = true;
            continue;
          }
          if (e.kv.key == succeeded || e.kv.key == final) {
            // Over: every agent leaves now, and counting each departure on every other agent
            // (N x N transactions) would change nothing.
            finished_ = true;
            change = true;
            continue;
          }
          if (e.type != WatchEvent::Type::kDelete || finished_) continue;
          // r<R>/alive/<member>: a member's lease ended (or it left).
          const auto key = keys::parseKey(std::string_view(e.kv.key).substr(prefix_.size()));
          if (!key || key->kind != keys::ParsedKey::Kind::kRound || key->name != "alive" ||
              key->member == memberId_) {
            continue;
          }
          countGone(*watchClient_, key->round, key->member);
          change = true;
        }
        if (change) changed();
      }
    } catch (const rendezvous::etcd::CompactedError& e) {
      // Events were missed: read the state afresh and go on from now.
      log_->warn("rendezvous: {}; reading the job's state again", e.what());
      revision = 0;
      changed();
    } catch (const rendezvous::etcd::UnreachableError& e) {
      if (stopping_) return;
      unreachable_ = true;
      lost(unreachable(options_.quorumTimeout, e.details()));
      return;
    } catch (const std::exception& e) {
      if (stopping_) return;
      lost(std::string("watching the job failed: ") + e.what());
      return;
    }
  }
}

void EtcdJob::publishStatus(std::string statusJson) {
  {
    std::lock_guard lock(mutex_);
    pendingStatus_ = statusJson;
    lastStatus_ = std::move(statusJson);
  }
  cv_.notify_all();
}

void EtcdJob::writeStatus(const std::string& statusJson) {
  try {
    keepAliveClient_->put(prefix_ + keys::agentStatusKey(memberId_), statusJson);
  } catch (const std::exception& e) {
    // etcd does not answer: the renewal below says so; the next state change writes again.
    log_->debug("rendezvous: could not publish this agent's status: {}", e.what());
  }
}

void EtcdJob::keepAliveLoop() {
  // The outage is measured from the last renewal that worked, so the bound is quorum_timeout
  // plus at most one keep_alive_interval and one request (heartbeat_timeout).
  bool failing = false;
  Clock::time_point lastOk = Clock::now(), lastNotice;
  Clock::time_point renewAt = Clock::now() + options_.keepAliveInterval;
  for (;;) {
    std::optional<std::string> status;
    {
      std::unique_lock lock(mutex_);
      // Woken early for a status to publish (this thread's client is free between renewals,
      // and a rendezvous in progress on the ops thread never holds it up).
      cv_.wait_until(lock, renewAt, [this] { return stopping_.load() || pendingStatus_; });
      if (stopping_) return;
      status = std::exchange(pendingStatus_, std::nullopt);
    }
    if (status) writeStatus(*status);
    if (Clock::now() < renewAt) continue;
    renewAt = Clock::now() + options_.keepAliveInterval;
    try {
      if (keepAliveClient_->leaseKeepAlive(lease_) <= 0) {
        lost("this agent's lease expired: it was stopped or cut off from etcd for longer than " +
             seconds(options_.keepAliveInterval * options_.keepAliveMaxAttempt) +
             " (keep_alive_interval x keep_alive_max_attempt), and the other nodes have gone on "
             "without it");
        return;
      }
      if (failing) {
        log_->warn("rendezvous: {} answers again after {}; the job goes on", describe(),
                   seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - lastOk)));
        failing = false;
      }
      lastOk = Clock::now();
    } catch (const std::exception& e) {
      if (stopping_) return;
      const auto now = Clock::now();
      const auto down = std::chrono::duration_cast<milliseconds>(now - lastOk);
      const auto* u = dynamic_cast<const rendezvous::etcd::UnreachableError*>(&e);
      const std::string details = u ? u->details() : e.what();
      if (down >= options_.quorumTimeout) {
        unreachable_ = true;
        lost(unreachable(down, details));
        return;
      }
      if (!failing || now - lastNotice >= kOutageNotice) {
        failing = true;
        lastNotice = now;
        log_->warn(
            "rendezvous: {} does not answer (no quorum, or unreachable): {}; the workers keep "
            "running (a running round needs nothing from etcd); giving up in {} (quorum_timeout) "
            "unless etcd comes back",
            describe(), details, seconds(options_.quorumTimeout - down));
      }
    }
  }
}

void EtcdJob::join(std::function<void(Result<rendezvous::RoundInfo>)> done) {
  leaveWorkerStore();
  ops<rendezvous::RoundInfo>([this] { return rdzv_->join(); }, std::move(done));
}

void EtcdJob::state(std::int64_t round, std::function<void(Result<rendezvous::JobState>)> done) {
  ops<rendezvous::JobState>([this, round] { return readState(round); }, std::move(done));
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

void EtcdJob::reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                            std::function<void(Result<bool>)> done) {
  ops<bool>(
      [this, round, failureJson = std::move(failureJson), maxRestarts] {
        rdzv_->reportFailure(round, failureJson);
        return rdzv_->advance(round, rendezvous::AdvanceReason::kFailure, maxRestarts);
      },
      std::move(done));
}

void EtcdJob::advance(std::int64_t round, std::function<void(Result<bool>)> done) {
  ops<bool>(
      [this, round] { return rdzv_->advance(round, rendezvous::AdvanceReason::kMembership, 0); },
      std::move(done));
}

void EtcdJob::markDone(std::int64_t round, int groupWorldSize,
                       std::function<void(Result<std::int64_t>)> done) {
  ops<std::int64_t>(
      [this, round, groupWorldSize] { return rdzv_->markDone(round, groupWorldSize); },
      std::move(done));
}

void EtcdJob::failures(std::int64_t round,
                       std::function<void(Result<std::vector<std::string>>)> done) {
  ops<std::vector<std::string>>([this, round] { return rdzv_->failures(round); }, std::move(done));
}

void EtcdJob::leaveWorkerStore() {
  storeRound_ = -1;  // first: closing the channel runs its handler, which must ignore it
  if (hostChannel_) hostChannel_->close();
  hostChannel_.reset();
  hosted_.reset();
}

void EtcdJob::workerStore(const rendezvous::RoundInfo& round,
                          std::function<void(Result<WorkerStore>)> done) {
  leaveWorkerStore();
  const std::int64_t r = round.round;
  storeRound_ = r;
  const std::string key = prefix_ + keys::roundKey(r, keys::kStore);
  if (round.groupRank == 0) {
    try {
      rendezvous::StoreServerOptions o;
      o.port = 0;  // on every address ("::"): the others reach it at localAddr, v4 or v6
      hosted_ = std::make_unique<HostedStore>(o, log_);
    } catch (...) {
      boost::asio::post(io_, [done = std::move(done), e = std::current_exception()] {
        done(Result<WorkerStore>::failure(e));
      });
      return;
    }
    WorkerStore ws{options_.localAddr, hosted_->port()};
    const std::string value = hostPortText(options_.localAddr, ws.port) + " " + memberId_;
    ops<WorkerStore>(
        [this, key, value, ws] {
          ops_->put(key, value, lease_);
          return ws;
        },
        std::move(done));
    return;
  }
  ops<HostStore>(
      [this, r, key] {
        HostStore h = parseHostStore(
            r, job_->get(keys::roundKey(r, keys::kStore), options_.rendezvous.joinTimeout));
        rendezvous::TcpStore connection(workerStoreClient(h.store, options_.connectTimeout));
        h.fd = connection.detachSocket();
        return h;
      },
      [this, r, done = std::move(done)](Result<HostStore> h) {
        if (!h.ok()) {
          done(Result<WorkerStore>::failure(h.error));
          return;
        }
        if (storeRound_ == r) {
          watchStoreHost(r, h.value->fd, hostPortText(h.value->store.addr, h.value->store.port),
                         h.value->member);
        } else {
          ::close(h.value->fd);
        }
        done(Result<WorkerStore>::success(h.value->store));
      });
}

void EtcdJob::watchStoreHost(std::int64_t round, int fd, std::string address,
                             std::string hostMember) {
  hostChannel_ = std::make_unique<StoreChannel>(io_, fd, address, "/");
  hostChannel_->waitChange(
      kNeverSet, "",
      [this, round, address, hostMember](const std::string& error, rendezvous::Bytes) {
        if (stopping_ || finished_ || storeRound_ != round || error.empty()) return;
        hostGoneRound_ = round;
        // The host of this round's worker store is gone (its workers with it): end the round
        // for everyone now, by deleting the host's alive key, rather than when its lease lapses.
        log_->warn(
            "rendezvous: round {}: the workers' store at {} (hosted by {}) is gone ({}); the "
            "round ends and the nodes re-form with a new host",
            round, address, hostMember, error);
        queue_->post([this, round, hostMember] {
          try {
            ops_->remove(prefix_ + keys::aliveKey(round, hostMember));
          } catch (const std::exception& e) {
            if (!stopping_) log_->warn("rendezvous: could not end round {}: {}", round, e.what());
          }
        });
      });
}

void EtcdJob::abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) {
  reason = reason.substr(0, worker::kMaxAbortReasonBytes);
  if (hosted_ && storeRound_ == round) {
    hosted_->set("/" + worker::abortKey(round), reason,
                 [this, done = std::move(done)] { boost::asio::post(io_, done); });
    return;
  }
  if (hostGoneRound_ == round) {
    // The round's store died with its host: no native worker can read an abort key there, and
    // trying would hold up the next rendezvous for a connect timeout.
    boost::asio::post(io_, [done = std::move(done)] {
      if (done) done();
    });
    return;
  }
  ops<bool>(
      [this, round, reason] {
        // Bounded as the stop waits for it (kAbortBound): past that the workers are signalled
        // anyway, and a store whose host died would hold up the next rendezvous for a connect
        // timeout.
        const auto value = job_->get(keys::roundKey(round, keys::kStore), kAbortBound);
        const HostStore h = parseHostStore(round, value);
        rendezvous::TcpStore store(workerStoreClient(h.store, kAbortBound));
        store.set(worker::abortKey(round), reason);
        store.ping();
        return true;
      },
      [this, round, done = std::move(done)](Result<bool> r) {
        if (!r.ok()) {
          log_->warn("could not tell native workers to abort round {}: {}", round, r.message());
        }
        if (done) done();
      });
}

}  // namespace dtrun::agent
