// LocalJob: the job of one node that nobody else can join. Its job-wide state lives in the agent;
// every answer still comes later on the io thread, as from any JobLink.
#include "agent/local_job.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace dtrun::agent;

namespace {

template <typename T>
T await(boost::asio::io_context& io,
        const std::function<void(std::function<void(Result<T>)>)>& call) {
  std::optional<Result<T>> got;
  call([&](Result<T> r) { got = std::move(r); });
  CHECK_FALSE(got.has_value());  // never inside the call
  io.restart();
  io.run();
  REQUIRE(got.has_value());
  REQUIRE(got->ok());
  return *got->value;
}

}  // namespace

TEST_CASE("LocalJob: rounds, restarts past --max-restarts, done", "[agent][local]") {
  boost::asio::io_context io;
  LocalJobOptions o;
  o.nproc = 3;
  o.workerStore = {"127.0.0.1", 4321};
  LocalJob job(io, o);
  int changes = 0;
  job.watch([&] { ++changes; }, [](std::string) { FAIL("a local job is never lost"); });

  auto r0 = await<dtrun::rendezvous::RoundInfo>(io, [&](auto cb) { job.join(cb); });
  CHECK(r0.round == 0);
  CHECK(r0.groupRank == 0);
  CHECK(r0.groupWorldSize == 1);
  CHECK(r0.worldSize == 3);
  auto store = await<WorkerStore>(io, [&](auto cb) { job.workerStore(r0, cb); });
  CHECK(store.port == 4321);

  CHECK(await<bool>(io, [&](auto cb) { job.reportFailure(0, R"({"rank":1})", 1, cb); }));
  CHECK(changes == 1);
  auto s = await<dtrun::rendezvous::JobState>(io, [&](auto cb) { job.state(0, cb); });
  CHECK(s.round == 1);
  CHECK(s.restarts == 1);
  CHECK_FALSE(s.final);
  // A second report of the same round (this node's claim still) is recorded and restarts
  // nothing more.
  CHECK(await<bool>(io, [&](auto cb) { job.reportFailure(0, R"({"rank":2})", 1, cb); }));
  CHECK(await<dtrun::rendezvous::JobState>(io, [&](auto cb) { job.state(0, cb); }).restarts == 1);
  CHECK(await<std::vector<std::string>>(io, [&](auto cb) { job.failures(0, cb); }).size() == 2);

  // Round 1 fails too: one restart allowed, so the job is final.
  CHECK(await<bool>(io, [&](auto cb) { job.reportFailure(1, R"({"rank":0})", 1, cb); }));
  s = await<dtrun::rendezvous::JobState>(io, [&](auto cb) { job.state(1, cb); });
  REQUIRE(s.final);
  CHECK(nlohmann::json::parse(*s.final).at("round") == 1);
  CHECK(s.round == 1);

  LocalJob ok(io, o);
  CHECK(await<std::int64_t>(io, [&](auto cb) { ok.markDone(0, 1, cb); }) == 1);
  CHECK(await<dtrun::rendezvous::JobState>(io, [&](auto cb) { ok.state(0, cb); }).done == 1);
}

TEST_CASE("LocalJob: the abort key goes to the workers' store, with the client's prefix",
          "[agent][local]") {
  boost::asio::io_context io;
  LocalJobOptions o;
  std::string key, value;
  o.setKey = [&](std::string k, std::string v, std::function<void()> done) {
    key = k;
    value = v;
    done();
  };
  LocalJob job(io, o);
  bool done = false;
  job.abortWorkers(2, "rank 0 failed", [&] { done = true; });
  io.run();
  CHECK(done);
  CHECK(key == "/dtrun/abort/2");
  CHECK(value == "rank 0 failed");
}

TEST_CASE("LocalJob: without the agent store, rank 0's store gets a free port", "[agent][local]") {
  boost::asio::io_context io;
  LocalJobOptions o;
  o.agentStore = false;
  o.localAddr = "node1";
  LocalJob job(io, o);
  auto s = await<WorkerStore>(io, [&](auto cb) { job.workerStore({}, cb); });
  CHECK(s.addr == "node1");
  CHECK(s.port != 0);
  job.close();
  bool called = false;
  job.markDone(0, 1, [&](Result<std::int64_t>) { called = true; });
  io.restart();
  io.run();
  CHECK_FALSE(called);  // nothing runs after close()
}
