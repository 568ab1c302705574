/* The C interface of dtrun_worker, for C programs and other languages' FFIs.
 *
 *   dtrun_worker* w = NULL;
 *   if (dtrun_worker_open(&w, 0) != DTRUN_OK) {
 *     fprintf(stderr, "%s\n", dtrun_worker_error(w));
 *     dtrun_worker_record_error(w, dtrun_worker_error(w));
 *     dtrun_worker_close(w);
 *     return 1;
 *   }
 *   dtrun_worker_barrier(w);
 *   dtrun_worker_close(w);
 *
 * Every call returns a dtrun_status; after a failure dtrun_worker_error() says why. A handle is
 * used by one thread at a time, except dtrun_worker_abort_requested and dtrun_worker_abort_reason,
 * which any thread may call at any time. */
#ifndef DTRUN_WORKER_C_API_H_
#define DTRUN_WORKER_C_API_H_

#include <stddef.h>

#include "dtrun/worker/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An open worker: the environment, the round store and the abort watcher. */
typedef struct dtrun_worker dtrun_worker;

/** Results. The numbers are stable. */
enum dtrun_status {
  DTRUN_OK = 0,
  DTRUN_ERR_CONFIG = 1,     /* bad environment or argument */
  DTRUN_ERR_TIMEOUT = 2,    /* a deadline passed */
  DTRUN_ERR_CONNECTION = 3, /* the store could not be reached or went away */
  DTRUN_ERR_PROTOCOL = 4,   /* the store answered out of protocol */
  DTRUN_ERR_ABORTED = 5,    /* the agent aborted this round */
  DTRUN_ERR_NCCL = 6,       /* an NCCL call failed */
  DTRUN_ERR_CUDA = 7,       /* a CUDA call failed */
  DTRUN_ERR_OTHER = 8       /* anything else */
};

/** Reads the environment, connects to the store (up to timeout_ms; <= 0: 60 s) and starts the
 *  abort watcher. Blocking. *out is set even on failure (NULL only when memory ran out), so that
 *  dtrun_worker_error can say why; close it in both cases. */
int dtrun_worker_open(dtrun_worker** out, int timeout_ms);
/** Destroys NCCL communicators made through this handle, stops the watcher, frees the handle.
 *  NULL is ignored. */
void dtrun_worker_close(dtrun_worker* w);
/** The message of the last failed call on this handle ("" if none). Valid until the next call. */
const char* dtrun_worker_error(const dtrun_worker* w);

/** RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, TORCHELASTIC_RESTART_COUNT of an
 *  open handle; -1 when w is NULL or failed to open. */
int dtrun_worker_rank(const dtrun_worker* w);
/** WORLD_SIZE, or -1. */
int dtrun_worker_world_size(const dtrun_worker* w);
/** LOCAL_RANK, or -1. */
int dtrun_worker_local_rank(const dtrun_worker* w);
/** LOCAL_WORLD_SIZE, or -1. */
int dtrun_worker_local_world_size(const dtrun_worker* w);
/** GROUP_RANK, or -1. */
int dtrun_worker_group_rank(const dtrun_worker* w);
/** TORCHELASTIC_RESTART_COUNT, or -1. */
int dtrun_worker_restart_count(const dtrun_worker* w);

/** Blocks until every rank called it as often (the worker's timeout, 5 min). */
int dtrun_worker_barrier(dtrun_worker* w);
/** Rank `root` sends `size` bytes of `data`; every other rank receives them into `data`, and
 *  fails with DTRUN_ERR_PROTOCOL when the root sent a different size. Blocking. */
int dtrun_worker_broadcast(dtrun_worker* w, void* data, size_t size, int root);
/** Sets `key` in the round store (under /worker/attempt_<n>/). Does not block on other ranks. */
int dtrun_worker_set(dtrun_worker* w, const char* key, const void* value, size_t size);
/** Waits for `key` (the worker's timeout) and returns a malloc'd copy of its value in *value
 *  (free() it) and its length in *size. */
int dtrun_worker_get(dtrun_worker* w, const char* key, void** value, size_t* size);

/** 1 once the agent aborted this round (or the store was lost), else 0. Any thread. */
int dtrun_worker_abort_requested(const dtrun_worker* w);
/** The abort reason, or NULL while there is none. Any thread; valid until the handle closes. */
const char* dtrun_worker_abort_reason(const dtrun_worker* w);

/** Writes `message` to TORCHELASTIC_ERROR_FILE in torch's format. Works on a handle that failed
 *  to open, too. DTRUN_ERR_CONFIG when no error file is set; DTRUN_ERR_OTHER when writing
 *  failed. */
int dtrun_worker_record_error(dtrun_worker* w, const char* message);

/* Deadlines on the launcher's file timer (torch's FileTimerClient protocol; see timer.h). A
 * dtrun_timer needs no store and no dtrun_worker handle:
 *
 *   dtrun_timer* t = NULL;
 *   if (dtrun_timer_open(&t, NULL, 9) != DTRUN_OK) { ... dtrun_timer_error(t) ... }
 *   dtrun_timer_acquire(t, "step", 60.0);
 *   step();
 *   dtrun_timer_release(t, "step");
 *   dtrun_timer_close(t);
 *
 * A handle is used by one thread at a time. */
typedef struct dtrun_timer dtrun_timer;

/** A client of the FIFO at `path` (NULL: TORCHELASTIC_TIMER_FILE; DTRUN_ERR_CONFIG when unset).
 *  `signal` is what the launcher sends when a deadline passes (9, SIGKILL, is torch's default;
 *  <= 0: report the hang only). *out is set even on failure; close it in both cases. */
int dtrun_timer_open(dtrun_timer** out, const char* path, int signal);
/** Frees the handle (armed scopes stay armed). NULL is ignored. */
void dtrun_timer_close(dtrun_timer* t);
/** The message of the last failed call on this handle ("" if none). */
const char* dtrun_timer_error(const dtrun_timer* t);
/** Arms (or re-arms) `scope` of this process to expire `after_seconds` from now. Never waits for
 *  the launcher: DTRUN_ERR_CONNECTION when no launcher serves the FIFO, DTRUN_ERR_TIMEOUT when
 *  it stopped reading it. */
int dtrun_timer_acquire(dtrun_timer* t, const char* scope, double after_seconds);
/** Releases `scope` (nothing happens when it is not armed). Errors as dtrun_timer_acquire. */
int dtrun_timer_release(dtrun_timer* t, const char* scope);

#if DTRUN_WORKER_HAS_NCCL
/* NCCL's handle type, without including nccl.h: ncclComm_t is `struct ncclComm*`. */
struct ncclComm;

/** Selects CUDA device LOCAL_RANK, exchanges a unique id through the store and creates the
 *  world communicator (all ranks call it). The handle owns *comm: do not destroy it yourself;
 *  the watcher aborts it when the agent stops the round. */
int dtrun_worker_nccl_comm(dtrun_worker* w, struct ncclComm** comm);
/** Creates the communicator of the ranks that pass the same `color` (ordered by `key`, then
 *  rank) under the name `name`; a negative color takes no part and gets NULL. Collective over
 *  all ranks. Owned by the handle, like the world communicator. */
int dtrun_worker_nccl_split(dtrun_worker* w, const char* name, int color, int key,
                            struct ncclComm** comm);
#endif

#ifdef __cplusplus
}
#endif

#endif /* DTRUN_WORKER_C_API_H_ */
