// StoreCore without sockets: the map, parked clients and their wake-ups, queues, barriers,
// WAIT_CHANGE and close actions. How ADD reads an old value: tests/common/decimal_test.cpp.
#include "rendezvous/store_core.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/error.h"

using namespace dtrun::rendezvous;

namespace {

// A core whose wake-ups are recorded in order.
struct Recorder {
  std::vector<StoreCore::ClientId> woken;
  StoreCore core{[this](StoreCore::ClientId c) { woken.push_back(c); }};
};

}  // namespace

TEST_CASE("core: WAIT on present keys completes at once, on missing keys it parks the client",
          "[store][core]") {
  Recorder r;
  r.core.set("a", "1");
  CHECK(r.core.wait(1, {"a"}));
  CHECK(r.core.wait(1, {}));
  CHECK_FALSE(r.core.isParked(1));

  CHECK_FALSE(r.core.wait(2, {"a", "b", "c"}));
  CHECK(r.core.isParked(2));
  r.core.set("b", "2");
  CHECK(r.woken.empty());
  r.core.set("c", "3");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{2});
  CHECK_FALSE(r.core.isParked(2));
  r.core.set("c", "again");  // completed clients are not woken twice
  CHECK(r.woken.size() == 1);
}

TEST_CASE("core: a waiter counts each awaited key once, as torch does", "[store][core]") {
  Recorder r;
  CHECK_FALSE(r.core.wait(1, {"x", "y", "x"}));  // duplicates count once
  r.core.set("x", "1");
  r.core.set("x", "2");  // a second write of x does not stand in for y
  CHECK(r.woken.empty());
  r.core.add("y", 1);
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1});
}

TEST_CASE("core: every kind of write wakes the key's waiters", "[store][core]") {
  Recorder r;
  r.core.set("old", "v");
  CHECK_FALSE(r.core.wait(1, {"set"}));
  CHECK_FALSE(r.core.wait(2, {"add"}));
  CHECK_FALSE(r.core.wait(3, {"append"}));
  CHECK_FALSE(r.core.wait(4, {"m1", "m2"}));
  CHECK_FALSE(r.core.wait(5, {"cas"}));
  r.core.set("set", "");
  r.core.add("add", 0);
  r.core.append("append", "");
  r.core.multiSet({"m1", "m2"}, {"1", "2"});
  r.core.compareSet("cas", "", "new");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1, 2, 3, 4, 5});
}

TEST_CASE("core: several clients parked on one key all wake on one write", "[store][core]") {
  Recorder r;
  for (StoreCore::ClientId c = 1; c <= 50; ++c) CHECK_FALSE(r.core.wait(c, {"go"}));
  r.core.set("go", "now");
  REQUIRE(r.woken.size() == 50);
  for (StoreCore::ClientId c = 1; c <= 50; ++c) CHECK(r.woken[c - 1] == c);
}

TEST_CASE("core: CANCEL_WAIT forgets the parked operation", "[store][core]") {
  Recorder r;
  CHECK_FALSE(r.core.cancelWait(1));  // nothing parked
  CHECK_FALSE(r.core.wait(1, {"k"}));
  CHECK_FALSE(r.core.wait(2, {"k"}));
  CHECK(r.core.cancelWait(1));
  CHECK_FALSE(r.core.isParked(1));
  CHECK_FALSE(r.core.cancelWait(1));
  r.core.set("k", "v");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{2});
}

TEST_CASE("core: a client parks at most one operation, a new one replaces the old",
          "[store][core]") {
  Recorder r;
  CHECK_FALSE(r.core.wait(1, {"first"}));
  CHECK_FALSE(r.core.wait(1, {"second"}));
  r.core.set("first", "x");
  CHECK(r.woken.empty());
  r.core.set("second", "x");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1});
}

TEST_CASE("core: compareSet follows torch, and a failed swap still wakes", "[store][core]") {
  Recorder r;
  CHECK(r.core.compareSet("k", "", "a") == "a");
  CHECK(*r.core.find("k") == "a");
  CHECK(r.core.compareSet("k", "x", "b") == "a");
  CHECK(r.core.compareSet("k", "a", "b") == "b");
  CHECK(r.core.compareSet("gone", "x", "y") == "x");
  CHECK(r.core.find("gone") == nullptr);
  // A WAIT_CHANGE on the key re-evaluates on each compareSet.
  CHECK_FALSE(r.core.waitChange(7, "k", "b"));
  r.core.compareSet("k", "nope", "c");
  CHECK(r.woken.empty());
  r.core.compareSet("k", "b", "c");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{7});
  // A missing key with a non-empty `expected` stores nothing and wakes nobody.
  CHECK_FALSE(r.core.wait(8, {"gone"}));
  r.core.compareSet("gone", "x", "y");
  CHECK(r.core.isParked(8));
}

TEST_CASE("core: add keeps decimal text and refuses non-numbers and overflow", "[store][core]") {
  StoreCore core;
  CHECK(core.add("n", 3) == 3);
  CHECK(*core.find("n") == "3");
  CHECK(core.add("n", -10) == -7);
  CHECK(*core.find("n") == "-7");
  core.set("t", " 12xyz");
  CHECK(core.add("t", 1) == 13);
  core.set("bad", "abc");
  CHECK_THROWS_AS(core.add("bad", 1), dtrun::ProtocolError);
  CHECK(*core.find("bad") == "abc");
  core.set("max", std::to_string(std::numeric_limits<std::int64_t>::max()));
  CHECK_THROWS_AS(core.add("max", 1), dtrun::ProtocolError);
  CHECK(core.add("max", -1) == std::numeric_limits<std::int64_t>::max() - 1);
}

