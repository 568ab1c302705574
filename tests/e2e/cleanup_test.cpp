// Grandchildren: whatever a worker started, in its process group or in a session of its own
// (a daemon), is gone once its round ends, before the next round's workers start.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>

#include "common/spawn.h"
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

TEST_CASE("a worker starts with 0, 1, 2 and what the user gave dtrun, nothing of dtrun's",
          "[e2e]") {
  // A descriptor the user hands dtrun (as `dtrun ... 7<file` would): it must reach every worker.
  // Everything dtrun opens itself (its store's sockets, the store connections, pidfds, log
  // pipes, the guard's pipe) must not. Round 1 runs after a failure, when the agent has all of
  // them open.
  test::TempDir tmp;
  const int userFd = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: inherited by dtrun
  REQUIRE(userFd > 2);
  std::set<int> expected{0, 1, 2};
  for (int fd : dtrun::inheritedDescriptors()) expected.insert(fd);  // userFd among them
  REQUIRE(expected.count(userFd) == 1);
  auto run = runDtrun(
      withWorker({"--standalone", "--nproc-per-node=2", "--max-restarts=1"},
                 {"fds", "rank1,restart0:wait=fds.0.0", "rank1,restart0:exit=3", "restart0:sleep"}),
      tmp.path());
  ::close(userFd);
  INFO("dtrun stderr:\n" << run.err);
  REQUIRE(run.exit.exited());
  CHECK(run.exit.code == 0);
  for (int restart : {0, 1}) {
    for (int lr : {0, 1}) {
      INFO("round " << restart << ", local rank " << lr);
      std::set<int> seen;
      for (const auto& line :
           splitLines(test::readFile(workerFile(tmp.path() / "w", "fds", restart, lr)))) {
        if (!line.empty()) seen.insert(std::stoi(line));
      }
      CHECK(seen == expected);
    }
  }
}

}  // namespace dtrun::e2e
