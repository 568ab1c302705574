// C10dJob against a real store server on loopback: joining, the job's state, the watch on the
// job's epoch, membership bound to the connection, the heartbeat noticing a store that is gone,
// and the workers' store. The test's own io_context plays the agent's; it is stepped with
// run_for until what a case waits for happened.
#include "agent/c10d_job.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>

#include "common/abort_key.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using namespace dtrun::agent;
using namespace std::chrono_literals;
using dtrun::rendezvous::TcpStore;
using dtrun::rendezvous::TcpStoreOptions;

using dtrun::test::runUntil;

namespace {

C10dJobOptions optionsFor(std::uint16_t port, const std::string& runId) {
  C10dJobOptions o;
  o.store.host = "127.0.0.1";
  o.store.port = port;
  o.store.connectTimeout = 5s;
  o.store.timeout = 10s;
  o.runId = runId;
  o.me.host = "node0";
  o.me.addr = "127.0.0.1";
  o.me.pid = 4242;
  o.me.nproc = 2;
  o.rendezvous.joinTimeout = 20s;
  o.keepAliveInterval = 100ms;
  o.keepAliveMaxAttempt = 3;
  o.heartbeatTimeout = 2s;
  o.workerStore = {"127.0.0.1", port};
  return o;
}

// A plain client of the same store, for what the other nodes would see.
TcpStore observer(std::uint16_t port) {
  TcpStoreOptions o;
  o.port = port;
  o.connectTimeout = 5s;
  o.timeout = 10s;
  return TcpStore(o);
}

template <typename T>
struct Answer {
  std::optional<Result<T>> result;
  std::function<void(Result<T>)> callback() {
    return [this](Result<T> r) { result = std::move(r); };
  }
};

}  // namespace

TEST_CASE("C10dJob: one node joins, reads the job's state, finishes", "[agent][c10d]") {
  dtrun::rendezvous::test::ServerThread server;
  boost::asio::io_context io;
  C10dJob job(io, optionsFor(server.port(), "one"), dtrun::rendezvous::test::quietLogger());
  CHECK(job.describe() == "store at 127.0.0.1:" + std::to_string(server.port()));

  Answer<dtrun::rendezvous::RoundInfo> joined;
  job.join(joined.callback());
  REQUIRE(runUntil(io, [&] { return joined.result.has_value(); }));
  REQUIRE(joined.result->ok());
  CHECK(joined.result->value->round == 0);
  CHECK(joined.result->value->groupWorldSize == 1);
  CHECK(joined.result->value->worldSize == 2);

  Answer<WorkerStore> store;
  job.workerStore(*joined.result->value, store.callback());
  REQUIRE(runUntil(io, [&] { return store.result.has_value(); }));
  INFO(store.result->message());
  REQUIRE(store.result->ok());
  CHECK(store.result->value->port == server.port());

  Answer<std::int64_t> done;
  job.markDone(0, 1, done.callback());
  REQUIRE(runUntil(io, [&] { return done.result.has_value(); }));
  INFO(done.result->message());
  REQUIRE(done.result->ok());
  CHECK(*done.result->value == 1);
  Answer<dtrun::rendezvous::JobState> state;
  job.state(0, state.callback());
  REQUIRE(runUntil(io, [&] { return state.result.has_value(); }));
  INFO(state.result->message());
  REQUIRE(state.result->ok());
  CHECK(state.result->value->done == 1);
  CHECK_FALSE(state.result->value->final);
}

TEST_CASE("C10dJob: the watch sees the job's epoch move, closing leaves the round",
          "[agent][c10d]") {
  dtrun::rendezvous::test::ServerThread server;
  boost::asio::io_context io;
  auto job = std::make_unique<C10dJob>(io, optionsFor(server.port(), "watch"),
                                       dtrun::rendezvous::test::quietLogger());
  int changes = 0;
  std::optional<std::string> lost;
  job->watch([&] { ++changes; }, [&](std::string why) { lost = why; });
  Answer<dtrun::rendezvous::RoundInfo> joined;
  job->join(joined.callback());
  REQUIRE(runUntil(io, [&] { return joined.result.has_value(); }));
  REQUIRE(joined.result->ok());

  auto other = observer(server.port());
  const int before = changes;
  other.add("dtrun/watch/epoch", 1);
  CHECK(runUntil(io, [&] { return changes > before; }));

  // This node registered its membership of round 0 on a connection of its own: closing the job
  // closes it, and the server counts the node gone.
  CHECK(other.add("dtrun/watch/r0/gone", 0) == 0);
  job->close();
  CHECK(dtrun::test::pollUntil([&] { return other.add("dtrun/watch/r0/gone", 0) == 1; }, 10s));
  CHECK_FALSE(lost);  // closing is not losing
}

