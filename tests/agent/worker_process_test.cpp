// WorkerProcess, WorkerGroup and OrphanGuard with real child processes: exits as events, the
// fences (own process group, parent-death signal, the guard), stop with its grace, the sweep.
// Each defence is tested on its own, without the others that would hide its absence. The io
// loop is stepped with run_for until what a case waits for happened, never slept on.
#include "agent/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "agent/orphan_guard.h"
#include "agent/worker_group.h"
#include "tests/agent/child_pipe.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using namespace dtrun::agent;
using dtrun::ExitStatus;
using dtrun::SpawnSpec;
using dtrun::test::pollUntil;
using dtrun::test::processAlive;
using dtrun::test::runUntil;
using namespace std::chrono_literals;

namespace {

SpawnSpec shell(const std::string& script) {
  SpawnSpec s;
  s.argv = {"/bin/sh", "-c", script};
  return s;
}

using Pipe = dtrun::agent::testing::ChildPipe;

}  // namespace

TEST_CASE("WorkerProcess: an exit code or a signal arrives as an event", "[agent][worker]") {
  boost::asio::io_context io;
  std::optional<ExitStatus> status;
  WorkerProcess w(io, shell("exit 5"), [&](ExitStatus s) { status = s; });
  CHECK(w.pid() > 0);
  REQUIRE(runUntil(io, [&] { return status.has_value(); }));
  CHECK(status->code == 5);
  CHECK_FALSE(status->signal);
  CHECK_FALSE(w.running());

  std::optional<ExitStatus> killed;
  WorkerProcess k(io, shell("kill -SEGV $$"), [&](ExitStatus s) { killed = s; });
  REQUIRE(runUntil(io, [&] { return killed.has_value(); }));
  REQUIRE(killed->signal);
  CHECK(*killed->signal == SIGSEGV);
  CHECK(killed->describe() == "signal 11 (SIGSEGV)");
  CHECK(killed->torchExitCode() == -11);
}

TEST_CASE("WorkerProcess: a program that cannot run exits 127 or 126 with the reason",
          "[agent][worker]") {
  boost::asio::io_context io;
  std::optional<ExitStatus> status;
  SpawnSpec missing;
  missing.argv = {"dtrun-test-no-such-program"};
  WorkerProcess w(io, missing, [&](ExitStatus s) { status = s; });
  REQUIRE(runUntil(io, [&] { return status.has_value(); }));
  CHECK(status->code == 127);
  CHECK(w.execError().find("dtrun-test-no-such-program") != std::string::npos);
}

TEST_CASE("WorkerProcess: the worker leads a process group of its own", "[agent][worker]") {
  boost::asio::io_context io;
  std::optional<ExitStatus> status;
  WorkerProcess w(io, shell("exec sleep 60"), [&](ExitStatus s) { status = s; });
  CHECK(::getpgid(w.pid()) == w.pid());
  CHECK(::getpgid(w.pid()) != ::getpgrp());
  w.signalGroup(SIGKILL);
  REQUIRE(runUntil(io, [&] { return status.has_value(); }));
}

TEST_CASE("WorkerProcess: a worker dies with its agent, with no guard to help", "[agent][worker]") {
  // A middle process plays the agent: it starts a worker and is gone, skipping every
  // destructor (as a SIGKILLed agent would). Only the parent-death signal can end the worker.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t agent = ::fork();
  if (agent == 0) {
    ::close(fds[0]);
    boost::asio::io_context io;
    WorkerProcess w(io, shell("exec sleep 60"), [](ExitStatus) {});
    int pid = w.pid();
    (void)!::write(fds[1], &pid, sizeof pid);
    ::_exit(0);
  }
  ::close(fds[1]);
  int worker = -1;
  REQUIRE(::read(fds[0], &worker, sizeof worker) == static_cast<ssize_t>(sizeof worker));
  ::close(fds[0]);
  ::waitpid(agent, nullptr, 0);
  REQUIRE(worker > 0);
  CHECK(pollUntil([&] { return !processAlive(worker); }, 10s));
  if (processAlive(worker)) ::kill(-worker, SIGKILL);
}

