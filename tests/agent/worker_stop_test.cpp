// Stops that cannot wait for ever, with real processes: a SIGSTOPped worker gets SIGCONT with
// the termination signal and exits of it at once; a worker that even SIGKILL cannot end (state
// D: here a cgroup v1 freezer holds it, as a job scheduler's suspend does) is given up on after a
// second grace, with a line, and reaped once it finally exits; the destructor never waits on it
// for long; a stop that takes long names the workers it still waits for.
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "agent/process_tree.h"
#include "agent/worker_group.h"
#include "agent/worker_process.h"
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

char stateLetter(int pid) {
  auto st = readProcStat(pid);
  return st ? st->state : '?';
}

// A logger whose lines the test reads.
struct Captured {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> log = std::make_shared<spdlog::logger>(
      "agent", std::make_shared<spdlog::sinks::ostream_sink_st>(text));
  bool has(const std::string& s) const { return text.str().find(s) != std::string::npos; }
};

// A cgroup v1 freezer group of this test's own: processes in it, once frozen, sit in state D
// and do not act on SIGKILL until thawed. Thawed and removed when destroyed, whatever happened.
class Freezer {
 public:
  Freezer() : dir_("/sys/fs/cgroup/freezer/dtrun-test-" + std::to_string(::getpid())) {
    if (::mkdir(dir_.c_str(), 0755) == 0 || errno == EEXIST)
      ok_ = std::filesystem::exists(dir_ / "freezer.state");
  }
  ~Freezer() {
    if (!ok_) return;
    thaw();
    // The group can only go once it is empty: the tests kill and reap what they put in it.
    pollUntil([&] { return ::rmdir(dir_.c_str()) == 0 || errno == ENOENT; }, 10s);
  }
  bool usable() const { return ok_; }
  void add(int pid) { write("tasks", std::to_string(pid)); }
  void freeze() { write("freezer.state", "FROZEN"); }
  void thaw() { write("freezer.state", "THAWED"); }

 private:
  void write(const std::string& file, const std::string& value) {
    std::ofstream f(dir_ / file);
    f << value << std::flush;
  }
  std::filesystem::path dir_;
  bool ok_ = false;
};

}  // namespace

TEST_CASE("WorkerProcess: a stopped worker gets SIGCONT with SIGTERM and exits of it at once",
          "[agent][worker][stop]") {
  boost::asio::io_context io;
  Captured lines;
  std::optional<ExitStatus> status;
  WorkerProcess w(
      io, shell("exec sleep 60"), [&](ExitStatus s) { status = s; }, lines.log, "local_rank 0");
  REQUIRE(::kill(w.pid(), SIGSTOP) == 0);
  REQUIRE(pollUntil([&] { return stateLetter(w.pid()) == 'T'; }, 10s));
  bool done = false;
  // A grace far beyond the test's deadline: only SIGCONT can make the worker exit within it.
  w.stop(SIGTERM, 600s, [&] { done = true; });
  REQUIRE(runUntil(io, [&] { return done; }));
  REQUIRE(status);
  REQUIRE(status->signal);
  CHECK(*status->signal == SIGTERM);  // of the SIGTERM, not a SIGKILL after the grace
  CHECK_FALSE(w.abandoned());
  CHECK_FALSE(lines.has("SIGKILL"));
}

