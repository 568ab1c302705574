// Many worker processes against a real `dtrun store`: barrier and broadcast across 8 ranks, a
// real NCCL unique id exchanged (ncclGetUniqueId needs no GPU), per-node ids, a restart's fresh
// namespace, the C API, and the NCCL path's error on a machine without a GPU.
#include <catch2/catch.hpp>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "dtrun/worker/config.h"
#include "rendezvous/tcp_store.h"
#include "tests/support/test_support.h"
#include "tests/worker_runtime/process_harness.h"
#if DTRUN_WORKER_HAS_NCCL
#include <cuda_runtime_api.h>
#endif

namespace {

using dtrun::test::Child;
using dtrun::test::StoreProcess;
using namespace std::chrono_literals;

using Children = std::vector<std::unique_ptr<Child>>;

Children spawn(int world, int perNode, std::uint16_t port, int round,
               const std::vector<std::string>& args) {
  Children out;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv = {WORKER_PROBE};
    argv.insert(argv.end(), args.begin(), args.end());
    out.push_back(
        std::make_unique<Child>(argv, dtrun::test::workerEnv(r, world, perNode, port, round)));
  }
  return out;
}

// Waits for all; every exit code must be `code`. Returns the outputs by rank.
std::vector<std::string> finish(Children& children, int code = 0) {
  std::vector<Child*> raw;
  for (auto& c : children) raw.push_back(c.get());
  REQUIRE(dtrun::test::waitAll(raw, 60s));
  std::vector<std::string> outputs;
  for (std::size_t r = 0; r < children.size(); ++r) {
    INFO("rank " << r << " output:\n" << children[r]->output());
    CHECK(children[r]->wait(0s) == code);
    outputs.push_back(children[r]->output());
  }
  return outputs;
}

// A raw client that sees the wire keys exactly (no "/" prefix of its own).
dtrun::rendezvous::TcpStore rawClient(std::uint16_t port) {
  dtrun::rendezvous::TcpStoreOptions o;
  o.port = port;
  o.keyPrefix = "";
  o.connectTimeout = 20s;
  return dtrun::rendezvous::TcpStore(o);
}

#if DTRUN_WORKER_HAS_NCCL
// "nccl-id rank R <hex>" -> hex by rank.
std::vector<std::string> idsOf(const std::vector<std::string>& outputs, const std::string& tag) {
  std::vector<std::string> ids;
  const std::regex re(tag + " rank (\\d+) .*?([0-9a-f]{256})");
  for (std::size_t r = 0; r < outputs.size(); ++r) {
    std::smatch m;
    INFO(outputs[r]);
    REQUIRE(std::regex_search(outputs[r], m, re));
    CHECK(std::stoul(m[1]) == r);
    ids.push_back(m[2]);
  }
  return ids;
}

bool gpuPresent(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  *why = e == cudaSuccess ? std::to_string(count) + " CUDA device(s)"
                          : std::string(cudaGetErrorName(e));
  return e == cudaSuccess && count > 0;
}
#endif

}  // namespace

TEST_CASE("barrier and broadcast across 8 worker processes", "[worker][multiprocess]") {
  StoreProcess store;
  auto children = spawn(8, 4, store.port(), 0, {"store", "6"});
  auto outputs = finish(children);
  for (int r = 0; r < 8; ++r) {
    CHECK_THAT(outputs[r], Catch::Contains("store ok rank " + std::to_string(r) +
                                           " world 8 prefix /worker/attempt_0"));
  }
  // Torch's wire layout: PrefixStore("/worker/attempt_0") under the client's "/" prefix.
  auto raw = rawClient(store.port());
  CHECK(raw.check({"//worker/attempt_0/dtrun_worker/barrier/0/done"}));
  CHECK(raw.check({"//worker/attempt_0/dtrun_worker/broadcast/5"}));
  CHECK(raw.get("//worker/attempt_0/dtrun_worker/barrier/6/arrived", 1s) == "8");
}

TEST_CASE("a barrier holds until the last rank arrives", "[worker][multiprocess]") {
  StoreProcess store;
  Children first;
  for (int r = 0; r < 7; ++r) {
    first.push_back(std::make_unique<Child>(std::vector<std::string>{WORKER_PROBE, "barrier"},
                                            dtrun::test::workerEnv(r, 8, 8, store.port())));
  }
  for (auto& c : first) REQUIRE(c->waitForOutput("barrier entered", 30s));
  // Seven of eight are in: none may pass. (A bounded look, not a sleep: any pass fails at once.)
  bool passed = dtrun::test::pollUntil(
      [&] {
        for (auto& c : first) {
          if (c->output().find("barrier passed") != std::string::npos) return true;
        }
        return false;
      },
      500ms);
  CHECK_FALSE(passed);
  first.push_back(std::make_unique<Child>(std::vector<std::string>{WORKER_PROBE, "barrier"},
                                          dtrun::test::workerEnv(7, 8, 8, store.port())));
  auto outputs = finish(first);
  for (const auto& out : outputs) CHECK_THAT(out, Catch::Contains("barrier passed"));
}

