// FileTimerServer against a real FIFO and real writer processes: each writer is a forked process
// group leader (as a worker is) that sends the lines it is told to, one open/write/close each,
// as torch's FileTimerClient does, and stays alive until the test ends it.
#include "agent/file_timer.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <sstream>

#include "agent/process_tree.h"
#include "common/error.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using dtrun::agent::FileTimerServer;
using dtrun::agent::ownerOf;
using dtrun::agent::parseFileTimerRequest;
using dtrun::agent::TimerExpiry;
using dtrun::test::pollUntil;
using dtrun::test::runUntil;
using dtrun::test::TempDir;
using namespace std::chrono_literals;

namespace {

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// torch's FileTimerRequest.to_json() with "$PID" for the sender's pid.
std::string request(const std::string& scope, double expiration, int signal = SIGKILL) {
  std::ostringstream s;
  s.precision(17);
  s << R"({"version": 1, "pid": $PID, "scope_id": ")" << scope << R"(", "expiration_time": )"
    << expiration << R"(, "signal": )" << signal << "}";
  return s.str();
}

void writeLine(const std::string& fifo, const std::string& bytes) {
  // Opened as torch's client opens it; then blocking, so that a line past the FIFO's buffer is
  // written whole (a client's request is far smaller).
  int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) ::_exit(3);
  ::fcntl(fd, F_SETFL, 0);
  if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) ::_exit(4);
  ::close(fd);
}

std::string withPid(std::string line, int pid) {
  for (auto at = line.find("$PID"); at != std::string::npos; at = line.find("$PID")) {
    line.replace(at, 4, std::to_string(pid));
  }
  return line;
}

