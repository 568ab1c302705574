// C10dJob: the JobLink of the c10d and static backends: the rendezvous job (agent/
// rendezvous_job.h) over dtrun's store, whose liveness is a store connection plus heartbeat.
//
// Three connections to the job's store:
//   ops         the rendezvous' work thread runs the protocol's calls (the rendezvous, reports,
//               state reads) one at a time with a blocking TcpStore: the protocol
//               (rendezvous/dynamic_rendezvous.h) is a sequence of store calls, written straight.
//   membership  on the agent's io thread (StoreChannel): registered with ADD_ON_CLOSE per
//               round and a DTRUN_LEASE, and pinged every keep_alive_interval by a timer. Its
//               closing (agent killed, or silent for interval x max_attempt) is how the other
//               nodes learn this node is gone.
//   watch       on the io thread too: parked in WAIT_CHANGE on the job's epoch. It also counts
//               this agent in the job's `agents` (ADD_ON_CLOSE -1), so that the store's host,
//               once the job is over, waits for every agent to leave (close_timeout at most):
//               one stopped or cut off while the job ended still reads how it ended.
// A lost job's outcome is read on a fourth, short-lived connection of its own (outcome()).
// Results of the work thread are posted back to the io thread, the only one that touches
// the agent's state (docs/agent.md, "Threads").
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/record_reader.h"
#include "agent/rendezvous_job.h"
#include "agent/store_channel.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"

namespace dtrun::agent {

struct C10dJobOptions {
  rendezvous::TcpStoreOptions store;  ///< where the store is; timeout = read_timeout
  std::string runId;
  rendezvous::NodeInfo me;
  rendezvous::RendezvousSettings rendezvous;
  std::chrono::milliseconds keepAliveInterval = std::chrono::seconds(5);
  int keepAliveMaxAttempt = 3;
  std::chrono::milliseconds heartbeatTimeout = std::chrono::seconds(5);
  /// Agent-store mode (the default): every round's workers use the job's store itself, found
  /// at `workerStore`. Otherwise (torchrun 1.13's mode) group rank 0 picks a free port on
  /// `localAddr` and its rank 0 worker serves the store there.
  bool agentStore = true;
  WorkerStore workerStore;
  std::string localAddr;
  /// This process serves the job's store: it leaves after the other nodes (servesOthers()).
  bool hostsStore = false;
};

class C10dJob final : public RendezvousJob {
 public:
  /// Connects all three connections (blocking, up to the store's connect timeout; throws
  /// ConnectionError naming the store), starts the work thread and the heartbeat.
  C10dJob(boost::asio::io_context& io, C10dJobOptions options, std::shared_ptr<spdlog::logger> log);
  /// close(). On the io thread, or after io.run() returned.
  ~C10dJob() override;
  C10dJob(const C10dJob&) = delete;
  C10dJob& operator=(const C10dJob&) = delete;

  // JobLink (agent/job_link.h) beyond the rendezvous job's calls; `done` runs later on the io
  // thread.
  /// Agent-store mode: the job's store. Otherwise group rank 0 publishes "addr:port" of a free
  /// port on its host, and the others read it.
  void workerStore(const rendezvous::RoundInfo& round,
                   std::function<void(Result<WorkerStore>)> done) override;
  /// On a short-lived thread and a new connection, bounded by the heartbeat timeout.
  void readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) override;
  /// Sets the round's abort key (worker_runtime watches it) and confirms the server has it.
  void abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) override;
  /// On the membership connection (the io thread's), so a rendezvous in progress never holds
  /// it up; the last one again at close() on a connection of its own.
  void publishStatus(std::string statusJson) override;
  bool servesOthers() const override { return options_.hostsStore; }
  /// Cancels a join in progress and stops every thread (the connections close, so the other
  /// nodes see this node leave).
  void close() override;
  /// "store at host:port".
  std::string describe() const override { return "store at " + address_; }

 private:
  /// Work thread, before joining `round`: ADD_ON_CLOSE on the membership channel (io thread),
  /// waited for here so that the server has it before this node's join counts.
  void registerMember(std::int64_t round) override;
  /// The watch connection parks in WAIT_CHANGE on the job's epoch (io thread).
  void startWatching() override;
  void heartbeat();                        // io thread
  void watchFrom(rendezvous::Bytes seen);  // io thread
  /// The heartbeat failed: on a short-lived thread, find out whether the store is gone or
  /// dropped this agent, then report it lost.
  void probe(const std::string& error);
  std::string classifyHeartbeatFailure(const std::string& error);
  /// close(): writes the last status published unless the store confirmed it already.
  void storeLastStatus();

  C10dJobOptions options_;
  std::string address_;
  std::string jobPrefix_;
  std::shared_ptr<rendezvous::TcpStore> ops_;
  std::unique_ptr<StoreChannel> membership_;
  std::unique_ptr<StoreChannel> watcher_;
  std::shared_ptr<rendezvous::PrefixStore> job_;
  boost::asio::steady_timer heartbeatTimer_;

  std::mutex mutex_;  // guards pendingRegistration_ (work thread vs io thread)
  std::shared_ptr<std::promise<std::string>> pendingRegistration_;
  // The heartbeat's probe found the store silent: outcome() then answers at once instead of
  // waiting its own timeout on the same silence.
  std::atomic<bool> storeSilent_{false};
  bool epochRegistered_ = false;  // work thread only
  // Io thread only:
  std::optional<std::string> lastStatus_;  // the last status published ...
  bool lastStatusStored_ = false;          // ... and whether the store confirmed it
  std::uint64_t statusSeq_ = 0;
  std::thread probeThread_;
  RecordReader recordReader_;
};

}  // namespace dtrun::agent
