// DynamicRendezvous on the in-memory store with many simulated nodes (threads), including
// adversarial interleavings: a decorator that yields and sleeps at random before every store
// operation, so joins, closes and reads interleave differently in every trial.
#include "rendezvous/dynamic_rendezvous.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/null_sink.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "common/error.h"
#include "rendezvous/in_memory_store.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::rendezvous;
using dtrun::test::pollUntil;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("rdzv", std::make_shared<spdlog::sinks::null_sink_mt>());
}

// Passes every call to the real store after calling `before()`, which may pause (chaos) or
// throw (a connection that died).
class HookStore : public Store {
 public:
  HookStore(std::shared_ptr<Store> base, std::function<void()> before)
      : base_(std::move(base)), before_(std::move(before)) {}

  void set(const std::string& k, const Bytes& v) override {
    before_();
    base_->set(k, v);
  }
  Bytes get(const std::string& k, std::chrono::milliseconds t) override {
    before_();
    return base_->get(k, t);
  }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    before_();
    return base_->add(k, d);
  }
  Bytes compareSet(const std::string& k, const Bytes& e, const Bytes& d) override {
    before_();
    return base_->compareSet(k, e, d);
  }
  bool check(const std::vector<std::string>& k) override {
    before_();
    return base_->check(k);
  }
  void wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
    before_();
    base_->wait(k, t);
  }
  bool deleteKey(const std::string& k) override {
    before_();
    return base_->deleteKey(k);
  }
  std::int64_t numKeys() override { return base_->numKeys(); }
  void append(const std::string& k, const Bytes& v) override {
    before_();
    base_->append(k, v);
  }
  std::vector<Bytes> multiGet(const std::vector<std::string>& k,
                              std::chrono::milliseconds t) override {
    before_();
    return base_->multiGet(k, t);
  }
  void multiSet(const std::vector<std::string>& k, const std::vector<Bytes>& v) override {
    before_();
    base_->multiSet(k, v);
  }
  Bytes waitChange(const std::string& k, const Bytes& o, std::chrono::milliseconds t) override {
    before_();
    return base_->waitChange(k, o, t);
  }

 private:
  std::shared_ptr<Store> base_;
  std::function<void()> before_;
};

// A random pause (0-300 us) or a yield before every call.
std::shared_ptr<Store> chaosStore(std::shared_ptr<Store> base, unsigned seed) {
  auto state = std::make_shared<std::pair<std::mutex, std::minstd_rand>>();
  state->second.seed(seed);
  return std::make_shared<HookStore>(std::move(base), [state] {
    unsigned r, pause;
    {
      std::lock_guard lock(state->first);
      r = state->second() % 4;
      pause = state->second() % 300;
    }
    if (r == 0) std::this_thread::yield();
    if (r == 1) std::this_thread::sleep_for(std::chrono::microseconds(pause));
  });
}

// A connection that dies (every call throws) after `limit` calls: an agent killed at any point
// of a protocol step. `*died` says whether it did.
std::shared_ptr<Store> dyingStore(std::shared_ptr<Store> base, int limit,
                                  std::shared_ptr<bool> died) {
  auto left = std::make_shared<int>(limit);
  return std::make_shared<HookStore>(std::move(base), [left, died] {
    if (--*left < 0) {
      *died = true;
      throw dtrun::ConnectionError("connection closed: the agent died");
    }
  });
}

struct Node {
  NodeInfo info;
  std::shared_ptr<Store> store;
  std::unique_ptr<DynamicRendezvous> rdzv;
};

// A simulated node: its own view of the shared store (with chaos when `seed` != 0).
Node makeNode(const std::shared_ptr<Store>& shared, int id, int nproc, RendezvousSettings s,
              unsigned seed) {
  Node n;
  n.info.host = "node" + std::to_string(id);
  n.info.addr = n.info.host;
  n.info.pid = 1000 + id;
  n.info.nproc = nproc;
  std::shared_ptr<Store> view = shared;
  if (seed != 0) view = chaosStore(shared, seed);
  n.store = std::make_shared<PrefixStore>("dtrun/job", view);
  n.rdzv = std::make_unique<DynamicRendezvous>(n.store, n.info, s, nullptr, quiet());
  return n;
}

