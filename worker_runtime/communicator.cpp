#include "dtrun/worker/communicator.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 19, 0)
#error "dtrun_worker needs NCCL 2.19 or newer (ncclConfig_t.commName, ncclGetLastError)"
#endif

namespace dtrun::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The value under a unique-id key is tagged, so that a root that cannot make the id can say so
// and its peers fail at once instead of waiting out the timeout.
constexpr char kIdTag = 'I';
constexpr char kFailureTag = 'E';

std::string who(const Worker& w) {
  return "dtrun_worker rank " + std::to_string(w.rank()) + "/" + std::to_string(w.worldSize()) +
         " (LOCAL_RANK " + std::to_string(w.localRank()) + ", round " +
         std::to_string(w.restartCount()) + ")";
}

std::string context(const Worker& w, const std::string& name, const std::string& key) {
  return who(w) + ", communicator '" + name + "', key " + key;
}

milliseconds timeoutOf(const Worker& w, const CommunicatorOptions& o) {
  return o.timeout.value_or(w.options().timeout);
}

// Best effort: the caller is already failing with a better error than any this could raise.
void publishFailure(Worker& w, const std::string& key, const std::string& message) noexcept {
  try {
    w.store().set(key, std::string(1, kFailureTag) + message);
  } catch (...) {
  }
}

// Checks the device before the rank takes part in any exchange, so that a machine without a
// GPU fails with CUDA's own words rather than somewhere inside ncclCommInitRank.
int selectDevice(const Worker& w, const CommunicatorOptions& o, const std::string& ctx) {
  int count = 0;
  DTRUN_CUDA_CHECK(::cudaGetDeviceCount(&count), ctx + ": no usable CUDA device");
  if (count == 0) {
    throw CudaError(ctx + ": no usable CUDA device: cudaGetDeviceCount() found none",
                    cudaErrorNoDevice);
  }
  const int device = o.device.value_or(w.localRank());
  if (device < 0 || device >= count) {
    throw CudaError(ctx + ": CUDA device " + std::to_string(device) +
                        (o.device ? " (CommunicatorOptions::device)" : " (LOCAL_RANK)") +
                        " does not exist; " + std::to_string(count) +
                        " device(s) are visible (check CUDA_VISIBLE_DEVICES and "
                        "--nproc-per-node)",
                    cudaErrorInvalidDevice);
  }
  DTRUN_CUDA_CHECK(::cudaSetDevice(device), ctx);
  return device;
}

ncclUniqueId decodeId(const Bytes& value, const std::string& ctx) {
  if (!value.empty() && value[0] == kFailureTag) {
    throw Error(ctx + ": the rank that creates the unique id failed: " + value.substr(1));
  }
  ncclUniqueId id{};
  if (value.size() != 1 + sizeof(id.internal) || value[0] != kIdTag) {
    throw ProtocolError(ctx + ": the store holds " + std::to_string(value.size()) +
                        " bytes, not a tagged " + std::to_string(sizeof(id.internal)) +
                        "-byte NCCL unique id");
  }
  std::memcpy(id.internal, value.data() + 1, sizeof(id.internal));
  return id;
}

