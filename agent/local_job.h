// LocalJob: the JobLink of a job that is this node alone: --standalone, or a single-node run on
// a free port that no other agent can know. It is the rendezvous job (agent/rendezvous_job.h)
// every backend is, over an InMemoryStore in this process: one copy of the restart rules, the
// final record and the success record. Its liveness is none (nothing can be lost; its writes
// notify the watch themselves). With one node every round closes at once, so its calls never
// wait; they run on the io thread and answer later, as any JobLink's. Only the workers use a
// network store, and only an abort for native workers writes to it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/rendezvous_job.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/in_memory_store.h"

namespace dtrun::agent {

struct LocalJobOptions {
  int nproc = 1;
  std::string role = "default";
  /// Agent-store mode: the store the workers use. Otherwise (torchrun 1.13's mode) worker rank
  /// 0 serves a store on a free port of `localAddr`.
  bool agentStore = true;
  WorkerStore workerStore;
  std::string localAddr = "127.0.0.1";
  /// Sets `key` to `value` in the workers' store and runs `done` on the io thread (agent-store
  /// mode; empty otherwise).
  std::function<void(std::string key, std::string value, std::function<void()> done)> setKey;
};

class LocalJob final : public RendezvousJob {
 public:
  /// Io thread; nothing blocks.
  LocalJob(boost::asio::io_context& io, LocalJobOptions options);
  LocalJob(const LocalJob&) = delete;
  LocalJob& operator=(const LocalJob&) = delete;

  void workerStore(const rendezvous::RoundInfo& round,
                   std::function<void(Result<WorkerStore>)> done) override;
  /// Never lost, but answered: the final record, if the job failed for good.
  void readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) override;
  void abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) override;
  bool servesOthers() const override { return false; }
  void close() override { beginClose(); }
  std::string describe() const override { return "job of this node alone"; }

 private:
  /// Nobody else joins: nothing to count.
  void registerMember(std::int64_t) override {}
  /// Nothing to watch: the job is this process (its writes say changed()).
  void startWatching() override {}
  /// The watch first, as a shared store's epoch would wake it, then the call's answer.
  void afterWrite() override { changed(); }

  LocalJobOptions options_;
  std::shared_ptr<rendezvous::InMemoryStore> store_;
};

}  // namespace dtrun::agent