TEST_CASE("core: check, deleteKey, numKeys, listKeys, append, multiSet", "[store][core]") {
  StoreCore core;
  CHECK(core.numKeys() == 0);
  core.set("a", "1");
  core.append("a", "2");
  core.append("b", std::string("\0", 1));
  core.multiSet({"c", "d"}, {"3", "4"});
  CHECK(*core.find("a") == "12");
  CHECK(*core.find("b") == std::string("\0", 1));
  CHECK(core.numKeys() == 4);
  CHECK(core.check({"a", "b", "c", "d"}));
  CHECK_FALSE(core.check({"a", "e"}));
  auto keys = core.listKeys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"a", "b", "c", "d"});
  CHECK(core.deleteKey("a"));
  CHECK_FALSE(core.deleteKey("a"));
  CHECK(core.numKeys() == 3);
  CHECK(core.find("a") == nullptr);
}

TEST_CASE("core: queues are FIFO, separate from keys, and a push wakes one waiter",
          "[store][core]") {
  Recorder r;
  std::int64_t before = -1;
  CHECK_FALSE(r.core.queuePop("q", &before).has_value());
  CHECK(before == 0);
  CHECK(r.core.queueLen("q") == 0);
  CHECK_FALSE(r.core.check({"q"}));

  CHECK_FALSE(r.core.wait(1, {"q"}));
  CHECK_FALSE(r.core.wait(2, {"q"}));
  r.core.queuePush("q", "first");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1});  // libuv wakes one waiter per push
  r.core.queuePush("q", "second");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1, 2});

  CHECK(r.core.queueLen("q") == 2);
  CHECK(r.core.check({"q"}));  // a non-empty queue counts as present (libuv's CHECK)
  CHECK(r.core.numKeys() == 0);
  CHECK(r.core.listKeys().empty());
  CHECK(r.core.queuePop("q", &before) == "first");
  CHECK(before == 2);
  CHECK(r.core.queuePop("q", &before) == "second");
  CHECK(before == 1);
  CHECK_FALSE(r.core.queuePop("q", &before).has_value());
  CHECK(before == 0);
  CHECK_FALSE(r.core.check({"q"}));
}

TEST_CASE("core: BARRIER counts arrivals and releases everyone at world size", "[store][core]") {
  Recorder r;
  CHECK_FALSE(r.core.barrier(1, "b", 3));
  CHECK_FALSE(r.core.barrier(2, "b", 3));
  CHECK(r.woken.empty());
  CHECK(*r.core.find("b") == "2");
  CHECK(r.core.barrier(3, "b", 3));  // the last arrival answers at once
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1, 2});
  CHECK(*r.core.find("b") == "3");
  CHECK(r.core.barrier(4, "b", 3));  // late arrivals pass straight through

  // Other writes to the key re-check the count rather than release the barrier.
  CHECK_FALSE(r.core.barrier(5, "c", 10));
  r.core.set("c", "5");
  CHECK(r.core.isParked(5));
  r.core.add("c", 5);
  CHECK(r.woken.back() == 5);
}

TEST_CASE("core: WAIT_CHANGE waits for a value other than the old one", "[store][core]") {
  Recorder r;
  CHECK_FALSE(r.core.waitChange(1, "k", ""));  // absent: keep waiting, even for ""
  r.core.set("k", "");
  CHECK(r.woken.empty());  // "" is the old value
  r.core.set("k", "v1");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1});
  CHECK(r.core.waitChange(2, "k", "v0"));  // already different
  CHECK_FALSE(r.core.waitChange(2, "k", "v1"));
  r.core.deleteKey("k");
  CHECK(r.core.isParked(2));
  r.core.add("k", 1);
  CHECK(r.woken == std::vector<StoreCore::ClientId>{1, 2});
}

TEST_CASE("core: dropClient forgets the client and runs its ADD_ON_CLOSE actions",
          "[store][core]") {
  Recorder r;
  r.core.add("members", 2);
  r.core.addOnClose(1, "members", -1);
  r.core.addOnClose(1, "left", 1);
  CHECK_FALSE(r.core.wait(1, {"never"}));
  CHECK_FALSE(r.core.waitChange(9, "members", "2"));

  r.core.dropClient(1);
  CHECK_FALSE(r.core.isParked(1));
  CHECK(*r.core.find("members") == "1");
  CHECK(*r.core.find("left") == "1");
  CHECK(r.woken == std::vector<StoreCore::ClientId>{9});  // the watcher hears of it
  r.core.set("never", "x");
  CHECK(r.woken.size() == 1);  // the dropped client is not woken

  r.core.dropClient(1);  // actions ran once
  CHECK(*r.core.find("members") == "1");

  // A counter overwritten with text cannot be added to; dropping the client does not throw.
  r.core.addOnClose(2, "members", -1);
  r.core.set("members", "text");
  CHECK_NOTHROW(r.core.dropClient(2));
  CHECK(*r.core.find("members") == "text");
}
