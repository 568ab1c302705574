// The JobLink contract: what the agent relies on from its job, checked on each of the three
// implementations with one node: LocalJob (this node alone), C10dJob (dtrun's store, a real
// store server on loopback) and EtcdJob (a real etcd member on loopback; SKIP without etcd). The
// same template runs on each, like the Store contract suite (tests/rendezvous/
// store_contract_test.cpp), so that a difference between them is a failing case, not a
// surprise in production.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "agent/c10d_job.h"
#include "agent/etcd_job.h"
#include "agent/local_job.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/http_connection.h"
#include "tests/etcd/etcd_cluster.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using namespace dtrun::agent;
using namespace std::chrono_literals;
using dtrun::rendezvous::JobRecord;
using dtrun::rendezvous::JobState;
using dtrun::rendezvous::RoundInfo;
using dtrun::test::runUntil;

namespace {

constexpr int kNproc = 2;

dtrun::rendezvous::NodeInfo me() {
  dtrun::rendezvous::NodeInfo n;
  n.host = "node0";
  n.addr = "127.0.0.1";
  n.pid = 4242;
  n.nproc = kNproc;
  return n;
}

dtrun::rendezvous::RendezvousSettings settings() {
  dtrun::rendezvous::RendezvousSettings s;
  s.joinTimeout = 20s;
  s.lastCallTimeout = 1s;
  return s;
}

struct Local {
  static constexpr const char* kName = "local";
  static std::optional<std::string> unavailable() { return std::nullopt; }
  Local() {
    LocalJobOptions o;
    o.nproc = kNproc;
    o.workerStore = {"127.0.0.1", 4321};
    job = std::make_unique<LocalJob>(io, o);
  }
  boost::asio::io_context io;
  std::unique_ptr<JobLink> job;
};

struct C10d {
  static constexpr const char* kName = "c10d";
  static std::optional<std::string> unavailable() { return std::nullopt; }
  C10d() {
    C10dJobOptions o;
    o.store.host = "127.0.0.1";
    o.store.port = server.port();
    o.store.connectTimeout = 5s;
    o.store.timeout = 10s;
    o.runId = "contract";
    o.me = me();
    o.rendezvous = settings();
    o.keepAliveInterval = 100ms;
    o.keepAliveMaxAttempt = 3;
    o.heartbeatTimeout = 2s;
    o.workerStore = {"127.0.0.1", server.port()};
    job = std::make_unique<C10dJob>(io, o, dtrun::rendezvous::test::quietLogger());
  }
  dtrun::rendezvous::test::ServerThread server;
  boost::asio::io_context io;
  std::unique_ptr<JobLink> job;
};

struct Etcd {
  static constexpr const char* kName = "etcd";
  static std::optional<std::string> unavailable() {
    if (dtrun::test::EtcdCluster::available()) return std::nullopt;
    return "/usr/bin/etcd or /usr/bin/etcdctl is missing (scripts/setup.sh installs etcd-server)";
  }
  Etcd() : cluster(1) {
    EtcdJobOptions o;
    o.client.endpoints =
        dtrun::rendezvous::etcd::parseEndpoints("test", cluster.endpoints(), "http");
    o.client.requestTimeout = 2s;
    o.runId = "contract";
    o.me = me();
    o.rendezvous = settings();
    o.keepAliveInterval = 200ms;
    o.keepAliveMaxAttempt = 5;
    o.connectTimeout = 5s;
    o.localAddr = "127.0.0.1";
    o.closeTimeout = 2s;
    job = std::make_unique<EtcdJob>(io, o, dtrun::rendezvous::test::quietLogger());
  }
  dtrun::test::EtcdCluster cluster;
  boost::asio::io_context io;
  std::unique_ptr<JobLink> job;
};

// Calls `call` with a callback and steps the io until the answer came, which must be later,
// never inside the call, and must be a value.
template <typename T, typename F>
T ask(boost::asio::io_context& io, F call) {
  std::optional<Result<T>> got;
  call([&](Result<T> r) { got = std::move(r); });
  CHECK_FALSE(got.has_value());
  REQUIRE(runUntil(
      io, [&] { return got.has_value(); }, 30s));
  INFO(got->message());
  REQUIRE(got->ok());
  return std::move(*got->value);
}

std::string failureJson(int rank) {
  return nlohmann::json{{"rank", rank},
                        {"localRank", rank},
                        {"pid", 100 + rank},
                        {"exitCode", 1},
                        {"timestampMs", 1700000000000 + rank}}
      .dump();
}

#define NEED_BACKEND()                                        \
  do {                                                        \
    if (auto why = TestType::unavailable()) DTRUN_SKIP(*why); \
  } while (false)

}  // namespace

