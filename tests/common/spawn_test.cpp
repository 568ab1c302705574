// common/spawn.h: the one way dtrun starts a program. Each defence is checked on its own, with a
// control that shows the check can fail.
#include "common/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <string>

#include "tests/support/test_support.h"

using dtrun::SpawnError;
using dtrun::spawnProcess;
using dtrun::SpawnSpec;
using namespace std::chrono_literals;

namespace {

// Waits for `pid` (a child of this process) and returns its wait status.
int reap(int pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Runs /bin/sh -c `script` with `spec`'s other settings and returns its exit code.
int shell(const std::string& script, SpawnSpec spec = {}) {
  spec.argv = {"/bin/sh", "-c", script};
  const int status = reap(spawnProcess(spec));
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("spawnProcess runs a program found in PATH and passes its arguments", "[common]") {
  SpawnSpec spec;
  spec.argv = {"sh", "-c", "exit $0", "7"};
  const int status = reap(spawnProcess(spec));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
}

TEST_CASE("a program that cannot run is an error before spawnProcess returns", "[common]") {
  SpawnSpec missing;
  missing.argv = {"dtrun-no-such-program"};
  try {
    spawnProcess(missing);
    FAIL("no error");
  } catch (const SpawnError& e) {
    CHECK(e.exitCode() == 127);
    CHECK(std::string(e.what()).find("dtrun-no-such-program") != std::string::npos);
  }
  missing.argv = {"/nonexistent/dir/program"};
  CHECK_THROWS_AS(spawnProcess(missing), SpawnError);

  dtrun::test::TempDir dir;
  const auto script = dir.path() / "not-executable";
  dtrun::test::writeFile(script, "#!/bin/sh\nexit 0\n");
  ::chmod(script.c_str(), 0644);
  SpawnSpec notExec;
  notExec.argv = {script.string()};
  try {
    spawnProcess(notExec);
    FAIL("no error");
  } catch (const SpawnError& e) {
    CHECK(e.exitCode() == 126);
    CHECK(std::string(e.what()).find("Permission denied") != std::string::npos);
  }
}

TEST_CASE("the environment, working directory and standard streams are the spec's", "[common]") {
  SpawnSpec env;
  env.env = std::vector<std::string>{"DTRUN_SPAWN_TEST=yes"};
  CHECK(shell("test \"$DTRUN_SPAWN_TEST\" = yes && test -z \"$HOME\"", env) == 0);

  dtrun::test::TempDir dir;
  SpawnSpec cwd;
  cwd.cwd = dir.path().string();
  CHECK(shell("test \"$(pwd -P)\" = \"" + std::filesystem::canonical(dir.path()).string() + "\"",
              cwd) == 0);

  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  SpawnSpec streams;
  streams.stdinFd = dtrun::kSpawnDevNull;
  streams.stdoutFd = out[1];
  streams.stderrFd = out[1];
  streams.argv = {"/bin/sh", "-c", "cat; echo out; echo err >&2"};
  const int pid = spawnProcess(streams);
  ::close(out[1]);
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  reap(pid);
  CHECK(got == "out\nerr\n");  // stdin was /dev/null: cat read nothing
}

TEST_CASE("the child has only 0, 1, 2 and the descriptors it keeps", "[common]") {
  // One descriptor that would leak through exec (no close-on-exec) and one that would not.
  const int leaky = ::open("/dev/null", O_RDONLY);
  const int cloexec = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(leaky > 2);
  REQUIRE(cloexec > 2);
  auto has = [](int fd) { return "test -e /proc/self/fd/" + std::to_string(fd); };
  auto lacks = [](int fd) { return "test ! -e /proc/self/fd/" + std::to_string(fd); };

  CHECK(shell(lacks(leaky) + " && " + lacks(cloexec)) == 0);
  SpawnSpec keep;
  keep.keepFds = {leaky, cloexec};
  CHECK(shell(has(leaky) + " && " + has(cloexec), keep) == 0);
  // Control: a plain fork+exec of the same shell does see the leaky descriptor.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", has(leaky).c_str(), static_cast<char*>(nullptr));
    ::_exit(99);
  }
  const int status = reap(pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  ::close(leaky);
  ::close(cloexec);
}

TEST_CASE("ownProcessGroup: the child leads a process group of its own", "[common]") {
  SpawnSpec spec;
  spec.argv = {"sleep", "60"};
  spec.ownProcessGroup = true;
  const int pid = spawnProcess(spec);
  CHECK(::getpgid(pid) == pid);
  ::kill(pid, SIGKILL);
  reap(pid);

  spec.ownProcessGroup = false;  // control
  const int same = spawnProcess(spec);
  CHECK(::getpgid(same) == ::getpgrp());
  ::kill(same, SIGKILL);
  reap(same);
}

TEST_CASE("parentDeathSignal: the child dies with the process that started it", "[common]") {
  // A middle process starts `sleep` and exits; with the signal set the sleep dies too, without
  // it (the control) the sleep lives on.
  for (const bool withSignal : {true, false}) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t middle = ::fork();
    if (middle == 0) {
      ::close(fds[0]);
      SpawnSpec spec;
      spec.argv = {"sleep", "60"};
      spec.parentDeathSignal = withSignal ? SIGKILL : 0;
      int pid = -1;
      try {
        pid = spawnProcess(spec);
      } catch (...) {
      }
      (void)!::write(fds[1], &pid, sizeof pid);
      ::_exit(0);
    }
    ::close(fds[1]);
    int sleeper = -1;
    REQUIRE(::read(fds[0], &sleeper, sizeof sleeper) == static_cast<ssize_t>(sizeof sleeper));
    ::close(fds[0]);
    reap(middle);
    REQUIRE(sleeper > 0);
    INFO("with PR_SET_PDEATHSIG: " << withSignal);
    if (withSignal) {
      CHECK(dtrun::test::pollUntil([&] { return !dtrun::test::processAlive(sleeper); }, 10s));
    } else {
      CHECK(dtrun::test::processAlive(sleeper));
      ::kill(sleeper, SIGKILL);
    }
  }
}

TEST_CASE("signal dispositions and the mask are reset for the child", "[common]") {
  // This process ignores SIGTERM and blocks SIGUSR1; neither may reach the child.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTERM, &ignore, &old);
  sigset_t usr1, oldMask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::pthread_sigmask(SIG_BLOCK, &usr1, &oldMask);
  SpawnSpec spec;
  spec.argv = {"sleep", "60"};
  const int pid = spawnProcess(spec);
  const int second = spawnProcess(spec);
  ::sigaction(SIGTERM, &old, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &oldMask, nullptr);
  ::kill(pid, SIGTERM);
  const int status = reap(pid);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM));
  // /proc shows the mask of a running child: nothing blocked.
  const std::string st = dtrun::test::readFile("/proc/" + std::to_string(second) + "/status");
  CHECK(st.find("SigBlk:\t0000000000000000") != std::string::npos);
  ::kill(second, SIGKILL);
  reap(second);
}

TEST_CASE("inheritedDescriptors lists what is open without close-on-exec", "[common]") {
  const int leaky = ::open("/dev/null", O_RDONLY);
  const int cloexec = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto fds = dtrun::inheritedDescriptors();
  CHECK(std::find(fds.begin(), fds.end(), leaky) != fds.end());
  CHECK(std::find(fds.begin(), fds.end(), cloexec) == fds.end());
  for (int fd : fds) CHECK(fd > 2);
  ::close(leaky);
  ::close(cloexec);
}
