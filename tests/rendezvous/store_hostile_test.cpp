// The hostile-client suite (hostile_cases.h) against an in-process StoreServer, with its log
// captured; plus what only an in-process server shows: the quota, rate-limited warnings, the
// store connection's failure isolation, and the client's MaybeAppliedError.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "common/log_text.h"
#include "hostile_cases.h"
#include "rendezvous/store_connection.h"
#include "tests/support/test_support.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::test;
using Catch::Matchers::Contains;
using wire::Op;

namespace {

StoreServerOptions hostileOptions() {
  auto o = loopbackOptions();
  applyHostileLimits(o);
  o.warningBurst = 5;
  o.warningWindow = std::chrono::seconds(1);
  return o;
}

}  // namespace

TEST_CASE("hostile: every case against an in-process store", "[store][hostile]") {
  for (const auto& name : hostileCaseNames()) {
    DYNAMIC_SECTION(name) {
      CapturedLog log;
      ServerThread server(hostileOptions(), log.logger());
      runHostileCase(name, server.port());
      if (name == "add_on_text_with_newline") {
        // Polled: the line is written by the io thread after the connection closed.
        CHECK(dtrun::test::pollUntil([&] {
          return server.onIoThread([](StoreServer&) { return true; }) &&
                 !log.linesWith("t\\nINJECTED").empty();
        }));
      }
      if (name == "flood_of_bad_frames") {
        // 300 bad connections: 5 lines, then one count once the 1 s window ends.
        CHECK(dtrun::test::pollUntil([&] { return !log.linesWith("more in the last").empty(); },
                                     std::chrono::seconds(30)));
        server.stop();
        CHECK(log.linesWith("unknown opcode 127").size() == 5);
        CHECK_THAT(log.linesWith("more in the last")[0], Contains("295 more"));
      }
    }
  }
}

TEST_CASE("hostile: the memory quota refuses a write and changes nothing", "[store][hostile]") {
  auto options = loopbackOptions();
  options.memoryQuota = 4 * 1024 * 1024;
  ServerThread server(options);
  auto by = bystander(server.port());
  by->set("a", Bytes(1024 * 1024, 'a'));
  by->set("b", Bytes(1024 * 1024, 'b'));
  // A MULTI_SET that would pass the quota is refused whole: neither key is written.
  auto c = connect2(server.port());
  c->send(frame2(Op::kMultiSet, {"/hostile/c", "/hostile/d"},
                 {Bytes(1024 * 1024, 'c'), Bytes(1024 * 1024, 'd')}));
  CHECK(c->closedByPeer());
  CHECK_FALSE(by->check({"c"}));
  CHECK_FALSE(by->check({"d"}));
  // Replacing a value by a smaller one always fits; deleting frees room.
  by->set("a", "small");
  by->set("c", Bytes(1024 * 1024, 'c'));
  CHECK(by->get("c", std::chrono::seconds(5)).size() == 1024 * 1024);
  CHECK(server.onIoThread([](StoreServer& s) { return s.storedBytes(); }) < 4 * 1024 * 1024);
}

TEST_CASE("hostile: a StoreConnection turns any failure into a reason to close",
          "[store][hostile]") {
  StoreCore core({}, StoreQuota{1024, 64 * 1024});
  ConnectionBytes held;
  wire::Limits limits;
  limits.maxValueSize = 1024;
  StoreConnection conn(core, 1, limits, 4096, held);
  std::string in = validateFrame() + frame2(Op::kSet, {"k"}, {Bytes(1000, 'x')}) +
                   frame2(Op::kMultiGet, std::vector<std::string>(8, "k"));
  const std::string why = conn.receive(in);
  CHECK_THAT(why,
             Contains("MULTI_GET") && Contains("reply of") && Contains("past the limit of 4096"));
  CHECK(core.find("k")->size() == 1000);
  CHECK_FALSE(conn.hasOutput());  // refused before a byte of the reply was built
  conn.close();
  CHECK(held.held == 0);
}