TEMPLATE_TEST_CASE("JobLink contract: one node joins round 0 and finds its workers' store",
                   "[job-link]", Local, C10d, Etcd) {
  NEED_BACKEND();
  TestType f;
  INFO(TestType::kName);
  JobLink& job = *f.job;
  job.watch([] {}, [](std::string why) { FAIL("lost: " << why); });
  const RoundInfo r = ask<RoundInfo>(f.io, [&](auto cb) { job.join(cb); });
  CHECK(r.round == 0);
  CHECK(r.groupRank == 0);
  CHECK(r.groupWorldSize == 1);
  CHECK(r.rankOffset == 0);
  CHECK(r.worldSize == kNproc);
  const WorkerStore store = ask<WorkerStore>(f.io, [&](auto cb) { job.workerStore(r, cb); });
  CHECK_FALSE(store.addr.empty());
  CHECK(store.port > 0);
  const JobState s = ask<JobState>(f.io, [&](auto cb) { job.state(0, cb); });
  CHECK(s.round == 0);
  CHECK_FALSE(s.final.has_value());
  CHECK(s.restarts == 0);
  CHECK(s.done == 0);
  CHECK_FALSE(s.succeeded.has_value());
  CHECK_FALSE(job.describe().empty());
  job.close();
}

TEMPLATE_TEST_CASE("JobLink contract: a failure within the restarts opens the next round",
                   "[job-link]", Local, C10d, Etcd) {
  NEED_BACKEND();
  TestType f;
  INFO(TestType::kName);
  JobLink& job = *f.job;
  int changes = 0;
  job.watch([&] { ++changes; }, [](std::string why) { FAIL("lost: " << why); });
  ask<RoundInfo>(f.io, [&](auto cb) { job.join(cb); });
  const int before = changes;
  // The first report decides (this node's claim); a second one of the same round, this node's
  // claim still, is recorded but restarts nothing more (restarts stays 1 below).
  CHECK(ask<bool>(f.io, [&](auto cb) { job.reportFailure(0, failureJson(1), 3, cb); }));
  CHECK(ask<bool>(f.io, [&](auto cb) { job.reportFailure(0, failureJson(0), 3, cb); }));
  // Every node is told: the watch fires.
  CHECK(runUntil(
      f.io, [&] { return changes > before; }, 30s));
  const JobState s = ask<JobState>(f.io, [&](auto cb) { job.state(0, cb); });
  CHECK(s.round == 1);
  CHECK(s.restarts == 1);
  CHECK_FALSE(s.final.has_value());
  CHECK(s.endedBy == "failure");
  const auto records = ask<std::vector<std::string>>(f.io, [&](auto cb) { job.failures(0, cb); });
  REQUIRE(records.size() == 2);
  CHECK(records.front() == failureJson(1));
  // The next round is joined with the restart count in its number.
  const RoundInfo r1 = ask<RoundInfo>(f.io, [&](auto cb) { job.join(cb); });
  CHECK(r1.round == 1);
  const JobRecord rec = ask<JobRecord>(f.io, [&](auto cb) { job.readRecord(cb); });
  CHECK_FALSE(rec.over());
  job.close();
}