// Runs join() on every node at once; collects results and the first error.
std::vector<RoundInfo> joinAll(std::vector<Node>& nodes) {
  std::vector<RoundInfo> out(nodes.size());
  std::exception_ptr error;
  std::mutex m;
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        out[i] = nodes[i].rdzv->join();
      } catch (...) {
        std::lock_guard lock(m);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

// The invariants of one closed round: group ranks 0..n-1 each once, offsets the prefix sums of
// the nodes' sizes in group-rank order, everyone agreeing on the sizes.
void checkRound(const std::vector<RoundInfo>& infos, const std::vector<int>& nprocs) {
  REQUIRE(!infos.empty());
  const auto& first = infos.front();
  std::map<int, std::size_t> byRank;
  for (std::size_t i = 0; i < infos.size(); ++i) {
    CHECK(infos[i].round == first.round);
    CHECK(infos[i].groupWorldSize == first.groupWorldSize);
    CHECK(infos[i].worldSize == first.worldSize);
    CHECK(byRank.emplace(infos[i].groupRank, i).second);  // unique group ranks
  }
  REQUIRE(static_cast<int>(byRank.size()) == first.groupWorldSize);
  int offset = 0;
  for (const auto& [rank, i] : byRank) {
    CHECK(infos[i].rankOffset == offset);
    offset += nprocs[i];
  }
  CHECK(byRank.begin()->first == 0);
  CHECK(byRank.rbegin()->first == first.groupWorldSize - 1);
  CHECK(offset == first.worldSize);
}

RendezvousSettings settings(int min, int max) {
  RendezvousSettings s;
  s.minNodes = min;
  s.maxNodes = max;
  s.joinTimeout = 30s;
  // Longer than any case: a round closes when MAX (or the count a new round expects) have
  // joined, never because one thread of a loaded machine came late. The case about the last
  // call sets its own.
  s.lastCallTimeout = 25s;
  return s;
}

}  // namespace

TEST_CASE("rendezvous: N nodes with N = max close one round with contiguous ranks", "[rdzv]") {
  for (int n : {1, 2, 7, 32}) {
    auto shared = std::make_shared<InMemoryStore>();
    std::vector<Node> nodes;
    std::vector<int> nprocs;
    for (int i = 0; i < n; ++i) {
      nprocs.push_back(1 + i % 3);  // different --nproc-per-node on different nodes
      nodes.push_back(makeNode(shared, i, nprocs.back(), settings(n, n), 0));
    }
    auto infos = joinAll(nodes);
    checkRound(infos, nprocs);
    CHECK(infos[0].round == 0);
    CHECK(infos[0].groupWorldSize == n);
  }
}

TEST_CASE("rendezvous: adversarial interleavings keep every invariant", "[rdzv]") {
  std::mt19937 seeds(12345);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 2 + trial % 9;
    auto shared = std::make_shared<InMemoryStore>();
    std::vector<Node> nodes;
    std::vector<int> nprocs;
    for (int i = 0; i < n; ++i) {
      nprocs.push_back(1 + static_cast<int>(seeds() % 4));
      nodes.push_back(makeNode(shared, i, nprocs.back(), settings(n, n), seeds() | 1u));
    }
    INFO("trial " << trial << " with " << n << " nodes");
    checkRound(joinAll(nodes), nprocs);
  }
}

