// Signals to dtrun: the terminating four are forwarded and end the job, SIGUSR1/SIGUSR2 are
// forwarded and the job goes on, a worker that ignores SIGTERM is killed after the grace, a
// second signal kills at once, and SIGKILL to dtrun leaves nothing running.
#include <signal.h>

#include <catch2/catch.hpp>

#include "tests/e2e/e2e_support.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

namespace fs = std::filesystem;

// Waits for the files every worker of `round` writes with `what` (pid, child, ...).
void requireWorkerFiles(const fs::path& w, const std::string& what, int nproc, int round = 0) {
  for (int lr = 0; lr < nproc; ++lr) {
    INFO("waiting for " << workerFile(w, what, round, lr));
    REQUIRE(waitForFile(workerFile(w, what, round, lr)));
  }
}

std::vector<int> pidsIn(const fs::path& w, const std::string& what, int nproc, int round = 0) {
  std::vector<int> pids;
  for (int lr = 0; lr < nproc; ++lr) pids.push_back(readPid(workerFile(w, what, round, lr)));
  return pids;
}

bool allGone(const std::vector<int>& pids) {
  for (int p : pids) {
    if (test::processAlive(p)) return false;
  }
  return true;
}

// dtrun's orphan guard, or -1: forked twice (not dtrun's child), named "dtrun-guard", with
// dtrun's own command line (each test's is unique: its temporary directory is in it).
int guardOf(pid_t dtrun) {
  const std::string cmdline = test::readFile("/proc/" + std::to_string(dtrun) + "/cmdline");
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int pid = std::stoi(name);
    if (pid != dtrun && processName(pid) == "dtrun-guard" &&
        test::readFile(e.path() / "cmdline") == cmdline) {
      return pid;
    }
  }
  return -1;
}

// A job of two workers, each with a child ("child" step), once every worker wrote its pid: its
// work directory, the workers, their children and dtrun's orphan guard.
struct Running {
  fs::path w;
  std::vector<int> workers;
  std::vector<int> children;
  int guard;
};
Running running(Launch& dtrun) {
  Running r{dtrun.workDir(), {}, {}, -1};
  requireWorkerFiles(r.w, "pid", 2);
  r.workers = pidsIn(r.w, "pid", 2);
  r.children = pidsIn(r.w, "child", 2);
  r.guard = guardOf(dtrun.pid());
  REQUIRE(r.guard > 0);
  return r;
}

std::map<int, nlohmann::json> lastExits(const fs::path& events) {
  std::map<int, nlohmann::json> out;
  for (const auto& e : eventsNamed(readEvents(events), "worker_exited")) {
    out[e.at("local_rank").get<int>()] = e;
  }
  return out;
}

}  // namespace

TEST_CASE(
    "SIGTERM, SIGINT, SIGHUP, SIGQUIT to dtrun: the same signal to every worker group, "
    "then exit 1 with nothing left",
    "[e2e]") {
  const int sig = GENERATE(SIGTERM, SIGINT, SIGHUP, SIGQUIT);
  INFO("signal " << sig);
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  Launch dtrun(
      withWorker({"--standalone", "--nproc-per-node=2", "--event-log", events.string()},
                 {"child", "onsig=TERM", "onsig=INT", "onsig=HUP", "onsig=QUIT", "pid", "sleep"}),
      tmp.path());
  const Running job = running(dtrun);
  const auto& w = job.w;

  dtrun.signal(sig);
  auto exit = dtrun.wait();
  INFO("dtrun stderr:\n" << dtrun.err());
  REQUIRE(exit);
  CHECK(exit->exited());
  CHECK(exit->code == 1);
  for (int lr = 0; lr < 2; ++lr) {
    INFO("local rank " << lr);
    CHECK(readSignals(workerFile(w, "sig", 0, lr)) == std::vector<int>{sig});
  }
  // Every worker and the child in its process group are gone, and so is the guard.
  CHECK(test::pollUntil([&] { return allGone(job.workers) && allGone(job.children); }));
  CHECK(test::pollUntil([&] { return !test::processAlive(job.guard); }));
  auto exits = lastExits(events);
  REQUIRE(exits.size() == 2);
  CHECK(exits[0]["signal"] == sig);
  CHECK(exits[1]["signal"] == sig);
  auto shutdown = eventsNamed(readEvents(events), "shutdown");
  REQUIRE(shutdown.size() == 1);
  CHECK(shutdown[0]["reason"] == "signal");
  CHECK(shutdown[0]["signal"] == sig);
}