// A forked process group leader. Commands go over a pipe, one per line:
//   "send <bytes>"   writes <bytes> (with $PID = its pid) to the FIFO, as is
//   "child <line>"   forks a child that sends <line> + '\n' with its own pid and then waits;
//                    the child's pid comes back on the reply pipe
class Writer {
 public:
  explicit Writer(std::string fifo) : fifo_(std::move(fifo)) {
    int cmd[2], reply[2];
    REQUIRE(::pipe2(cmd, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(reply, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::close(cmd[1]);
      ::close(reply[0]);
      serve(cmd[0], reply[1]);
      ::_exit(0);
    }
    ::setpgid(pid_, pid_);  // both sides, so the group exists whoever runs first
    ::close(cmd[0]);
    ::close(reply[1]);
    cmd_ = cmd[1];
    reply_ = reply[0];
  }
  ~Writer() {
    ::close(cmd_);
    ::close(reply_);
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }

  void send(const std::string& bytes) { command("send " + bytes); }
  void line(const std::string& json) { send(json + "\n"); }
  /// Returns the pid of the child that sent `json`.
  int childSends(const std::string& json) {
    command("child " + json);
    char buf[32] = {};
    ssize_t n = ::read(reply_, buf, sizeof buf - 1);
    REQUIRE(n > 0);
    return std::atoi(buf);
  }

 private:
  void command(const std::string& c) {
    // Length-prefixed: payloads may hold newlines and any byte.
    std::uint32_t len = static_cast<std::uint32_t>(c.size());
    REQUIRE(::write(cmd_, &len, sizeof len) == sizeof len);
    REQUIRE(::write(cmd_, c.data(), c.size()) == static_cast<ssize_t>(c.size()));
  }

  void serve(int in, int out) {
    for (;;) {
      std::uint32_t len = 0;
      if (::read(in, &len, sizeof len) != sizeof len) return;
      std::string c(len, '\0');
      std::size_t got = 0;
      while (got < len) {
        ssize_t n = ::read(in, c.data() + got, len - got);
        if (n <= 0) return;
        got += static_cast<std::size_t>(n);
      }
      if (c.rfind("send ", 0) == 0) {
        writeLine(fifo_, withPid(c.substr(5), ::getpid()));
      } else if (c.rfind("child ", 0) == 0) {
        pid_t child = ::fork();
        if (child == 0) {
          writeLine(fifo_, withPid(c.substr(6), ::getpid()) + "\n");
          for (;;) ::pause();
        }
        std::string p = std::to_string(child);
        if (::write(out, p.data(), p.size()) < 0) return;
      }
    }
  }

  std::string fifo_;
  pid_t pid_ = -1;
  int cmd_ = -1;
  int reply_ = -1;
};

struct Fixture {
  TempDir dir;
  boost::asio::io_context io;
  std::ostringstream logText;
  std::shared_ptr<spdlog::logger> log = std::make_shared<spdlog::logger>(
      "timer", std::make_shared<spdlog::sinks::ostream_sink_st>(logText));
  std::map<int, int> roots;  // writer pid -> owner
  std::vector<TimerExpiry> expiries;
  std::vector<std::chrono::system_clock::time_point> reportedAt;
  std::string fifo = (dir.path() / "timer.fifo").string();
  FileTimerServer server{io, fifo, [this](int pid) { return ownerOf(pid, roots); },
                         [this](const TimerExpiry& e) {
                           expiries.push_back(e);
                           reportedAt.push_back(std::chrono::system_clock::now());
                         },
                         log};

  Fixture() { server.start(); }
  bool waitRequests(std::uint64_t n) {
    return runUntil(io, [&] { return server.stats().requests >= n; });
  }
  bool waitExpiries(std::size_t n) {
    return runUntil(io, [&] { return expiries.size() >= n; });
  }
};

}  // namespace

TEST_CASE("file timer: torch's request lines parse, anything else is a ProtocolError",
          "[file_timer]") {
  auto r = parseFileTimerRequest(
      R"({"version": 1, "pid": 42, "scope_id": "train.py#7", "expiration_time": 1700000000.25, "signal": 9})");
  CHECK(r.pid == 42);
  CHECK(r.scopeId == "train.py#7");
  CHECK(r.expirationTime == 1700000000.25);
  CHECK(r.signal == 9);
  CHECK_FALSE(r.release());
  // torch's release: expiration_time -1, signal 0. An integer expiration is a number too.
  auto rel = parseFileTimerRequest(
      R"({"version": 1, "pid": 42, "scope_id": "s", "expiration_time": -1, "signal": 0})");
  CHECK(rel.release());
  // No version is accepted (torch never reads it); another version is not.
  CHECK(parseFileTimerRequest(R"({"pid": 1, "scope_id": "", "expiration_time": 0, "signal": 15})")
            .signal == 15);
  for (const char* bad : {
           "garbage",
           "[1, 2]",
           R"({"version": 2, "pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 9})",
           R"({"pid": 0, "scope_id": "s", "expiration_time": 1, "signal": 9})",
           R"({"pid": -3, "scope_id": "s", "expiration_time": 1, "signal": 9})",
           R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 1, "signal": 9})",
           R"({"pid": "12", "scope_id": "s", "expiration_time": 1, "signal": 9})",
           R"({"pid": 1.5, "scope_id": "s", "expiration_time": 1, "signal": 9})",
           R"({"pid": 1, "scope_id": 7, "expiration_time": 1, "signal": 9})",
           R"({"pid": 1, "scope_id": "s", "expiration_time": "soon", "signal": 9})",
           R"({"pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 999})",
           R"({"pid": 1, "scope_id": "s", "expiration_time": 1})",
           R"({"pid": 1, "scope_id": "s", "expiration_time": 1, "signal": true})",
       }) {
    INFO(bad);
    CHECK_THROWS_AS(parseFileTimerRequest(bad), dtrun::ProtocolError);
  }
}

TEST_CASE("file timer: an overstayed deadline is reported once, after it passed", "[file_timer]") {
  Fixture f;
  Writer w(f.fifo);
  f.roots[w.pid()] = 3;
  const double deadline = nowSeconds() + 0.3;
  w.line(request("step", deadline));
  REQUIRE(f.waitExpiries(1));
  const auto& e = f.expiries[0];
  CHECK(e.pid == w.pid());
  CHECK(e.owner == 3);
  CHECK(e.scopeId == "step");
  CHECK(e.signal == SIGKILL);
  CHECK(e.overstay >= 0ms);
  CHECK(std::chrono::duration<double>(e.deadline.time_since_epoch()).count() ==
        Approx(deadline).margin(1e-3));
  // Acted on after the deadline, never before it.
  CHECK(f.reportedAt[0] >= e.deadline - 1ms);
  CHECK(f.server.armed() == 0);
  CHECK(f.server.stats().expired == 1);
}

