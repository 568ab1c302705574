// EtcdJob's worker store (agent/etcd_job.h): group rank 0 of each round serves the round's
// workers a store of its own and publishes it at r<R>/store; the other agents watch that
// store's connection (its close is the host's death), and the abort key for native workers goes
// there.
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "agent/etcd_job.h"
#include "common/abort_key.h"
#include "common/error.h"
#include "common/host_port.h"
#include "rendezvous/tcp_store.h"

namespace dtrun::agent {

namespace keys = rendezvous::keys;
using std::chrono::milliseconds;

namespace {

// The key a round's non-host agents wait on in the worker store: never set, so the wait ends
// only when the connection does.
constexpr char kNeverSet[] = "dtrun/etcd/host-watch";

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
    run<WorkerStore>(
        [this, key, value, ws] {
          ops_->put(key, value, lease_);
          return ws;
        },
        std::move(done));
    return;
  }
  run<HostStore>(
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
        if (stopping() || finished_ || storeRound_ != round || error.empty()) return;
        hostGoneRound_ = round;
        // The host of this round's worker store is gone (its workers with it): end the round
        // for everyone now, by deleting the host's alive key, rather than when its lease lapses.
        log_->warn(
            "rendezvous: round {}: the workers' store at {} (hosted by {}) is gone ({}); the "
            "round ends and the nodes re-form with a new host",
            round, address, hostMember, error);
        post([this, round, hostMember] {
          try {
            ops_->remove(prefix_ + keys::aliveKey(round, hostMember));
          } catch (const std::exception& e) {
            if (!stopping()) log_->warn("rendezvous: could not end round {}: {}", round, e.what());
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
  run<bool>(
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