TEST_CASE(
    "a worker that dies of the forwarded signal is no failure: the others get that "
    "signal only",
    "[e2e]") {
  const int sig = GENERATE(SIGTERM, SIGINT, SIGHUP);
  INFO("signal " << sig);
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  // Local rank 0 dies of the signal at once; local rank 1 records every signal it gets and
  // carries on until the grace ends.
  Launch dtrun(withWorker({"--standalone", "--nproc-per-node=2", "--shutdown-timeout=1",
                           "--event-log", events.string()},
                          {"lr0:onsig=" + std::to_string(sig), "lr1:trap=TERM", "lr1:trap=INT",
                           "lr1:trap=HUP", "pid", "sleep"}),
               tmp.path());
  const auto w = dtrun.workDir();
  requireWorkerFiles(w, "pid", 2);
  dtrun.signal(sig);
  auto exit = dtrun.wait();
  INFO("dtrun stderr:\n" << dtrun.err());
  REQUIRE(exit);
  CHECK(exit->code == 1);
  CHECK(readSignals(workerFile(w, "sig", 0, 0)) == std::vector<int>{sig});
  CHECK(readSignals(workerFile(w, "sig", 0, 1)) == std::vector<int>{sig});
  auto ev = readEvents(events);
  CHECK(eventsNamed(ev, "restart_decided").empty());
  auto shutdown = eventsNamed(ev, "shutdown");
  REQUIRE(shutdown.size() == 1);
  CHECK(shutdown[0]["reason"] == "signal");
  CHECK(failureReport(dtrun.err()).empty());
}

TEST_CASE(
    "SIGKILL to dtrun: no worker, and nothing in a worker's process group, is alive 2 s "
    "later",
    "[e2e]") {
  test::TempDir tmp;
  // The workers ignore SIGTERM too: only a kill can end them.
  Launch dtrun(
      withWorker({"--standalone", "--nproc-per-node=2"}, {"ignore=TERM", "child", "pid", "sleep"}),
      tmp.path());
  const Running job = running(dtrun);

  dtrun.signal(SIGKILL);
  auto exit = dtrun.wait();
  REQUIRE(exit);
  CHECK(exit->signal == SIGKILL);
  // PR_SET_PDEATHSIG ends the workers with dtrun; the guard ends their process groups (nothing
  // dtrun started outlives it: docs/design.md, decision 5). Both are immediate kernel actions,
  // so 2 s is a generous bound.
  CHECK(test::pollUntil([&] { return allGone(job.workers); }, std::chrono::seconds(2)));
  CHECK(test::pollUntil([&] { return allGone(job.children); }, std::chrono::seconds(2)));
  CHECK(test::pollUntil([&] { return !test::processAlive(job.guard); }, std::chrono::seconds(2)));
}

