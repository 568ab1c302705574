// Grandchildren: whatever a worker started, in its process group or in a session of its own
// (a daemon), is gone once its round ends, before the next round's workers start.
#include <catch2/catch.hpp>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {

TEST_CASE("grandchildren, in the worker's group and setsid'ed, are cleaned up after each round",
          "[e2e]") {
  test::TempDir tmp;
  Launch dtrun(withWorker({"--standalone", "--nproc-per-node=2", "--max-restarts=1"},
                          {"child", "daemon", "pid", "rank1,restart0:wait=pid.0.0",
                           "rank1,restart0:exit=3", "restart0:sleep", "wait=go", "exit=0"}),
               tmp.path());
  const auto w = dtrun.workDir();
  auto pidOf = [&](const std::string& what, int round, int lr) {
    return readPid(workerFile(w, what, round, lr));
  };
  // Round 1 runs: round 0's grandchildren must be gone by now.
  for (int lr = 0; lr < 2; ++lr) {
    INFO("waiting for round 1, local rank " << lr << "; dtrun stderr:\n" << dtrun.err());
    REQUIRE(waitForFile(workerFile(w, "pid", 1, lr)));
  }
  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    const int child0 = pidOf("child", 0, lr), daemon0 = pidOf("daemon", 0, lr);
    REQUIRE(child0 > 0);
    REQUIRE(daemon0 > 0);
    CHECK(test::pollUntil([&] { return !test::processAlive(child0); }));
    CHECK(test::pollUntil([&] { return !test::processAlive(daemon0); }));
    // The same kind of processes of the running round are alive: the check above can fail.
    CHECK(test::processAlive(pidOf("child", 1, lr)));
    CHECK(test::processAlive(pidOf("daemon", 1, lr)));
    // The daemon really left the worker's session and group.
    CHECK(::getsid(pidOf("daemon", 1, lr)) != ::getsid(pidOf("pid", 1, lr)));
    CHECK(::getpgid(pidOf("child", 1, lr)) == pidOf("pid", 1, lr));
  }

  // The job succeeds; the last round's grandchildren go too.
  test::writeFile(w / "go", "");
  auto exit = dtrun.wait();
  INFO("dtrun stderr:\n" << dtrun.err());
  REQUIRE(exit);
  CHECK(exit->code == 0);
  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    const int child1 = pidOf("child", 1, lr), daemon1 = pidOf("daemon", 1, lr);
    CHECK(test::pollUntil([&] { return !test::processAlive(child1); }));
    CHECK(test::pollUntil([&] { return !test::processAlive(daemon1); }));
  }
}

}  // namespace dtrun::e2e
