// The abort hook: the agent sets dtrun/abort/<round> (through a client with torch's "/" prefix)
// before it stops round <round>; each worker's watcher sees it, aborts what registered, and makes
// blocking calls give up. Losing the store counts as an abort, after a reconnect grace.
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <string>

#include "common/abort_key.h"
#include "dtrun/worker/worker.h"
#include "rendezvous/tcp_store.h"
#include "tests/support/test_support.h"
#include "tests/worker_runtime/process_harness.h"

namespace {

using dtrun::test::StoreProcess;
using dtrun::worker::AbortedError;
using dtrun::worker::Worker;
using dtrun::worker::WorkerEnv;
using dtrun::worker::WorkerOptions;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

WorkerEnv envFor(std::uint16_t port, int rank = 0, int world = 1, int round = 0) {
  WorkerEnv e;
  e.rank = rank;
  e.localRank = rank;
  e.worldSize = world;
  e.localWorldSize = world;
  e.masterAddr = "127.0.0.1";
  e.masterPort = port;
  e.restartCount = round;
  e.useAgentStore = true;
  return e;
}

WorkerOptions fastOptions() {
  WorkerOptions o;
  o.timeout = 30s;
  o.connectTimeout = 20s;
  o.abortPollInterval = 50ms;
  return o;
}

// What the agent does: a TcpStore with the default "/" prefix, outside the workers' prefix.
dtrun::rendezvous::TcpStore agentClient(std::uint16_t port) {
  dtrun::rendezvous::TcpStoreOptions o;
  o.port = port;
  o.connectTimeout = 20s;
  return dtrun::rendezvous::TcpStore(o);
}

struct Recorder : dtrun::worker::Abortable {
  std::atomic<int> calls{0};
  std::atomic<bool> onCallerThread{false};
  std::thread::id caller;
  std::string reason;
  void abort(const std::string& why) noexcept override {
    reason = why;
    onCallerThread = std::this_thread::get_id() == caller;
    calls++;
  }
};

}  // namespace

TEST_CASE("the abort key format is the agent contract", "[worker][abort]") {
  CHECK(dtrun::worker::abortKey(0) == "dtrun/abort/0");
  CHECK(dtrun::worker::abortKey(12) == "dtrun/abort/12");
  CHECK(dtrun::worker::kAbortKeyPrefix == "dtrun/abort/");
}

TEST_CASE("the watcher reacts to dtrun/abort/<round> within a deadline", "[worker][abort]") {
  StoreProcess store;
  Worker worker(envFor(store.port(), 0, 1, 3), fastOptions());
  auto recorder = std::make_shared<Recorder>();
  worker.watch(recorder);
  auto agent = agentClient(store.port());

  // Keys that must not trigger it: another round's, and the right name under the worker prefix.
  agent.set(dtrun::worker::abortKey(2), "round 2 is over");
  agent.set("/worker/attempt_3/" + dtrun::worker::abortKey(3), "wrong place");
  CHECK_FALSE(dtrun::test::pollUntil([&] { return worker.abortRequested(); }, 300ms));
  CHECK_FALSE(worker.abortReason().has_value());
  CHECK_NOTHROW(worker.throwIfAborted());

  const std::string reason = "worker rank 3 exited with code 1";
  const auto start = Clock::now();
  agent.set(dtrun::worker::abortKey(3), reason);
  REQUIRE(dtrun::test::pollUntil([&] { return recorder->calls.load() > 0; }, 10s));
  const auto took = Clock::now() - start;
  CHECK(took < 2s);
  CHECK(worker.abortRequested());
  CHECK(worker.abortReason() == reason);
  CHECK(recorder->calls == 1);
  CHECK(recorder->reason == reason);

  CHECK_THROWS_AS(worker.throwIfAborted(), AbortedError);
  CHECK_THROWS_WITH(worker.barrier(), Catch::Contains("the round was aborted: " + reason));
  CHECK_THROWS_AS(worker.broadcast("x", 0), AbortedError);
  CHECK_THROWS_AS(worker.wait({"never"}, 5s), AbortedError);

  // Registered after the abort: aborted at once, on the registering thread.
  auto late = std::make_shared<Recorder>();
  late->caller = std::this_thread::get_id();
  worker.watch(late);
  CHECK(late->calls == 1);
  CHECK(late->onCallerThread);
  CHECK(late->reason == reason);
}

TEST_CASE("a blocked barrier gives up when the round is aborted", "[worker][abort]") {
  StoreProcess store;
  // Rank 0 of 2; rank 1 never comes.
  Worker worker(envFor(store.port(), 0, 2, 0), fastOptions());
  auto blocked = std::async(std::launch::async, [&] { worker.barrier(); });
  REQUIRE(blocked.wait_for(300ms) == std::future_status::timeout);
  auto agent = agentClient(store.port());
  const auto start = Clock::now();
  agent.set(dtrun::worker::abortKey(0), "node lost");
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  CHECK(Clock::now() - start < 2s);
  CHECK_THROWS_WITH(blocked.get(), Catch::Contains("node lost"));
}

