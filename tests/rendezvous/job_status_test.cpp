// `dtrun status`'s reading (rendezvous/job_reader.h) and working out (rendezvous/job_status.h)
// of a job that the real rendezvous protocol moved through a failure and a membership change,
// on a real store over sockets.
#include "rendezvous/job_status.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/job_reader.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"
#include "tests/rendezvous/store_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::test;
using namespace std::chrono_literals;

namespace {

AgentStatus statusOf(const NodeInfo& me, const std::string& state, std::int64_t round) {
  AgentStatus s;
  s.host = me.host;
  s.pid = me.pid;
  s.nproc = me.nproc;
  s.state = state;
  s.round = round;
  s.groupRank = 0;
  s.maxRestarts = 3;
  s.keepAliveMs = 200;
  return s;
}

}  // namespace

TEST_CASE("status: a job through a failure and a membership change, read in three requests",
          "[rendezvous][status]") {
  ServerThread server;
  auto ops = std::make_shared<TcpStore>(clientOptions(server.port()));
  auto job = std::make_shared<PrefixStore>(keys::jobPrefix("job7"), ops);
  NodeInfo me{"node-a", "10.0.0.1", 811, 2, "default", "node-a:811:0000abcd"};
  RendezvousSettings one;
  DynamicRendezvous rdzv(
      job, me, one, [](std::int64_t) {}, quietLogger());

  // The membership connection: a close action on this agent's gone key, as C10dJob registers.
  auto membership = std::make_unique<TcpStore>(clientOptions(server.port()));
  membership->addOnClose(keys::jobPrefix("job7") + "/" + keys::agentGoneKey(me.member), 1);

  REQUIRE(rdzv.join().round == 0);
  rdzv.reportFailure(0, R"({"localRank":1,"rank":1,"pid":4242,"exitCode":-9,"host":"node-a",)"
                        R"("timestampMs":5,"message":"Signal 9","fromErrorFile":false,)"
                        R"("stderrTail":["boom on rank 1"]})");
  REQUIRE(rdzv.advance(0, AdvanceReason::kFailure, 3));
  REQUIRE(rdzv.join().round == 1);
  job->add(keys::goneKey(1), 1);  // a member's connection closed, as the store does it
  REQUIRE(rdzv.advance(1, AdvanceReason::kMembership, 3));
  REQUIRE(rdzv.join().round == 2);
  job->set(keys::agentStatusKey(me.member), nlohmann::json(statusOf(me, "running", 2)).dump());
  // A second agent that published once and was killed: its gone key is set, its status stale.
  const std::string killed = "node-b:907:12345678";
  job->set(
      keys::agentStatusKey(killed),
      nlohmann::json(statusOf({"node-b", "", 907, 2, "default", killed}, "running", 1)).dump());
  job->add(keys::agentGoneKey(killed), 1);

  TcpStore reader(clientOptions(server.port()));
  const auto snap = readJob(reader, "job7");
  CHECK(snap.disconnected.at(me.member) == false);
  CHECK(snap.disconnected.at(killed) == true);
  REQUIRE(snap.heard.count(me.member));
  CHECK(snap.heard.at(me.member).value_or(1h) < 20s);

  const JobStatus st = describeJob("job7", snap);
  CHECK(st.phase == "running");
  CHECK(st.round == 2);
  CHECK(st.restartsUsed == 1);
  CHECK(st.maxRestarts == 3);
  REQUIRE(st.rounds.size() == 3);
  for (const auto& r : st.rounds) {
    CHECK(r.closed);
    CHECK(r.nodes == 1);
    CHECK(r.worldSize == 2);
  }
  CHECK(st.rounds[0].endedBy == "failure");
  CHECK(st.rounds[1].endedBy == "membership");
  CHECK(st.rounds[2].endedBy.empty());
  REQUIRE(st.restarts.size() == 2);
  CHECK(st.restarts[0].cause == "worker_failure");
  CHECK(st.restarts[0].detail == "rank 1 on node-a: signal 9");
  CHECK(st.restarts[1].cause == "node_left");
  REQUIRE(st.lastFailure);
  CHECK(st.lastFailure->round == 0);
  CHECK(st.lastFailure->signal == 9);
  CHECK(st.lastFailure->message == "boom on rank 1");
  REQUIRE(st.nodes.size() == 2);
  CHECK(st.nodes[0].member == me.member);  // the current round's member first
  CHECK(st.nodes[0].state == "running");
  CHECK(st.nodes[0].heardMs);
  CHECK(st.nodes[1].state == "stopped answering");
  CHECK(st.nodes[1].published == "running");

  const auto j = toJson(st);
  CHECK(j["counts"]["running"] == 1);
  CHECK(j["counts"]["stopped answering"] == 1);
  CHECK(j["restarts"]["used"] == 1);
  CHECK(j["rounds"].size() == 3);

  // The agent's connection closes: it stopped answering, unless it said how it ended.
  membership.reset();
  const std::string goneKey = keys::jobPrefix("job7") + "/" + keys::agentGoneKey(me.member);
  REQUIRE(dtrun::test::pollUntil([&] { return reader.check({goneKey}); }));
  CHECK(describeJob("job7", readJob(reader, "job7")).nodes[0].state == "stopped answering");
  job->set(keys::agentStatusKey(me.member), nlohmann::json(statusOf(me, "done", 2)).dump());
  CHECK(describeJob("job7", readJob(reader, "job7")).nodes[0].state == "done");
}

TEST_CASE("status: no such job, and a store that hides the job from a client without its token",
          "[rendezvous][status]") {
  auto options = loopbackOptions();
  options.token = "a-secret-of-sixteen-bytes";
  ServerThread server(options);
  auto owner = clientOptions(server.port());
  owner.token = options.token;
  TcpStore agent(owner);
  agent.set("dtrun/guarded/round", "0");

  TcpStore withToken(owner);
  CHECK_THROWS_AS(readJob(withToken, "other"), NoSuchJobError);
  CHECK(readJob(withToken, "guarded").values.count(keys::kRound) == 1);
  TcpStore stranger(clientOptions(server.port()));
  CHECK_THROWS_AS(readJob(stranger, "guarded"), StoreAuthError);
}

TEST_CASE("status: keysToRead leaves out what status does not use", "[rendezvous][status]") {
  const auto keys = keysToRead({"round", "epoch", "r0/node/0", "r0/closed", "r0/alive/a:1:2",
                                "agent/a:1:2/status", "agent/a:1:2/gone", "members/a:1:2",
                                "r0/failures", "r1/expect", "worker/x"});
  CHECK(keys == std::vector<std::string>{"round", "epoch", "r0/closed", "agent/a:1:2/status",
                                         "agent/a:1:2/gone", "r0/failures"});
}