TEMPLATE_TEST_CASE("JobLink contract: past the restarts the job is final, and its record says so",
                   "[job-link]", Local, C10d, Etcd) {
  NEED_BACKEND();
  TestType f;
  INFO(TestType::kName);
  JobLink& job = *f.job;
  job.watch([] {}, [](std::string why) { FAIL("lost: " << why); });
  ask<RoundInfo>(f.io, [&](auto cb) { job.join(cb); });
  CHECK(ask<bool>(f.io, [&](auto cb) { job.reportFailure(0, failureJson(1), 0, cb); }));
  const JobState s = ask<JobState>(f.io, [&](auto cb) { job.state(0, cb); });
  REQUIRE(s.final.has_value());
  const auto final = nlohmann::json::parse(*s.final);
  CHECK(final.at("round") == 0);
  CHECK(final.at("reason") == "max_restarts");
  const JobRecord rec = ask<JobRecord>(f.io, [&](auto cb) { job.readRecord(cb); });
  REQUIRE(rec.final.has_value());
  CHECK(rec.finalRound() == 0);
  CHECK_FALSE(rec.succeeded.has_value());
  REQUIRE_FALSE(rec.failures.empty());
  CHECK(rec.failures.front() == failureJson(1));
  job.close();
}

TEMPLATE_TEST_CASE("JobLink contract: a round every node is done in is the job's success",
                   "[job-link]", Local, C10d, Etcd) {
  NEED_BACKEND();
  TestType f;
  INFO(TestType::kName);
  JobLink& job = *f.job;
  job.watch([] {}, [](std::string why) { FAIL("lost: " << why); });
  ask<RoundInfo>(f.io, [&](auto cb) { job.join(cb); });
  CHECK(ask<std::int64_t>(f.io, [&](auto cb) { job.markDone(0, 1, cb); }) == 1);
  const JobState s = ask<JobState>(f.io, [&](auto cb) { job.state(0, cb); });
  CHECK(s.done == 1);
  REQUIRE(s.succeeded.has_value());
  CHECK(*s.succeeded == 0);
  CHECK_FALSE(s.final.has_value());
  const JobRecord rec = ask<JobRecord>(f.io, [&](auto cb) { job.readRecord(cb); });
  REQUIRE(rec.succeeded.has_value());
  CHECK(*rec.succeeded == 0);
  CHECK_FALSE(rec.final.has_value());
  job.close();
}

TEMPLATE_TEST_CASE("JobLink contract: a membership change ends the round without a restart",
                   "[job-link]", Local, C10d, Etcd) {
  NEED_BACKEND();
  TestType f;
  INFO(TestType::kName);
  JobLink& job = *f.job;
  job.watch([] {}, [](std::string why) { FAIL("lost: " << why); });
  ask<RoundInfo>(f.io, [&](auto cb) { job.join(cb); });
  CHECK(ask<bool>(f.io, [&](auto cb) { job.advance(0, cb); }));
  const JobState s = ask<JobState>(f.io, [&](auto cb) { job.state(0, cb); });
  CHECK(s.round == 1);
  CHECK(s.restarts == 0);
  CHECK(s.endedBy == "membership");
  // The native workers' abort is best effort and bounded: its answer always comes.
  bool aborted = false;
  job.abortWorkers(1, "test", [&] { aborted = true; });
  CHECK(runUntil(
      f.io, [&] { return aborted; }, 10s));
  job.close();
}

TEMPLATE_TEST_CASE("JobLink contract: after close() no answer, change or loss is delivered",
                   "[job-link]", Local, C10d, Etcd) {
  NEED_BACKEND();
  TestType f;
  INFO(TestType::kName);
  JobLink& job = *f.job;
  int delivered = 0;
  job.watch([&] { ++delivered; }, [&](std::string) { ++delivered; });
  ask<RoundInfo>(f.io, [&](auto cb) { job.join(cb); });
  delivered = 0;  // what the join itself changed may have been seen already
  // Calls in flight when the job closes, writes among them (each wakes the watch).
  job.state(0, [&](Result<JobState>) { ++delivered; });
  job.markDone(0, 1, [&](Result<std::int64_t>) { ++delivered; });
  job.advance(0, [&](Result<bool>) { ++delivered; });
  job.failures(0, [&](Result<std::vector<std::string>>) { ++delivered; });
  job.close();
  // close() returned: its threads are joined, so whatever they had handed to the io thread is
  // queued there now, and running it must deliver nothing.
  f.io.restart();
  const std::size_t ran = f.io.poll();
  INFO("handlers run after close(): " << ran);
  CHECK(delivered == 0);
  job.close();  // a second close() is harmless
  f.io.restart();
  f.io.poll();
  CHECK(delivered == 0);
}
