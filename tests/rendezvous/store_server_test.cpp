// StoreServer over real loopback sockets, spoken to in raw bytes: PING, CANCEL_WAIT ordering,
// LIST_KEYS, QUEUE_*, BARRIER, DTRUN_LEASE, the connection limit, bad frames, and 100 connections
// sending garbage while real clients carry on.
//
// Most tests run the server on its own thread (ServerThread); the first steps the io_context on
// the test's thread instead, as the asio unit tests do. Log lines are captured with spdlog's
// ostream sink and read once the server thread has stopped.
#include "rendezvous/store_server.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/wire.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using wire::Dialect;
using wire::Op;

namespace {

std::string u64le(std::uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

std::string pingFrame(std::uint32_t nonce) { return frame2(Op::kPing, {}, {}, 0, nonce); }

// Sends a PING and reads the echo: proves every earlier reply was already read.
void expectPingNext(RawConn& c, std::uint32_t nonce) {
  c.send(pingFrame(nonce));
  CHECK(c.recvU32() == nonce);
}

}  // namespace

TEST_CASE("server: stepping the io_context, PING is echoed and stop() lets run() return",
          "[store][server]") {
  boost::asio::io_context io(1);
  StoreServer server(io, loopbackOptions(), quietLogger());
  server.start();
  REQUIRE(server.endpoint().port() != 0);
  RawConn c(server.endpoint().port());  // the kernel completes the connect from its backlog
  c.send(validateFrame() + pingFrame(0xA1B2C3D4));
  std::string reply;
  CHECK(dtrun::test::pollUntil([&] {
    io.poll();
    reply += c.recvAvailable();
    return reply.size() >= 4;
  }));
  REQUIRE(reply.size() == 4);
  std::uint32_t echo = 0;
  std::memcpy(&echo, reply.data(), 4);
  CHECK(echo == 0xA1B2C3D4);
  CHECK(server.connectionCount() == 1);

  server.stop();
  io.run_for(20s);
  CHECK(io.stopped());  // nothing was left pending: run() returned on its own
  CHECK(c.closedByPeer());
}

TEST_CASE("server: several addresses on one port, and '::' for IPv6 and IPv4 alike",
          "[store][server]") {
  auto reach = [](const std::string& host, std::uint16_t port) {
    TcpStoreOptions o;
    o.host = host;
    o.port = port;
    o.connectTimeout = 5s;
    o.timeout = 5s;
    TcpStore client(o);
    client.set("k", "from " + host);
    return client.get("k", 5s);
  };
  auto refused = [](const std::string& host, std::uint16_t port) {
    TcpStoreOptions o;
    o.host = host;
    o.port = port;
    o.connectTimeout = 300ms;
    try {
      TcpStore client(o);
    } catch (const dtrun::ConnectionError&) {
      return true;
    }
    return false;
  };
  SECTION("127.0.0.2 and ::1 on one free port; 127.0.0.1 is not among them") {
    StoreServerOptions o = loopbackOptions();
    o.hosts = {"127.0.0.2", "::1"};
    ServerThread server(o);
    const auto eps = server.onIoThread([](StoreServer& s) { return s.endpoints(); });
    REQUIRE(eps.size() == 2);
    CHECK(eps[0].address().to_string() == "127.0.0.2");
    CHECK(eps[1].address().to_string() == "::1");
    CHECK(eps[0].port() == eps[1].port());
    CHECK(reach("127.0.0.2", server.port()) == "from 127.0.0.2");
    CHECK(reach("::1", server.port()) == "from ::1");
    CHECK(refused("127.0.0.1", server.port()));
  }
  SECTION("'::' takes IPv4 and IPv6 clients on every local address") {
    StoreServerOptions o = loopbackOptions();
    o.hosts = {"::"};
    ServerThread server(o);
    CHECK(reach("127.0.0.1", server.port()) == "from 127.0.0.1");
    CHECK(reach("127.0.0.3", server.port()) == "from 127.0.0.3");
    CHECK(reach("::1", server.port()) == "from ::1");
  }
  SECTION("a name listens on what it resolves to, once per address") {
    StoreServerOptions o = loopbackOptions();
    o.hosts = {"localhost", "127.0.0.1"};
    ServerThread server(o);
    const auto eps = server.onIoThread([](StoreServer& s) { return s.endpoints(); });
    std::set<std::string> addrs;
    for (const auto& ep : eps) addrs.insert(ep.address().to_string());
    CHECK(addrs.size() == eps.size());  // 127.0.0.1 once, though named twice
    CHECK(addrs.count("127.0.0.1") == 1);
    CHECK(reach("localhost", server.port()) == "from localhost");
  }
  SECTION("an address that is not this machine's is one clear error naming it") {
    StoreServerOptions o = loopbackOptions();
    o.hosts = {"127.0.0.1", "192.0.2.1"};  // TEST-NET-1: never a local address
    boost::asio::io_context io;
    StoreServer server(io, o, quietLogger());
    CHECK_THROWS_WITH(server.start(), Contains("cannot listen on 192.0.2.1:0"));
  }
}

TEST_CASE("server: CANCEL_WAIT answers after any STOP_WAITING already owed", "[store][server]") {
  ServerThread server;
  auto a = connect2(server.port());
  auto b = connect2(server.port());

  SECTION("a parked WAIT that is cancelled answers only WAIT_CANCELED") {
    a->send(frame2(Op::kWait, {"/k"}) + frame2(Op::kCancelWait));
    CHECK(a->recv(1) == std::string(1, wire::kWaitCanceled));
    expectPingNext(*a, 1);
    // The key arriving later sends nothing to the connection that gave up.
    b->send(frame2(Op::kSet, {"/k"}, {"v"}));
    expectPingNext(*b, 2);
    expectPingNext(*a, 3);
  }
  SECTION("a WAIT completed just before the cancel answers STOP_WAITING then WAIT_CANCELED") {
    // In one send: the SET completes the WAIT before the server reads the CANCEL_WAIT.
    a->send(frame2(Op::kWait, {"/k"}) + frame2(Op::kSet, {"/k"}, {"v"}) + frame2(Op::kCancelWait));
    CHECK(a->recv(2) == std::string{static_cast<char>(wire::kStopWaiting),
                                    static_cast<char>(wire::kWaitCanceled)});
    expectPingNext(*a, 4);
  }
  SECTION("a WAIT woken by another connection, then cancelled by a slow client") {
    a->send(frame2(Op::kWait, {"/k", "/j"}));
    b->send(frame2(Op::kSet, {"/k"}, {"1"}));
    expectPingNext(*b, 5);  // the SET has been handled; /j is still missing
    b->send(frame2(Op::kSet, {"/j"}, {"2"}));
    CHECK(a->recv(1) == std::string(1, wire::kStopWaiting));
    a->send(frame2(Op::kCancelWait));
    CHECK(a->recv(1) == std::string(1, wire::kWaitCanceled));
    expectPingNext(*a, 6);
  }
  SECTION("WAIT on keys that exist answers at once") {
    b->send(frame2(Op::kSet, {"/k"}, {"1"}));
    expectPingNext(*b, 7);
    a->send(frame2(Op::kWait, {"/k"}));
    CHECK(a->recv(1) == std::string(1, wire::kStopWaiting));
  }
}

TEST_CASE("server: GET and MULTI_GET of missing keys answer empty values, as libuv does",
          "[store][server]") {
  ServerThread server;
  auto a = connect2(server.port());
  a->send(frame2(Op::kSet, {"/x"}, {"val"}));
  a->send(frame2(Op::kGet, {"/nope"}));
  CHECK(a->recvBytes().empty());
  a->send(frame2(Op::kMultiGet, {"/nope", "/x"}));
  CHECK(a->recvBytes().empty());
  CHECK(a->recvBytes() == "val");
  a->send(frame2(Op::kCheck, {"/x", "/nope"}));
  CHECK(a->recv(1) == std::string(1, wire::kCheckNotReady));
  a->send(frame2(Op::kCheck, {"/x"}));
  CHECK(a->recv(1) == std::string(1, wire::kCheckReady));
  a->send(frame2(Op::kNumKeys));
  CHECK(a->recvI64() == 1);
  a->send(frame2(Op::kDeleteKey, {"/x"}) + frame2(Op::kDeleteKey, {"/x"}));
  CHECK(a->recvI64() == 1);
  CHECK(a->recvI64() == 0);
}

TEST_CASE("server: a torch 1.13 connection and a 2.x connection share one store",
          "[store][server]") {
  ServerThread server;
  RawConn old(server.port());
  auto fresh = connect2(server.port());
  // 1.13's first message: ADD("init/", 1), ADD is opcode 3 in its table.
  old.send(frame(Dialect::kTorch113, Op::kAdd, {"init/"}, {}, 1));
  CHECK(old.recvI64() == 1);
  fresh->send(frame2(Op::kAdd, {"init/"}, {}, 1));
  CHECK(fresh->recvI64() == 2);
  old.send(frame(Dialect::kTorch113, Op::kSet, {"/shared"}, {"from 1.13"}));
  fresh->send(frame2(Op::kWait, {"/shared"}) + frame2(Op::kGet, {"/shared"}));
  CHECK(fresh->recv(1) == std::string(1, wire::kStopWaiting));
  CHECK(fresh->recvBytes() == "from 1.13");
  old.send(frame(Dialect::kTorch113, Op::kNumKeys));
  CHECK(old.recvI64() == 2);
}

TEST_CASE("server: LIST_KEYS lists every key as sent, and TcpStore strips its prefix",
          "[store][server]") {
  ServerThread server;
  TcpStore client(clientOptions(server.port()));
  client.set("a", "1");
  client.add("b", 1);
  auto raw = connect2(server.port());
  raw->send(frame2(Op::kSet, {"raw"}, {"x"}) + frame2(Op::kQueuePush, {"/queue"}, {"q"}));
  raw->send(frame2(Op::kListKeys));
  auto n = raw->recvI64();
  REQUIRE(n == 3);
  std::set<std::string> keys;
  for (std::int64_t i = 0; i < n; ++i) keys.insert(raw->recvBytes());
  CHECK(keys == std::set<std::string>{"/a", "/b", "raw"});  // queues are not keys
  auto listed = client.listKeys();
  CHECK(std::set<std::string>(listed.begin(), listed.end()) == std::set<std::string>{"a", "b"});
}

TEST_CASE("server: QUEUE_PUSH, QUEUE_POP and QUEUE_LEN", "[store][server]") {
  ServerThread server;
  auto a = connect2(server.port());
  auto b = connect2(server.port());

  // A WAIT on a queue is woken by a push.
  b->send(frame2(Op::kWait, {"/q"}));
  expectPingNext(*b, 9);  // the WAIT is parked: the PING echo came first
  a->send(frame2(Op::kQueuePush, {"/q"}, {"first"}) +
          frame2(Op::kQueuePush, {"/q"}, {std::string("\0sec", 4)}));
  CHECK(b->recv(1) == std::string(1, wire::kStopWaiting));

  a->send(frame2(Op::kQueueLen, {"/q"}));
  CHECK(a->recvI64() == 2);
  a->send(frame2(Op::kCheck, {"/q"}));
  CHECK(a->recv(1) == std::string(1, wire::kCheckReady));
  a->send(frame2(Op::kQueuePop, {"/q"}));
  CHECK(a->recvI64() == 2);  // the length before the pop, then the front element
  CHECK(a->recvBytes() == "first");
  b->send(frame2(Op::kQueuePop, {"/q"}));
  CHECK(b->recvI64() == 1);
  CHECK(b->recvBytes() == std::string("\0sec", 4));
  a->send(frame2(Op::kQueuePop, {"/q"}));
  CHECK(a->recvI64() == 0);  // empty: the length alone
  expectPingNext(*a, 10);
  a->send(frame2(Op::kQueueLen, {"/q"}));
  CHECK(a->recvI64() == 0);
}

TEST_CASE("server: BARRIER releases every arrival when the count reaches world size",
          "[store][server]") {
  ServerThread server;
  std::vector<std::unique_ptr<RawConn>> c;
  for (int i = 0; i < 4; ++i) c.push_back(connect2(server.port()));
  for (int i = 0; i < 2; ++i) {
    c[i]->send(frame2(Op::kBarrier, {"/b"}, {}, 3));
    expectPingNext(*c[i], 20 + i);  // no STOP_WAITING came before the echo: still waiting
  }
  c[2]->send(frame2(Op::kBarrier, {"/b"}, {}, 3));
  for (int i = 0; i < 3; ++i) CHECK(c[i]->recv(1) == std::string(1, wire::kStopWaiting));
  c[3]->send(frame2(Op::kBarrier, {"/b"}, {}, 3));  // past the count: through at once
  CHECK(c[3]->recv(1) == std::string(1, wire::kStopWaiting));
  c[3]->send(frame2(Op::kGet, {"/b"}));
  CHECK(c[3]->recvBytes() == "4");
}

TEST_CASE("server: DTRUN_LEASE closes a quiet connection and runs its close actions",
          "[store][server]") {
  CapturedLog log;
  ServerThread server(loopbackOptions(), log.logger());
  auto keep = connect2(server.port());
  auto quiet = connect2(server.port());
  auto watcher = connect2(server.port());
  // `keep` asks for a lease, then takes it back; its lease would have run out before quiet's.
  keep->send(frame2(Op::kLease, {}, {}, 0, 200) + frame2(Op::kLease, {}, {}, 0, 0));
  expectPingNext(*keep, 30);

  quiet->send(frame2(Op::kAdd, {"/members"}, {}, 1));
  CHECK(quiet->recvI64() == 1);
  quiet->send(frame2(Op::kAddOnClose, {"/members"}, {}, -1) + frame2(Op::kLease, {}, {}, 0, 200));
  const auto quietPort = quiet->localPort();
  watcher->send(frame2(Op::kWaitChange, {"/members"}, {"1"}));
  expectPingNext(*watcher, 31);  // parked: the value is still "1"

  CHECK(quiet->closedByPeer());
  CHECK(watcher->recv(1) == std::string(1, wire::kStopWaiting));
  watcher->send(frame2(Op::kGet, {"/members"}));
  CHECK(watcher->recvBytes() == "0");
  expectPingNext(*keep, 32);  // still open: a lease of 0 means none

  server.stop();
  auto lines = log.linesWith("nothing received for");
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Contains("127.0.0.1:" + std::to_string(quietPort) + ":"));
}

