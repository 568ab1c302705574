// common/exit_status.h: the one decoding of a waitpid() status, checked against real children
// (every exit code and the common signals), in the three ways dtrun reports it. The copies this
// replaced agreed on 128+n for a signal; torch's -n and the description come from here too.
#include "common/exit_status.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

using dtrun::ExitStatus;

namespace {

// The wait status of a child that ran `body`.
template <typename Body>
int statusOf(Body body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    body();
    ::_exit(99);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

TEST_CASE("ExitStatus decodes every exit code of a real child", "[common][exit_status]") {
  for (int code : {0, 1, 2, 3, 77, 126, 127, 128, 137, 255}) {
    INFO("exit code " << code);
    const ExitStatus s = ExitStatus::fromWaitStatus(statusOf([code] { ::_exit(code); }));
    CHECK_FALSE(s.signal);
    CHECK(s.code == code);
    CHECK(s.success() == (code == 0));
    CHECK(s.shellExitCode() == code);
    CHECK(s.torchExitCode() == code);
    CHECK(s.describe() == "exit code " + std::to_string(code));
  }
}

TEST_CASE("ExitStatus decodes a death by signal as 128+n, -n and its name",
          "[common][exit_status]") {
  for (int signo : {SIGKILL, SIGTERM, SIGSEGV, SIGINT, SIGABRT}) {
    INFO("signal " << signo);
    const ExitStatus s = ExitStatus::fromWaitStatus(statusOf([signo] {
      ::signal(signo, SIG_DFL);
      ::raise(signo);
    }));
    REQUIRE(s.signal == signo);
    CHECK_FALSE(s.success());
    CHECK(s.shellExitCode() == 128 + signo);  // the shell's, and --hostfile's per host
    CHECK(s.torchExitCode() == -signo);       // torch's in its failure report
  }
  CHECK(ExitStatus{0, SIGKILL}.describe() == "signal 9 (SIGKILL)");
  // Exit code 137 is not a signal, though the shell prints both as 137.
  const ExitStatus code137 = ExitStatus::fromWaitStatus(statusOf([] { ::_exit(137); }));
  CHECK_FALSE(code137.signal);
  CHECK(code137.torchExitCode() == 137);
}
