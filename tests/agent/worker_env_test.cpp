// The worker's command line, environment and log prefix for every rank of every node, without
// starting anything: the multi-node values (ranks, world sizes, the global rank in prefixes)
// that single-node end-to-end tests cannot see.
#include "agent/worker_env.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <map>

#include "tests/agent/round_util.h"

using namespace dtrun::agent;
using dtrun::rendezvous::NodeInfo;
using dtrun::rendezvous::RoundInfo;
using Env = std::map<std::string, std::string>;
using dtrun::agent::testing::envMap;
using dtrun::agent::testing::roundOf;

namespace {

LaunchConfig config(int nproc) { return testing::envTestConfig(nproc); }

}  // namespace

TEST_CASE("every rank of the second of two nodes", "[agent][env]") {
  const auto c = config(2);
  const auto round = roundOf(/*round=*/3, 1, 2, 2);
  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    Env env = envMap(workerEnv(c, round, lr, WorkerStore{"head", 29400}, "/logs/e.json"));
    CHECK(env.at("RANK") == std::to_string(2 + lr));
    CHECK(env.at("LOCAL_RANK") == std::to_string(lr));
    CHECK(env.at("GROUP_RANK") == "1");
    CHECK(env.at("ROLE_RANK") == std::to_string(2 + lr));
    CHECK(env.at("ROLE_NAME") == "default");
    CHECK(env.at("WORLD_SIZE") == "4");
    CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(env.at("GROUP_WORLD_SIZE") == "2");
    CHECK(env.at("ROLE_WORLD_SIZE") == "4");
    CHECK(env.at("MASTER_ADDR") == "head");
    CHECK(env.at("MASTER_PORT") == "29400");
    CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "3");
    CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "3");
    CHECK(env.at("TORCHELASTIC_RUN_ID") == "job42");
    CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
    CHECK(env.at("TORCHELASTIC_ERROR_FILE") == "/logs/e.json");
    CHECK(env.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGUSR1");
    // NCCL's async error handling: what the launcher put in baseEnv for the workers' torch
    // (launcher/torch_probe.h), passed on as it is; the agent adds no name of its own.
    CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "0");
    CHECK(env.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0);
    CHECK(env.at("PATH") == "/usr/bin");
  }
}

TEST_CASE("nodes of different sizes: offsets come from the round", "[agent][env]") {
  auto c = config(3);
  RoundInfo r = roundOf(0, 2, 3, 3);
  r.rankOffset = 5;  // nodes 0 and 1 ran 2 and 3 workers
  r.worldSize = 8;
  Env env = envMap(workerEnv(c, r, 2, WorkerStore{"h", 1}, ""));
  CHECK(env.at("RANK") == "7");
  CHECK(env.at("WORLD_SIZE") == "8");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "3");
}

TEST_CASE("mixed roles: role ranks count the nodes of the same role only", "[agent][env]") {
  auto c = config(2);
  c.role = "trainer";
  RoundInfo r = roundOf(0, 2, 3, 2);
  r.mixedRoles = true;
  r.nodes = {NodeInfo{"a", "a", 11, 2, "trainer", ""}, NodeInfo{"b", "b", 12, 2, "reader", ""},
             NodeInfo{"c", "c", 13, 2, "trainer", ""}};
  Env env = envMap(workerEnv(c, r, 1, WorkerStore{"h", 1}, ""));
  CHECK(env.at("RANK") == "5");
  CHECK(env.at("ROLE_NAME") == "trainer");
  CHECK(env.at("ROLE_RANK") == "3");
  CHECK(env.at("ROLE_WORLD_SIZE") == "4");
}

TEST_CASE("virtual local rank: LOCAL_RANK 0 and the rank's own device", "[agent][env]") {
  auto c = config(2);
  c.virtualLocalRank = true;
  c.baseEnv["CUDA_VISIBLE_DEVICES"] = "4,6";
  Env env = envMap(workerEnv(c, roundOf(0, 0, 1, 2), 1, WorkerStore{"h", 1}, ""));
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.at("RANK") == "1");
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "6");
}

TEST_CASE("argv: the entrypoint, then the script's arguments with ${local_rank}", "[agent][env]") {
  const auto c = config(2);
  CHECK(workerArgv(c, 1) ==
        std::vector<std::string>{"python3", "-u", "train.py", "--local-rank=1", "--lr", "0.1"});
}

TEST_CASE("the log prefix shows the global rank and the node", "[agent][env]") {
  auto c = config(2);
  c.role = "trainer";
  const auto vars = linePrefixVars(c, roundOf(4, 1, 2, 2), 1, "node-b");
  CHECK(vars.rank == 3);
  CHECK(vars.localRank == 1);
  CHECK(vars.nodeRank == 1);
  CHECK(vars.restart == 4);
  CHECK(vars.host == "node-b");
  CHECK(makeLinePrefix("[${role_name} ${rank}/${local_rank}@${host}]", vars) ==
        "[trainer 3/1@node-b]");
}

TEST_CASE("DeepSpeed's variables: the node's rank and count, its worker count", "[agent][env]") {
  // Nodes of 3 and 2 workers: DeepSpeed's own launcher would give the second node's workers
  // LOCAL_RANK 1 and 0 (RANK modulo 2); dtrun keeps the local index.
  auto c = config(2);
  c.workerVariables = WorkerVariables::kDeepSpeed;
  RoundInfo r = roundOf(2, 1, 2, 2);
  r.rankOffset = 3;
  r.worldSize = 5;
  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    Env env = envMap(workerEnv(c, r, lr, WorkerStore{"head", 29500}, "/e.json"));
    CHECK(env.at("CROSS_RANK") == "1");
    CHECK(env.at("CROSS_SIZE") == "2");
    CHECK(env.at("LOCAL_SIZE") == "2");
    CHECK(env.at("RANK") == std::to_string(3 + lr));
    CHECK(env.at("LOCAL_RANK") == std::to_string(lr));
    CHECK(env.at("WORLD_SIZE") == "5");
    // torchrun's are there too.
    CHECK(env.at("GROUP_RANK") == "1");
    CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  }
  // torchrun's own set has none of them.
  Env plain = envMap(workerEnv(config(2), r, 0, WorkerStore{"head", 29500}, ""));
  for (const char* name : {"CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE"}) CHECK(plain.count(name) == 0);
}

TEST_CASE("no worker variables: the launcher's environment and the agent's extras only",
          "[agent][env]") {
  auto c = config(1);
  c.workerVariables = WorkerVariables::kNone;
  Env env = envMap(workerEnv(c, roundOf(0, 0, 1, 1), 0, WorkerStore{"head", 29500}, "/e.json",
                             {{"TORCHELASTIC_TIMER_FILE", "/run/t"}}));
  CHECK(env == Env{{"PATH", "/usr/bin"},
                   {"NCCL_ASYNC_ERROR_HANDLING", "0"},
                   {"TORCHELASTIC_TIMER_FILE", "/run/t"}});
}