TEST_CASE("WorkerProcess: stop sends the signal, then SIGKILL after the grace", "[agent][worker]") {
  boost::asio::io_context io;
  Pipe out;
  // Ignores SIGTERM (inherited by the exec'd sleep) and says so once it does.
  SpawnSpec spec = shell("trap '' TERM; echo ready; exec sleep 60");
  spec.stdoutFd = out.write;
  std::optional<ExitStatus> status;
  WorkerProcess w(io, spec, [&](ExitStatus s) { status = s; });
  out.closeWrite();
  REQUIRE(out.line() == "ready");
  int stopped = 0;
  w.stop(SIGTERM, 300ms, [&] { ++stopped; });
  w.stop(SIGINT, 60s, [&] { ++stopped; });  // a second stop keeps the first's signal and grace
  REQUIRE(runUntil(io, [&] { return stopped == 2; }));
  REQUIRE(status);
  REQUIRE(status->signal);
  CHECK(*status->signal == SIGKILL);

  // A worker that obeys SIGTERM exits of it, and a stop after the exit completes at once.
  std::optional<ExitStatus> polite;
  WorkerProcess p(io, shell("exec sleep 60"), [&](ExitStatus s) { polite = s; });
  bool done = false;
  p.stop(SIGTERM, 60s, [&] { done = true; });
  REQUIRE(runUntil(io, [&] { return done; }));
  REQUIRE(polite);
  REQUIRE(polite->signal);
  CHECK(*polite->signal == SIGTERM);
  bool again = false;
  p.stop(SIGTERM, 60s, [&] { again = true; });
  CHECK(runUntil(io, [&] { return again; }));
}

TEST_CASE("WorkerGroup: one exit per local rank, signals to every group, stop waits for all",
          "[agent][worker]") {
  boost::asio::io_context io;
  WorkerGroup group(io);
  std::vector<WorkerSpec> specs;
  for (int lr = 0; lr < 3; ++lr) {
    WorkerSpec s;
    s.localRank = lr;
    s.rank = 10 + lr;
    s.spawn = shell(lr == 1 ? "exit 4" : "exec sleep 60");
    specs.push_back(s);
  }
  std::map<int, ExitStatus> exits;
  group.start(specs, [&](int lr, ExitStatus s) { exits[lr] = s; });
  REQUIRE(group.size() == 3);
  CHECK(group.groups().size() == 3);
  REQUIRE(runUntil(io, [&] { return exits.count(1) == 1; }));
  CHECK(exits[1].code == 4);
  CHECK(group.anyRunning());
  CHECK(group.runningPids().size() == 2);

  bool stopped = false;
  group.stop(SIGTERM, 60s, [&] { stopped = true; });
  REQUIRE(runUntil(io, [&] { return stopped; }));
  CHECK_FALSE(group.anyRunning());
  REQUIRE(exits.size() == 3);
  REQUIRE(exits[0].signal);
  REQUIRE(exits[2].signal);
  CHECK(*exits[0].signal == SIGTERM);
  CHECK(*exits[2].signal == SIGTERM);
}

TEST_CASE("WorkerGroup: the sweep ends what an exited worker left in its group",
          "[agent][worker]") {
  boost::asio::io_context io;
  WorkerGroup group(io);
  Pipe out;
  WorkerSpec spec;
  spec.spawn = shell("sleep 60 & echo $!");  // the worker exits; its child stays in the group
  spec.spawn.stdoutFd = out.write;
  std::optional<ExitStatus> exit;
  group.start({spec}, [&](int, ExitStatus s) { exit = s; });
  out.closeWrite();
  const int orphan = std::stoi(out.line());
  REQUIRE(runUntil(io, [&] { return exit.has_value(); }));
  CHECK(processAlive(orphan));
  group.sweep();
  CHECK(pollUntil([&] { return !processAlive(orphan); }, 10s));
}

TEST_CASE("OrphanGuard: when its owner dies the guard kills every group still listed",
          "[agent][worker]") {
  // The owner lists two groups, then takes one off the list, and dies without cleaning up.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t owner = ::fork();
  if (owner == 0) {
    ::close(fds[0]);
    OrphanGuard guard = OrphanGuard::start();
    int pids[2];
    for (int& pid : pids) {
      SpawnSpec s;
      s.argv = {"sleep", "60"};
      s.ownProcessGroup = true;  // no parent-death signal: only the guard can end it
      pid = dtrun::spawnProcess(s);
      guard.add(pid);
    }
    guard.remove(pids[1]);
    (void)!::write(fds[1], pids, sizeof pids);
    ::_exit(0);
  }
  ::close(fds[1]);
  int pids[2] = {-1, -1};
  REQUIRE(::read(fds[0], pids, sizeof pids) == static_cast<ssize_t>(sizeof pids));
  ::close(fds[0]);
  ::waitpid(owner, nullptr, 0);
  CHECK(pollUntil([&] { return !processAlive(pids[0]); }, 10s));
  CHECK(processAlive(pids[1]));  // removed from the list: left alone
  ::kill(pids[1], SIGKILL);
}
