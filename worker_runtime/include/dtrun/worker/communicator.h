// NCCL communicators bootstrapped from the dtrun store (only with DTRUN_WORKER_HAS_NCCL).
//
// The world communicator: rank 0 calls ncclGetUniqueId and publishes the 128 bytes under
// "dtrun_worker/nccl/world/<n>/unique_id" in the round store; every rank reads them, selects its
// CUDA device (LOCAL_RANK unless told otherwise) and calls ncclCommInitRankConfig. A named
// sub-communicator (createSubCommunicator) gathers every rank's (color, key) through the store and
// exchanges one unique id per color the same way, so no parent communicator is needed. Every
// communicator registers with its Worker, whose abort watcher calls ncclCommAbort on it when the
// agent stops the round.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/worker/cuda_check.h"
#include "dtrun/worker/worker.h"

namespace dtrun::worker {

/// How to build a communicator.
struct CommunicatorOptions {
  /// CUDA device; default LOCAL_RANK (torchrun's convention; with --virtual-local-rank and
  /// CUDA_VISIBLE_DEVICES that is device 0 of each worker's own list).
  std::optional<int> device;
  /// false: NCCL's nonblocking mode. Initialisation is then polled, so an abort or the timeout
  /// ends it; collectives may return ncclInProgress (see NCCL's docs).
  bool blocking = true;
  /// Deadline of the store exchange (and of a nonblocking init); default the worker's timeout.
  std::optional<std::chrono::milliseconds> timeout;
};

/// One NCCL communicator. Thread-safe: the watcher thread may abort it while another thread
/// uses it; after that get() throws AbortedError.
class Communicator final : public Abortable {
 public:
  /// Takes ownership of `comm` (already initialised).
  Communicator(ncclComm_t comm, std::string name, int rank, int size, int device);
  /// ncclCommDestroy, unless the communicator was aborted (then nothing is left to free).
  ~Communicator() override;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// The handle for NCCL calls. Throws AbortedError (with the reason) once aborted: take it
  /// fresh for every call rather than keeping it, since an abort frees it.
  ncclComm_t get() const;
  /// The name given at creation ("world", "node", ...).
  const std::string& name() const { return name_; }
  /// This process's rank in the communicator.
  int rank() const { return rank_; }
  /// Ranks in the communicator.
  int size() const { return size_; }
  /// The CUDA device it was created on.
  int device() const { return device_; }

  /// ncclCommAbort (once); any thread. Collectives blocked on the communicator return.
  void abort(const std::string& reason) noexcept override;
  /// True after abort().
  bool aborted() const;
  /// Throws NcclError when NCCL recorded an asynchronous error (a peer went away, ...), and
  /// AbortedError when aborted.
  void checkAsyncError() const;
  /// Waits for `stream` while watching for aborts and asynchronous NCCL errors (polling about
  /// every 100 us). Throws AbortedError, NcclError, CudaError, or TimeoutError after `timeout`.
  void synchronize(cudaStream_t stream, std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mutex_;
  ncclComm_t comm_;  // nullptr once aborted
  std::string name_;
  int rank_;
  int size_;
  int device_;
  std::string abortReason_;
};

/// Which group of a named split this rank is in, and that group's unique id.
struct GroupUniqueId {
  int color = -1;            ///< the color asked for (-1: not in any group)
  int rank = -1;             ///< rank within the group (-1 when color is -1)
  int size = 0;              ///< ranks in the group (0 when color is -1)
  std::vector<int> members;  ///< global ranks of the group, in group-rank order
  ncclUniqueId id{};         ///< the group's unique id (zero when color is -1)
};

/// Rank `isRoot` makes a unique id (ncclGetUniqueId, no GPU needed) and publishes it under `key`
/// in worker.store(); the others wait for it (abort-aware, up to `timeout`) and return it.
/// Blocking; collective over whoever uses `key`.
ncclUniqueId exchangeUniqueId(Worker& worker, const std::string& key, bool isRoot,
                              std::chrono::milliseconds timeout);
/// Collective over all ranks: gathers (color, key) under `name` and exchanges one unique id per
/// color (root: the member with the lowest key, then rank). color -1 takes no part. No GPU.
GroupUniqueId exchangeGroupUniqueId(Worker& worker, const std::string& name, int color, int key,
                                    std::chrono::milliseconds timeout);

/// The communicator of all WORLD_SIZE ranks, named "world". Collective; blocking. Throws
/// CudaError when this rank has no usable GPU (before it takes part in the exchange, and
/// rank 0 then tells the others, who fail fast too), NcclError, TimeoutError, AbortedError.
std::shared_ptr<Communicator> createCommunicator(Worker& worker,
                                                 const CommunicatorOptions& options = {});
/// The communicator of the ranks passing the same `color` (>= 0), ordered by `key` then rank;
/// color -1 returns nullptr after taking part in the exchange. Collective over all ranks.
std::shared_ptr<Communicator> createSubCommunicator(Worker& worker, const std::string& name,
                                                    int color, int key,
                                                    const CommunicatorOptions& options = {});
/// createSubCommunicator(worker, "node", GROUP_RANK, LOCAL_RANK): the ranks on this node.
std::shared_ptr<Communicator> createNodeCommunicator(Worker& worker,
                                                     const CommunicatorOptions& options = {});

}  // namespace dtrun::worker