TEST_CASE("the C API: barrier, broadcast, set/get across 4 processes", "[worker][multiprocess]") {
  StoreProcess store;
  auto children = spawn(4, 2, store.port(), 0, {"c-api"});
  auto outputs = finish(children);
  for (int r = 0; r < 4; ++r) {
    INFO(outputs[r]);
    CHECK_THAT(outputs[r],
               Catch::Contains("c-api rank " + std::to_string(r) + " world 4 local " +
                               std::to_string(r % 2) + " group " + std::to_string(r / 2) +
                               " broadcast 'c-api-broadcast' peer 'value of rank " +
                               std::to_string((r + 1) % 4) + "'"));
    if (r != 0) {
      CHECK_THAT(outputs[r], Catch::Contains("mismatch 4 broadcast: rank 0 sent 4 bytes, this "
                                             "rank expected 3"));
    }
    CHECK_THAT(outputs[r], Catch::EndsWith("aborted 0\n"));
  }
}

TEST_CASE("the C API reports a broken environment and still writes the error file",
          "[worker][multiprocess]") {
  dtrun::test::TempDir dir;
  const std::string path = (dir.path() / "error.json").string();
  Child child({WORKER_PROBE, "c-api"},
              dtrun::test::workerEnv(0, 2, 2, 29500, 0,
                                     {{"WORLD_SIZE", "two"}, {"TORCHELASTIC_ERROR_FILE", path}}));
  REQUIRE(child.wait(30s) == 5);
  CHECK_THAT(child.output(), Catch::Contains("c-api open status 1: worker environment: "
                                             "WORLD_SIZE='two'"));
  CHECK_THAT(dtrun::test::readFile(path), Catch::Contains("WORLD_SIZE='two'"));
}

TEST_CASE("a worker that cannot reach the store says where it looked", "[worker][multiprocess]") {
  // A port nobody listens on: bind one, note it, close it.
  std::uint16_t port = 0;
  {
    StoreProcess store;
    port = store.port();
    store.kill();
  }
  Child child({WORKER_PROBE, "c-api"},
              dtrun::test::workerEnv(0, 1, 1, port, 0, {{"WORKER_PROBE_CONNECT_MS", "300"}}));
  REQUIRE(child.wait(60s) == 5);
  CHECK_THAT(child.output(), Catch::Contains("c-api open status 3: dtrun_worker rank 0/1 (round "
                                             "0): cannot reach the store at "
                                             "MASTER_ADDR:MASTER_PORT=127.0.0.1:" +
                                             std::to_string(port)));
}

#if DTRUN_WORKER_HAS_NCCL

TEST_CASE("8 worker processes exchange one real NCCL unique id", "[worker][multiprocess][nccl]") {
  StoreProcess store;
  auto children = spawn(8, 8, store.port(), 0, {"nccl-id"});
  auto ids = idsOf(finish(children), "nccl-id");
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == 1);
  CHECK(ids[0] != std::string(256, '0'));
  // The 128 bytes sit in the store, tagged, under the round's prefix.
  auto raw = rawClient(store.port());
  CHECK(raw.get("//worker/attempt_0/probe/nccl-id", 1s).size() == 129);
}

TEST_CASE("named sub-communicator ids: one per node", "[worker][multiprocess][nccl]") {
  StoreProcess store;
  // 8 ranks on 2 "nodes" of 4: color = GROUP_RANK, key = LOCAL_RANK.
  auto children = spawn(8, 4, store.port(), 0, {"nccl-group", "node"});
  auto outputs = finish(children);
  auto ids = idsOf(outputs, "nccl-group");
  for (int r = 0; r < 8; ++r) {
    INFO(outputs[r]);
    const int node = r / 4;
    CHECK_THAT(outputs[r], Catch::Contains("color " + std::to_string(node) + " group_rank " +
                                           std::to_string(r % 4) + " size 4 members " +
                                           (node == 0 ? "0,1,2,3" : "4,5,6,7")));
    CHECK(ids[r] == ids[node * 4]);
  }
  CHECK(ids[0] != ids[4]);
}

