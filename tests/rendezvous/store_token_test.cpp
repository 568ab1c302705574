// The store's shared secret (docs/store.md, "Shared secret") and its writer records, over real
// loopback sockets: with a token, a connection that has not presented it reaches the workers'
// keys and reads the abort keys, and nothing else under /dtrun/; a wrong token is refused with a
// reply the client turns into a clear error; a refused request changes nothing. Without a token
// the store names who last wrote a rendezvous key, so an agent's error about junk can say who.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/abort_key.h"
#include "common/error.h"
#include "rendezvous/store_connection.h"
#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/wire.h"
#include "tests/rendezvous/store_test_util.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

const std::string kToken = "0123456789abcdef-the-job's-secret";

TcpStoreOptions client(std::uint16_t port, std::string token = {},
                       wire::Dialect dialect = wire::Dialect::kTorch2) {
  TcpStoreOptions o;
  o.port = port;
  o.dialect = dialect;
  o.connectTimeout = 20s;
  o.timeout = 20s;
  o.token = std::move(token);
  return o;
}

StoreServerOptions withToken(std::string token) {
  auto o = loopbackOptions();
  o.token = std::move(token);
  return o;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("token: without it a connection reaches the workers' keys and no rendezvous key",
          "[store][token]") {
  CapturedLog log;
  ServerThread server(withToken(kToken), log.logger());
  TcpStore agent(client(server.port(), kToken));
  agent.set("dtrun/job/round", "0");
  agent.set(dtrun::worker::abortKey(0), "node lost");

  // What torch's init_process_group does under dtrun (no token): its own keys work.
  TcpStore worker(client(server.port()));
  worker.set("worker/attempt_0/rank0", "addr");
  CHECK(worker.get("worker/attempt_0/rank0", 5s) == "addr");
  CHECK(worker.add("worker/attempt_0/count", 2) == 2);
  // The workers' runtime reads the abort key of its round without the token.
  worker.wait({dtrun::worker::abortKey(0)}, 5s);
  CHECK(worker.get(dtrun::worker::abortKey(0), 5s) == "node lost");
  const auto listed = worker.listKeys();
  CHECK(contains(listed, "worker/attempt_0/rank0"));
  CHECK_FALSE(contains(listed, "dtrun/job/round"));
  CHECK_FALSE(contains(listed, dtrun::worker::abortKey(0)));

  // Everything else under /dtrun/ is closed to it: reads, writes, the round counter, the abort
  // key's value. Each attempt closes that connection.
  {
    TcpStore stranger(client(server.port()));
    CHECK_THROWS_AS(stranger.get("dtrun/job/round", 5s), dtrun::ConnectionError);
  }
  {
    TcpStore stranger(client(server.port()));
    CHECK_THROWS_AS(stranger.add("dtrun/job/round", 1), dtrun::ConnectionError);
  }
  {
    // SET has no reply: the refusal shows as the connection closing.
    RawConn stranger(server.port());
    stranger.send(validateFrame() +
                  frame2(wire::Op::kSet, {"/" + dtrun::worker::abortKey(0)}, {"forged"}));
    CHECK(stranger.closedByPeer());
  }
  {
    TcpStore stranger(client(server.port()));
    CHECK_THROWS_AS(stranger.compareSet("dtrun/job/round", "0", "7"), dtrun::ConnectionError);
  }
  // Nothing changed, and the agent's connection was never disturbed.
  CHECK(agent.get("dtrun/job/round", 5s) == "0");
  CHECK(agent.get(dtrun::worker::abortKey(0), 5s) == "node lost");
  CHECK(contains(agent.listKeys(), "dtrun/job/round"));
  server.stop();
  CHECK_THAT(log.text(),
             Contains("need the store's token") && Contains("closing connection from 127.0.0.1:"));
}

TEST_CASE("token: a wrong token is refused at once, in either dialect, and nothing else is",
          "[store][token]") {
  CapturedLog log;
  ServerThread server(withToken(kToken), log.logger());
  for (wire::Dialect d : {wire::Dialect::kTorch2, wire::Dialect::kTorch113}) {
    // Refused on the first try: the error is StoreAuthError, not the ConnectionError that
    // retrying until the connect deadline would end with.
    try {
      TcpStore wrong(client(server.port(), kToken + "x", d));
      FAIL("a wrong token was accepted");
    } catch (const StoreAuthError& e) {
      CHECK_THAT(e.what(), Contains("refused this client's token") &&
                               Contains("127.0.0.1:" + std::to_string(server.port())));
    }
    TcpStore right(client(server.port(), kToken, d));
    right.set("dtrun/job/key", "v");
    CHECK(right.get("dtrun/job/key", 5s) == "v");
  }
  // In raw bytes: the refusal is one status byte, then the connection closes.
  RawConn raw(server.port());
  raw.send(validateFrame() + frame2(wire::Op::kAuth, {}, {"not the token at all"}));
  CHECK(raw.recv(1) == std::string(1, static_cast<char>(wire::kAuthRefused)));
  CHECK(raw.closedByPeer());
  server.stop();
  CHECK(log.linesWith("not the store's").size() == 3);
}

TEST_CASE("token: a client with a token and a store without one do not silently mix",
          "[store][token]") {
  ServerThread server(loopbackOptions(), quietLogger());
  CHECK_THROWS_WITH(TcpStore(client(server.port(), kToken)),
                    Contains("has no token, but this client was given one"));
  // Without a token on either side, everyone reaches everything (torch's behaviour).
  TcpStore plain(client(server.port()));
  plain.set("dtrun/job/round", "3");
  CHECK(plain.get("dtrun/job/round", 5s) == "3");
}

TEST_CASE("writer: the store names who last wrote a rendezvous key", "[store][token]") {
  ServerThread server(loopbackOptions(), quietLogger());
  TcpStore agent(client(server.port()));
  agent.set("dtrun/job/round", "0");
  agent.set("worker/attempt_0/k", "v");

  RawConn stranger(server.port());
  stranger.send(validateFrame() + frame2(wire::Op::kSet, {"/dtrun/job/round"}, {"junk"}) +
                frame2(wire::Op::kPing, {}, {}, 0, 7));
  REQUIRE(stranger.recvU32() == 7);  // the SET was served
  CHECK(agent.writer("dtrun/job/round") == stranger.localAddress());
  CHECK(agent.writerOf("dtrun/job/round") == stranger.localAddress());
  // A COMPARE_SET that does not swap writes nothing, so it does not make its sender the writer.
  CHECK(agent.compareSet("dtrun/job/round", "not the value", "7") == "junk");
  CHECK(agent.writer("dtrun/job/round") == stranger.localAddress());
  // One that swaps does.
  CHECK(agent.compareSet("dtrun/job/round", "junk", "1") == "1");
  const std::string agentAddress = agent.writer("dtrun/job/round");
  CHECK_THAT(agentAddress, Catch::Matchers::StartsWith("127.0.0.1:"));
  CHECK(agentAddress != stranger.localAddress());
  // Only the protected keys are recorded; a deleted key forgets its writer.
  CHECK(agent.writer("worker/attempt_0/k").empty());
  CHECK(agent.deleteKey("dtrun/job/round"));
  CHECK(agent.writer("dtrun/job/round").empty());
}

TEST_CASE("token: StoreConnection without sockets: the protected prefix covers the abort keys",
          "[store][token]") {
  // The abort keys the agent writes are under the protected prefix, and open for reading.
  const std::string wireKey = "/" + dtrun::worker::abortKey(3);
  CHECK(wireKey.rfind(std::string(kProtectedKeyPrefix), 0) == 0);
  CHECK(wireKey.rfind(std::string(kOpenReadKeyPrefix), 0) == 0);

  StoreCore core;
  ConnectionBytes held;
  wire::Limits limits;
  StoreConnection conn(core, 1, limits, 1 << 20, held, "10.0.0.9:5", kToken);
  CHECK_FALSE(conn.authenticated());
  CHECK(conn.receive(wire::encodeFrame(wire::Dialect::kTorch2, wire::Op::kValidate, {}, {}, 0,
                                       wire::kValidationMagic))
            .empty());
  const std::string why =
      conn.receive(wire::encodeFrame(wire::Dialect::kTorch2, wire::Op::kSet, {wireKey}, {"x"}));
  CHECK_THAT(why, Contains("need the store's token"));
  CHECK(core.find(wireKey) == nullptr);

  StoreConnection agent(core, 2, limits, 1 << 20, held, "10.0.0.9:6", kToken);
  CHECK(agent
            .receive(wire::encodeFrame(wire::Dialect::kTorch2, wire::Op::kValidate, {}, {}, 0,
                                       wire::kValidationMagic) +
                     wire::encodeFrame(wire::Dialect::kTorch2, wire::Op::kAuth, {}, {kToken}) +
                     wire::encodeFrame(wire::Dialect::kTorch2, wire::Op::kSet, {wireKey}, {"x"}))
            .empty());
  CHECK(agent.authenticated());
  CHECK(agent.takeOutput() == std::string(1, static_cast<char>(wire::kAuthAccepted)));
  REQUIRE(core.find(wireKey) != nullptr);
  REQUIRE(core.writerOf(wireKey) != nullptr);
  CHECK(*core.writerOf(wireKey) == "10.0.0.9:6");
}
