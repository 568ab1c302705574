// worker_probe: a small real worker program for the multi-process tests. Each mode exercises one
// part of dtrun_worker from a separate process, the way a native worker under dtrun would, and
// prints lines the tests (and tests/worker_runtime/under_dtrun.sh) parse.
//
//   worker_probe env | store ROUNDS | barrier | nccl-id | nccl-group NAME | nccl-fetch KEY
//                | nccl-comm
//                | abort-wait SECONDS | record-error MESSAGE | c-api | restart-demo
//                | timer DEADLINE WORK [--c-api] [--hang-on-round R]
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "dtrun/worker/c_api.h"
#include "dtrun/worker/error_file.h"
#include "dtrun/worker/timer.h"
#include "dtrun/worker/worker.h"
#if DTRUN_WORKER_HAS_NCCL
#include "dtrun/worker/communicator.h"
#endif

namespace {

using dtrun::worker::Worker;
using dtrun::worker::WorkerEnv;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string r(const Worker& w) { return "rank " + std::to_string(w.rank()); }

#if DTRUN_WORKER_HAS_NCCL
std::string hex(const ncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char c : id.internal) {
    auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}
#endif

// Bytes with a NUL, high bytes and the round number, so that a broadcast that loses or mangles
// anything shows.
std::string payload(int round, int root) {
  std::string p = "payload-" + std::to_string(round) + "-from-" + std::to_string(root);
  p += std::string("\0\xff\x80tail", 7);
  p += std::string(static_cast<std::size_t>(round) * 1000, static_cast<char>('a' + round % 26));
  return p;
}

int modeEnv(const WorkerEnv& e) {
  say("env rank=" + std::to_string(e.rank) + " local_rank=" + std::to_string(e.localRank) +
      " world=" + std::to_string(e.worldSize) + " local_world=" + std::to_string(e.localWorldSize) +
      " group=" + std::to_string(e.groupRank) + " restart=" + std::to_string(e.restartCount) +
      " agent_store=" + (e.useAgentStore ? "True" : "False") + " prefix=" + e.storePrefix() +
      " master=" + e.masterAddr + ":" + std::to_string(e.masterPort) + " run_id=" + e.runId +
      " error_file=" + e.errorFile);
  return 0;
}

int modeStore(Worker& w, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    w.barrier();
    const int root = i % w.worldSize();
    std::string got = w.broadcast(w.rank() == root ? payload(i, root) : "wrong", root);
    if (got != payload(i, root)) {
      say("store FAILED " + r(w) + " round " + std::to_string(i) + " got " + got);
      return 1;
    }
  }
  w.barrier();
  say("store ok " + r(w) + " world " + std::to_string(w.worldSize()) + " prefix " +
      w.env().storePrefix());
  return 0;
}

int modeBarrier(Worker& w) {
  say("barrier entered " + r(w));
  w.barrier();
  say("barrier passed " + r(w));
  return 0;
}

