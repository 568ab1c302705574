// The points where dtrun follows torchrun more closely (docs/migration.md), with the real binary:
// --virtual-local-rank maps local ranks through the launcher's CUDA_VISIBLE_DEVICES (and
// refuses more workers than entries), --event-log-handler console prints the events, and
// `dtrun launch` prints its notice once. The comparison with torch's own
// torch.distributed.launch on a real tutorial script is e2e:torch_launch_vs_torch.
#include <catch2/catch.hpp>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(text.substr(start, nl - start));
  }
  return out;
}

}  // namespace

TEST_CASE("virtual local rank: each worker gets its entry of the launcher's devices",
          "[e2e][compat]") {
  // Every worker is LOCAL_RANK 0, so each writes env.0.0: one run per rank looked at.
  for (int rank = 0; rank < 2; ++rank) {
    test::TempDir tmp;
    auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--virtual-local-rank"},
                                   {"rank" + std::to_string(rank) + ":env"}),
                        tmp.path(), {{"CUDA_VISIBLE_DEVICES", "3,5"}});
    INFO("rank " << rank << ", dtrun stderr:\n" << run.err);
    REQUIRE(run.exit.code == 0);
    auto env = readEnvFile(workerFile(tmp.path() / "w", "env", 0, 0));
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == "0");
    CHECK(env["CUDA_VISIBLE_DEVICES"] == (rank == 0 ? "3" : "5"));
  }

  // One entry, two workers: torchrun refuses the second rank; dtrun refuses before starting.
  test::TempDir tmp2;
  auto refused = runDtrun(
      withWorker({"--standalone", "--nproc-per-node=2", "--virtual-local-rank"}, {"mark=ran"}),
      tmp2.path(), {{"CUDA_VISIBLE_DEVICES", "3"}});
  CHECK(refused.exit.code == 2);
  CHECK_THAT(refused.err,
             Catch::Matchers::Contains("dtrun: error: --virtual-local-rank: 2 workers per node "
                                       "but CUDA_VISIBLE_DEVICES=3 lists 1 device(s)"));
  CHECK_FALSE(std::filesystem::exists(workerFile(tmp2.path() / "w", "ran", 0, 0)));
}

TEST_CASE("event log handler console: every event as a JSON line on stderr", "[e2e][compat]") {
  test::TempDir tmp;
  const auto file = tmp.path() / "events.jsonl";
  auto run = runDtrun(withWorker({"--standalone", "--nproc-per-node=2", "--event-log-handler",
                                  "console", "--event-log", file.string()},
                                 {"exit=0"}),
                      tmp.path());
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.code == 0);
  std::vector<std::string> console;
  for (const auto& l : lines(run.err)) {
    if (!l.empty() && l.front() == '{') console.push_back(l);
  }
  // The same lines as the --event-log file, in the same order.
  std::vector<std::string> logged = lines(test::readFile(file));
  CHECK(console == logged);
  std::vector<std::string> names;
  for (const auto& l : console) names.push_back(nlohmann::json::parse(l).at("event"));
  REQUIRE(names.size() >= 4);
  CHECK(names[0] == "rendezvous_started");
  CHECK(names[1] == "rendezvous_done");
  CHECK(std::count(names.begin(), names.end(), "worker_started") == 2);
  CHECK(std::count(names.begin(), names.end(), "worker_exited") == 2);
  CHECK(names[names.size() - 2] == "shutdown");
  CHECK(names.back() == "job_ended");  // the summary (docs/observe.md)

  // null (the default) prints none.
  test::TempDir quiet;
  auto none = runDtrun(withWorker({"--standalone"}, {"exit=0"}), quiet.path());
  REQUIRE(none.exit.code == 0);
  CHECK(none.err.find("{\"event\"") == std::string::npos);
}

// A program that is not Python runs under `dtrun launch` only with --use-env (as in torch); the
// --local_rank=N case needs a Python script: e2e:torch_launch_vs_torch.
TEST_CASE("dtrun launch --use-env: the worker's own arguments, the notice once", "[e2e][compat]") {
  test::TempDir tmp;
  auto plain =
      runDtrun(withWorker({"launch", "--nproc_per_node=2", "--use_env"}, {"args"}), tmp.path());
  INFO("dtrun stderr:\n" << plain.err);
  REQUIRE(plain.exit.code == 0);
  // --use-env: the worker's own arguments only.
  CHECK(test::readFile(workerFile(tmp.path() / "w", "args", 0, 1)).find("--local_rank") ==
        std::string::npos);
  const std::string notice = "torch.distributed.launch is deprecated in favour of torchrun";
  auto first = plain.err.find(notice);
  CHECK(first != std::string::npos);
  CHECK(plain.err.find(notice, first + 1) == std::string::npos);
}

}  // namespace dtrun::e2e
