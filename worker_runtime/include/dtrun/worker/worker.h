// dtrun::worker::Worker: what a native worker needs from the launcher, in a few lines.
//
//   auto worker = dtrun::worker::Worker::fromEnvironment();
//   worker.barrier();
//   auto config = worker.broadcast(worker.rank() == 0 ? loadConfig() : "", /*root=*/0);
//   auto comm = dtrun::worker::createCommunicator(worker);  // communicator.h, with NCCL
//
// A Worker reads the environment once, connects to the store at MASTER_ADDR:MASTER_PORT (the
// agent's store, as torch's workers do in agent-store mode) and scopes its keys to this round:
// every key goes under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>", so a restarted round starts
// from a fresh namespace. A second connection watches abortKey(round) (abort_key.h): when the agent
// stops the round, or the store goes away, every registered Abortable (each NCCL communicator) is
// aborted and blocking calls fail with AbortedError.
//
// Threads: the methods may be called from any thread; calls that use the store are serialised on
// one connection. The abort watcher runs on its own thread, which the destructor stops and joins.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/abort_key.h"
#include "dtrun/worker/env.h"
#include "common/error.h"
#include "rendezvous/store.h"

namespace dtrun::worker {

using rendezvous::Bytes;

/// Thrown by runtime calls once the round was aborted; what() includes the agent's reason.
class AbortedError : public Error {
 public:
  using Error::Error;
};

/// Something the runtime stops when the round is aborted (each NCCL Communicator is one).
class Abortable {
 public:
  virtual ~Abortable() = default;
  /// Called at most once per abort, on the watcher thread (or on the registering thread when the
  /// round was already aborted). Must not throw and should return quickly.
  virtual void abort(const std::string& reason) noexcept = 0;
};

/// Knobs a program may change; the defaults suit torchrun-style jobs.
struct WorkerOptions {
  /// Deadline of each blocking runtime call: barrier, broadcast, get, unique-id exchange.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  /// How long the first connection to the store may take (the agent may still be starting it).
  std::chrono::milliseconds connectTimeout = std::chrono::seconds(60);
  /// Watch abortKey(restartCount) and abort registered Abortables when it appears.
  bool watchAbort = true;
  /// After the store connection breaks, how long the watcher tries to reconnect before it
  /// declares the round aborted.
  std::chrono::milliseconds storeLossGrace = std::chrono::seconds(5);
  /// Blocking waits look at the abort state at least this often.
  std::chrono::milliseconds abortPollInterval = std::chrono::seconds(1);
  /// Gets one line per event (connected, aborted, communicator created), from any thread;
  /// empty: the runtime prints nothing.
  std::function<void(const std::string&)> log;
};

/// One worker process's handle on the job: its environment, this round's store, the abort state.
class Worker {
 public:
  /// Connects to the store (blocking, up to options.connectTimeout; ConnectionError) and starts
  /// the abort watcher. Throws WorkerEnvError when `env` is inconsistent.
  explicit Worker(WorkerEnv env, WorkerOptions options = {});
  /// Worker(readWorkerEnv(), options): the usual way in.
  static Worker fromEnvironment(WorkerOptions options = {});
  /// Stops and joins the abort watcher (promptly: it interrupts the watcher's socket).
  ~Worker();
  /// Movable (the watcher thread keeps no pointer to the Worker object itself).
  Worker(Worker&&) noexcept;
  /// Move assignment; the replaced Worker's watcher is stopped first.
  Worker& operator=(Worker&&) noexcept;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// The environment this worker was built from.
  const WorkerEnv& env() const;
  /// The options given at construction.
  const WorkerOptions& options() const;
  /// RANK.
  int rank() const { return env().rank; }
  /// WORLD_SIZE.
  int worldSize() const { return env().worldSize; }
  /// LOCAL_RANK.
  int localRank() const { return env().localRank; }
  /// LOCAL_WORLD_SIZE.
  int localWorldSize() const { return env().localWorldSize; }
  /// GROUP_RANK (the node).
  int groupRank() const { return env().groupRank; }
  /// TORCHELASTIC_RESTART_COUNT (the round).
  int restartCount() const { return env().restartCount; }

  /// This round's store: keys go to "/worker/attempt_<n>/<key>" (wire "//worker/attempt_<n>/<key>",
  /// as torch's workers write them). Thread-safe; calls block as the Store interface says.
  rendezvous::Store& store();

  /// 0, 1, 2, ... per `name` on this worker. Ranks that call collectives in the same order get the
  /// same numbers, which gives each collective call its own keys.
  std::uint64_t nextSequence(const std::string& name);

  /// Blocks until every rank of the round called barrier() as often (options.timeout, then
  /// TimeoutError with the count that arrived). AbortedError once the round is aborted.
  void barrier();
  /// barrier() with its own deadline.
  void barrier(std::chrono::milliseconds timeout);

  /// Rank `root` sends `data` (up to the store's 64 MiB value limit); every rank returns it. Other
  /// ranks' `data` is ignored. Blocks up to options.timeout; AbortedError once aborted.
  Bytes broadcast(const Bytes& data, int root);

  /// store().wait() that gives up with AbortedError once the round is aborted and with
  /// TimeoutError (naming keys and rank) after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// wait({key}, timeout), then the key's value.
  Bytes get(const std::string& key, std::chrono::milliseconds timeout);

  /// True once the agent asked to stop this round (or the store was lost). Never blocks.
  bool abortRequested() const noexcept;
  /// The agent's reason once abortRequested(), else nullopt. Never blocks for long.
  std::optional<std::string> abortReason() const;
  /// Throws AbortedError (with the reason) once abortRequested().
  void throwIfAborted() const;
  /// Aborts `target` when the round is aborted (at once, on this thread, if it already was).
  /// Only a weak reference is kept: an Abortable that is gone is skipped.
  void watch(std::weak_ptr<Abortable> target);
  /// Treats the round as aborted locally with `reason` (as if the agent had asked); the first
  /// reason wins. The agent is not told.
  void abortLocally(const std::string& reason);

  /// Sends `line` to options.log, prefixed with the rank; no-op without a log function.
  void log(const std::string& line) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrun::worker