TEST_CASE("a worker that ignores SIGTERM is SIGKILLed after --shutdown-timeout", "[e2e]") {
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  SECTION("when another worker fails") {
    Launch dtrun(withWorker({"--standalone", "--nproc-per-node=2", "--shutdown-timeout=1",
                             "--event-log", events.string()},
                            {"trap=TERM", "pid", "rank1:wait=fail", "rank1:exit=1", "sleep"}),
                 tmp.path());
    const auto w = dtrun.workDir();
    requireWorkerFiles(w, "pid", 2);
    const int stubborn = readPid(workerFile(w, "pid", 0, 0));
    test::writeFile(w / "fail", "");
    auto exit = dtrun.wait();
    INFO("dtrun stderr:\n" << dtrun.err());
    REQUIRE(exit);
    CHECK(exit->code == 1);
    CHECK(readSignals(workerFile(w, "sig", 0, 0)) == std::vector<int>{SIGTERM});
    auto exits = lastExits(events);
    CHECK(exits[0]["signal"] == SIGKILL);
    CHECK(exits[1]["exit_code"] == 1);
    CHECK(test::pollUntil([&] { return !test::processAlive(stubborn); }));
  }
  SECTION("when dtrun gets SIGTERM") {
    Launch dtrun(withWorker({"--standalone", "--nproc-per-node=2", "--shutdown-timeout=1",
                             "--event-log", events.string()},
                            {"trap=TERM", "pid", "sleep"}),
                 tmp.path());
    const auto w = dtrun.workDir();
    requireWorkerFiles(w, "pid", 2);
    const auto workers = pidsIn(w, "pid", 2);
    dtrun.signal(SIGTERM);
    auto exit = dtrun.wait();
    INFO("dtrun stderr:\n" << dtrun.err());
    REQUIRE(exit);
    CHECK(exit->code == 1);
    auto exits = lastExits(events);
    for (int lr = 0; lr < 2; ++lr) {
      INFO("local rank " << lr);
      CHECK(readSignals(workerFile(w, "sig", 0, lr)) == std::vector<int>{SIGTERM});
      CHECK(exits[lr]["signal"] == SIGKILL);
    }
    CHECK(test::pollUntil([&] { return allGone(workers); }));
  }
}

TEST_CASE("a second SIGTERM or SIGINT kills the workers without waiting for the grace", "[e2e]") {
  const int second = GENERATE(SIGTERM, SIGINT);
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  // A grace far longer than the deadline below: only the second signal can end this in time.
  Launch dtrun(withWorker({"--standalone", "--nproc-per-node=2", "--shutdown-timeout=3600",
                           "--event-log", events.string()},
                          {"trap=TERM", "trap=INT", "pid", "sleep"}),
               tmp.path());
  const auto w = dtrun.workDir();
  requireWorkerFiles(w, "pid", 2);
  dtrun.signal(SIGTERM);
  // The first signal has reached both workers (and they ignored it).
  REQUIRE(test::pollUntil([&] {
    return !readSignals(workerFile(w, "sig", 0, 0)).empty() &&
           !readSignals(workerFile(w, "sig", 0, 1)).empty();
  }));
  dtrun.signal(second);
  auto exit = dtrun.wait();
  INFO("dtrun stderr:\n" << dtrun.err());
  REQUIRE(exit);
  CHECK(exit->code == 1);
  auto exits = lastExits(events);
  CHECK(exits[0]["signal"] == SIGKILL);
  CHECK(exits[1]["signal"] == SIGKILL);
}

TEST_CASE("SIGUSR1 and SIGUSR2 reach every worker and the job goes on", "[e2e]") {
  test::TempDir tmp;
  const auto events = tmp.path() / "events.jsonl";
  Launch dtrun(withWorker({"--standalone", "--nproc-per-node=2", "--event-log", events.string()},
                          {"trap=USR1", "trap=USR2", "pid", "wait=go", "exit=0"}),
               tmp.path());
  const auto w = dtrun.workDir();
  requireWorkerFiles(w, "pid", 2);
  auto signalsSeen = [&](const std::vector<int>& expected) {
    return test::pollUntil([&] {
      return readSignals(workerFile(w, "sig", 0, 0)) == expected &&
             readSignals(workerFile(w, "sig", 0, 1)) == expected;
    });
  };
  dtrun.signal(SIGUSR1);
  CHECK(signalsSeen({SIGUSR1}));
  dtrun.signal(SIGUSR2);
  CHECK(signalsSeen({SIGUSR1, SIGUSR2}));
  test::writeFile(w / "go", "");
  auto exit = dtrun.wait();
  INFO("dtrun stderr:\n" << dtrun.err());
  REQUIRE(exit);
  CHECK(exit->code == 0);
  auto exits = lastExits(events);
  CHECK(exits[0]["exit_code"] == 0);
  CHECK(exits[1]["exit_code"] == 0);
}

}  // namespace dtrun::e2e