TEST_CASE("a barrier that times out says how many ranks arrived", "[worker][abort]") {
  StoreProcess store;
  Worker worker(envFor(store.port(), 0, 3, 0), fastOptions());
  try {
    worker.barrier(300ms);
    FAIL("the barrier passed with one of three ranks");
  } catch (const dtrun::TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 0/3 (round 0): waited"));
    CHECK_THAT(e.what(), Catch::Contains("dtrun_worker/barrier/0/done"));
    CHECK_THAT(e.what(), Catch::Contains("saw 1 of 3 ranks arrive"));
  }
}

TEST_CASE("losing the store counts as an abort", "[worker][abort]") {
  StoreProcess store;
  WorkerOptions o = fastOptions();
  o.storeLossGrace = 300ms;
  Worker worker(envFor(store.port()), o);
  auto recorder = std::make_shared<Recorder>();
  worker.watch(recorder);
  store.kill();
  REQUIRE(dtrun::test::pollUntil([&] { return recorder->calls.load() > 0; }, 20s));
  CHECK_THAT(*worker.abortReason(),
             Catch::Contains("lost the connection to the store at 127.0.0.1:" +
                             std::to_string(store.port()) + " for 300 ms"));
}

TEST_CASE("the watcher rides out a store restart within the grace", "[worker][abort]") {
  auto store = std::make_unique<StoreProcess>();
  const std::uint16_t port = store->port();
  WorkerOptions o = fastOptions();
  o.storeLossGrace = 15s;
  Worker worker(envFor(port), o);
  store->kill();
  store = std::make_unique<StoreProcess>(port);  // same port, empty store
  // The watcher's parked WAIT is repeatable: its TcpStore sends it again on a new connection
  // (or the watcher pings its way back): either way the restart is no abort, and the abort
  // key set on the new store reaches it.
  auto agent = agentClient(port);
  agent.set("a-key-the-watcher-does-not-watch", "x");
  CHECK_FALSE(worker.abortRequested());
  agent.set(dtrun::worker::abortKey(0), "stopped after the restart");
  REQUIRE(dtrun::test::pollUntil([&] { return worker.abortRequested(); }, 10s));
  CHECK(worker.abortReason() == "stopped after the restart");
}

TEST_CASE("destroying a Worker stops its watcher promptly", "[worker][abort]") {
  StoreProcess store;
  SECTION("parked on the abort key") {
    auto worker = std::make_unique<Worker>(envFor(store.port()), fastOptions());
    const auto start = Clock::now();
    worker.reset();
    CHECK(Clock::now() - start < 1s);
  }
  SECTION("reconnecting to a store that is gone") {
    WorkerOptions o = fastOptions();
    o.storeLossGrace = 30s;
    auto worker = std::make_unique<Worker>(envFor(store.port()), o);
    store.kill();
    const auto start = Clock::now();
    worker.reset();
    CHECK(Clock::now() - start < 3s);  // at most one connect backoff step, not the 30 s grace
  }
}

TEST_CASE("abortLocally aborts like the agent would, first reason wins", "[worker][abort]") {
  StoreProcess store;
  WorkerOptions o = fastOptions();
  o.watchAbort = false;
  Worker worker(envFor(store.port()), o);
  auto recorder = std::make_shared<Recorder>();
  worker.watch(recorder);
  // Without a watcher the key does nothing.
  agentClient(store.port()).set(dtrun::worker::abortKey(0), "ignored");
  CHECK_FALSE(dtrun::test::pollUntil([&] { return worker.abortRequested(); }, 300ms));
  worker.abortLocally("local failure");
  worker.abortLocally("second reason");
  CHECK(worker.abortReason() == "local failure");
  CHECK(recorder->calls == 1);
  CHECK(recorder->reason == "local failure");
}

TEST_CASE("a worker process sees the agent's abort", "[worker][abort][multiprocess]") {
  StoreProcess store;
  dtrun::test::Child child({WORKER_PROBE, "abort-wait", "60"},
                           dtrun::test::workerEnv(1, 2, 2, store.port(), 4));
  REQUIRE(child.waitForOutput("ready rank 1", 30s));
  const auto start = Clock::now();
  agentClient(store.port()).set(dtrun::worker::abortKey(4), "worker rank 0 exited with code 1");
  REQUIRE(child.wait(30s) == 0);
  CHECK(Clock::now() - start < 5s);
  CHECK_THAT(child.output(), Catch::Contains("aborted: worker rank 0 exited with code 1"));
  CHECK_THAT(child.output(),
             Catch::Contains("abortable calls 1: worker rank 0 exited with code 1"));
}