TEST_CASE("rendezvous: min < max closes after last call with the nodes that came", "[rdzv]") {
  // Two nodes join with a last call far longer than the test; the third comes once both are
  // in (whatever the machine's load) and closes the round 200 ms after it saw the minimum: with
  // all three, and without waiting for the two others' last call or for MAX.
  auto shared = std::make_shared<InMemoryStore>();
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(makeNode(shared, i, 2, settings(2, 5), 0));
  std::vector<RoundInfo> infos(3);
  std::vector<std::thread> first;
  for (int i = 0; i < 2; ++i) first.emplace_back([&, i] { infos[i] = nodes[i].rdzv->join(); });
  // The round's join counter packs nodes << 32 | processes.
  const auto joinKey = keys::roundKey(0, keys::kJoin);
  CHECK(pollUntil([&] { return (nodes[0].store->add(joinKey, 0) >> 32) == 2; }));
  auto quick = settings(2, 5);
  quick.lastCallTimeout = 200ms;
  Node third = makeNode(shared, 2, 2, quick, 0);
  infos[2] = third.rdzv->join();
  for (auto& t : first) t.join();
  checkRound(infos, {2, 2, 2});
  CHECK(infos[0].groupWorldSize == 3);
  CHECK(infos[0].worldSize == 6);
}

TEST_CASE("rendezvous: a node past max waits for the next round, which the others open", "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  std::vector<Node> first;
  for (int i = 0; i < 2; ++i) first.push_back(makeNode(shared, i, 1, settings(1, 2), 0));
  auto round0 = joinAll(first);
  checkRound(round0, {1, 1});
  CHECK(round0[0].round == 0);

  // A third node arrives: round 0 is full, so it registers as waiting and blocks.
  Node late = makeNode(shared, 9, 1, settings(1, 2), 0);
  RoundInfo lateInfo;
  std::thread t([&] { lateInfo = late.rdzv->join(); });
  auto& probe = first[0];
  REQUIRE(pollUntil([&] { return probe.rdzv->state(0).waiting == 1; }));
  // The group is full (max 2), so no restart for the late node; now node 1 dies.
  probe.store->add(keys::goneKey(0), 1);
  auto s = probe.rdzv->state(0);
  CHECK(s.gone == 1);
  // Both survivors see it; exactly one of them opens round 1, not counted as a failure.
  std::atomic<int> winners{0};
  std::thread a([&] { winners += first[0].rdzv->advance(0, AdvanceReason::kMembership, 0); });
  std::thread b([&] { winners += first[1].rdzv->advance(0, AdvanceReason::kMembership, 0); });
  a.join();
  b.join();
  CHECK(winners == 1);
  // Round 1 expects 2 - 1 + 1 = 2 nodes: the survivor and the late node; it closes at once.
  RoundInfo survivor = first[0].rdzv->join();
  t.join();
  checkRound({survivor, lateInfo}, {1, 1});
  CHECK(survivor.round == 1);
  CHECK(probe.rdzv->state(1).restarts == 0);
}

TEST_CASE("rendezvous: a waiting node opens the next round when every running node is gone",
          "[rdzv]") {
  // What an etcd job does when the only agent of the running round is killed while another
  // waits: nobody is left to open the next round, so the waiting node does, instead of waiting
  // out its join timeout.
  auto shared = std::make_shared<InMemoryStore>();
  std::vector<Node> first;
  first.push_back(makeNode(shared, 0, 1, settings(1, 1), 0));
  auto round0 = joinAll(first);
  CHECK(round0[0].round == 0);
  Node late = makeNode(shared, 9, 2, settings(1, 1), 0);
  std::optional<RoundInfo> lateInfo;
  std::string error;
  std::thread t([&] {
    try {
      lateInfo = late.rdzv->join();
    } catch (const std::exception& e) {
      error = e.what();  // without the fix: its join timeout
    }
  });
  auto& probe = first[0];
  REQUIRE(pollUntil([&] { return probe.rdzv->state(0).waiting == 1; }));
  CHECK_FALSE(probe.store->check({keys::roundKey(1, keys::kOpened)}));
  // The one member of round 0 dies: its connection's close counts it gone.
  probe.store->add(keys::goneKey(0), 1);
  t.join();
  CHECK(error == "");
  REQUIRE(lateInfo);
  CHECK(lateInfo->round == 1);
  CHECK(lateInfo->groupRank == 0);
  CHECK(lateInfo->groupWorldSize == 1);
  CHECK(lateInfo->worldSize == 2);
  // A membership change, not a failure: no restart counted.
  CHECK(probe.rdzv->state(1).restarts == 0);
}

