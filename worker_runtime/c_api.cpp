// The C API over dtrun::worker::Worker. A handle is the one piece of state C callers hold; it
// owns the Worker, the last error message and (with NCCL) the communicators made through it.
#include "dtrun/worker/c_api.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/worker/error_file.h"
#include "dtrun/worker/timer.h"
#include "dtrun/worker/worker.h"
#if DTRUN_WORKER_HAS_NCCL
#include "dtrun/worker/communicator.h"
#endif

using dtrun::worker::Worker;

struct dtrun_worker {
  std::optional<Worker> worker;
  std::string error;
  std::string errorFile;  // known even when opening failed half-way
  std::mutex reasonMutex;
  std::optional<std::string> reason;  // set once, then never changed: its c_str() stays valid
#if DTRUN_WORKER_HAS_NCCL
  // Declared after `worker`, so destroyed before it: communicators go first.
  std::vector<std::shared_ptr<dtrun::worker::Communicator>> comms;
#endif
};

struct dtrun_timer {
  std::optional<dtrun::worker::TimerClient> client;
  std::string error;
};

namespace {

// Handles (dtrun_worker, dtrun_timer) keep the message of their last failure in `error`.
template <class Handle>
int fail(Handle* w, int status, const char* what) {
  if (w != nullptr) {
    try {
      w->error = what;
    } catch (...) {
      w->error.clear();
    }
  }
  return status;
}

// Runs `f`, turning each exception type into its status and keeping the message for
// dtrun_worker_error. No exception crosses the C boundary.
template <class Handle, class F>
int guarded(Handle* w, F&& f) {
  if (w == nullptr) return DTRUN_ERR_CONFIG;
  try {
    f();
    w->error.clear();
    return DTRUN_OK;
  } catch (const dtrun::worker::AbortedError& e) {
    return fail(w, DTRUN_ERR_ABORTED, e.what());
#if DTRUN_WORKER_HAS_NCCL
  } catch (const dtrun::worker::NcclError& e) {
    return fail(w, DTRUN_ERR_NCCL, e.what());
  } catch (const dtrun::worker::CudaError& e) {
    return fail(w, DTRUN_ERR_CUDA, e.what());
#endif
  } catch (const dtrun::TimeoutError& e) {
    return fail(w, DTRUN_ERR_TIMEOUT, e.what());
  } catch (const dtrun::ConnectionError& e) {
    return fail(w, DTRUN_ERR_CONNECTION, e.what());
  } catch (const dtrun::ProtocolError& e) {
    return fail(w, DTRUN_ERR_PROTOCOL, e.what());
  } catch (const dtrun::ConfigError& e) {
    return fail(w, DTRUN_ERR_CONFIG, e.what());
  } catch (const std::exception& e) {
    return fail(w, DTRUN_ERR_OTHER, e.what());
  } catch (...) {
    return fail(w, DTRUN_ERR_OTHER, "unknown exception");
  }
}

Worker& open(dtrun_worker* w) {
  if (!w->worker) throw dtrun::ConfigError("the dtrun_worker handle did not open: " + w->error);
  return *w->worker;
}

int field(const dtrun_worker* w, int dtrun::worker::WorkerEnv::*member) {
  if (w == nullptr || !w->worker) return -1;
  return w->worker->env().*member;
}

}  // namespace