TEST_CASE("file timer: a released or re-armed scope does not fire at its old deadline",
          "[file_timer]") {
  Fixture f;
  Writer a(f.fifo);
  Writer b(f.fifo);
  f.roots[a.pid()] = 0;
  f.roots[b.pid()] = 1;
  const double now = nowSeconds();
  // Margins wide enough for a loaded machine: the release must land before the old deadline.
  a.line(request("released", now + 1.5));
  a.line(request("moved", now + 1.5));
  b.line(request("witness", now + 2.5));
  REQUIRE(f.waitRequests(3));
  a.line(request("released", -1, 0));  // torch's release
  a.line(request("moved", now + 30));  // a second acquire replaces the deadline
  REQUIRE(f.waitRequests(5));
  CHECK(f.server.armed() == 2);
  // The witness fires after the old deadlines passed; nothing else did.
  REQUIRE(f.waitExpiries(1));
  CHECK(f.expiries[0].scopeId == "witness");
  CHECK(f.expiries.size() == 1);
  CHECK(f.server.armed() == 1);  // "moved", 30 s from now
  f.server.clearOwner(0);
  CHECK(f.server.armed() == 0);
}

TEST_CASE("file timer: per pid, the earliest expired timer with a signal is the one acted on",
          "[file_timer]") {
  Fixture f;
  Writer w(f.fifo);
  Writer quiet(f.fifo);
  f.roots[w.pid()] = 0;
  f.roots[quiet.pid()] = 1;
  const double past = nowSeconds() - 5;
  // Both already expired when they arrive: the first without a signal is skipped (torch). One
  // write (atomic on a FIFO), so the server reads the three in one go, as a client that sent
  // them before the server's next look: one at a time, the first would be acted on alone.
  w.send(request("no-signal", past, 0) + "\n" + request("term", past + 1, SIGTERM) + "\n" +
         request("kill", past + 2, SIGKILL) + "\n");
  quiet.line(request("watch-only", past, 0));
  REQUIRE(f.waitRequests(4));
  REQUIRE(f.waitExpiries(2));
  std::map<int, TimerExpiry> byPid;
  for (const auto& e : f.expiries) byPid[e.pid] = e;
  CHECK(byPid[w.pid()].scopeId == "term");
  CHECK(byPid[w.pid()].signal == SIGTERM);
  CHECK(byPid[w.pid()].overstay >= 3000ms);
  // No signal asked for: reported so the agent can log it, with signal 0 (torch: not reaped).
  CHECK(byPid[quiet.pid()].signal == 0);
  // Every timer of an expired pid is gone, as torch clears them.
  CHECK(f.server.armed() == 0);
  // expiration_time 0 is an acquire that has already expired, not a release.
  w.line(request("zero", 0));
  REQUIRE(f.waitExpiries(3));
  CHECK(f.expiries.back().scopeId == "zero");
}

TEST_CASE("file timer: requests from a worker's descendants count, strangers' do not",
          "[file_timer]") {
  Fixture f;
  Writer w(f.fifo);
  f.roots[w.pid()] = 5;
  const int child = w.childSends(request("forked", nowSeconds() + 0.2));
  REQUIRE(f.waitExpiries(1));
  CHECK(f.expiries[0].pid == child);
  CHECK(f.expiries[0].owner == 5);

  // A process outside every worker's tree: a writer that is no root and no root's descendant.
  Writer stranger(f.fifo);
  stranger.line(request("strange", nowSeconds()));
  REQUIRE(runUntil(f.io, [&] { return f.server.stats().ignored == 1; }));
  CHECK(f.server.armed() == 0);
  CHECK(f.expiries.size() == 1);
  CHECK_THAT(f.logText.str(), Catch::Contains("not a process of this job"));
}

TEST_CASE("file timer: a timer whose process exited before its deadline is dropped silently",
          "[file_timer]") {
  Fixture f;
  auto gone = std::make_unique<Writer>(f.fifo);
  Writer witness(f.fifo);
  f.roots[gone->pid()] = 0;
  f.roots[witness.pid()] = 1;
  gone->line(request("orphaned", nowSeconds() + 2));
  REQUIRE(f.waitRequests(1));
  gone.reset();  // killed and reaped: its pid is no longer of the job
  witness.line(request("witness", nowSeconds() + 2.5));
  REQUIRE(f.waitExpiries(1));
  CHECK(f.expiries[0].scopeId == "witness");
  CHECK(f.server.armed() == 0);
}