TEST_CASE("rendezvous: failures restart the job once per round, job-wide, up to the limit",
          "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  std::vector<Node> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(makeNode(shared, i, 1, settings(4, 4), 0));
  joinAll(nodes);
  // Two nodes report failures of round 0 at the same time: one restart, not two.
  std::atomic<int> winners{0};
  std::thread a([&] {
    nodes[1].rdzv->reportFailure(0, R"({"rank":1})");
    winners += nodes[1].rdzv->advance(0, AdvanceReason::kFailure, 1);
  });
  std::thread b([&] {
    nodes[2].rdzv->reportFailure(0, R"({"rank":2})");
    winners += nodes[2].rdzv->advance(0, AdvanceReason::kFailure, 1);
  });
  a.join();
  b.join();
  CHECK(winners == 1);
  auto s = nodes[0].rdzv->state(0);
  CHECK(s.round == 1);
  CHECK(s.restarts == 1);
  CHECK_FALSE(s.final);
  auto failures = nodes[0].rdzv->failures(0);
  CHECK(failures.size() == 2);

  // Everyone is back in round 1, with the same round number (the job-wide clock).
  auto round1 = joinAll(nodes);
  checkRound(round1, {1, 1, 1, 1});
  for (const auto& r : round1) CHECK(r.round == 1);

  // A second failure is past --max-restarts=1: the job is final, no round 2 opens.
  CHECK(nodes[3].rdzv->advance(1, AdvanceReason::kFailure, 1));
  s = nodes[0].rdzv->state(1);
  REQUIRE(s.final);
  CHECK(s.round == 1);
  CHECK_THROWS_AS(nodes[0].rdzv->join(), dtrun::Error);
}

TEST_CASE("rendezvous: a join timeout names the nodes that came", "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  auto s = settings(3, 3);
  s.joinTimeout = 300ms;
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(makeNode(shared, i, 1, s, 0));
  try {
    joinAll(nodes);
    FAIL("join should time out");
  } catch (const dtrun::TimeoutError& e) {
    std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("of min 3"));
    CHECK_THAT(what, Catch::Contains("node0"));
    CHECK_THAT(what, Catch::Contains("node1"));
  }
}

TEST_CASE("rendezvous: static ranks follow --node-rank whatever the arrival order", "[rdzv]") {
  std::mt19937 seeds(7);
  for (int trial = 0; trial < 10; ++trial) {
    const int n = 4;
    auto shared = std::make_shared<InMemoryStore>();
    std::vector<Node> nodes;
    std::vector<int> nprocs;
    for (int i = 0; i < n; ++i) {
      auto s = settings(n, n);
      s.fixedRank = i;
      nprocs.push_back(1 + i);
      nodes.push_back(makeNode(shared, i, nprocs.back(), s, seeds() | 1u));
    }
    auto infos = joinAll(nodes);
    checkRound(infos, nprocs);
    for (int i = 0; i < n; ++i) CHECK(infos[i].groupRank == i);
    CHECK(infos[3].rankOffset == 1 + 2 + 3);
  }
}

TEST_CASE("rendezvous: two static nodes with the same --node-rank are refused", "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  auto s = settings(2, 2);
  s.fixedRank = 0;
  s.joinTimeout = 2s;
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(makeNode(shared, i, 1, s, 0));
  CHECK_THROWS_WITH(joinAll(nodes), Catch::Contains("--node-rank 0 is also used by"));
}

