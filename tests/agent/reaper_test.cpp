#include "agent/reaper.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <set>

#include "agent/process_tree.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using dtrun::agent::adoptedChildren;
using dtrun::agent::readProcStat;
using dtrun::agent::Reaper;
using dtrun::test::pollUntil;
using dtrun::test::runUntil;

namespace {

// A "worker" that leaves a daemon behind: the child forks a grandchild that leaves its process
// group (setsid) and waits for the pipe `release` to close (or, without one, pauses until killed),
// says its pid on a pipe, and exits. Returns the grandchild's pid once the worker is reaped, so
// the grandchild is an orphan of this (subreaper) process.
pid_t orphanBehindWorker(const int* release = nullptr) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t worker = ::fork();
  REQUIRE(worker >= 0);
  if (worker == 0) {
    ::close(fds[0]);
    if (release) ::close(release[1]);  // only the test's end keeps the daemon waiting
    const pid_t daemon = ::fork();
    if (daemon == 0) {
      ::setsid();
      ::close(fds[1]);
      if (!release) {
        for (;;) ::pause();
      }
      char c;
      while (::read(release[0], &c, 1) > 0) {
      }
      ::_exit(0);
    }
    (void)!::write(fds[1], &daemon, sizeof daemon);
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t daemon = 0;
  REQUIRE(::read(fds[0], &daemon, sizeof daemon) == sizeof daemon);
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  return daemon;
}

bool isOurChild(pid_t pid) {
  auto stat = readProcStat(pid);
  return stat && stat->ppid == ::getpid() && stat->state != 'Z';
}

// A pid is gone, zombie included, once kill(pid, 0) says ESRCH: reaped by someone.
bool reaped(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

TEST_CASE("Reaper: a worker's daemonised grandchild is adopted and ended by the sweep",
          "[reaper]") {
  boost::asio::io_context io;
  Reaper reaper(io, [] { return std::set<int>{}; });
  reaper.start();
  const pid_t daemon = orphanBehindWorker();
  // Re-parented to this process (the subreaper), not to init.
  REQUIRE(pollUntil([&] { return isOurChild(daemon); }));
  auto adopted = adoptedChildren({});
  CHECK(std::count(adopted.begin(), adopted.end(), daemon) == 1);
  CHECK(reaper.sweep() == 1);
  // SIGKILLed, and its zombie reaped on SIGCHLD (or by the sweep's own reap).
  CHECK(runUntil(io, [&] { return reaped(daemon); }));
  reaper.stop();
}

TEST_CASE("Reaper: an adopted orphan that exits by itself is reaped on SIGCHLD", "[reaper]") {
  boost::asio::io_context io;
  Reaper reaper(io, [] { return std::set<int>{}; });
  reaper.start();
  int release[2];
  REQUIRE(::pipe(release) == 0);
  const pid_t daemon = orphanBehindWorker(release);
  ::close(release[0]);
  REQUIRE(pollUntil([&] { return isOurChild(daemon); }));
  ::close(release[1]);  // the daemon exits now
  CHECK(runUntil(io, [&] { return reaped(daemon); }));
  reaper.stop();
}

TEST_CASE("Reaper: an owned process's status is left to its owner", "[reaper]") {
  boost::asio::io_context io;
  std::set<int> owned;
  Reaper reaper(io, [&] { return owned; });
  reaper.start();
  const pid_t worker = ::fork();
  REQUIRE(worker >= 0);
  if (worker == 0) ::_exit(7);
  owned.insert(worker);
  // Its zombie is there: the reaper peeks at it and leaves it.
  REQUIRE(pollUntil([&] {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(worker), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == worker;
  }));
  reaper.reap();
  CHECK(reaper.sweep() == 0);  // never signalled either
  io.restart();
  io.poll();  // the SIGCHLD handler too
  int status = 0;
  REQUIRE(::waitpid(worker, &status, WNOHANG) == worker);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  reaper.stop();
}

TEST_CASE("Reaper: with no child at all the sweep kills nothing", "[reaper]") {
  boost::asio::io_context io;
  Reaper reaper(io, [] { return std::set<int>{}; });
  CHECK(adoptedChildren({}).empty());
  CHECK(reaper.sweep() == 0);
}