// Polls a nonblocking communicator until its initialisation ends, aborting it when the round is
// aborted or the deadline passes (the point of nonblocking init: it can be given up).
void awaitInit(Worker& w, ncclComm_t comm, Clock::time_point until, const std::string& ctx) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t rc = ::ncclCommGetAsyncError(comm, &state);
    if (rc == ncclSuccess && state == ncclSuccess) return;
    if (rc != ncclSuccess || state != ncclInProgress) {
      ::ncclCommAbort(comm);
      detail::throwNccl(rc != ncclSuccess ? rc : state, "ncclCommInitRankConfig (nonblocking)", ctx,
                        __FILE__, __LINE__);
    }
    if (w.abortRequested()) {
      ::ncclCommAbort(comm);
      throw AbortedError(ctx + ": aborted during initialisation: " +
                         w.abortReason().value_or("(no reason given)"));
    }
    if (Clock::now() >= until) {
      ::ncclCommAbort(comm);
      throw TimeoutError(ctx + ": initialisation did not finish in time");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::shared_ptr<Communicator> initCommunicator(Worker& w, const std::string& name,
                                               const ncclUniqueId& id, int size, int rank,
                                               int device, const CommunicatorOptions& o,
                                               const std::string& ctx) {
  w.throwIfAborted();
  const auto until = Clock::now() + timeoutOf(w, o);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = o.blocking ? 1 : 0;
  config.commName = name.c_str();
  ncclComm_t comm = nullptr;
  const std::string where = ctx + " (rank " + std::to_string(rank) + " of " + std::to_string(size) +
                            " on device " + std::to_string(device) + ")";
  DTRUN_NCCL_CHECK(::ncclCommInitRankConfig(&comm, size, id, rank, &config), where);
  if (!o.blocking) awaitInit(w, comm, until, where);
  auto c = std::make_shared<Communicator>(comm, name, rank, size, device);
  w.watch(c);  // aborts it at once if the round ended meanwhile
  w.log("communicator '" + name + "' ready: rank " + std::to_string(rank) + " of " +
        std::to_string(size) + " on CUDA device " + std::to_string(device));
  return c;
}

struct GroupPlan {
  GroupUniqueId group;
  std::string idKey;
  bool root = false;
};

// The store half of a split: everyone publishes (color, key) and reads everyone else's.
GroupPlan planGroup(Worker& w, const std::string& name, int color, int key, milliseconds timeout) {
  if (name.empty()) throw ConfigError(who(w) + ": a sub-communicator needs a name");
  if (color < -1) {
    throw ConfigError(who(w) + ": color " + std::to_string(color) + " for '" + name +
                      "' must be >= 0, or -1 to take no part");
  }
  const std::string base =
      "dtrun_worker/nccl/" + name + "/" + std::to_string(w.nextSequence("nccl/" + name));
  w.store().set(base + "/member/" + std::to_string(w.rank()),
                std::to_string(color) + " " + std::to_string(key));
  std::vector<std::string> keys;
  for (int r = 0; r < w.worldSize(); ++r) keys.push_back(base + "/member/" + std::to_string(r));
  w.wait(keys, timeout);
  std::vector<Bytes> values = w.store().multiGet(keys, timeout);

  GroupPlan plan;
  plan.group.color = color;
  if (color == -1) return plan;
  std::vector<std::pair<long long, int>> same;  // (key, global rank)
  for (int r = 0; r < w.worldSize(); ++r) {
    std::istringstream in(values[r]);
    long long c = 0;
    long long k = 0;
    if (!(in >> c >> k)) {
      throw ProtocolError(who(w) + ": bad member entry '" + values[r] + "' under " + keys[r]);
    }
    if (c == color) same.emplace_back(k, r);
  }
  std::sort(same.begin(), same.end());
  for (const auto& [k, r] : same) plan.group.members.push_back(r);
  plan.group.size = static_cast<int>(plan.group.members.size());
  auto it = std::find(plan.group.members.begin(), plan.group.members.end(), w.rank());
  plan.group.rank = static_cast<int>(it - plan.group.members.begin());
  plan.idKey = base + "/color/" + std::to_string(color) + "/unique_id";
  plan.root = plan.group.members.front() == w.rank();
  return plan;
}

}  // namespace

Communicator::Communicator(ncclComm_t comm, std::string name, int rank, int size, int device)
    : comm_(comm), name_(std::move(name)), rank_(rank), size_(size), device_(device) {}

Communicator::~Communicator() {
  std::lock_guard lock(mutex_);
  // NCCL finalises inside ncclCommDestroy when the program did not call ncclCommFinalize.
  if (comm_ != nullptr) ::ncclCommDestroy(comm_);
}

ncclComm_t Communicator::get() const {
  std::lock_guard lock(mutex_);
  if (comm_ == nullptr) {
    throw AbortedError("communicator '" + name_ + "' (rank " + std::to_string(rank_) + " of " +
                       std::to_string(size_) + ") was aborted: " + abortReason_);
  }
  return comm_;
}

void Communicator::abort(const std::string& reason) noexcept {
  std::lock_guard lock(mutex_);
  if (comm_ == nullptr) return;
  try {
    abortReason_ = reason;
  } catch (...) {
  }
  // Frees the communicator and makes its kernels and proxy threads give up, so a collective
  // blocked on a dead peer returns instead of spinning until NCCL's own timeouts.
  ::ncclCommAbort(comm_);
  comm_ = nullptr;
}