TEST_CASE("rendezvous: a node that dies half-way through ending a round stalls nobody", "[rdzv]") {
  // The node that decides a round's end may die after any of its store operations. The others
  // ask too once its connection closes (its `gone` bump): whoever asks next finishes the same
  // steps, the restart counts once, and the survivors meet in the next round.
  int claimedCuts = 0;
  for (int cut = 1; cut <= 17; ++cut) {
    INFO("the deciding node dies after " << cut << " store operation(s)");
    auto shared = std::make_shared<InMemoryStore>();
    std::vector<Node> nodes;
    for (int i = 0; i < 3; ++i) nodes.push_back(makeNode(shared, i, 1, settings(2, 3), 0));
    joinAll(nodes);
    auto died = std::make_shared<bool>(false);
    DynamicRendezvous doomed(
        std::make_shared<PrefixStore>("dtrun/job", dyingStore(shared, cut, died)), nodes[0].info,
        settings(2, 3), nullptr, quiet());
    nodes[0].rdzv->reportFailure(0, R"({"rank":0})");
    bool decided = false;
    try {
      decided = doomed.advance(0, AdvanceReason::kFailure, 5);
    } catch (const dtrun::ConnectionError&) {
    }
    CHECK(*died == !decided);  // it either died or got through every step
    // Did it die after its claim? Then its reason (a failure) stands.
    const auto claimKey = keys::roundKey(0, keys::kAdvance);
    const bool claimed = nodes[1].store->check({claimKey});
    nodes[1].store->add(keys::goneKey(0), 1);  // what its closing connection does
    // The survivors see a member gone and ask to end the round, as their agents do.
    CHECK(nodes[1].rdzv->advance(0, AdvanceReason::kMembership, 5) == !claimed);
    CHECK_FALSE(nodes[2].rdzv->advance(0, AdvanceReason::kMembership, 5));
    auto s = nodes[1].rdzv->state(0);
    CHECK(s.round == 1);
    CHECK(s.restarts == (claimed ? 1 : 0));  // the dead node's failure, counted once
    CHECK_FALSE(s.final);
    CHECK(nodes[1].store->get(keys::roundKey(1, keys::kOpened), 1s) ==
          (claimed ? "failure" : "membership"));
    // Round 1 may have to close by its last call (when the doomed node's `expect` counted
    // itself): a short one, which cannot close early, since its MIN is both survivors.
    auto quick = settings(2, 3);
    quick.lastCallTimeout = 200ms;
    std::vector<Node> survivors;
    for (int i = 1; i <= 2; ++i) survivors.push_back(makeNode(shared, i, 1, quick, 0));
    auto round1 = joinAll(survivors);
    checkRound(round1, {1, 1});
    CHECK(round1[0].round == 1);
    claimedCuts += claimed && *died;
  }
  CHECK(claimedCuts >= 10);  // every step after the claim was a place to die
}

TEST_CASE("rendezvous: a late call to end an old round changes nothing", "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(makeNode(shared, i, 1, settings(2, 2), 0));
  joinAll(nodes);
  CHECK(nodes[0].rdzv->advance(0, AdvanceReason::kFailure, 5));
  joinAll(nodes);
  CHECK(nodes[0].rdzv->advance(1, AdvanceReason::kFailure, 5));
  auto s = nodes[0].rdzv->state(1);
  REQUIRE(s.round == 2);
  REQUIRE(s.restarts == 2);
  // A node resumed after a long stop helps end round 0 again: no step moves anything back.
  CHECK_FALSE(nodes[1].rdzv->advance(0, AdvanceReason::kFailure, 5));
  CHECK_FALSE(nodes[1].rdzv->advance(0, AdvanceReason::kMembership, 5));
  s = nodes[0].rdzv->state(2);
  CHECK(s.round == 2);
  CHECK(s.restarts == 2);
  CHECK_FALSE(s.final);
}

namespace {

// Log lines of one node, readable from the test thread while the node's thread writes them.
class CaptureSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    text_.append(msg.payload.data(), msg.payload.size());
    text_ += '\n';
  }
  void flush_() override {}

 private:
  std::string text_;
};

struct Chatty {
  std::shared_ptr<CaptureSink> sink = std::make_shared<CaptureSink>();
  std::shared_ptr<spdlog::logger> log = std::make_shared<spdlog::logger>("rdzv", sink);
  std::string lines() { return sink->text(); }
};

}  // namespace