TEST_CASE("server: past the connection limit a connection is refused and logged",
          "[store][server]") {
  CapturedLog log;
  auto options = loopbackOptions();
  options.maxConnections = 2;
  ServerThread server(options, log.logger());
  auto a = connect2(server.port());
  auto b = connect2(server.port());
  RawConn refused(server.port());
  CHECK(refused.closedByPeer());
  expectPingNext(*a, 40);
  expectPingNext(*b, 41);
  CHECK(server.connectionCount() == 2);

  a.reset();  // a slot frees up once the server notices the close
  CHECK(dtrun::test::pollUntil([&] { return server.connectionCount() == 1; }));
  auto c = connect2(server.port());
  expectPingNext(*c, 42);

  server.stop();
  auto lines = log.linesWith("connection limit 2 reached");
  CHECK(lines.size() == 1);
  CHECK_THAT(log.text(), Contains("refusing 127.0.0.1"));
}

TEST_CASE("server: each kind of bad frame closes only its connection, with a log line",
          "[store][server]") {
  struct Case {
    const char* name;
    std::string bytes;
    const char* logged;
  };
  auto limits = wire::Limits{};
  limits.maxKeySize = 64;
  limits.maxValueSize = 1024;
  limits.maxKeysPerRequest = 8;
  const std::vector<Case> cases = {
      {"unknown 2.x opcode", validateFrame() + "\x13", "unknown opcode 19 (torch 2.x table)"},
      {"unknown 1.13 opcode (APPEND)", frame2(Op::kAppend, {"/k"}, {"v"}),
       "unknown opcode 9 (torch 1.13 table)"},
      {"oversize key", validateFrame() + "\x01" + u64le(65), "key of 65 bytes exceeds"},
      {"oversize value", validateFrame() + frame2(Op::kSet, {"/k"}, {std::string(1025, 'v')}),
       "value of 1025 bytes exceeds"},
      {"huge key count", validateFrame() + "\x06" + u64le(std::uint64_t{1} << 62), "keys, limit 8"},
      {"second VALIDATE with a wrong magic",
       validateFrame() + std::string("\x00\x01\x02\x03\x04", 5), "bad validation magic"},
      {"ADD on a value that is not a number",
       validateFrame() + frame2(Op::kSet, {"/t"}, {"text"}) + frame2(Op::kAdd, {"/t"}, {}, 1),
       "ADD failed"},
      {"WATCH_KEY from a 1.13 client", frame(Dialect::kTorch113, Op::kWatchKey, {"/k"}),
       "WATCH_KEY"},
      {"truncated frame, then the connection ends",
       validateFrame() + frame2(Op::kSet, {"/k"}, {"value"}).substr(0, 12),
       "it ended inside a request (12 bytes"},
  };
  CapturedLog log;
  auto options = loopbackOptions();
  options.limits = limits;
  ServerThread server(options, log.logger());
  auto bystander = connect2(server.port());
  std::vector<std::uint16_t> ports;
  for (const auto& c : cases) {
    INFO(c.name);
    RawConn bad(server.port());
    ports.push_back(bad.localPort());
    bad.send(c.bytes);
    bad.shutdownWrite();
    CHECK(bad.closedByPeer());
    expectPingNext(*bystander, 50);
  }
  server.stop();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].name);
    auto lines = log.linesWith("127.0.0.1:" + std::to_string(ports[i]) + ":");
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Contains("closing connection from") && Contains(cases[i].logged));
  }
}

