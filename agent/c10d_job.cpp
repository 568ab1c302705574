#include "agent/c10d_job.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "common/abort_key.h"
#include "common/error.h"
#include "common/free_port.h"
#include "common/host_port.h"
#include "common/node_id.h"

namespace dtrun::agent {
namespace keys = rendezvous::keys;
using rendezvous::Store;
using rendezvous::TcpStore;
using rendezvous::TcpStoreOptions;

C10dJob::C10dJob(boost::asio::io_context& io, C10dJobOptions options,
                 std::shared_ptr<spdlog::logger> log)
    : RendezvousJob(io, std::move(log)),
      options_(std::move(options)),
      address_(hostPortText(options_.store.host, options_.store.port)),
      jobPrefix_(keys::jobPrefix(options_.runId)),
      heartbeatTimer_(io),
      recordReader_(io) {
  options_.store.dialect = rendezvous::wire::Dialect::kTorch2;
  if (options_.me.member.empty()) {
    options_.me.member = nodeId(options_.me.host, options_.me.pid, makeNonce());
  }
  ops_ = std::make_shared<TcpStore>(options_.store);
  job_ = std::make_shared<rendezvous::PrefixStore>(jobPrefix_, ops_);
  // Counted before the close action that uncounts it: an agent that dies in between leaves the
  // count one too high, which costs the host close_timeout at the end, never a late agent its
  // outcome.
  job_->add(keys::kAgents, 1);
  {
    TcpStore membership(options_.store);
    // A stopped or cut-off agent keeps its socket open; the lease makes the server close it
    // after keep_alive_interval x keep_alive_max_attempt of silence, which the others then see.
    membership.lease(options_.keepAliveInterval * options_.keepAliveMaxAttempt);
    membership_ = std::make_unique<StoreChannel>(io_, membership.detachSocket(), address_,
                                                 options_.store.keyPrefix);
    TcpStore watcher(options_.store);
    // No lease here: a stopped agent keeps this connection and its count until it exits.
    watcher.addOnClose(job_->joinKey(keys::kAgents), -1);
    watcher.addOnClose(job_->joinKey(keys::kEpoch), 1);
    watcher_ = std::make_unique<StoreChannel>(io_, watcher.detachSocket(), address_,
                                              options_.store.keyPrefix);
  }
  startRendezvous(job_, options_.me, options_.rendezvous, Runner::kWorkThread);
  heartbeat();
}

C10dJob::~C10dJob() { close(); }

void C10dJob::close() {
  if (!beginClose()) return;
  {
    std::lock_guard lock(mutex_);
    // The work thread may be waiting for a registration the io thread will not serve.
    if (pendingRegistration_) {
      pendingRegistration_->set_value("the agent is closing");
      pendingRegistration_.reset();
    }
  }
  heartbeatTimer_.cancel();
  membership_->close();
  watcher_->close();
  ops_->interrupt();
  stopRunner();
  if (probeThread_.joinable()) probeThread_.join();
  storeLastStatus();
  recordReader_.cancel();  // bounded by its connection's deadlines
}

void C10dJob::readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) {
  if (stopping()) return;
  if (storeSilent_) {
    recordReader_.fail("the store did not answer a fresh connection either", std::move(done));
    return;
  }
  // Not the ops connection: its thread may be stuck in a call to a store that went silent.
  TcpStoreOptions o = options_.store;
  o.connectTimeout = options_.heartbeatTimeout;
  o.timeout = options_.heartbeatTimeout;
  recordReader_.read(
      [o, prefix = jobPrefix_] {
        return std::make_shared<rendezvous::PrefixStore>(prefix, std::make_shared<TcpStore>(o));
      },
      std::move(done));
}

void C10dJob::publishStatus(std::string statusJson) {
  if (stopping()) return;
  lastStatus_ = statusJson;
  lastStatusStored_ = false;
  const auto seq = ++statusSeq_;
  membership_->set(job_->joinKey(keys::agentStatusKey(options_.me.member)), statusJson,
                   options_.heartbeatTimeout, [this, seq](const std::string& error) {
                     if (error.empty() && seq == statusSeq_) lastStatusStored_ = true;
                   });
}

void C10dJob::storeLastStatus() {
  // The last status (how this agent ended) comes just before close(): it goes on a connection of
  // its own, bounded, and not at all when the store is gone.
  if (!lastStatus_ || lastStatusStored_ || lostReported()) return;
  lastStatusStored_ = true;
  TcpStoreOptions o = options_.store;
  o.connectTimeout =
      std::min<std::chrono::milliseconds>(options_.heartbeatTimeout, std::chrono::seconds(2));
  o.timeout = o.connectTimeout;
  try {
    TcpStore last(o);
    last.set(job_->joinKey(keys::agentStatusKey(options_.me.member)), *lastStatus_);
    last.ping();
  } catch (const std::exception& e) {
    log_->debug("rendezvous: could not store this agent's last status: {}", e.what());
  }
}