TEST_CASE("C10dJob: a store that goes away is reported lost, naming it", "[agent][c10d]") {
  auto server = std::make_unique<dtrun::rendezvous::test::ServerThread>();
  const auto port = server->port();
  boost::asio::io_context io;
  C10dJob job(io, optionsFor(port, "lost"), dtrun::rendezvous::test::quietLogger());
  std::optional<std::string> lost;
  job.watch([] {}, [&](std::string why) { lost = why; });
  Answer<dtrun::rendezvous::RoundInfo> joined;
  job.join(joined.callback());
  REQUIRE(runUntil(io, [&] { return joined.result.has_value(); }));
  server.reset();  // every connection closes
  REQUIRE(runUntil(
      io, [&] { return lost.has_value(); }, 15s));
  INFO(*lost);
  CHECK(lost->find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
}

TEST_CASE("C10dJob: without the agent store, group rank 0 publishes MASTER_ADDR:MASTER_PORT",
          "[agent][c10d]") {
  dtrun::rendezvous::test::ServerThread server;
  boost::asio::io_context io;
  auto options = optionsFor(server.port(), "master");
  options.agentStore = false;
  options.localAddr = "10.1.2.3";
  C10dJob job(io, options, dtrun::rendezvous::test::quietLogger());
  dtrun::rendezvous::RoundInfo round;  // round 0, group rank 0
  Answer<WorkerStore> mine;
  job.workerStore(round, mine.callback());
  REQUIRE(runUntil(io, [&] { return mine.result.has_value(); }));
  REQUIRE(mine.result->ok());
  CHECK(mine.result->value->addr == "10.1.2.3");
  CHECK(mine.result->value->port != 0);

  // Another node reads what rank 0 published; a malformed value is an error naming it.
  auto otherOptions = optionsFor(server.port(), "master");
  otherOptions.agentStore = false;
  C10dJob reader(io, otherOptions, dtrun::rendezvous::test::quietLogger());
  round.groupRank = 1;
  Answer<WorkerStore> theirs;
  reader.workerStore(round, theirs.callback());
  REQUIRE(runUntil(io, [&] { return theirs.result.has_value(); }));
  REQUIRE(theirs.result->ok());
  CHECK(theirs.result->value->addr == "10.1.2.3");
  CHECK(theirs.result->value->port == mine.result->value->port);

  observer(server.port()).set("dtrun/master/r1/master", "no-port-here");
  round.round = 1;
  Answer<WorkerStore> bad;
  reader.workerStore(round, bad.callback());
  REQUIRE(runUntil(io, [&] { return bad.result.has_value(); }));
  REQUIRE_FALSE(bad.result->ok());
  CHECK(bad.result->message().find("no-port-here") != std::string::npos);

  // An IPv6 address travels in brackets and comes back without them.
  auto v6Options = optionsFor(server.port(), "master");
  v6Options.agentStore = false;
  v6Options.localAddr = "fd00::7";
  C10dJob v6(io, v6Options, dtrun::rendezvous::test::quietLogger());
  round.round = 2;
  round.groupRank = 0;
  Answer<WorkerStore> published;
  v6.workerStore(round, published.callback());
  REQUIRE(runUntil(io, [&] { return published.result.has_value(); }));
  INFO(published.result->message());
  REQUIRE(published.result->ok());
  CHECK(published.result->value->addr == "fd00::7");
  CHECK(observer(server.port()).get("dtrun/master/r2/master", 5s) ==
        "[fd00::7]:" + std::to_string(published.result->value->port));
  round.groupRank = 1;
  Answer<WorkerStore> read;
  reader.workerStore(round, read.callback());
  REQUIRE(runUntil(io, [&] { return read.result.has_value(); }));
  INFO(read.result->message());
  REQUIRE(read.result->ok());
  CHECK(read.result->value->addr == "fd00::7");
  CHECK(read.result->value->port == published.result->value->port);
}

TEST_CASE("C10dJob: abortWorkers sets the round's abort key before answering", "[agent][c10d]") {
  dtrun::rendezvous::test::ServerThread server;
  boost::asio::io_context io;
  C10dJob job(io, optionsFor(server.port(), "abort"), dtrun::rendezvous::test::quietLogger());
  bool done = false;
  job.abortWorkers(3, "rank 1 failed", [&] { done = true; });
  REQUIRE(runUntil(io, [&] { return done; }));
  auto other = observer(server.port());
  CHECK(other.check({dtrun::worker::abortKey(3)}));
  CHECK(other.get(dtrun::worker::abortKey(3), 1s) == "rank 1 failed");
}
