// EtcdStore: the Store semantics the rendezvous relies on, on a real 3-member etcd, and the
// rendezvous protocol itself running on it with several nodes (threads) joining at once.
#include "rendezvous/etcd/etcd_store.h"

#include <spdlog/sinks/null_sink.h>

#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "common/error.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/prefix_store.h"
#include "tests/etcd/etcd_cluster.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::etcd;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using dtrun::test::EtcdCluster;

namespace {

std::shared_ptr<Store> storeFor(const EtcdCluster& c, const std::string& prefix = "t") {
  ClientOptions o;
  o.endpoints = parseEndpoints("test", c.endpoints(), "http");
  o.requestTimeout = 2s;
  return std::make_shared<PrefixStore>(
      prefix, std::make_shared<EtcdStore>(std::make_shared<EtcdClient>(o)));
}

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("etcd store: counters, compare-and-set, append and waits", "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  auto a = storeFor(cluster);
  auto b = storeFor(cluster);

  CHECK(a->add("n", 0) == 0);  // ADD 0 creates the counter, as on dtrun's store
  CHECK(a->check({"n"}));
  CHECK(a->add("n", 5) == 5);
  CHECK(b->add("n", -7) == -2);
  a->set("text", "x");
  CHECK_THROWS_AS(a->add("text", 1), dtrun::ProtocolError);

  // Every ADD counts once with four clients racing on one key, and each gets a value of its
  // own: 1..100, each once (what makes join indices unique and dense).
  std::vector<std::thread> threads;
  std::vector<std::vector<std::int64_t>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cluster, &got, t] {
      auto s = storeFor(cluster);
      for (int i = 0; i < 25; ++i) got[t].push_back(s->add("race", 1));
    });
  }
  for (auto& t : threads) t.join();
  CHECK(a->add("race", 0) == 100);
  std::set<std::int64_t> all;
  for (const auto& g : got) all.insert(g.begin(), g.end());
  CHECK(all.size() == 100);
  CHECK(*all.begin() == 1);
  CHECK(*all.rbegin() == 100);
  CHECK(a->deleteKey("race"));
  CHECK(a->add("race", 0) == 0);  // its increments went with it

  // compareSet: torch's answers.
  CHECK(a->compareSet("cas", "", "first") == "first");
  CHECK(b->compareSet("cas", "", "second") == "first");
  CHECK(b->compareSet("cas", "first", "second") == "second");
  CHECK(a->compareSet("cas", "nope", "third") == "second");
  CHECK(a->compareSet("absent", "expected", "x") == "expected");
  CHECK_FALSE(a->check({"absent"}));
  a->set("empty", "");
  CHECK(a->compareSet("empty", "", "filled") == "filled");

  a->append("log", "a\n");
  b->append("log", "b\n");
  CHECK(a->get("log", 1s) == "a\nb\n");

  // Waits name the key and the time; a late write wakes the waiter (watch, no polling).
  const std::string msg = errorOf([&] { a->get("late", 100ms); });
  CHECK_THAT(msg, Contains("late") && Contains("ms"));
  CHECK_THROWS_AS(a->wait({"late"}, 50ms), dtrun::TimeoutError);
  std::thread writer([&] { b->set("late", "here"); });
  CHECK(a->get("late", 20s) == "here");
  writer.join();
  CHECK_THROWS_AS(a->waitChange("late", "here", 100ms), dtrun::TimeoutError);
  std::thread changer([&] {
    b->set("late", "here");  // the same value: not a change
    b->set("late", "there");
  });
  CHECK(a->waitChange("late", "here", 20s) == "there");
  changer.join();

  a->multiSet({"m1", "m2"}, {"1", "2"});
  CHECK(b->multiGet({"m2", "m1"}, 1s) == std::vector<Bytes>{"2", "1"});
  const auto before = a->numKeys();
  CHECK(a->deleteKey("m1"));
  CHECK_FALSE(a->deleteKey("m1"));
  CHECK(a->numKeys() == before - 1);
}

TEST_CASE("etcd store: the rendezvous protocol closes one round with unique ranks", "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  constexpr int kNodes = 4;
  RendezvousSettings settings;
  settings.minNodes = 2;
  settings.maxNodes = kNodes;
  settings.joinTimeout = 60s;
  settings.lastCallTimeout = 30s;  // full at 4: closes at once
  auto quiet =
      std::make_shared<spdlog::logger>("rdzv", std::make_shared<spdlog::sinks::null_sink_mt>());
  std::vector<RoundInfo> infos(kNodes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      NodeInfo me;
      me.host = "node" + std::to_string(i);
      me.pid = 100 + i;
      me.nproc = 2;
      DynamicRendezvous rdzv(storeFor(cluster, "dtrun/job"), me, settings, nullptr, quiet);
      infos[i] = rdzv.join();
    });
  }
  for (auto& t : threads) t.join();
  std::set<int> ranks, offsets;
  for (const auto& info : infos) {
    CHECK(info.round == 0);
    CHECK(info.groupWorldSize == kNodes);
    CHECK(info.worldSize == 2 * kNodes);
    ranks.insert(info.groupRank);
    offsets.insert(info.rankOffset);
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3});
  CHECK(offsets == std::set<int>{0, 2, 4, 6});

  // A failure ends the round once, counted once job-wide, whoever asks.
  DynamicRendezvous a(storeFor(cluster, "dtrun/job"), NodeInfo{}, settings, nullptr, quiet);
  DynamicRendezvous b(storeFor(cluster, "dtrun/job"), NodeInfo{}, settings, nullptr, quiet);
  a.reportFailure(0, R"({"rank":3})");
  const bool first = a.advance(0, AdvanceReason::kFailure, 3);
  const bool second = b.advance(0, AdvanceReason::kFailure, 3);
  CHECK(first != second);
  const auto state = a.state(0);
  CHECK(state.round == 1);
  CHECK(state.restarts == 1);
  CHECK(a.failures(0) == std::vector<std::string>{R"({"rank":3})"});
}
