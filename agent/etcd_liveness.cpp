// EtcdJob's liveness (agent/etcd_job.h): the lease kept alive on a thread of its own, the
// watch on the job's keys on another, and what they make of etcd's silences: a member gone is
// counted as gone, etcd unreachable past the quorum timeout is the job lost.
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "agent/etcd_job.h"
#include "common/duration_text.h"
#include "common/error.h"
#include "rendezvous/etcd/etcd_store.h"

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

namespace {

// While etcd does not answer, the keep-alive thread repeats its warning this often.
constexpr milliseconds kOutageNotice(10000);

}  // namespace

void EtcdJob::registerMember(std::int64_t round) {
  ops_->put(prefix_ + keys::aliveKey(round, memberId_), options_.me.host, lease_);
}

void EtcdJob::startWatching() {
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
  while (!stopping()) {
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
      if (stopping()) return;
      unreachable_ = true;
      lost(unreachable(options_.quorumTimeout, e.details()));
      return;
    } catch (const std::exception& e) {
      if (stopping()) return;
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
      cv_.wait_until(lock, renewAt, [this] { return stopping() || pendingStatus_; });
      if (stopping()) return;
      status = std::exchange(pendingStatus_, std::nullopt);
    }
    if (status) writeStatus(*status);
    if (Clock::now() < renewAt) continue;
    renewAt = Clock::now() + options_.keepAliveInterval;
    try {
      if (keepAliveClient_->leaseKeepAlive(lease_) <= 0) {
        lost("this agent's lease expired: it was stopped or cut off from etcd for longer than " +
             secondsText(options_.keepAliveInterval * options_.keepAliveMaxAttempt) +
             " (keep_alive_interval x keep_alive_max_attempt), and the other nodes have gone on "
             "without it");
        return;
      }
      if (failing) {
        log_->warn("rendezvous: {} answers again after {}; the job goes on", describe(),
                   secondsText(std::chrono::duration_cast<milliseconds>(Clock::now() - lastOk)));
        failing = false;
      }
      lastOk = Clock::now();
    } catch (const std::exception& e) {
      if (stopping()) return;
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
            describe(), details, secondsText(options_.quorumTimeout - down));
      }
    }
  }
}

}  // namespace dtrun::agent
