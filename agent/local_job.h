// LocalJob: the JobLink of a job that is this node alone: --standalone, or a single-node run on
// a free port that no other agent can know. Its rendezvous is the same DynamicRendezvous as
// every other backend's, over an InMemoryStore in this process: one copy of the restart rules,
// the final record and the success record. With one node every round closes at once, so its
// calls never wait; they run on the io thread and answer later, as any JobLink's. Only the
// workers use a network store, and only an abort for native workers writes to it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/job_link.h"
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

class LocalJob : public JobLink {
 public:
  /// Io thread; nothing blocks.
  LocalJob(boost::asio::io_context& io, LocalJobOptions options);
  LocalJob(const LocalJob&) = delete;
  LocalJob& operator=(const LocalJob&) = delete;

  void watch(std::function<void()> onChange, std::function<void(std::string)> onLost) override;
  void join(std::function<void(Result<rendezvous::RoundInfo>)> done) override;
  void workerStore(const rendezvous::RoundInfo& round,
                   std::function<void(Result<WorkerStore>)> done) override;
  void state(std::int64_t round, std::function<void(Result<rendezvous::JobState>)> done) override;
  void reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                     std::function<void(Result<bool>)> done) override;
  void advance(std::int64_t round, std::function<void(Result<bool>)> done) override;
  void markDone(std::int64_t round, int groupWorldSize,
                std::function<void(Result<std::int64_t>)> done) override;
  void failures(std::int64_t round,
                std::function<void(Result<std::vector<std::string>>)> done) override;
  /// Never lost, but answered: the final record, if the job failed for good.
  void readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) override;
  void abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) override;
  bool servesOthers() const override { return false; }
  void close() override { closed_ = true; }
  std::string describe() const override { return "job of this node alone"; }

 private:
  /// Runs `f` later on the io thread unless the job was closed meanwhile.
  void later(std::function<void()> f);
  void changed();
  /// Runs `work` now (the rendezvous over the in-process store never waits) and hands its
  /// result, or what it threw, to `done` later; after the watch's onChange when `changes`.
  template <typename T, typename F>
  void answer(F work, std::function<void(Result<T>)> done, bool changes = false);

  boost::asio::io_context& io_;
  LocalJobOptions options_;
  std::shared_ptr<rendezvous::InMemoryStore> store_;
  std::unique_ptr<rendezvous::DynamicRendezvous> rdzv_;
  std::function<void()> onChange_;
  bool closed_ = false;
};

}  // namespace dtrun::agent