extern "C" {

int dtrun_worker_open(dtrun_worker** out, int timeout_ms) {
  if (out == nullptr) return DTRUN_ERR_CONFIG;
  *out = new (std::nothrow) dtrun_worker();
  if (*out == nullptr) return DTRUN_ERR_OTHER;
  dtrun_worker* w = *out;
  return guarded(w, [&] {
    dtrun::worker::WorkerOptions options;
    if (timeout_ms > 0) options.connectTimeout = std::chrono::milliseconds(timeout_ms);
    dtrun::worker::WorkerEnv env;
    try {
      env = dtrun::worker::readWorkerEnv();
    } catch (const dtrun::worker::WorkerEnvError& e) {
      w->errorFile = e.errorFile();
      throw;
    }
    w->errorFile = env.errorFile;
    w->worker.emplace(std::move(env), std::move(options));
  });
}

void dtrun_worker_close(dtrun_worker* w) { delete w; }

const char* dtrun_worker_error(const dtrun_worker* w) {
  return w == nullptr ? "no dtrun_worker handle (out of memory?)" : w->error.c_str();
}

int dtrun_worker_rank(const dtrun_worker* w) { return field(w, &dtrun::worker::WorkerEnv::rank); }
int dtrun_worker_world_size(const dtrun_worker* w) {
  return field(w, &dtrun::worker::WorkerEnv::worldSize);
}
int dtrun_worker_local_rank(const dtrun_worker* w) {
  return field(w, &dtrun::worker::WorkerEnv::localRank);
}
int dtrun_worker_local_world_size(const dtrun_worker* w) {
  return field(w, &dtrun::worker::WorkerEnv::localWorldSize);
}
int dtrun_worker_group_rank(const dtrun_worker* w) {
  return field(w, &dtrun::worker::WorkerEnv::groupRank);
}
int dtrun_worker_restart_count(const dtrun_worker* w) {
  return field(w, &dtrun::worker::WorkerEnv::restartCount);
}

int dtrun_worker_barrier(dtrun_worker* w) {
  return guarded(w, [&] { open(w).barrier(); });
}

int dtrun_worker_broadcast(dtrun_worker* w, void* data, size_t size, int root) {
  return guarded(w, [&] {
    if (data == nullptr && size > 0) throw dtrun::ConfigError("broadcast: data is NULL");
    Worker& worker = open(w);
    dtrun::worker::Bytes mine;
    if (worker.rank() == root) mine.assign(static_cast<const char*>(data), size);
    dtrun::worker::Bytes got = worker.broadcast(mine, root);
    if (got.size() != size) {
      throw dtrun::ProtocolError("broadcast: rank " + std::to_string(root) + " sent " +
                                 std::to_string(got.size()) + " bytes, this rank expected " +
                                 std::to_string(size));
    }
    if (size > 0) std::memcpy(data, got.data(), size);
  });
}

int dtrun_worker_set(dtrun_worker* w, const char* key, const void* value, size_t size) {
  return guarded(w, [&] {
    if (key == nullptr || (value == nullptr && size > 0)) {
      throw dtrun::ConfigError("set: key or value is NULL");
    }
    open(w).store().set(key, dtrun::worker::Bytes(static_cast<const char*>(value), size));
  });
}

int dtrun_worker_get(dtrun_worker* w, const char* key, void** value, size_t* size) {
  return guarded(w, [&] {
    if (key == nullptr || value == nullptr || size == nullptr) {
      throw dtrun::ConfigError("get: key, value or size is NULL");
    }
    Worker& worker = open(w);
    dtrun::worker::Bytes got = worker.get(key, worker.options().timeout);
    void* copy = std::malloc(got.empty() ? 1 : got.size());
    if (copy == nullptr) throw std::bad_alloc();
    if (!got.empty()) std::memcpy(copy, got.data(), got.size());
    *value = copy;
    *size = got.size();
  });
}

int dtrun_worker_abort_requested(const dtrun_worker* w) {
  return w != nullptr && w->worker && w->worker->abortRequested() ? 1 : 0;
}

const char* dtrun_worker_abort_reason(const dtrun_worker* w) {
  if (w == nullptr || !w->worker) return nullptr;
  auto* mw = const_cast<dtrun_worker*>(w);  // the cache is logically const
  std::lock_guard lock(mw->reasonMutex);
  if (!mw->reason) {
    try {
      mw->reason = w->worker->abortReason();
    } catch (...) {
      return nullptr;
    }
  }
  return mw->reason ? mw->reason->c_str() : nullptr;
}

int dtrun_worker_record_error(dtrun_worker* w, const char* message) {
  if (w == nullptr || message == nullptr) return DTRUN_ERR_CONFIG;
  if (w->errorFile.empty()) {
    return fail(w, DTRUN_ERR_CONFIG, "TORCHELASTIC_ERROR_FILE is not set");
  }
  bool written = false;
  try {
    written = dtrun::worker::recordError(w->errorFile, dtrun::worker::makeErrorRecord(message));
  } catch (...) {
  }
  if (!written) return fail(w, DTRUN_ERR_OTHER, "cannot write TORCHELASTIC_ERROR_FILE");
  return DTRUN_OK;
}

int dtrun_timer_open(dtrun_timer** out, const char* path, int signal) {
  if (out == nullptr) return DTRUN_ERR_CONFIG;
  *out = new (std::nothrow) dtrun_timer();
  if (*out == nullptr) return DTRUN_ERR_OTHER;
  return guarded(*out, [&] {
    (*out)->client.emplace(path != nullptr ? dtrun::worker::TimerClient(path, signal)
                                           : dtrun::worker::TimerClient::fromEnvironment(signal));
  });
}

void dtrun_timer_close(dtrun_timer* t) { delete t; }

const char* dtrun_timer_error(const dtrun_timer* t) {
  return t == nullptr ? "no dtrun_timer handle (out of memory?)" : t->error.c_str();
}

int dtrun_timer_acquire(dtrun_timer* t, const char* scope, double after_seconds) {
  return guarded(t, [&] {
    if (scope == nullptr) throw dtrun::ConfigError("timer acquire: scope is NULL");
    if (!t->client) throw dtrun::ConfigError("the dtrun_timer handle did not open: " + t->error);
    t->client->acquire(scope, std::chrono::system_clock::now() +
                                  std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                      std::chrono::duration<double>(after_seconds)));
  });
}

int dtrun_timer_release(dtrun_timer* t, const char* scope) {
  return guarded(t, [&] {
    if (scope == nullptr) throw dtrun::ConfigError("timer release: scope is NULL");
    if (!t->client) throw dtrun::ConfigError("the dtrun_timer handle did not open: " + t->error);
    t->client->release(scope);
  });
}

#if DTRUN_WORKER_HAS_NCCL
int dtrun_worker_nccl_comm(dtrun_worker* w, struct ncclComm** comm) {
  return guarded(w, [&] {
    if (comm == nullptr) throw dtrun::ConfigError("nccl_comm: comm is NULL");
    auto c = dtrun::worker::createCommunicator(open(w));
    w->comms.push_back(c);
    *comm = c->get();
  });
}

int dtrun_worker_nccl_split(dtrun_worker* w, const char* name, int color, int key,
                            struct ncclComm** comm) {
  return guarded(w, [&] {
    if (name == nullptr || comm == nullptr) {
      throw dtrun::ConfigError("nccl_split: name or comm is NULL");
    }
    auto c = dtrun::worker::createSubCommunicator(open(w), name, color < 0 ? -1 : color, key);
    *comm = nullptr;
    if (c) {
      w->comms.push_back(c);
      *comm = c->get();
    }
  });
}
#endif

}  // extern "C"
