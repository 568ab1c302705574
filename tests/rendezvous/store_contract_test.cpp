// The Store contract: the same assertions on every implementation (gloo's transport matrix).
//
// One TEMPLATE_TEST_CASE over five factories: InMemoryStore, PrefixStore over InMemoryStore,
// TcpStore against a StoreServer on loopback in both dialects, and EtcdStore on a real etcd
// member (tests/etcd/etcd_cluster.h; SKIP without /usr/bin/etcd). Each SECTION starts from a
// fresh factory (a fresh server or etcd for the remote ones). Two handles from one factory share
// one store, the way two ranks share one. Where EtcdStore differs by design (a counter is its key
// plus one key per increment, rendezvous/etcd/etcd_store.h), the case says so and checks what
// EtcdStore promises instead.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/error.h"
#include "rendezvous/etcd/etcd_store.h"
#include "rendezvous/in_memory_store.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store.h"
#include "tests/etcd/etcd_cluster.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using dtrun::rendezvous::test::Background;
using dtrun::rendezvous::test::runThreads;
using dtrun::rendezvous::test::ServerThread;

namespace {

// Throws (Catch2's assertions are for the test's own thread) unless `n` calls are blocked in
// `store` within the deadline.
void waitForWaiters(InMemoryStore& store, int n) {
  if (!dtrun::test::pollUntil([&] { return store.blockedWaiters() == n; })) {
    throw std::runtime_error("the store never had " + std::to_string(n) + " blocked waiter(s)");
  }
}

// Every factory has untilWaiting(n): returns once n calls are blocked in the store waiting for
// a key, so that a case that tests waking a waiter writes only after the waiter is in place
// (else the waiter may simply find the key and the wake-up goes untested). kHasAppend: the
// store has APPEND; kGetSeesAdds: GET (and WAIT_CHANGE, numKeys) see a counter's ADDs; missing():
// why the factory cannot run here, or null.
struct LocalFactory {
  static constexpr bool kHasAppend = true;
  static constexpr bool kGetSeesAdds = true;
  static const char* missing() { return nullptr; }
};

struct InMemoryFactory : LocalFactory {
  std::shared_ptr<InMemoryStore> shared = std::make_shared<InMemoryStore>();
  std::shared_ptr<Store> make() { return shared; }
  void untilWaiting(int n) { waitForWaiters(*shared, n); }
};

struct PrefixFactory : LocalFactory {
  std::shared_ptr<InMemoryStore> shared = std::make_shared<InMemoryStore>();
  std::shared_ptr<Store> make() { return std::make_shared<PrefixStore>("job/7", shared); }
  void untilWaiting(int n) { waitForWaiters(*shared, n); }
};

template <wire::Dialect D>
struct TcpFactory : LocalFactory {
  static constexpr bool kHasAppend = D == wire::Dialect::kTorch2;  // 1.13 has no APPEND opcode
  ServerThread server;
  std::shared_ptr<Store> make() {
    TcpStoreOptions o;
    o.port = server.port();
    o.dialect = D;
    o.connectTimeout = 20s;
    o.timeout = 20s;
    return std::make_shared<TcpStore>(o);
  }
  // StoreServer does not tell how many WAITs it holds, so over TCP the write may still come
  // first; the in-memory factories, which share StoreCore with the server, do wait.
  void untilWaiting(int) {}
};
using Tcp2Factory = TcpFactory<wire::Dialect::kTorch2>;
using Tcp113Factory = TcpFactory<wire::Dialect::kTorch113>;

struct EtcdFactory {
  static constexpr bool kHasAppend = true;
  static constexpr bool kGetSeesAdds = false;
  static const char* missing() {
    return dtrun::test::EtcdCluster::available()
               ? nullptr
               : "/usr/bin/etcd is missing (scripts/setup.sh installs etcd-server)";
  }
  dtrun::test::EtcdCluster cluster{1};  // one member: the contract is about semantics
  std::shared_ptr<Store> make() {
    etcd::ClientOptions o;
    o.endpoints = etcd::parseEndpoints("test", cluster.endpoints(), "http");
    o.requestTimeout = 20s;
    return std::make_shared<etcd::EtcdStore>(std::make_shared<etcd::EtcdClient>(o));
  }
  // Waits are watches; whether one is in place cannot be asked, so the write may come first.
  void untilWaiting(int) {}
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

TEMPLATE_TEST_CASE("store contract", "[store]", InMemoryFactory, PrefixFactory, Tcp2Factory,
                   Tcp113Factory, EtcdFactory) {
  if (const char* why = TestType::missing()) DTRUN_SKIP(why);
  TestType factory;
  auto a = factory.make();
  auto b = factory.make();
  // A counter's text: GET where GET sees ADDs; on EtcdStore, which keeps increments in keys of
  // their own, the value ADD 0 reads (how the rendezvous reads every counter).
  const auto counterText = [&](const std::string& key) {
    if constexpr (TestType::kGetSeesAdds) {
      return a->get(key, 1s);
    } else {
      return std::to_string(a->add(key, 0));
    }
  };

  SECTION("set then get from another handle; binary, empty and overwritten values") {
    a->set("k", "v1");
    CHECK(b->get("k", 1s) == "v1");
    const std::string binary("\0x\0\xff\n", 5);
    a->set("bin", binary);
    CHECK(b->get("bin", 1s) == binary);
    a->set("empty", "");
    CHECK(b->get("empty", 1s).empty());
    CHECK(b->check({"empty"}));  // absent is never the same as empty
    b->set("k", "v2");
    CHECK(a->get("k", 1s) == "v2");
    const std::string binaryKey("key\0with\xfe", 9);
    a->set(binaryKey, "x");
    CHECK(b->get(binaryKey, 1s) == "x");
  }

  SECTION("a large value survives the trip") {
    std::string big(1 << 20, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
    a->set("big", big);
    CHECK(b->get("big", 10s) == big);
  }

  SECTION("get waits for a late key, or throws TimeoutError naming the key and the wait") {
    std::string msg = errorText([&] { a->get("late-key", 100ms); });
    CHECK_THAT(msg, Contains("late-key") && Contains("ms"));
    CHECK_THROWS_AS(a->get("late-key", 100ms), dtrun::TimeoutError);
    Background writer([&] {
      factory.untilWaiting(1);
      b->set("late-key", "here");
    });
    CHECK(a->get("late-key", 20s) == "here");
    writer.join();
    {
      dtrun::test::Watchdog bound(20s, "a get without a timeout of a key that exists");
      CHECK(a->get("late-key", Store::kNoTimeout) == "here");
    }
    // The handle that timed out is still usable, and no stale reply is left in its stream.
    CHECK(a->add("after-timeout", 1) == 1);
  }

  SECTION("add: a missing key starts at 0; deltas may be negative; the value is decimal text") {
    CHECK(a->add("n", 5) == 5);
    CHECK(b->add("n", -7) == -2);
    CHECK(counterText("n") == "-2");
    CHECK(a->add("n", 0) == -2);
    CHECK(a->add("zero", 0) == 0);
    CHECK(a->check({"zero"}));
    CHECK(a->get("zero", 1s) == "0");
    a->set("text", "41");
    CHECK(b->add("text", 1) == 42);
    CHECK(counterText("text") == "42");
    // std::stoll's reading of text: leading blanks and a sign; trailing bytes ignored.
    a->set("blank", "  -17");
    CHECK(a->add("blank", 2) == -15);
    a->set("trailing", "12abc");
    CHECK(a->add("trailing", 1) == 13);
    CHECK(counterText("trailing") == "13");
    CHECK(a->add("large", std::int64_t{1} << 40) == std::int64_t{1} << 40);
    CHECK(counterText("large") == "1099511627776");
  }

  SECTION("add on a value that is not a number fails; the value and the store are unharmed") {
    a->set("word", "abc");
    CHECK_THROWS_AS(a->add("word", 1), dtrun::Error);
    CHECK(a->add("counter", 1) == 1);  // a TcpStore reconnects after the server closed it
    CHECK(b->get("word", 1s) == "abc");
  }

  SECTION("compareSet, including torch's answer for a missing key") {
    // Missing key, empty `expected`: store `desired`, return it.
    CHECK(a->compareSet("cas", "", "first") == "first");
    CHECK(b->get("cas", 1s) == "first");
    // Present key, wrong `expected`: no change; the current value comes back.
    CHECK(a->compareSet("cas", "wrong", "second") == "first");
    CHECK(a->compareSet("cas", "", "second") == "first");
    CHECK(b->get("cas", 1s) == "first");
    // Present key, right `expected`: replaced; the new value comes back.
    CHECK(a->compareSet("cas", "first", "third") == "third");
    CHECK(b->get("cas", 1s) == "third");
    // torch's quirk: a missing key with a non-empty `expected` answers `expected` and stores
    // nothing.
    CHECK(a->compareSet("missing", "exp", "des") == "exp");
    CHECK_FALSE(a->check({"missing"}));
    const std::string x("\0\1", 2), y("\xff\0", 2);
    CHECK(a->compareSet("bin", "", x) == x);
    CHECK(a->compareSet("bin", x, y) == y);
  }

  SECTION("compareSet that creates a key wakes its waiter") {
    Background waiter([&] { b->wait({"cas-wake"}, 20s); });
    factory.untilWaiting(1);
    a->compareSet("cas-wake", "", "v");
    waiter.join();
    CHECK(b->check({"cas-wake"}));
  }

  SECTION("check is true when every key exists, and never blocks") {
    CHECK(a->check({}));
    CHECK_FALSE(a->check({"c1"}));
    b->set("c1", "1");
    CHECK(a->check({"c1"}));
    CHECK_FALSE(a->check({"c1", "c2"}));
    b->set("c2", "2");
    CHECK(a->check({"c1", "c2"}));
    CHECK(a->check({"c2", "c1", "c2"}));
  }

  SECTION("wait without a timeout returns once every key exists") {
    a->set("w0", "x");
    {
      dtrun::test::Watchdog bound(20s, "a wait without a timeout for a key that exists");
      a->wait({"w0"}, Store::kNoTimeout);  // present: returns at once
    }
    Background writer([&] {
      factory.untilWaiting(1);
      b->set("w1", "1");
      b->set("w2", "2");
    });
    {
      dtrun::test::Watchdog bound(20s, "a wait without a timeout for keys another handle sets");
      a->wait({"w1", "w2"}, Store::kNoTimeout);
    }
    writer.join();
    CHECK(a->check({"w1", "w2"}));
  }

  SECTION("wait with a timeout throws TimeoutError while any key is missing") {
    b->set("have", "1");
    std::string msg = errorText([&] { a->wait({"have", "not-yet"}, 100ms); });
    CHECK_THAT(msg, Contains("not-yet") && Contains("ms"));
    CHECK_THROWS_AS(a->wait({"not-yet"}, 50ms), dtrun::TimeoutError);
    // The key arrives after the waiter gave up; the next wait sees it and nothing is misread.
    b->set("not-yet", "now");
    a->wait({"have", "not-yet"}, 20s);
    CHECK(a->get("not-yet", 1s) == "now");
    CHECK(a->add("after", 2) == 2);
  }

  SECTION("deleteKey says whether the key existed; a deleted key is gone") {
    const auto base = a->numKeys();
    CHECK_FALSE(a->deleteKey("d"));
    a->set("d", "x");
    CHECK(a->numKeys() == base + 1);
    CHECK(b->deleteKey("d"));
    CHECK_FALSE(a->check({"d"}));
    CHECK_FALSE(b->deleteKey("d"));
    CHECK(a->numKeys() == base);
    CHECK_THROWS_AS(a->get("d", 50ms), dtrun::TimeoutError);
    a->set("d", "again");
    CHECK(b->get("d", 1s) == "again");
  }

  SECTION("numKeys counts keys; overwrites do not add") {
    const auto base = a->numKeys();
    CHECK(base == 0);  // a fresh store holds no key
    a->set("n1", "x");
    a->set("n2", "x");
    a->set("n2", "y");
    CHECK(b->numKeys() == base + 2);
    if constexpr (TestType::kGetSeesAdds) {
      b->add("n3", 1);
      b->add("n3", 1);
    } else {
      b->add("n3", 0);  // EtcdStore: each non-zero ADD is a key of its own
    }
    CHECK(a->numKeys() == base + 3);
    a->compareSet("n4", "not-there", "x");  // stores nothing
    CHECK(a->numKeys() == base + 3);
    a->deleteKey("n1");
    CHECK(a->numKeys() == base + 2);
  }

  SECTION("append creates, concatenates and wakes waiters") {
    if constexpr (!TestType::kHasAppend) {
      WARN(
          "append skipped: torch 1.13's protocol has no APPEND opcode; TcpStore in 1.13 mode "
          "refuses it with ProtocolError, checked here");
      CHECK_THROWS_AS(a->append("log", "x"), dtrun::ProtocolError);
      CHECK(a->add("still-works", 1) == 1);
    } else {
      Background waiter([&] { b->wait({"log"}, 20s); });
      factory.untilWaiting(1);
      a->append("log", "ab");
      waiter.join();
      b->append("log", std::string("\0c", 2));
      a->append("log", "");
      CHECK(a->get("log", 1s) == std::string("ab\0c", 4));
      a->set("counter", "4");
      a->append("counter", "2");
      CHECK(a->add("counter", 1) == 43);
    }
  }

  SECTION("multiGet returns values in order, waiting for missing keys up to the timeout") {
    a->set("m1", "one");
    a->set("m2", "");
    a->set("m3", std::string("\0", 1));
    CHECK(b->multiGet({"m3", "m1", "m2", "m1"}, 1s) ==
          std::vector<Bytes>{std::string("\0", 1), "one", "", "one"});
    CHECK(b->multiGet({}, 1s).empty());
    CHECK_THROWS_AS(b->multiGet({"m1", "m4"}, 100ms), dtrun::TimeoutError);
    Background writer([&] {
      factory.untilWaiting(1);
      a->set("m4", "four");
    });
    CHECK(b->multiGet({"m4", "m1"}, 20s) == std::vector<Bytes>{"four", "one"});
    writer.join();
  }

  SECTION("multiSet sets every key, wakes waiters, and refuses mismatched lengths") {
    a->set("s2", "old");
    Background waiter([&] { b->wait({"s1", "s2", "s3"}, 20s); });
    factory.untilWaiting(1);
    a->multiSet({"s1", "s2", "s3"}, {"1", "2", std::string("\0", 1)});
    waiter.join();
    CHECK(b->multiGet({"s1", "s2", "s3"}, 1s) ==
          std::vector<Bytes>{"1", "2", std::string("\0", 1)});
    CHECK_THROWS_AS(a->multiSet({"x", "y"}, {"1"}), dtrun::ConfigError);
    CHECK_FALSE(a->check({"x"}));
    a->multiSet({}, {});
  }

  SECTION("waitChange returns a value other than the old one, waiting for it up to the timeout") {
    // An absent key keeps the caller waiting, even when `old` is empty.
    CHECK_THROWS_AS(a->waitChange("wc", "", 50ms), dtrun::TimeoutError);
    a->set("wc", "1");
    CHECK(a->waitChange("wc", "0", 1s) == "1");
    CHECK(a->waitChange("wc", "", 1s) == "1");
    std::string msg = errorText([&] { a->waitChange("wc", "1", 50ms); });
    CHECK_THAT(msg, Contains("wc") && Contains("ms"));
    CHECK(a->add("after", 1) == 1);
    Background writer([&] {
      factory.untilWaiting(1);
      b->set("wc", "1");  // the same value again: not a change
      if constexpr (TestType::kGetSeesAdds) {
        b->add("wc", 1);
      } else {
        b->set("wc", "2");  // EtcdStore: WAIT_CHANGE sees the key, not its increments
      }
    });
    CHECK(a->waitChange("wc", "1", 20s) == "2");
    writer.join();
  }

  SECTION("several waiters on one key all wake on one write") {
    constexpr int kWaiters = 8;
    // A waiter that gave up on the key first must not disturb the ones that follow.
    CHECK_THROWS_AS(a->wait({"go"}, 50ms), dtrun::TimeoutError);
    std::vector<std::shared_ptr<Store>> handles;
    for (int i = 0; i < kWaiters; ++i) handles.push_back(factory.make());
    std::atomic<int> woke{0};
    Background waiters([&] {
      runThreads(kWaiters, [&](int i) {
        auto& h = handles[static_cast<std::size_t>(i)];
        h->add("ready", 1);
        h->wait({"go"}, 20s);
        if (h->get("go", 1s) == "now") ++woke;
      });
    });
    CHECK(dtrun::test::pollUntil([&] { return a->add("ready", 0) == kWaiters; }));
    factory.untilWaiting(kWaiters);
    a->set("go", "now");
    waiters.join();
    CHECK(woke == kWaiters);
  }
}

TEST_CASE("PrefixStore puts prefix/ before every key it passes on", "[store]") {
  auto base = std::make_shared<InMemoryStore>();
  auto outer = std::make_shared<PrefixStore>("a", std::make_shared<PrefixStore>("b", base));
  outer->set("k", "v");
  CHECK(base->get("b/a/k", 1s) == "v");
  outer->add("n", 2);
  outer->multiSet({"m"}, {"x"});
  CHECK(base->check({"b/a/n", "b/a/m"}));
  CHECK(outer->compareSet("k", "v", "w") == "w");
  CHECK(base->get("b/a/k", 1s) == "w");
  CHECK(outer->deleteKey("k"));
  CHECK_FALSE(base->check({"b/a/k"}));
  CHECK(outer->numKeys() == base->numKeys());  // not limited to the prefix, as in torch
  PrefixStore p("round.3", base);
  CHECK(p.joinKey("x") == "round.3/x");
  CHECK(p.prefix() == "round.3");
}
