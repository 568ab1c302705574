// EtcdJob: the JobLink of the etcd backend (--rdzv-backend=etcd, or torchrun's etcd-v2
// spelling): the rendezvous job (agent/rendezvous_job.h) over etcd, whose liveness is a lease
// plus a watch. No node is special: the job's state lives in etcd, replicated by its members
// (docs/rendezvous.md, "The etcd backend").
//
// The rendezvous protocol is dtrun's (rendezvous/dynamic_rendezvous.h), run on an EtcdStore under
// "dtrun/<run id>/". What the c10d backend gets from its store's connections, etcd gives with
// leases and watches:
//   lease       granted at start (TTL keep_alive_interval x keep_alive_max_attempt), renewed by
//               the keep-alive thread every keep_alive_interval. Before joining round R the node
//               puts r<R>/alive/<member> on it: when the agent dies or is cut off, the lease
//               lapses, the key vanishes, and every other agent sees its DELETE.
//   gone        the first agent to see such a DELETE counts it in r<R>/gone, once (one
//               transaction guarded by a per-member mark), then each agent reads the job's state.
//   watch       one streaming watch on the whole job prefix (its own thread): epoch changes and
//               member deletions, pushed; it resumes on another member when its member dies.
//   ops         the rendezvous and every other request, in order, on the rendezvous job's work
//               thread.
// Workers need a TCPStore: group rank 0 hosts one for its round (agent/hosted_store.h) and puts
// its address on its lease (r<R>/store); the others connect a channel to it, and when that
// connection drops mid-round they delete the host's alive key, so everyone re-forms at once
// without waiting for its lease to lapse.
//
// etcd unreachable or without quorum: the workers keep running (a running round needs nothing
// from etcd); the keep-alive thread says what is wrong and until when it waits, and after
// quorum_timeout reports the job lost (one line) unless etcd came back first.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/hosted_store.h"
#include "agent/record_reader.h"
#include "agent/rendezvous_job.h"
#include "agent/store_channel.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/prefix_store.h"

namespace dtrun::agent {

struct EtcdJobOptions {
  rendezvous::etcd::ClientOptions client;  ///< endpoints, TLS, auth, request timeout
  std::string runId;
  rendezvous::NodeInfo me;
  rendezvous::RendezvousSettings rendezvous;
  std::chrono::milliseconds keepAliveInterval = std::chrono::seconds(5);
  int keepAliveMaxAttempt = 3;
  /// How long etcd may be unreachable (or without quorum) before the job is reported lost.
  std::chrono::milliseconds quorumTimeout = std::chrono::seconds(60);
  /// First contact: how long to try the members before the one-line error.
  std::chrono::milliseconds connectTimeout = std::chrono::seconds(5);
  /// Where group rank 0's worker store listens (an address the other nodes reach).
  std::string localAddr;
  /// How long the outcome of a finished job stays readable after its last agent left, for
  /// agents that lost their lease while it ended (on a lease of this TTL).
  std::chrono::milliseconds closeTimeout = std::chrono::seconds(30);
};

class EtcdJob final : public RendezvousJob {
 public:
  /// Contacts etcd (up to connectTimeout; throws naming the endpoints, a TLS file or the user),
  /// grants the lease, clears the keys of a finished job with the same run id, and starts the
  /// threads.
  EtcdJob(boost::asio::io_context& io, EtcdJobOptions options, std::shared_ptr<spdlog::logger> log);
  ~EtcdJob() override;
  EtcdJob(const EtcdJob&) = delete;
  EtcdJob& operator=(const EtcdJob&) = delete;

  void workerStore(const rendezvous::RoundInfo& round,
                   std::function<void(Result<WorkerStore>)> done) override;
  /// On a short-lived thread with a client of its own (one pass over the members).
  void readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) override;
  /// Native workers watch the round's worker store; the abort key goes there (by the host).
  void abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) override;
  /// Written by the keep-alive thread (the ops thread may be inside a rendezvous), not on the
  /// lease: it stays after the agent, saying how it ended.
  void publishStatus(std::string statusJson) override;
  /// Nobody reads anything from this node after their workers finished: the state is in etcd.
  bool servesOthers() const override { return false; }
  /// Revokes the lease (the others see this node leave at once); the last agent of a finished
  /// job deletes its keys, but for its outcome, which stays for closeTimeout.
  void close() override;
  std::string describe() const override;

  /// This agent's member id (host:pid:nonce), as in r<R>/alive/<id>.
  const std::string& memberId() const { return memberId_; }

 private:
  std::shared_ptr<rendezvous::etcd::EtcdClient> makeClient(std::chrono::milliseconds retryFor);
  /// "No member answered" becomes one line about quorum and its bound.
  std::exception_ptr explain(std::exception_ptr error) const override;
  /// The line for an outage of `down` (quorum_timeout reached): what each member said.
  std::string unreachable(std::chrono::milliseconds down, const std::string& details) const;
  void registerMember(std::int64_t round) override;             // ops thread
  rendezvous::JobState readState(std::int64_t round) override;  // ops thread
  void startWatching() override;                                // io thread: the watch thread
  void beforeJoin() override { leaveWorkerStore(); }            // io thread
  void watchLoop(std::int64_t fromRevision);                    // watch thread
  void keepAliveLoop();                                         // keep-alive thread
  void writeStatus(const std::string& statusJson);              // keep-alive thread
  /// Counts member `id` of `round` in r<round>/gone once, whoever sees its key vanish first.
  void countGone(rendezvous::etcd::EtcdClient& client, std::int64_t round, const std::string& id);
  /// Io thread: stops hosting / watching the previous round's worker store.
  void leaveWorkerStore();
  void watchStoreHost(std::int64_t round, int fd, std::string address, std::string hostMember);
  /// The job is over (succeeded or failed for good) and no agent of it is left: its keys may go.
  bool finishedAndAlone(rendezvous::etcd::EtcdClient& client);
  /// The last agent of a finished job leaves: every key goes but `succeeded` and `final`, which
  /// move onto a lease of closeTimeout.
  void keepRecordOnly(rendezvous::etcd::EtcdClient& client);

  EtcdJobOptions options_;
  std::string prefix_;  // "dtrun/<run id>/"
  std::string memberId_;
  std::int64_t lease_ = 0;
  std::int64_t startRevision_ = 0;
  std::shared_ptr<rendezvous::etcd::EtcdClient> ops_, watchClient_, keepAliveClient_;
  std::shared_ptr<rendezvous::PrefixStore> job_;

  std::mutex mutex_;
  std::condition_variable cv_;  // wakes the keep-alive thread on close or for a status
  std::optional<std::string> pendingStatus_;  // guarded by mutex_: to be written ...
  std::optional<std::string> lastStatus_;     // ... and the last one given (close writes it)
  std::atomic<bool> finished_{false};         // the watch saw the job succeed or fail for good
  std::atomic<bool> unreachable_{false};      // lost for an outage: outcome() does not try again
  std::thread watchThread_, keepAliveThread_;
  RecordReader recordReader_{io_};
  // Io thread only:
  std::unique_ptr<HostedStore> hosted_;        // group rank 0: this round's worker store
  std::unique_ptr<StoreChannel> hostChannel_;  // the others: a connection to it
  std::int64_t storeRound_ = -1;               // the round hosted_ / hostChannel_ belong to
  std::int64_t hostGoneRound_ = -1;            // the round whose store host was seen to die
};

}  // namespace dtrun::agent