TEST_CASE("server: 100 connections send garbage while real clients keep working",
          "[store][server]") {
  CapturedLog log;
  auto options = loopbackOptions();
  options.limits.maxKeySize = 4096;
  options.limits.maxValueSize = 1 << 20;
  options.limits.maxKeysPerRequest = 1024;
  auto server = std::make_unique<ServerThread>(options, log.logger());
  const auto port = server->port();

  TcpStore real(clientOptions(port));
  // A second real client in 1.13 mode loops on its own thread for the whole test...
  std::atomic<bool> done{false};
  std::atomic<std::int64_t> rounds{0};
  Background worker([&] {
    TcpStore c(clientOptions(port, Dialect::kTorch113));
    for (std::int64_t i = 0; !done; ++i) {
      const std::string key = "worker/" + std::to_string(i % 50);
      const std::string value = "value " + std::to_string(i);
      c.set(key, value);
      if (c.get(key, 20s) != value) throw std::runtime_error("worker read back a wrong value");
      c.add("worker/count", 1);
      ++rounds;
    }
  });
  // ...and a third sits in a WAIT that must survive the storm.
  Background waiter([&] {
    TcpStore w(clientOptions(port));
    w.wait({"finish"}, 120s);
  });

  std::mt19937 rng(1234);
  auto randomBytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng());
    return s;
  };
  std::vector<std::unique_ptr<RawConn>> bad;
  std::vector<std::uint16_t> ports;
  for (int i = 0; i < 100; ++i) {
    std::string garbage;
    switch (i % 5) {
      case 0:  // random bytes
        garbage = randomBytes(16 + rng() % 2048);
        break;
      case 1:  // a truncated frame: the connection ends in the middle of a SET
        garbage = validateFrame() +
                  frame2(Op::kSet, {"/t"}, {randomBytes(100)}).substr(0, 1 + rng() % 100);
        break;
      case 2:  // an oversized length, in either dialect
        garbage = (i % 2 ? validateFrame() + "\x01" : std::string("\x00", 1)) +
                  u64le((std::uint64_t{1} << (13 + rng() % 50)) + 1);
        break;
      case 3:  // an unknown opcode after some valid requests
        garbage = validateFrame() + pingFrame(7) + frame2(Op::kSet, {"/g"}, {"x"}) +
                  std::string(1, static_cast<char>(19 + rng() % 109));
        break;
      case 4:  // a 1.13 connection that sends a 2.x-only opcode mid-stream
        garbage = frame(Dialect::kTorch113, Op::kAdd, {"init/"}, {}, 1) +
                  std::string(1, static_cast<char>(9 + rng() % 10)) + randomBytes(32);
        break;
    }
    auto c = std::make_unique<RawConn>(port);
    ports.push_back(c->localPort());
    c->send(garbage);  // false when the server already hung up: fine
    c->shutdownWrite();
    bad.push_back(std::move(c));
    // The main real client works between every two bad connections.
    const std::string key = "between/" + std::to_string(i);
    real.set(key, std::to_string(i));
    CHECK(real.get(key, 20s) == std::to_string(i));
    CHECK(real.add("between/count", 1) == i + 1);
  }
  for (std::size_t i = 0; i < bad.size(); ++i) {
    INFO("garbage connection " << i);
    CHECK(bad[i]->closedByPeer());
  }
  CHECK(dtrun::test::pollUntil([&] { return rounds > 10; }));
  done = true;
  worker.join();
  CHECK(real.add("worker/count", 0) == rounds);
  real.set("finish", "1");
  waiter.join();
  real.ping();

  server->stop();
  const auto closing = log.linesWith("closing connection from");
  CHECK(closing.size() == 100);
  for (std::size_t i = 0; i < ports.size(); ++i) {
    INFO("garbage connection " << i << " from port " << ports[i]);
    CHECK(log.linesWith("127.0.0.1:" + std::to_string(ports[i]) + ":").size() == 1);
  }
}
