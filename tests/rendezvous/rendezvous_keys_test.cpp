// The rendezvous' key names and their parsing (rendezvous/rendezvous_keys.h): every name a
// writer builds is read back as the same thing, and what is not one of them is refused.
#include "rendezvous/rendezvous_keys.h"

#include <catch2/catch.hpp>

using namespace dtrun::rendezvous;
using Kind = keys::ParsedKey::Kind;

TEST_CASE("rendezvous keys: names", "[rendezvous]") {
  CHECK(keys::jobPrefix("job42") == "dtrun/job42");
  CHECK(keys::roundKey(3, keys::kClosed) == "r3/closed");
  CHECK(keys::goneKey(0) == "r0/gone");
  CHECK(keys::nodeKey(2, 17) == "r2/node/17");
  CHECK(keys::rankKey(1, 0) == "r1/rank/0");
  CHECK(keys::aliveKey(4, "h:12:ab") == "r4/alive/h:12:ab");
  CHECK(keys::goneMarkKey(4, "h:12:ab") == "r4/gone_mark/h:12:ab");
  CHECK(keys::memberKey("h:12:ab") == "members/h:12:ab");
  CHECK(keys::agentStatusKey("h:12:ab") == "agent/h:12:ab/status");
  CHECK(keys::agentGoneKey("h:12:ab") == "agent/h:12:ab/gone");
}

TEST_CASE("rendezvous keys: every name reads back as what it names", "[rendezvous]") {
  for (const auto& job :
       {keys::kRound, keys::kEpoch, keys::kRestarts, keys::kFinal, keys::kSucceeded}) {
    auto k = keys::parseKey(job);
    REQUIRE(k);
    CHECK(k->kind == Kind::kJob);
    CHECK(k->name == job);
  }
  for (const auto& name : {keys::kJoin, keys::kClosed, keys::kExpect, keys::kGone, keys::kDone,
                           keys::kAdvance, keys::kOpened, keys::kFailures, keys::kWaiting}) {
    auto k = keys::parseKey(keys::roundKey(12, name));
    REQUIRE(k);
    CHECK(k->kind == Kind::kRound);
    CHECK(k->round == 12);
    CHECK(k->name == name);
    CHECK_FALSE(k->index);
  }
  auto node = keys::parseKey(keys::nodeKey(5, 255));
  REQUIRE(node);
  CHECK((node->kind == Kind::kRound && node->name == "node" && node->round == 5));
  CHECK(node->index == 255);
  auto alive = keys::parseKey(keys::aliveKey(7, "host.example:99:00ff00ff"));
  REQUIRE(alive);
  CHECK((alive->name == "alive" && alive->round == 7));
  CHECK(alive->member == "host.example:99:00ff00ff");
  auto status = keys::parseKey(keys::agentStatusKey("h:1:2"));
  REQUIRE(status);
  CHECK((status->kind == Kind::kAgent && status->name == "status" && status->member == "h:1:2"));
  auto gone = keys::parseKey(keys::agentGoneKey("h:1:2"));
  REQUIRE(gone);
  CHECK((gone->kind == Kind::kAgent && gone->name == "gone"));
  auto member = keys::parseKey(keys::memberKey("h:1:2"));
  REQUIRE(member);
  CHECK((member->kind == Kind::kMember && member->member == "h:1:2"));
}

TEST_CASE("rendezvous keys: what is not a key of the job is refused", "[rendezvous]") {
  for (const char* bad : {"", "r", "r/closed", "rx/closed", "r-1/closed", "r1", "r1/", "r1/node/",
                          "r1/node/x", "r1/node/-2", "r1/unknown/3", "members/", "agent/",
                          "agent/h:1:2/other", "agent//status", "worker/attempt_0/x", "roundx"}) {
    INFO(bad);
    CHECK_FALSE(keys::parseKey(bad));
  }
  // An etcd counter increment, K\x01<writer>-<n>, is not a round key.
  CHECK_FALSE(keys::parseKey(std::string("r0/join\x01") + "w-1"));
}

TEST_CASE("rendezvous keys: values", "[rendezvous]") {
  CHECK(keys::joinedNodes(keys::packJoin(3, 24)) == 3);
  CHECK(keys::joinedProcs(keys::packJoin(3, 24)) == 24);
  const auto claim = keys::parseClaim(keys::claimValue(keys::AdvanceReason::kMembership, "h:1:2"));
  REQUIRE(claim);
  CHECK(claim->reason == keys::AdvanceReason::kMembership);
  CHECK(claim->member == "h:1:2");
  CHECK(keys::parseClaim("failure a:2:3")->reason == keys::AdvanceReason::kFailure);
  CHECK_FALSE(keys::parseClaim("junk"));
  CHECK(keys::openedValue(keys::AdvanceReason::kFailure) == "failure");
}
