// TcpStore beyond the Store contract: connecting with retries, error messages, torch 2.x-only
// operations and their refusal in 1.13 mode, dtrun-only operations, interrupt(), key prefixes.
#include "rendezvous/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/error.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using wire::Dialect;

namespace {

// A loopback port that is bound but not listening: connecting to it is refused.
class ReservedPort {
 public:
  ReservedPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~ReservedPort() { release(); }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

std::string errorText(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST_CASE("tcp store: connecting gives up at its deadline, naming host:port and the time",
          "[store][client]") {
  ReservedPort nobody;
  auto o = clientOptions(nobody.port());
  o.connectTimeout = 300ms;
  std::string msg;
  try {
    TcpStore store(o);
  } catch (const dtrun::ConnectionError& e) {
    msg = e.what();
  }
  CHECK_THAT(msg, Contains("127.0.0.1:" + std::to_string(nobody.port())) && Contains(" ms"));
}

TEST_CASE("tcp store: connecting retries until the server comes up", "[store][client]") {
  ReservedPort reserved;
  const auto port = reserved.port();
  std::atomic<bool> started{false};
  Background client([&] {
    started = true;
    TcpStore store(clientOptions(port));  // refused at first, retried with backoff
    store.set("k", "v");
  });
  REQUIRE(dtrun::test::pollUntil([&] { return started.load(); }));
  reserved.release();
  auto options = loopbackOptions();
  options.port = port;
  ServerThread server(options);
  client.join();
  TcpStore check(clientOptions(port));
  CHECK(check.get("k", 1s) == "v");
}

TEST_CASE("tcp store: timeouts name the store, the keys and the time waited", "[store][client]") {
  ServerThread server;
  TcpStore store(clientOptions(server.port()));
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  CHECK_THAT(errorText([&] { store.get("missing", 50ms); }),
             Contains(where) && Contains("/missing") && Contains("timed out after"));
  CHECK_THAT(errorText([&] {
               store.wait({"x", "y"}, 50ms);
             }),
             Contains("/x, /y") && Contains(" ms"));
  CHECK_THROWS_AS(store.wait({"x"}, 10ms), dtrun::TimeoutError);
}

TEST_CASE("tcp store: every key goes on the wire with the prefix", "[store][client]") {
  ServerThread server;
  TcpStore slashed(clientOptions(server.port()));
  auto o = clientOptions(server.port());
  o.keyPrefix = "";
  TcpStore bare(o);
  slashed.set("k", "v");
  CHECK(bare.get("/k", 1s) == "v");  // torch's client sends "/" + key
  bare.set("raw", "r");
  CHECK_FALSE(slashed.check({"raw"}));
  auto listed = slashed.listKeys();  // keys without the prefix are dropped, as torch does
  CHECK(std::set<std::string>(listed.begin(), listed.end()) == std::set<std::string>{"k"});
}

TEST_CASE("tcp store: torch 2.x operations: ping, queues, barrier", "[store][client]") {
  ServerThread server;
  TcpStore a(clientOptions(server.port()));
  TcpStore b(clientOptions(server.port()));
  a.ping();

  SECTION("queues") {
    CHECK(a.queueLen("q") == 0);
    CHECK_FALSE(a.queuePop("q", 0ms).has_value());
    a.queuePush("q", "1");
    a.queuePush("q", "2");
    CHECK(b.queueLen("q") == 2);
    CHECK(b.queuePop("q", 0ms) == "1");
    CHECK(b.queuePop("q", 1s) == "2");
    CHECK_THROWS_AS(b.queuePop("q", 50ms), dtrun::TimeoutError);  // a blocking pop times out
    Background pusher([&] { a.queuePush("q", "late"); });
    CHECK(b.queuePop("q", 20s) == "late");
    pusher.join();
  }
  SECTION("barrier") {
    constexpr int kRanks = 5;
    std::atomic<int> through{0};
    runThreads(kRanks, [&](int) {
      TcpStore rank(clientOptions(server.port()));
      rank.barrier("b", kRanks, 20s);
      ++through;
    });
    CHECK(through == kRanks);
    CHECK(a.get("b", 1s) == std::to_string(kRanks));
    CHECK_THROWS_AS(a.barrier("lonely", 2, 50ms), dtrun::TimeoutError);
    CHECK(a.get("lonely", 1s) == "1");
  }
}

TEST_CASE("tcp store: in 1.13 mode the 2.x-only operations are refused before sending",
          "[store][client]") {
  ServerThread server;
  TcpStore old(clientOptions(server.port(), Dialect::kTorch113));
  CHECK_THROWS_AS(old.ping(), dtrun::ProtocolError);
  CHECK_THROWS_AS(old.append("k", "v"), dtrun::ProtocolError);
  CHECK_THROWS_AS(old.queuePush("q", "v"), dtrun::ProtocolError);
  CHECK_THROWS_AS(old.queuePop("q", 0ms), dtrun::ProtocolError);
  CHECK_THROWS_AS(old.queueLen("q"), dtrun::ProtocolError);
  CHECK_THROWS_AS(old.listKeys(), dtrun::ProtocolError);
  CHECK_THROWS_AS(old.barrier("b", 1, 1s), dtrun::ProtocolError);
  CHECK_THAT(errorText([&] { old.ping(); }), Contains("1.13"));
  // Nothing was sent, so the connection is in step.
  CHECK(old.add("n", 1) == 1);
  // multiGet and multiSet fall back to one GET / SET per key.
  old.multiSet({"a", "b"}, {"1", "2"});
  CHECK(old.multiGet({"b", "a"}, 1s) == std::vector<Bytes>{"2", "1"});
}

TEST_CASE("tcp store: addOnClose runs when the connection goes away", "[store][client]") {
  ServerThread server;
  TcpStore watcher(clientOptions(server.port()));
  auto member = std::make_unique<TcpStore>(clientOptions(server.port()));
  CHECK(member->add("members", 1) == 1);
  member->addOnClose("members", -1);
  member->addOnClose("left", 1);
  CHECK(watcher.get("members", 1s) == "1");
  member.reset();
  CHECK(watcher.waitChange("members", "1", 20s) == "0");
  CHECK(watcher.get("left", 20s) == "1");
}

TEST_CASE("tcp store: a lease lets the server drop a client that went quiet", "[store][client]") {
  ServerThread server;
  TcpStore watcher(clientOptions(server.port()));
  TcpStore quiet(clientOptions(server.port()));
  quiet.add("alive", 1);
  quiet.addOnClose("alive", -1);
  quiet.lease(100ms);
  CHECK(watcher.waitChange("alive", "1", 20s) == "0");
  CHECK(dtrun::test::pollUntil([&] { return server.connectionCount() == 1; }));
}

TEST_CASE("tcp store: interrupt() unblocks a call on another thread and fails later calls",
          "[store][client]") {
  ServerThread server;
  TcpStore store(clientOptions(server.port()));
  store.set("ready", "1");
  std::atomic<bool> waiting{false};
  std::atomic<bool> failedRight{false};
  Background blocked([&] {
    try {
      waiting = true;
      store.wait({"never"}, Store::kNoTimeout);
    } catch (const dtrun::ConnectionError&) {
      failedRight = true;
    }
  });
  REQUIRE(dtrun::test::pollUntil([&] { return waiting.load(); }));
  TcpStore other(clientOptions(server.port()));
  CHECK(other.get("ready", 1s) == "1");  // a round trip's worth of time for the WAIT to park
  store.interrupt();
  blocked.join();
  CHECK(failedRight);  // also when interrupt() came first: a later call fails the same way
  CHECK_THROWS_AS(store.set("k", "v"), dtrun::ConnectionError);
  CHECK_FALSE(other.check({"k"}));
}

TEST_CASE("tcp store: a server that stops fails a blocked wait instead of hanging",
          "[store][client]") {
  auto server = std::make_unique<ServerThread>();
  TcpStore store(clientOptions(server->port()));
  store.set("up", "1");
  std::atomic<bool> waiting{false};
  std::string error = "(no ConnectionError)";
  Background blocked([&] {
    try {
      waiting = true;
      store.wait({"never"}, 60s);
    } catch (const dtrun::ConnectionError& e) {
      error = e.what();
    }
  });
  REQUIRE(dtrun::test::pollUntil([&] { return waiting.load(); }));
  TcpStore probe(clientOptions(server->port()));
  CHECK(probe.get("up", 1s) == "1");
  server->stop();
  blocked.join();
  CHECK_THAT(error, Contains("127.0.0.1:"));
}

TEST_CASE("tcp store: values up to the client limit are read, larger replies fail",
          "[store][client]") {
  ServerThread server;
  TcpStore writer(clientOptions(server.port()));
  auto o = clientOptions(server.port());
  o.limits.maxValueSize = 1000;
  TcpStore reader(o);
  writer.set("fits", std::string(1000, 'x'));
  writer.set("big", std::string(1001, 'x'));
  CHECK(reader.get("fits", 1s).size() == 1000);
  CHECK_THAT(errorText([&] { reader.get("big", 1s); }), Contains("exceeds the limit of 1000"));
  CHECK(reader.get("fits", 1s).size() == 1000);  // reconnected
}