bool Communicator::aborted() const {
  std::lock_guard lock(mutex_);
  return comm_ == nullptr;
}

void Communicator::checkAsyncError() const {
  std::lock_guard lock(mutex_);
  const std::string ctx = "communicator '" + name_ + "' (rank " + std::to_string(rank_) + " of " +
                          std::to_string(size_) + ")";
  if (comm_ == nullptr) throw AbortedError(ctx + " was aborted: " + abortReason_);
  ncclResult_t state = ncclSuccess;
  DTRUN_NCCL_CHECK(::ncclCommGetAsyncError(comm_, &state), ctx);
  if (state != ncclSuccess && state != ncclInProgress) {
    detail::throwNccl(state, "asynchronous operation", ctx, __FILE__, __LINE__);
  }
}

void Communicator::synchronize(cudaStream_t stream, milliseconds timeout) const {
  const auto start = Clock::now();
  for (;;) {
    cudaError_t q = ::cudaStreamQuery(stream);
    // Aborted first: a stream whose kernels were cut short by ncclCommAbort also "completes".
    checkAsyncError();
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) DTRUN_CUDA_CHECK(q, "communicator '" + name_ + "': synchronize");
    if (Clock::now() - start >= timeout) {
      throw TimeoutError("communicator '" + name_ + "' (rank " + std::to_string(rank_) +
                         "): the stream did not finish within " + std::to_string(timeout.count()) +
                         " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

ncclUniqueId exchangeUniqueId(Worker& worker, const std::string& key, bool isRoot,
                              milliseconds timeout) {
  const std::string ctx = who(worker) + ", key " + key;
  if (!isRoot) return decodeId(worker.get(key, timeout), ctx);
  ncclUniqueId id{};
  try {
    DTRUN_NCCL_CHECK(::ncclGetUniqueId(&id), ctx);
  } catch (const Error& e) {
    publishFailure(worker, key, e.what());
    throw;
  }
  worker.store().set(key, std::string(1, kIdTag) + std::string(id.internal, sizeof(id.internal)));
  return id;
}

GroupUniqueId exchangeGroupUniqueId(Worker& worker, const std::string& name, int color, int key,
                                    milliseconds timeout) {
  GroupPlan plan = planGroup(worker, name, color, key, timeout);
  if (color == -1) return plan.group;
  plan.group.id = exchangeUniqueId(worker, plan.idKey, plan.root, timeout);
  return plan.group;
}

std::shared_ptr<Communicator> createCommunicator(Worker& worker,
                                                 const CommunicatorOptions& options) {
  worker.throwIfAborted();
  const std::string name = "world";
  const std::string key =
      "dtrun_worker/nccl/world/" + std::to_string(worker.nextSequence("nccl/world")) + "/unique_id";
  const std::string ctx = context(worker, name, key);
  const bool root = worker.rank() == 0;
  int device = -1;
  try {
    device = selectDevice(worker, options, ctx);
  } catch (const Error& e) {
    if (root) publishFailure(worker, key, e.what());
    throw;
  }
  ncclUniqueId id = exchangeUniqueId(worker, key, root, timeoutOf(worker, options));
  return initCommunicator(worker, name, id, worker.worldSize(), worker.rank(), device, options,
                          ctx);
}

std::shared_ptr<Communicator> createSubCommunicator(Worker& worker, const std::string& name,
                                                    int color, int key,
                                                    const CommunicatorOptions& options) {
  worker.throwIfAborted();
  GroupPlan plan = planGroup(worker, name, color, key, timeoutOf(worker, options));
  if (color == -1) return nullptr;
  const std::string ctx = context(worker, name, plan.idKey);
  int device = -1;
  try {
    device = selectDevice(worker, options, ctx);
  } catch (const Error& e) {
    if (plan.root) publishFailure(worker, plan.idKey, e.what());
    throw;
  }
  plan.group.id = exchangeUniqueId(worker, plan.idKey, plan.root, timeoutOf(worker, options));
  return initCommunicator(worker, name, plan.group.id, plan.group.size, plan.group.rank, device,
                          options, ctx);
}

std::shared_ptr<Communicator> createNodeCommunicator(Worker& worker,
                                                     const CommunicatorOptions& options) {
  return createSubCommunicator(worker, "node", worker.groupRank(), worker.localRank(), options);
}

}  // namespace dtrun::worker
