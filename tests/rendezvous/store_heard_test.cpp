// DTRUN_HEARD (how long ago the store heard from the connection holding a close action on a key:
// `dtrun status`'s last heard) and the server's request counts (the metrics), over sockets.
#include <catch2/catch.hpp>
#include <chrono>

#include "rendezvous/store_core.h"
#include "rendezvous/tcp_store.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::test;
using namespace std::chrono_literals;
using dtrun::test::pollUntil;

TEST_CASE("heard: the age of the last request of the connection that holds a close action",
          "[store][server]") {
  ServerThread server;
  TcpStore reader(clientOptions(server.port()));
  auto member = std::make_unique<TcpStore>(clientOptions(server.port()));
  member->addOnClose("agent/a/gone", 1);
  // Nobody holds a close action on the other key; a key the member holds is heard from now.
  auto heard = reader.heard({"agent/a/gone", "agent/b/gone"});
  REQUIRE(heard.size() == 2);
  REQUIRE(heard[0]);
  CHECK(*heard[0] < 5000ms);
  CHECK_FALSE(heard[1]);
  // Silence makes the age grow; a PING (the heartbeat) brings it back.
  std::chrono::milliseconds silent{0};
  REQUIRE(pollUntil(
      [&] {
        silent = reader.heard({"agent/a/gone"})[0].value_or(0ms);
        return silent >= 1000ms;
      },
      20s));
  member->ping();
  CHECK(reader.heard({"agent/a/gone"})[0].value_or(1h) < silent);
  // The connection closes: its close action runs, and nobody answers for the key any more.
  member.reset();
  REQUIRE(pollUntil([&] { return reader.check({"agent/a/gone"}); }, 10s));
  CHECK_FALSE(reader.heard({"agent/a/gone"})[0]);
}

TEST_CASE("heard: the core answers for the client that registered last, until it goes",
          "[store][core]") {
  StoreCore core;
  const auto t0 = StoreCore::Clock::now();
  core.addOnClose(1, "k", 1);
  core.noteHeard(1, t0);
  core.noteHeard(2, t0);  // a client without close actions is not timed
  CHECK(core.heardAgo("k", t0 + 1500ms) == 1500ms);
  core.addOnClose(2, "k", 1);
  core.noteHeard(2, t0 + 1000ms);
  CHECK(core.heardAgo("k", t0 + 1500ms) == 500ms);
  core.dropClient(2);
  CHECK_FALSE(core.heardAgo("k", t0 + 1500ms));  // client 1's action remains, but not its claim
  CHECK(core.numKeys() == 1);
  CHECK(*core.find("k") == "1");
}

TEST_CASE("server: requests are counted by operation", "[store][server]") {
  ServerThread server;
  TcpStore client(clientOptions(server.port()));
  client.set("x", "1");
  client.set("y", "2");
  client.get("x", 1s);
  const auto counts = server.onIoThread([](StoreServer& s) { return s.requests(); });
  CHECK(counts.byOp[static_cast<std::size_t>(wire::Op::kSet)] == 2);
  CHECK(counts.byOp[static_cast<std::size_t>(wire::Op::kGet)] == 1);
  CHECK(counts.byOp[static_cast<std::size_t>(wire::Op::kValidate)] == 1);
  CHECK(server.onIoThread([](StoreServer& s) { return s.keyCount(); }) == 2);
}