TEST_CASE("rendezvous: a waiting node says who came, who is missing, and until when", "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  auto s = settings(3, 3);
  s.progressInterval = 20ms;
  Chatty chat;
  std::vector<Node> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(makeNode(shared, i, 1, s, 0));
  Node watcher = makeNode(shared, 0, 1, s, 0);
  watcher.rdzv =
      std::make_unique<DynamicRendezvous>(watcher.store, watcher.info, s, nullptr, chat.log);
  // Round 0: node0 (the one that talks) and node1 wait for a third.
  std::thread t1([&] { nodes[1].rdzv->join(); });
  std::thread t0([&] { watcher.rdzv->join(); });
  REQUIRE(pollUntil([&] { return chat.lines().find("2 came") != std::string::npos; }));
  nodes[2].rdzv->join();
  t0.join();
  t1.join();
  std::string line = chat.lines();
  CHECK_THAT(line, Catch::Contains("round 0 is waiting for nodes until "));
  CHECK_THAT(line, Catch::Contains("(join timeout): 2 came (min 3, max 3)"));
  CHECK_THAT(line, Catch::Contains("node1 (pid 1001)"));
  CHECK_THAT(line, Catch::Contains("1 more for the minimum of 3"));

  // Round 1 after a membership change: the node that has not come back is named.
  auto s2 = settings(2, 3);
  s2.progressInterval = 20ms;
  s2.lastCallTimeout = 60s;
  Chatty chat2;
  auto shared2 = std::make_shared<InMemoryStore>();
  std::vector<Node> group;
  for (int i = 0; i < 3; ++i) group.push_back(makeNode(shared2, i, 1, s2, 0));
  joinAll(group);
  CHECK(group[0].rdzv->advance(0, AdvanceReason::kMembership, 0));
  DynamicRendezvous talker(group[0].store, group[0].info, s2, nullptr, chat2.log);
  std::thread a([&] { talker.join(); });
  std::thread b([&] { group[1].rdzv->join(); });
  REQUIRE(pollUntil([&] { return chat2.lines().find("missing") != std::string::npos; }));
  group[2].rdzv->join();  // max reached: the round closes at once
  a.join();
  b.join();
  line = chat2.lines();
  CHECK_THAT(line, Catch::Contains("missing: node2 (pid 1002) from round 0"));
  CHECK_THAT(line, Catch::Contains("(last call) unless 1 more come first"));

  // Static: the missing node ranks.
  auto s3 = settings(2, 2);
  s3.progressInterval = 20ms;
  s3.fixedRank = 1;
  Chatty chat3;
  auto shared3 = std::make_shared<InMemoryStore>();
  Node n1 = makeNode(shared3, 1, 1, s3, 0);
  n1.rdzv = std::make_unique<DynamicRendezvous>(n1.store, n1.info, s3, nullptr, chat3.log);
  std::thread c([&] { n1.rdzv->join(); });
  REQUIRE(pollUntil([&] { return chat3.lines().find("missing") != std::string::npos; }));
  s3.fixedRank = 0;
  Node n0 = makeNode(shared3, 0, 1, s3, 0);
  n0.rdzv->join();
  c.join();
  CHECK_THAT(chat3.lines(), Catch::Contains("missing: --node-rank 0;"));
}

TEST_CASE("rendezvous: a node too late for a full round says what it waits for", "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  auto s = settings(1, 1);
  s.progressInterval = 20ms;
  Node first = makeNode(shared, 0, 1, s, 0);
  first.rdzv->join();
  Chatty chat;
  Node late = makeNode(shared, 1, 1, s, 0);
  late.rdzv = std::make_unique<DynamicRendezvous>(late.store, late.info, s, nullptr, chat.log);
  std::thread t([&] { late.rdzv->join(); });
  REQUIRE(pollUntil([&] { return chat.lines().find("for round 1 to open") != std::string::npos; }));
  CHECK_THAT(chat.lines(), Catch::Contains("round 0 runs without this node (1 node(s), max 1)"));
  // The running node leaves: round 1 opens and the late node is in it.
  first.store->add(keys::goneKey(0), 1);
  CHECK(first.rdzv->advance(0, AdvanceReason::kMembership, 0));
  t.join();
}

