// The worker environment: every variable torchrun/dtrun set, every way it can be missing or
// malformed, and readWorkerEnv over a real process environment.
#include "dtrun/worker/env.h"

#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>

#include "tests/worker_runtime/process_harness.h"

namespace {

using dtrun::worker::parseWorkerEnv;
using dtrun::worker::WorkerEnv;
using dtrun::worker::WorkerEnvError;
using Vars = std::map<std::string, std::string>;

// The environment torchrun's _start_workers (torch/distributed/
// elastic/agent/server/local_elastic_agent.py) gives rank 1 of 2.
Vars torchrunExample() {
  return {{"GROUP_RANK", "0"},
          {"GROUP_WORLD_SIZE", "1"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"NCCL_ASYNC_ERROR_HANDLING", "1"},
          {"OMP_NUM_THREADS", "1"},
          {"RANK", "1"},
          {"ROLE_NAME", "default"},
          {"ROLE_RANK", "1"},
          {"ROLE_WORLD_SIZE", "2"},
          {"TORCHELASTIC_ERROR_FILE", "/tmp/torchelastic_x/none_y/attempt_0/1/error.json"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_RUN_ID", "none"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"WORLD_SIZE", "2"}};
}

WorkerEnv parse(const Vars& vars) {
  return parseWorkerEnv([&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// The error message parse() throws for `vars` (fails the test when it does not throw).
std::string errorOf(const Vars& vars) {
  try {
    parse(vars);
  } catch (const WorkerEnvError& e) {
    return e.what();
  }
  FAIL("parseWorkerEnv accepted the environment");
  return "";
}

}  // namespace

TEST_CASE("parseWorkerEnv reads torchrun's worker environment", "[worker][env]") {
  WorkerEnv e = parse(torchrunExample());
  CHECK(e.rank == 1);
  CHECK(e.localRank == 1);
  CHECK(e.worldSize == 2);
  CHECK(e.localWorldSize == 2);
  CHECK(e.groupRank == 0);
  CHECK(e.groupWorldSize == 1);
  CHECK(e.roleName == "default");
  CHECK(e.masterAddr == "127.0.0.1");
  CHECK(e.masterPort == 29500);
  CHECK(e.restartCount == 0);
  CHECK(e.maxRestarts == 0);
  CHECK(e.useAgentStore);
  CHECK(e.runId == "none");
  CHECK(e.errorFile == "/tmp/torchelastic_x/none_y/attempt_0/1/error.json");
  CHECK(e.storePrefix() == "/worker/attempt_0");
}

TEST_CASE("the store prefix follows TORCHELASTIC_RESTART_COUNT as torch's does", "[worker][env]") {
  Vars v = torchrunExample();
  v["TORCHELASTIC_RESTART_COUNT"] = "7";
  CHECK(parse(v).storePrefix() == "/worker/attempt_7");
}

TEST_CASE("optional variables take torch's defaults", "[worker][env]") {
  Vars v = torchrunExample();
  for (const char* name :
       {"GROUP_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"}) {
    v.erase(name);
  }
  WorkerEnv e = parse(v);
  CHECK_FALSE(e.groupWorldSize.has_value());
  CHECK(e.roleName == "default");
  CHECK(e.errorFile.empty());
  CHECK(e.maxRestarts == 0);
  CHECK(e.runId.empty());
  CHECK_FALSE(e.useAgentStore);
  CHECK(e.restartCount == 0);
  CHECK(e.storePrefix() == "/worker/attempt_0");
}

TEST_CASE("every missing required variable is named", "[worker][env]") {
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                           "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"}) {
    INFO("without " << name);
    Vars v = torchrunExample();
    v.erase(name);
    std::string what = errorOf(v);
    CHECK_THAT(what, Catch::Contains(std::string(name) + " is not set"));
  }
}

TEST_CASE("every malformed variable is named with its value", "[worker][env]") {
  struct Case {
    const char* name;
    const char* value;
    const char* expect;
  };
  const Case cases[] = {
      {"RANK", "", "RANK is set but empty"},
      {"RANK", "abc", "RANK='abc' is not a non-negative decimal integer"},
      {"RANK", "-1", "RANK='-1' is not a non-negative decimal integer"},
      {"RANK", "1.5", "RANK='1.5'"},
      {"RANK", " 1", "RANK=' 1'"},
      {"RANK", "1 ", "RANK='1 '"},
      {"RANK", "0x1", "RANK='0x1'"},
      {"RANK", "99999999999999999999", "RANK='99999999999999999999'"},
      {"RANK", "2", "RANK=2 is not below WORLD_SIZE=2"},
      {"WORLD_SIZE", "0", "WORLD_SIZE=0 is out of range [1, "},
      {"WORLD_SIZE", "3000000000", "WORLD_SIZE=3000000000 is out of range"},
      {"LOCAL_RANK", "2", "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
      {"LOCAL_RANK", "x", "LOCAL_RANK='x'"},
      {"LOCAL_WORLD_SIZE", "3", "LOCAL_WORLD_SIZE=3 must be in [1, WORLD_SIZE=2]"},
      {"LOCAL_WORLD_SIZE", "0", "LOCAL_WORLD_SIZE=0 is out of range"},
      {"GROUP_RANK", "-2", "GROUP_RANK='-2'"},
      {"GROUP_RANK", "1", "GROUP_RANK=1 is not below GROUP_WORLD_SIZE=1"},
      {"GROUP_WORLD_SIZE", "zero", "GROUP_WORLD_SIZE='zero'"},
      {"MASTER_ADDR", "", "MASTER_ADDR is set but empty"},
      {"MASTER_PORT", "0", "MASTER_PORT=0 is out of range [1, 65535]"},
      {"MASTER_PORT", "65536", "MASTER_PORT=65536 is out of range [1, 65535]"},
      {"MASTER_PORT", "http", "MASTER_PORT='http'"},
      {"TORCHELASTIC_RESTART_COUNT", "-1", "TORCHELASTIC_RESTART_COUNT='-1'"},
      {"TORCHELASTIC_RESTART_COUNT", "", "TORCHELASTIC_RESTART_COUNT is set but empty"},
      {"TORCHELASTIC_MAX_RESTARTS", "many", "TORCHELASTIC_MAX_RESTARTS='many'"},
      {"TORCHELASTIC_USE_AGENT_STORE", "true", "TORCHELASTIC_USE_AGENT_STORE='true' must be"},
      {"TORCHELASTIC_USE_AGENT_STORE", "1", "TORCHELASTIC_USE_AGENT_STORE='1' must be"},
      {"TORCHELASTIC_USE_AGENT_STORE", "", "TORCHELASTIC_USE_AGENT_STORE='' must be"},
  };
  for (const Case& c : cases) {
    INFO(c.name << "='" << c.value << "'");
    Vars v = torchrunExample();
    v[c.name] = c.value;
    CHECK_THAT(errorOf(v), Catch::Contains(c.expect));
  }
}

TEST_CASE("an environment error still carries the error file", "[worker][env]") {
  Vars v = torchrunExample();
  v.erase("RANK");
  try {
    parse(v);
    FAIL("accepted an environment without RANK");
  } catch (const WorkerEnvError& e) {
    CHECK(e.errorFile() == "/tmp/torchelastic_x/none_y/attempt_0/1/error.json");
  }
}

TEST_CASE("validateWorkerEnv rejects hand-built inconsistent environments", "[worker][env]") {
  WorkerEnv e = parse(torchrunExample());
  e.rank = 5;
  CHECK_THROWS_WITH(dtrun::worker::validateWorkerEnv(e), Catch::Contains("RANK=5"));
  e = parse(torchrunExample());
  e.masterPort = 0;
  CHECK_THROWS_AS(dtrun::worker::validateWorkerEnv(e), WorkerEnvError);
}

TEST_CASE("readWorkerEnv reads a real process environment", "[worker][env]") {
  using dtrun::test::Child;
  SECTION("complete") {
    Child child(
        {WORKER_PROBE, "env"},
        dtrun::test::workerEnv(5, 8, 4, 29500, 2, {{"TORCHELASTIC_ERROR_FILE", "/x/e.json"}}));
    REQUIRE(child.wait(std::chrono::seconds(30)) == 0);
    CHECK_THAT(child.output(),
               Catch::Contains("env rank=5 local_rank=1 world=8 local_world=4 group=1 restart=2 "
                               "agent_store=True prefix=/worker/attempt_2 master=127.0.0.1:29500 "
                               "run_id=worker-runtime-test error_file=/x/e.json"));
  }
  SECTION("malformed") {
    Child child({WORKER_PROBE, "env"},
                dtrun::test::workerEnv(0, 2, 2, 29500, 0, {{"LOCAL_RANK", "one"}}));
    REQUIRE(child.wait(std::chrono::seconds(30)) == 2);
    CHECK_THAT(child.output(), Catch::Contains("error: worker environment: LOCAL_RANK='one' is "
                                               "not a non-negative decimal integer"));
  }
  SECTION("missing") {
    Child child({WORKER_PROBE, "env"}, {});
    REQUIRE(child.wait(std::chrono::seconds(30)) == 2);
    CHECK_THAT(child.output(), Catch::Contains("WORLD_SIZE is not set"));
  }
}