int modeAbortWait(Worker& w, int seconds) {
  // An Abortable that records the reason, as a communicator would get it.
  struct Recorder : dtrun::worker::Abortable {
    std::atomic<int> calls{0};
    std::string reason;
    void abort(const std::string& why) noexcept override {
      reason = why;
      calls++;
    }
  };
  auto recorder = std::make_shared<Recorder>();
  w.watch(recorder);
  say("ready " + r(w));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!w.abortRequested()) {
    if (std::chrono::steady_clock::now() >= until) {
      say("not aborted " + r(w));
      return 4;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  say("aborted: " + w.abortReason().value_or("?"));
  // The flag flips before the targets are called (on the watcher thread): give it a moment.
  const auto callDeadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (recorder->calls.load() == 0 && std::chrono::steady_clock::now() < callDeadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int calls = recorder->calls.load();  // acquire: `reason` was written before the increment
  say("abortable calls " + std::to_string(calls) + ": " + (calls > 0 ? recorder->reason : ""));
  return 0;
}

int modeCApi() {
  dtrun_worker* w = nullptr;
  const char* connectMs = std::getenv("WORKER_PROBE_CONNECT_MS");
  int rc = dtrun_worker_open(&w, connectMs ? std::atoi(connectMs) : 20000);
  if (rc != DTRUN_OK) {
    say("c-api open status " + std::to_string(rc) + ": " + dtrun_worker_error(w));
    dtrun_worker_record_error(w, dtrun_worker_error(w));
    dtrun_worker_close(w);
    return 5;
  }
  const int rank = dtrun_worker_rank(w);
  char buf[16] = {0};
  if (rank == 0) std::memcpy(buf, "c-api-broadcast", 16);
  if ((rc = dtrun_worker_barrier(w)) != DTRUN_OK ||
      (rc = dtrun_worker_broadcast(w, buf, sizeof(buf), 0)) != DTRUN_OK) {
    say(std::string("c-api FAILED: ") + dtrun_worker_error(w));
    dtrun_worker_close(w);
    return 5;
  }
  const std::string key = "c-api/" + std::to_string(rank);
  const std::string value = "value of rank " + std::to_string(rank);
  dtrun_worker_set(w, key.c_str(), value.data(), value.size());
  const std::string peerKey = "c-api/" + std::to_string((rank + 1) % dtrun_worker_world_size(w));
  void* got = nullptr;
  size_t size = 0;
  rc = dtrun_worker_get(w, peerKey.c_str(), &got, &size);
  std::string peer = rc == DTRUN_OK ? std::string(static_cast<char*>(got), size) : "";
  std::free(got);
  // A broadcast whose size disagrees with the root's must fail, not truncate.
  char small[4] = {0};
  int mismatch = dtrun_worker_broadcast(w, small, rank == 0 ? 4 : 3, 0);
  std::string mismatchText = dtrun_worker_error(w);
  dtrun_worker_barrier(w);
  say("c-api rank " + std::to_string(rank) + " world " +
      std::to_string(dtrun_worker_world_size(w)) + " local " +
      std::to_string(dtrun_worker_local_rank(w)) + " group " +
      std::to_string(dtrun_worker_group_rank(w)) + " broadcast '" + std::string(buf) + "' peer '" +
      peer + "' mismatch " + std::to_string(rank == 0 ? -1 : mismatch) + " " +
      (rank == 0 ? "" : mismatchText) + " aborted " +
      std::to_string(dtrun_worker_abort_requested(w)));
  dtrun_worker_close(w);
  return 0;
}

std::atomic<bool> sigtermSeen{false};

extern "C" void onSigterm(int) { sigtermSeen = true; }

int modeRestartDemo(Worker& w) {
  // Round 0: every rank exchanges a token, then the last rank fails on purpose and the others
  // wait for the agent's abort. Round 1 (after the restart): a fresh exchange, and success.
  // SIGTERM is trapped, as a worker that checkpoints on the way out does: such a worker is the
  // one that needs its blocked collectives aborted while it winds down.
  struct sigaction sa {};
  sa.sa_handler = onSigterm;
  ::sigaction(SIGTERM, &sa, nullptr);
  const int round = w.restartCount();
  std::string token;
#if DTRUN_WORKER_HAS_NCCL
  token = hex(
      dtrun::worker::exchangeUniqueId(w, "probe/restart-id", w.rank() == 0, w.options().timeout));
#else
  token = w.broadcast(std::to_string(::getpid()) + "-" + std::to_string(round), 0);
#endif
  say("attempt " + std::to_string(round) + " " + r(w) + " token " + token);
  w.barrier();
  if (round > 0) return 0;
  if (w.rank() == w.worldSize() - 1) {
    say("attempt 0 " + r(w) + " failing on purpose");
    return 1;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!w.abortRequested() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool termFirst = sigtermSeen;
  say("attempt 0 " + r(w) +
      (w.abortRequested() ? " aborted: " + *w.abortReason() : std::string(" never aborted")) +
      " (SIGTERM " + (termFirst ? "before" : "not before") + " the abort)");
  return 1;
}

// One step under a deadline of DEADLINE seconds on the launcher's file timer (C++ TimerScope, or
// the C API with --c-api) that takes WORK seconds, or hangs when WORK < 0 or when this is round
// R of --hang-on-round. Needs no store: only TORCHELASTIC_TIMER_FILE.
int modeTimer(int argc, char** argv) {
  if (argc < 4) {
    say("usage: worker_probe timer DEADLINE WORK [--c-api] [--hang-on-round R]");
    return 64;
  }
  const double deadline = std::atof(argv[2]);
  const double work = std::atof(argv[3]);
  bool cApi = false;
  int hangRound = -1;
  for (int i = 4; i < argc; ++i) {
    if (std::strcmp(argv[i], "--c-api") == 0) cApi = true;
    if (std::strcmp(argv[i], "--hang-on-round") == 0 && i + 1 < argc) {
      hangRound = std::atoi(argv[++i]);
    }
  }
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int round = restart ? std::atoi(restart) : 0;
  const bool hang = work < 0 || round == hangRound;
  auto step = [&] {
    say("timer armed pid " + std::to_string(::getpid()) + " round " + std::to_string(round) +
        (hang ? " (hanging)" : ""));
    if (hang) {
      for (;;) ::pause();
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(work));
  };
  if (cApi) {
    dtrun_timer* t = nullptr;
    if (dtrun_timer_open(&t, nullptr, SIGKILL) != DTRUN_OK ||
        dtrun_timer_acquire(t, "probe-step", deadline) != DTRUN_OK) {
      say(std::string("timer error: ") + dtrun_timer_error(t));
      dtrun_timer_close(t);
      return 3;
    }
    step();
    int rc = dtrun_timer_release(t, "probe-step");
    dtrun_timer_close(t);
    if (rc != DTRUN_OK) return 3;
  } else {
    dtrun::worker::TimerScope scope("probe-step", std::chrono::duration<double>(deadline));
    step();
  }
  say("timer released round " + std::to_string(round));
  return 0;
}

int run(int argc, char** argv, std::string* errorFile) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "c-api") return modeCApi();
  if (mode == "timer") return modeTimer(argc, argv);
  if (mode == "record-error") {
    // Records whatever it can: the environment may be the thing that is broken.
    std::string message = argc > 2 ? argv[2] : "worker_probe failure";
    try {
      *errorFile = dtrun::worker::readWorkerEnv().errorFile;
    } catch (const dtrun::worker::WorkerEnvError& e) {
      *errorFile = e.errorFile();
    }
    bool ok = dtrun::worker::recordError(*errorFile, dtrun::worker::makeErrorRecord(message));
    say(std::string("record-error ") + (ok ? "written" : "not written"));
    return 1;
  }
  WorkerEnv env = dtrun::worker::readWorkerEnv();
  *errorFile = env.errorFile;
  if (mode == "env") return modeEnv(env);

  dtrun::worker::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.abortPollInterval = std::chrono::milliseconds(200);
  if (std::getenv("WORKER_PROBE_LOG")) {
    options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  }
  Worker w(std::move(env), options);
  if (mode == "store") return modeStore(w, argc > 2 ? std::atoi(argv[2]) : 3);
  if (mode == "barrier") return modeBarrier(w);
  if (mode == "abort-wait") return modeAbortWait(w, argc > 2 ? std::atoi(argv[2]) : 30);
  if (mode == "restart-demo") return modeRestartDemo(w);
#if DTRUN_WORKER_HAS_NCCL
  if (mode == "nccl-id") {
    auto id =
        dtrun::worker::exchangeUniqueId(w, "probe/nccl-id", w.rank() == 0, w.options().timeout);
    say("nccl-id " + r(w) + " " + hex(id));
    return 0;
  }
  if (mode == "nccl-group") {
    auto g = dtrun::worker::exchangeGroupUniqueId(w, argc > 2 ? argv[2] : "node", w.groupRank(),
                                                  w.localRank(), w.options().timeout);
    std::string members;
    for (int m : g.members) members += (members.empty() ? "" : ",") + std::to_string(m);
    say("nccl-group " + r(w) + " color " + std::to_string(g.color) + " group_rank " +
        std::to_string(g.rank) + " size " + std::to_string(g.size) + " members " + members +
        " id " + hex(g.id));
    return 0;
  }
  if (mode == "nccl-fetch") {  // a non-root fetch of argv[2], as every rank but the root does
    try {
      auto id =
          dtrun::worker::exchangeUniqueId(w, argc > 2 ? argv[2] : "", false, w.options().timeout);
      say("nccl-fetch " + r(w) + " " + hex(id));
      return 0;
    } catch (const std::exception& e) {
      say(std::string("fetch error: ") + e.what());
      return 3;
    }
  }
  if (mode == "nccl-comm") {
    try {
      auto comm = dtrun::worker::createCommunicator(w);
      say("comm ok " + r(w) + " size " + std::to_string(comm->size()) + " device " +
          std::to_string(comm->device()));
      return 0;
    } catch (const std::exception& e) {
      say(std::string("comm error: ") + e.what());
      return 3;
    }
  }
#endif
  say("unknown mode '" + mode + "'");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  std::string errorFile;
  try {
    return run(argc, argv, &errorFile);
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    if (const auto* bad = dynamic_cast<const dtrun::worker::WorkerEnvError*>(&e)) {
      errorFile = bad->errorFile();
    }
    dtrun::worker::recordError(errorFile, dtrun::worker::makeErrorRecord(e));
    return 2;
  }
}