TEST_CASE("hostile: warnings are limited per kind and counted", "[store][hostile]") {
  using Clock = dtrun::WarningLimiter::Clock;
  dtrun::WarningLimiter limiter(2, std::chrono::seconds(5));
  const auto t0 = Clock::now();
  CHECK(limiter.allow("bad", t0));
  CHECK(limiter.allow("bad", t0));
  for (int i = 0; i < 31412; ++i) CHECK_FALSE(limiter.allow("bad", t0));
  CHECK(limiter.allow("other", t0));
  CHECK(limiter.nextFlush() == t0 + std::chrono::seconds(5));
  CHECK(limiter.flush(t0 + std::chrono::seconds(1)).empty());
  auto lines = limiter.flush(t0 + std::chrono::seconds(5));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "bad: ... 31412 more in the last 5 s");
  CHECK(limiter.allow("bad", t0 + std::chrono::seconds(6)));
  CHECK(dtrun::escapeForLog("a\nb\"\x01\xff") == "\"a\\nb\\\"\\x01\\xff\"");
  CHECK(dtrun::escapeForLog(std::string(200, 'k'), 4) == "\"kkkk\"... (200 bytes)");
}

namespace {

// A one-client-at-a-time fake server on 127.0.0.1, port 0, with blocking reads under a deadline.
class FakeServer {
 public:
  FakeServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~FakeServer() { ::close(fd_); }
  std::uint16_t port() const { return port_; }
  int accept() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) throw std::runtime_error("no client came");
    return ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  }
  static std::string read(int fd, std::size_t n) {
    std::string out;
    while (out.size() < n) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20000) != 1) throw std::runtime_error("client sent nothing");
      char buf[64];
      ssize_t got = ::recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) throw std::runtime_error("client hung up");
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace

TEST_CASE("hostile: a connection lost after a non-repeatable request raises MaybeAppliedError",
          "[store][hostile]") {
  // The fake takes the handshake, answers the PING, then reads one whole request and hangs up
  // without replying: the client cannot know whether it was applied, and must say so.
  FakeServer fake;
  TcpStoreOptions o;
  o.port = fake.port();
  o.connectTimeout = std::chrono::seconds(20);
  o.timeout = std::chrono::seconds(20);
  auto serveOne = [&](std::size_t requestBytes) {
    int c = fake.accept();
    FakeServer::read(c, 5);                       // VALIDATE
    std::string ping = FakeServer::read(c, 5);    // PING + nonce
    ::send(c, ping.data() + 1, 4, MSG_NOSIGNAL);  // the echo
    FakeServer::read(c, requestBytes);            // the whole request, then hang up
    ::close(c);
  };
  const std::size_t addBytes = frame2(Op::kAdd, {"/counter"}, {}, 1).size();
  const std::size_t casBytes = frame2(Op::kCompareSet, {"/k"}, {"", "v"}).size();
  Background server([&] {
    serveOne(addBytes);
    serveOne(casBytes);
  });
  TcpStore client(o);
  CHECK_THROWS_AS(client.add("counter", 1), MaybeAppliedError);
  // The next call reconnects (to the fake's second connection) and fails the same way.
  CHECK_THROWS_WITH(client.compareSet("k", "", "v"), Contains("may or may not have been applied"));
  server.join();
}

TEST_CASE("hostile: a repeatable request is sent again once on a new connection",
          "[store][hostile]") {
  // The first connection dies after a GET arrives; the client sends the GET again on a new one
  // and gets the real store's answer.
  ServerThread real;
  auto writer = bystander(real.port());
  writer->set("k", "v");
  FakeServer fake;
  TcpStoreOptions o;
  o.port = fake.port();
  o.connectTimeout = std::chrono::seconds(20);
  o.timeout = std::chrono::seconds(20);
  o.keyPrefix = "/hostile/";
  Background server([&] {
    int c = fake.accept();
    FakeServer::read(c, 5);
    std::string ping = FakeServer::read(c, 5);
    ::send(c, ping.data() + 1, 4, MSG_NOSIGNAL);
    FakeServer::read(c, frame2(Op::kCheck, {"/hostile/k"}).size());
    ::close(c);
    // The second connection is relayed to the real store, byte for byte, until either closes.
    int c2 = fake.accept();
    RawConn up(real.port());
    for (;;) {
      pollfd p[2] = {{c2, POLLIN, 0}, {up.fd(), POLLIN, 0}};
      if (::poll(p, 2, 20000) <= 0) break;
      char buf[4096];
      int from = (p[0].revents & (POLLIN | POLLHUP)) ? c2 : up.fd();
      int to = from == c2 ? up.fd() : c2;
      ssize_t n = ::recv(from, buf, sizeof(buf), 0);
      if (n <= 0) break;
      ::send(to, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
    }
    ::close(c2);
  });
  {
    TcpStore client(o);
    CHECK(client.check({"k"}));  // CHECK is repeatable: answered through the second connection
  }
  server.join();
}