TEST_CASE("WorkerProcess: a worker SIGKILL cannot end is given up on after a second grace",
          "[agent][worker][stop]") {
  Freezer freezer;
  if (!freezer.usable()) DTRUN_SKIP("no writable cgroup v1 freezer (/sys/fs/cgroup/freezer)");
  boost::asio::io_context io;
  Captured lines;
  std::optional<ExitStatus> status;
  WorkerProcess w(
      io, shell("exec sleep 60"), [&](ExitStatus s) { status = s; }, lines.log,
      "local_rank 1 (rank 3)");
  const int pid = w.pid();
  freezer.add(pid);
  freezer.freeze();
  REQUIRE(pollUntil([&] { return stateLetter(pid) == 'D'; }, 10s));

  bool done = false;
  w.stop(SIGTERM, 300ms, [&] { done = true; });
  REQUIRE(runUntil(io, [&] { return done; }));
  REQUIRE(status);
  CHECK(status->signal == SIGKILL);
  CHECK(w.abandoned());
  CHECK_FALSE(w.running());
  CHECK(processAlive(pid));  // still there: nothing waited for it
  INFO(lines.text.str());
  CHECK(lines.has("local_rank 1 (rank 3) (pid " + std::to_string(pid) +
                  ", uninterruptible (D: waiting on I/O, a driver or a frozen cgroup; even "
                  "SIGKILL waits)) did not exit within the 0.3 s grace after SIGTERM; sending "
                  "SIGKILL"));
  CHECK(lines.has("has not exited 0.3 s after SIGKILL; going on without it"));

  // Thawed, it dies of the pending SIGKILL and is reaped by its WorkerProcess.
  freezer.thaw();
  REQUIRE(runUntil(io, [&] { return lines.has("given up on earlier, has exited"); }));
  CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);  // ECHILD: reaped already
}

TEST_CASE("WorkerProcess: destroying a worker SIGKILL cannot end does not wait for it",
          "[agent][worker][stop]") {
  Freezer freezer;
  if (!freezer.usable()) DTRUN_SKIP("no writable cgroup v1 freezer (/sys/fs/cgroup/freezer)");
  boost::asio::io_context io;
  Captured lines;
  int pid = 0;
  {
    WorkerProcess w(io, shell("exec sleep 60"), nullptr, lines.log, "local_rank 0");
    pid = w.pid();
    freezer.add(pid);
    freezer.freeze();
    REQUIRE(pollUntil([&] { return stateLetter(pid) == 'D'; }, 10s));
  }  // the destructor SIGKILLs it and waits at most kDestroyBound
  CHECK(processAlive(pid));
  CHECK(lines.has("has not exited 2.0 s after SIGKILL; leaving it"));
  freezer.thaw();
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);  // the pending SIGKILL ends it once thawed
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("WorkerGroup: a stop that takes long names the workers it still waits for",
          "[agent][worker][stop]") {
  boost::asio::io_context io;
  Captured lines;
  WorkerGroup group(io, lines.log);
  std::vector<WorkerSpec> specs(2);
  for (int lr = 0; lr < 2; ++lr) {
    specs[lr].localRank = lr;
    specs[lr].rank = 4 + lr;
    // local rank 1 ignores SIGTERM (the exec'd sleep inherits the ignored disposition).
    specs[lr].spawn = shell(lr == 1 ? "trap '' TERM; exec sleep 60" : "exec sleep 60");
  }
  std::map<int, ExitStatus> exits;
  group.start(specs, [&](int lr, ExitStatus s) { exits[lr] = s; });
  const int stubborn = group.worker(1).pid();
  // The trap must be set before the stop, or the shell dies of SIGTERM.
  REQUIRE(pollUntil(
      [&] {
        std::ifstream f("/proc/" + std::to_string(stubborn) + "/comm");
        std::string comm;
        return std::getline(f, comm) && comm == "sleep";
      },
      10s));
  bool stopped = false;
  group.stop(SIGTERM, 2s, [&] { stopped = true; });
  REQUIRE(runUntil(io, [&] { return stopped; }));
  INFO(lines.text.str());
  CHECK(exits.at(0).signal == SIGTERM);
  CHECK(exits.at(1).signal == SIGKILL);
  // One notice before the SIGKILL, naming only the worker still there, and the SIGKILL line.
  CHECK(lines.has("stopping the workers (SIGTERM "));
  CHECK(lines.has("still waiting for local_rank 1 (pid " + std::to_string(stubborn) +
                  ", sleeping); SIGKILL in "));
  CHECK_FALSE(lines.has("still waiting for local_rank 0"));
  CHECK(lines.has("local_rank 1 (rank 5) (pid " + std::to_string(stubborn) +
                  ", sleeping) did not exit within the 2.0 s grace after SIGTERM; sending "
                  "SIGKILL"));
}
