// StackDump with real Python interpreters (/usr/bin/python3): a hung interpreter's stacks are
// collected on request and it keeps running; a healthy one behaves exactly as without dtrun's
// sitecustomize (the user's and the distribution's sitecustomize still run); a process that
// does not catch the signal is never sent it.
#include "agent/stack_dump.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <optional>

#include "tests/support/test_support.h"

using dtrun::agent::catchesSignal;
using dtrun::agent::StackDump;
using dtrun::test::pollUntil;
using dtrun::test::TempDir;
using namespace std::chrono_literals;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::map<std::string, std::string> baseEnv() {
  std::map<std::string, std::string> env;
  for (const char* k : {"PATH", "HOME", "LANG"}) {
    if (const char* v = std::getenv(k)) env[k] = v;
  }
  return env;
}

// A child with its stdout and stderr on one pipe.
struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string buffered;

  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    std::vector<std::string> envs;
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : envs) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out = fds[0];
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    ::close(out);
  }
  // The next line of output, waiting at most `timeout`.
  std::optional<std::string> line(std::chrono::milliseconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto nl = buffered.find('\n');
      if (nl != std::string::npos) {
        std::string l = buffered.substr(0, nl);
        buffered.erase(0, nl + 1);
        return l;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return std::nullopt;
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(out, buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      buffered.append(buf, static_cast<std::size_t>(n));
    }
  }
  // Everything until EOF, and the exit code.
  std::pair<std::string, int> finish() {
    std::string all = buffered;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(out, buf, sizeof buf)) > 0) all.append(buf, static_cast<std::size_t>(n));
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return {all, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
  }
};

std::optional<std::string> collect(boost::asio::io_context& io, StackDump& dump,
                                   std::vector<int> pids) {
  std::optional<std::string> got;
  dump.collect(std::move(pids), 10s, [&](std::string text) { got = std::move(text); });
  pollUntil([&] {
    io.restart();
    io.poll();
    return got.has_value();
  });
  return got;
}

bool havePython() { return ::access(kPython, X_OK) == 0; }

}  // namespace

TEST_CASE("stack dump: a hung Python worker's stacks, and it keeps running", "[stack_dump]") {
  if (!havePython()) {
    DTRUN_SKIP(kPython << " is missing, so there is no Python worker to ask for its stacks");
  }
  boost::asio::io_context io;
  StackDump dump(io);
  auto env = baseEnv();
  dump.addTo(env);
  Child py({kPython, "-c",
            "import os, sys, time\n"
            "def stuck_in_here():\n"
            "    print('ready', flush=True)\n"
            "    time.sleep(600)\n"
            "def waiting_child():\n"
            "    print('child', os.getpid(), flush=True)\n"
            "    time.sleep(600)\n"
            "if os.fork() == 0:\n"
            "    waiting_child()\n"
            "stuck_in_here()\n"},
           env);
  std::optional<std::string> ready, child;
  for (int i = 0; i < 2; ++i) {
    auto l = py.line();
    REQUIRE(l);
    (l->rfind("child", 0) == 0 ? child : ready) = *l;
  }
  REQUIRE(ready == "ready");
  const int childPid = std::stoi(child->substr(6));
  CHECK(catchesSignal(py.pid, dump.signal()));

  auto text = collect(io, dump, {py.pid});
  REQUIRE(text);
  CHECK_THAT(*text, Catch::Contains("Python stacks of pid " + std::to_string(py.pid)));
  CHECK_THAT(*text, Catch::Contains("in stuck_in_here"));
  CHECK(text->find("waiting_child") == std::string::npos);
  CHECK(dtrun::test::processAlive(py.pid));  // dumping is not dying

  // The forked child was re-armed with its own file.
  text = collect(io, dump, {childPid});
  REQUIRE(text);
  CHECK_THAT(*text, Catch::Contains("in waiting_child"));
  // A second request gets the new dump only.
  text = collect(io, dump, {py.pid});
  REQUIRE(text);
  CHECK(text->find("Python stacks of pid") == text->rfind("Python stacks of pid"));
  ::kill(childPid, SIGKILL);
}

TEST_CASE("stack dump: a healthy worker runs as it would without it", "[stack_dump]") {
  if (!havePython()) {
    DTRUN_SKIP(kPython << " is missing, so there is no Python worker to ask for its stacks");
  }
  boost::asio::io_context io;
  StackDump dump(io);
  TempDir user;
  dtrun::test::writeFile(user.path() / "sitecustomize.py",
                         "import sys\nsys.stderr.write('user sitecustomize ran\\n')\n");
  const std::string script =
      "import sys, signal, sitecustomize\n"
      "print('site', sitecustomize.__file__)\n"
      "print('handlers', [s for s in range(1, signal.NSIG) "
      "if signal.getsignal(s) not in (signal.SIG_DFL, None)])\n"
      "sys.exit(3)\n";
  auto plain = baseEnv();
  plain["PYTHONPATH"] = user.path().string();
  auto armed = plain;
  dump.addTo(armed);
  CHECK(armed["PYTHONPATH"] == dump.directory() + ":" + user.path().string());
  auto [without, rc1] = Child({kPython, "-c", script}, plain).finish();
  auto [with, rc2] = Child({kPython, "-c", script}, armed).finish();
  CHECK(rc1 == 3);
  CHECK(rc2 == 3);
  CHECK_THAT(with, Catch::Contains("user sitecustomize ran"));
  CHECK_THAT(with, Catch::Contains("site " + (user.path() / "sitecustomize.py").string()));
  CHECK(with == without);

  // Without a user one, the distribution's sitecustomize (Debian ships one) is the one that runs.
  auto distro = baseEnv();
  auto distroArmed = distro;
  dump.addTo(distroArmed);
  auto [d1, r1] = Child({kPython, "-c", script}, distro).finish();
  auto [d2, r2] = Child({kPython, "-c", script}, distroArmed).finish();
  CHECK(d1 == d2);
  CHECK(r1 == r2);
}

TEST_CASE("stack dump: processes that do not catch the signal are never sent it", "[stack_dump]") {
  boost::asio::io_context io;
  StackDump dump(io);
  auto env = baseEnv();
  dump.addTo(env);
  Child sh({"/bin/sh", "-c", "echo up; exec sleep 600"}, env);
  REQUIRE(sh.line() == "up");
  CHECK_FALSE(catchesSignal(sh.pid, dump.signal()));
  auto text = collect(io, dump, {sh.pid, 0, -5});
  REQUIRE(text);
  CHECK(text->empty());
  CHECK(dtrun::test::processAlive(sh.pid));  // the signal's default action would have killed it
}