TEST_CASE("file timer: garbage is counted and logged, and never stops the server", "[file_timer]") {
  Fixture f;
  Writer w(f.fifo);
  f.roots[w.pid()] = 0;
  w.send("not json at all\n");
  w.send("{\"pid\": \n");
  w.send(std::string("\x00\x01\xff binary\n", 11));
  w.send("\n\r\n   \n");                        // blank lines are not requests, nor errors
  w.send(std::string(200 * 1024, 'x') + "\n");  // far past any request: skipped to its end
  // Bytes left without a '\n' glue onto the next request: it is still read.
  w.send("half a line");
  w.line(request("glued", nowSeconds() + 0.1));
  w.line(request("after", -1, 0));
  REQUIRE(f.waitExpiries(1));
  REQUIRE(runUntil(f.io, [&] { return f.server.stats().requests == 2; }));
  CHECK(f.server.stats().malformed == 5);
  CHECK(f.expiries.size() == 1);
  CHECK(f.expiries[0].scopeId == "glued");
  // The first malformed line is quoted; the rest wait for the rate-limited count.
  const std::string log = f.logText.str();
  CHECK_THAT(log, Catch::Contains("not json at all"));
  CHECK(log.find("binary") == std::string::npos);
}

TEST_CASE("file timer: closed writers leave nothing to do on the io_context", "[file_timer]") {
  Fixture f;
  {
    Writer w(f.fifo);
    f.roots[w.pid()] = 0;
    for (int i = 0; i < 20; ++i) w.line(request("s" + std::to_string(i), -1, 0));
    REQUIRE(f.waitRequests(20));
  }
  // Every writer has closed the FIFO: a reader-only FIFO would now report EOF for ever (torch's
  // server sleeps between readline() calls for that reason). Here the read stays pending.
  f.io.restart();
  CHECK(f.io.poll() == 0);
  CHECK(f.io.poll() == 0);
}

TEST_CASE("file timer: deadlines from many processes at once", "[file_timer]") {
  Fixture f;
  std::vector<std::unique_ptr<Writer>> writers;
  const double base = nowSeconds() + 0.3;
  for (int i = 0; i < 32; ++i) {
    writers.push_back(std::make_unique<Writer>(f.fifo));
    f.roots[writers.back()->pid()] = i;
  }
  for (int i = 0; i < 32; ++i) {
    writers[i]->line(request("step", base + 0.01 * (i % 4)));
    writers[i]->line(request("inner", -1, 0));  // a release of an unarmed scope: harmless
  }
  REQUIRE(f.waitExpiries(32));
  std::set<int> owners;
  for (const auto& e : f.expiries) owners.insert(e.owner);
  CHECK(owners.size() == 32);
  CHECK(f.server.armed() == 0);
}

TEST_CASE("file timer: the FIFO path is created, reused after a crash, and never stolen",
          "[file_timer]") {
  TempDir dir;
  boost::asio::io_context io;
  auto log = std::make_shared<spdlog::logger>("t");
  auto none = [](int) { return std::optional<int>(); };
  auto ignore = [](const TimerExpiry&) {};
  const std::string path = (dir.path() / "t.fifo").string();

  // A stale FIFO (a killed agent's: no reader) is replaced.
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  {
    FileTimerServer s(io, path, none, ignore, log);
    s.start();
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
    // A second server on the same live path is refused by name.
    FileTimerServer second(io, path, none, ignore, log);
    CHECK_THROWS_WITH(second.start(), Catch::Contains(path) && Catch::Contains("another process"));
  }
  CHECK(::access(path.c_str(), F_OK) != 0);  // removed on stop

  // Something that is not a FIFO is never deleted.
  dtrun::test::writeFile(path, "precious");
  FileTimerServer s(io, path, none, ignore, log);
  CHECK_THROWS_AS(s.start(), dtrun::ConfigError);
  CHECK(dtrun::test::readFile(path) == "precious");

  // No path: a private FIFO in its own directory, both gone after stop().
  FileTimerServer priv(io, "", none, ignore, log);
  priv.start();
  const std::string p = priv.path();
  CHECK(::access(p.c_str(), F_OK) == 0);
  priv.stop();
  CHECK(::access(p.c_str(), F_OK) != 0);
  CHECK(::access(std::filesystem::path(p).parent_path().c_str(), F_OK) != 0);
}