TEST_CASE("a restart gets a fresh namespace", "[worker][multiprocess][nccl]") {
  StoreProcess store;
  auto round0 = spawn(4, 4, store.port(), 0, {"nccl-id"});
  auto ids0 = idsOf(finish(round0), "nccl-id");
  auto round1 = spawn(4, 4, store.port(), 1, {"nccl-id"});
  auto ids1 = idsOf(finish(round1), "nccl-id");
  CHECK(std::set<std::string>(ids1.begin(), ids1.end()).size() == 1);
  CHECK(ids1[0] != ids0[0]);  // round 1 made its own id instead of finding round 0's

  auto raw = rawClient(store.port());
  CHECK(raw.check({"//worker/attempt_0/probe/nccl-id", "//worker/attempt_1/probe/nccl-id"}));
  // Round 1's barrier 0 must not be satisfied by round 0's: a lone rank of 2 stays inside.
  auto round0Barrier = spawn(2, 2, store.port(), 0, {"barrier"});
  finish(round0Barrier);
  Child lone({WORKER_PROBE, "barrier"}, dtrun::test::workerEnv(0, 2, 2, store.port(), 1));
  REQUIRE(lone.waitForOutput("barrier entered", 30s));
  CHECK_FALSE(lone.waitForOutput("barrier passed", 500ms));
  Child second({WORKER_PROBE, "barrier"}, dtrun::test::workerEnv(1, 2, 2, store.port(), 1));
  CHECK(lone.wait(30s) == 0);
  CHECK(second.wait(30s) == 0);
}

TEST_CASE("without a GPU the NCCL path fails with a clear error", "[worker][multiprocess][nccl]") {
  std::string why;
  if (gpuPresent(&why)) {
    DTRUN_SKIP("this machine has a GPU (" << why
                                          << "); the [.gpu] test covers communicator creation");
  }
  StoreProcess store;
  auto children = spawn(2, 2, store.port(), 0, {"nccl-comm"});
  auto outputs = finish(children, 3);
  for (int r = 0; r < 2; ++r) {
    INFO(outputs[r]);
    const std::string rank = std::to_string(r);
    CHECK_THAT(outputs[r],
               Catch::Contains("comm error: dtrun_worker rank " + rank + "/2 (LOCAL_RANK " + rank +
                               ", round 0), communicator 'world', key "
                               "dtrun_worker/nccl/world/0/unique_id: no usable CUDA device: "));
    CHECK_THAT(outputs[r], Catch::Contains("cudaGetDeviceCount"));
    CHECK_THAT(outputs[r], Catch::Contains(why));  // CUDA's own error name
  }
  // Rank 0 told the others through the store instead of leaving them to time out.
  auto raw = rawClient(store.port());
  auto value = raw.get("//worker/attempt_0/dtrun_worker/nccl/world/0/unique_id", 1s);
  CHECK(value.substr(0, 1) == "E");
  CHECK_THAT(value, Catch::Contains("cudaGetDeviceCount"));
}

TEST_CASE("peers learn at once that rank 0 could not make the id", "[worker][multiprocess][nccl]") {
  std::string why;
  if (gpuPresent(&why)) {
    DTRUN_SKIP("this machine has a GPU (" << why << ")");
  }
  // Rank 0 fails its device check and publishes that; a peer that only fetches the id (which
  // needs no GPU) fails with rank 0's words, long before its 60 s timeout.
  StoreProcess store;
  Child rank0({WORKER_PROBE, "nccl-comm"}, dtrun::test::workerEnv(0, 2, 2, store.port()));
  REQUIRE(rank0.wait(60s) == 3);
  const auto start = std::chrono::steady_clock::now();
  Child peer({WORKER_PROBE, "nccl-fetch", "dtrun_worker/nccl/world/0/unique_id"},
             dtrun::test::workerEnv(1, 2, 2, store.port()));
  REQUIRE(peer.wait(60s) == 3);
  CHECK(std::chrono::steady_clock::now() - start < 20s);
  CHECK_THAT(peer.output(), Catch::Contains("fetch error: dtrun_worker rank 1/2"));
  CHECK_THAT(peer.output(), Catch::Contains("the rank that creates the unique id failed: "
                                            "dtrun_worker rank 0/2"));
  CHECK_THAT(peer.output(), Catch::Contains("cudaGetDeviceCount"));
}

TEST_CASE("createCommunicator on a GPU (world size 1)", "[.gpu][worker][nccl]") {
  std::string why;
  if (!gpuPresent(&why)) {
    DTRUN_SKIP("no GPU here (" << why << ")");
  }
  StoreProcess store;
  auto children = spawn(1, 1, store.port(), 0, {"nccl-comm"});
  auto outputs = finish(children);
  CHECK_THAT(outputs[0], Catch::Contains("comm ok rank 0 size 1 device 0"));
}

#endif  // DTRUN_WORKER_HAS_NCCL