TEST_CASE("rendezvous: a round some node finished never restarts", "[rdzv]") {
  auto shared = std::make_shared<InMemoryStore>();
  std::vector<Node> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(makeNode(shared, i, 1, settings(2, 3), 0));
  joinAll(nodes);
  CHECK(nodes[0].rdzv->markDone(0, 3) == 1);
  // A member leaves: nothing ends (the others' workers go on).
  nodes[1].store->add(keys::goneKey(0), 1);
  CHECK_FALSE(nodes[2].rdzv->advance(0, AdvanceReason::kMembership, 5));
  auto s = nodes[2].rdzv->state(0);
  CHECK(s.round == 0);
  CHECK_FALSE(s.final);
  // A failure now ends the job instead of running node 0's finished script again.
  nodes[2].rdzv->reportFailure(0, R"({"rank":2})");
  CHECK(nodes[2].rdzv->advance(0, AdvanceReason::kFailure, 5));
  s = nodes[0].rdzv->state(0);
  CHECK(s.round == 0);
  REQUIRE(s.final);
  CHECK_THAT(*s.final, Catch::Contains("failed_after_success"));
  CHECK(s.restarts == 0);
}

TEST_CASE("rendezvous: junk in the rendezvous' own keys is an error naming the key",
          "[rdzv][hostile]") {
  // A stranger wrote text where a round's closed counter belongs, and a non-JSON node
  // description: the agents fail with one line naming the key, never std::stoll's "stoll".
  auto shared = std::make_shared<InMemoryStore>();
  shared->set("dtrun/job/r0/closed", "junk\nmore");
  auto node = makeNode(shared, 0, 1, settings(1, 1), 0);
  try {
    node.rdzv->join();
    FAIL("join succeeded over a junk closed counter");
  } catch (const dtrun::ProtocolError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::Contains("r0/closed") &&
                         Catch::Matchers::Contains("\"junk\\nmore\"") &&
                         Catch::Matchers::Contains("not a number"));
  }
}

TEST_CASE("rendezvous: over dtrun's store, the error about junk names the client that wrote it",
          "[rdzv][hostile]") {
  using namespace dtrun::rendezvous::test;
  ServerThread server(loopbackOptions(), quietLogger());
  RawConn stranger(server.port());
  stranger.send(validateFrame() +
                frame2(dtrun::rendezvous::wire::Op::kSet, {"/dtrun/job/r0/closed"}, {"junk"}) +
                frame2(dtrun::rendezvous::wire::Op::kPing, {}, {}, 0, 9));
  REQUIRE(stranger.recvU32() == 9);
  dtrun::rendezvous::TcpStoreOptions o;
  o.port = server.port();
  o.connectTimeout = 20s;
  o.timeout = 20s;
  auto node = makeNode(std::make_shared<dtrun::rendezvous::TcpStore>(o), 0, 1, settings(1, 1), 0);
  CHECK_THROWS_WITH(node.rdzv->join(),
                    Catch::Matchers::Contains("r0/closed") &&
                        Catch::Matchers::Contains("not a number") &&
                        Catch::Matchers::Contains("written by " + stranger.localAddress()));
}

TEST_CASE("rendezvous: a round counter moved by a stranger is refused, not joined",
          "[rdzv][hostile]") {
  auto shared = std::make_shared<InMemoryStore>();
  auto first = makeNode(shared, 0, 1, settings(1, 1), 0);
  CHECK(first.rdzv->join().round == 0);
  shared->add("dtrun/job/round", 2);  // what an ADD from anyone who reaches the port does
  auto late = makeNode(shared, 1, 1, settings(1, 1), 0);
  CHECK_THROWS_WITH(late.rdzv->join(), Catch::Matchers::Contains("round 2") &&
                                           Catch::Matchers::Contains("moved the round counter"));
}