void C10dJob::registerMember(std::int64_t round) {
  std::vector<std::string> onClose;
  if (!epochRegistered_) {
    onClose.push_back(job_->joinKey(keys::kEpoch));
    // `dtrun status` reads this node's connection from it: set once it closes, and the key the
    // store answers DTRUN_HEARD for.
    onClose.push_back(job_->joinKey(keys::agentGoneKey(options_.me.member)));
  }
  epochRegistered_ = true;
  onClose.push_back(job_->joinKey(keys::goneKey(round)));
  auto promise = std::make_shared<std::promise<std::string>>();
  auto answer = promise->get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping()) throw ConnectionError("rendezvous cancelled");
    pendingRegistration_ = promise;
  }
  boost::asio::post(io_, [this, onClose, promise] {
    if (stopping()) return;  // close() answered it
    auto remaining = std::make_shared<std::size_t>(onClose.size());
    auto firstError = std::make_shared<std::string>();
    for (const auto& key : onClose) {
      membership_->addOnClose(key, 1, options_.heartbeatTimeout,
                              [this, remaining, firstError, promise](const std::string& error) {
                                if (firstError->empty()) *firstError = error;
                                if (--*remaining != 0) return;
                                std::lock_guard lock(mutex_);
                                if (pendingRegistration_ != promise) return;  // close() answered it
                                promise->set_value(*firstError);
                                pendingRegistration_.reset();
                              });
    }
  });
  // The io thread answers within the heartbeat timeout (or close() does); the extra bound only
  // guards against an io thread that is not running at all.
  if (answer.wait_for(options_.heartbeatTimeout * 2) != std::future_status::ready) {
    throw ConnectionError("store " + address_ + ": registering this node for round " +
                          std::to_string(round) + " got no answer");
  }
  if (const std::string error = answer.get(); !error.empty()) {
    throw ConnectionError("registering this node for round " + std::to_string(round) + ": " +
                          error);
  }
}

void C10dJob::heartbeat() {
  heartbeatTimer_.expires_after(options_.keepAliveInterval);
  heartbeatTimer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping()) return;
    membership_->ping(options_.heartbeatTimeout, [this](const std::string& error) {
      if (stopping()) return;
      if (!error.empty()) {
        probe(error);
        return;
      }
      heartbeat();
    });
  });
}

void C10dJob::probe(const std::string& error) {
  if (probeThread_.joinable()) return;
  probeThread_ = std::thread([this, error] {
    std::string why = classifyHeartbeatFailure(error);
    lost(why);
  });
}

std::string C10dJob::classifyHeartbeatFailure(const std::string& error) {
  // The membership connection is gone. Either the store is, or the store dropped this agent for
  // silence (it was stopped, or cut off, for longer than its lease): a fresh connection tells.
  TcpStoreOptions probe = options_.store;
  probe.connectTimeout = options_.heartbeatTimeout;
  probe.timeout = options_.heartbeatTimeout;
  try {
    TcpStore(probe).ping();
  } catch (const std::exception&) {
    storeSilent_ = true;
    return "heartbeat failed and the store does not answer: " + error;
  }
  return "the store dropped this agent after more than " +
         std::to_string((options_.keepAliveInterval * options_.keepAliveMaxAttempt).count()) +
         " ms without a heartbeat (was it stopped or cut off?); the other nodes have gone on "
         "without it";
}

void C10dJob::watchFrom(rendezvous::Bytes seen) {
  watcher_->waitChange(job_->joinKey(keys::kEpoch), seen,
                       [this](const std::string& error, rendezvous::Bytes now) {
                         if (stopping()) return;
                         if (!error.empty()) {
                           lost("watching the job failed: " + error);
                           return;
                         }
                         changed();
                         watchFrom(std::move(now));
                       });
}

void C10dJob::startWatching() {
  watcher_->read(job_->joinKey(keys::kEpoch), options_.heartbeatTimeout,
                 [this](const std::string& error, rendezvous::Bytes seen) {
                   if (stopping()) return;
                   if (!error.empty()) {
                     lost("watching the job failed: " + error);
                     return;
                   }
                   watchFrom(std::move(seen));
                 });
}

void C10dJob::abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) {
  run<bool>(
      [this, round, reason = std::move(reason)] {
        // Not under the job prefix: worker_runtime watches this key (abort_key.h). SET has no
        // reply, so a PING after it confirms the server has it before the workers are signalled.
        ops_->set(worker::abortKey(round), reason.substr(0, worker::kMaxAbortReasonBytes));
        ops_->ping();
        return true;
      },
      [this, round, done = std::move(done)](Result<bool> r) {
        if (!r.ok()) {
          log_->warn("could not tell native workers to abort round {}: {}", round, r.message());
        }
        if (done) done();
      });
}

void C10dJob::workerStore(const rendezvous::RoundInfo& round,
                          std::function<void(Result<WorkerStore>)> done) {
  if (options_.agentStore) {
    boost::asio::post(io_, [ws = options_.workerStore, done = std::move(done)] {
      done(Result<WorkerStore>::success(ws));
    });
    return;
  }
  // torchrun 1.13's way: group rank 0 picks a free port on its host and its rank 0 worker serves
  // the TCPStore there; the others read "addr:port" from the round's key.
  std::optional<std::string> mine;
  if (round.groupRank == 0) mine = hostPortText(options_.localAddr, pickFreePort());
  run<WorkerStore>(
      [this, r = round.round, mine = std::move(mine)] {
        const std::string key = keys::roundKey(r, keys::kMaster);
        std::string value;
        if (mine) {
          job_->set(key, *mine);
          value = *mine;
        } else {
          value = job_->get(key, options_.rendezvous.joinTimeout);
        }
        return workerStoreOf(value, "round " + std::to_string(r) + ": MASTER_ADDR:MASTER_PORT '" +
                                        value + "' in the store is not host:port");
      },
      std::move(done));
}

}  // namespace dtrun::agent
