#include "agent/log_forwarder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <optional>
#include <sstream>

#include "common/error.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using dtrun::UniqueFd;
using dtrun::agent::LogForwarder;
using dtrun::agent::StreamOptions;
using dtrun::test::pollUntil;
using dtrun::test::readFile;
using dtrun::test::runUntil;
using dtrun::test::TempDir;
using dtrun::test::writeFile;
using namespace std::chrono_literals;

namespace {

// Forks `sh -c script` with `outFd` as its stdout; the test's other fds are close-on-exec.
pid_t spawnSh(const std::string& script, int outFd) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(outFd, 1);
    ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int waitExit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A file standing in for the agent's console (appending, like a shared terminal).
struct Console {
  explicit Console(const TempDir& dir, const char* name = "console.txt")
      : path((dir.path() / name).string()),
        fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  std::string text() const { return readFile(path); }
  std::string path;
  UniqueFd fd;
};

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Drains `id` and runs the io_context until the tail arrives.
std::optional<std::vector<std::string>> drain(boost::asio::io_context& io, LogForwarder& fwd,
                                              LogForwarder::StreamId id,
                                              std::chrono::milliseconds timeout = 20s) {
  std::optional<std::vector<std::string>> tail;
  fwd.drainAndClose(id, [&](std::vector<std::string> t) { tail = std::move(t); });
  runUntil(
      io, [&] { return tail.has_value(); }, timeout);
  return tail;
}

// Writes all of `s` to a pipe the test thread itself drains: non-blocking writes, stepping the
// io_context in between.
void feed(boost::asio::io_context& io, const UniqueFd& fd, std::string_view s) {
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
  REQUIRE(runUntil(io, [&] {
    ssize_t n = ::write(fd.get(), s.data(), s.size());
    if (n > 0) s.remove_prefix(static_cast<std::size_t>(n));
    return s.empty();
  }));
  ::fcntl(fd.get(), F_SETFL, flags);
}

void writeStr(const UniqueFd& fd, const std::string& s) {
  REQUIRE(::write(fd.get(), s.data(), s.size()) == static_cast<ssize_t>(s.size()));
}

// StreamOptions for the common cases (GCC 12's -Wextra rejects designated initializers that
// leave members out).
StreamOptions streamTo(int consoleFd, std::string prefix, std::string teeFile = "",
                       std::size_t tailLines = dtrun::agent::kDefaultTailLines) {
  StreamOptions o;
  o.consoleFd = consoleFd;
  o.prefix = std::move(prefix);
  o.teeFile = std::move(teeFile);
  o.tailLines = tailLines;
  return o;
}

StreamOptions filteredTo(std::string prefix, std::vector<std::string> filters,
                         std::string filterFile) {
  StreamOptions o;
  o.prefix = std::move(prefix);
  o.filters = std::move(filters);
  o.filterFile = std::move(filterFile);
  return o;
}

}  // namespace

TEST_CASE("LogForwarder prefixes lines, tees raw bytes and keeps the tail", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  LogForwarder fwd(io);
  auto tee = (dir.path() / "stdout.log").string();
  auto opened = fwd.open(streamTo(console.fd.get(), "[default0]:", tee));
  pid_t pid =
      spawnSh("printf 'hello\\nworld\\n'; printf 'no newline at the end'", opened.writeEnd.get());
  opened.writeEnd.reset();  // the agent's copy: without this close there is never an EOF
  CHECK(waitExit(pid) == 0);
  REQUIRE(runUntil(io, [&] { return console.text().size() >= 50; }));
  CHECK(fwd.tail(opened.id) == std::vector<std::string>{"hello", "world", "no newline at the end"});
  auto tail = drain(io, fwd, opened.id);
  REQUIRE(tail);
  CHECK(*tail == std::vector<std::string>{"hello", "world", "no newline at the end"});
  // The console line is ended so the next worker's line starts on its own; the file is exact.
  CHECK(console.text() == "[default0]:hello\n[default0]:world\n[default0]:no newline at the end\n");
  CHECK(readFile(tee) == "hello\nworld\nno newline at the end");
  CHECK(fwd.openStreams() == 0);
  CHECK(fwd.tail(opened.id).empty());
}

TEST_CASE("LogForwarder passes carriage-return progress lines through", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  LogForwarder fwd(io);
  auto tee = (dir.path() / "stderr.log").string();
  auto opened = fwd.open(streamTo(console.fd.get(), "[p]:", tee));
  pid_t pid = spawnSh("printf '10%%\\r50%%\\r100%%\\rdone\\n'; printf 'dos line\\r\\n'",
                      opened.writeEnd.get());
  CHECK(waitExit(pid) == 0);
  const std::string first =
      "[p]:10%\r[p]:50%\r[p]:100%\r[p]:done\n"
      "[p]:dos line\r\n";  // "\r\n" is one line end: no prefix before the '\n'
  REQUIRE(runUntil(io, [&] { return console.text().size() >= first.size(); }));
  CHECK(console.text() == first);
  // A progress update shows as soon as its '\r' arrives, with the pipe still open.
  writeStr(opened.writeEnd, "eta 3s\r");
  REQUIRE(runUntil(io, [&] { return console.text().size() == first.size() + 11; }));
  CHECK(console.text().substr(first.size()) == "[p]:eta 3s\r");
  CHECK(fwd.tail(opened.id) == std::vector<std::string>{"done", "dos line", "eta 3s"});
  writeStr(opened.writeEnd, "eta 2s\r");
  opened.writeEnd.reset();
  auto tail = drain(io, fwd, opened.id);
  REQUIRE(tail);
  // At the end, the last progress line is ended so the next worker's line cannot overwrite it.
  CHECK(console.text().substr(first.size()) == "[p]:eta 3s\r[p]:eta 2s\r\n");
  CHECK(readFile(tee) == "10%\r50%\r100%\rdone\ndos line\r\neta 3s\reta 2s\r");
  CHECK(*tail == std::vector<std::string>{"done", "dos line", "eta 2s"});
}

TEST_CASE("LogForwarder holds a partial line until it ends", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  LogForwarder fwd(io);
  auto tee = (dir.path() / "out.log").string();
  auto opened = fwd.open(streamTo(console.fd.get(), "[w]:", tee));
  writeStr(opened.writeEnd, "par");
  // The bytes reach the tee file (every read is appended) but not the console.
  REQUIRE(runUntil(io, [&] { return readFile(tee) == "par"; }));
  io.restart();
  io.run_for(50ms);
  CHECK(console.text().empty());
  writeStr(opened.writeEnd, "tial\nnext");
  REQUIRE(runUntil(io, [&] { return !console.text().empty(); }));
  CHECK(console.text() == "[w]:partial\n");

  // 64 KiB without a terminator are forwarded anyway (as a console line of their own).
  std::string big(100 * 1024, 'x');
  feed(io, opened.writeEnd, big);  // more than a pipe holds: the io_context must read meanwhile
  REQUIRE(runUntil(io, [&] { return console.text().size() > 64 * 1024; }));
  auto text = console.text();
  auto secondLine = text.substr(std::string("[w]:partial\n").size());
  CHECK(secondLine.rfind("[w]:next" + std::string(64 * 1024 - 4, 'x'), 0) == 0);
  opened.writeEnd.reset();  // EOF: the rest is flushed
  REQUIRE(runUntil(
      io, [&] { return console.text().back() == '\n' && console.text().size() > 100 * 1024 + 4; }));
  auto tail = drain(io, fwd, opened.id);
  REQUIRE(tail);
  CHECK(readFile(tee) == "partial\nnext" + big);  // the file is exactly the bytes written
  std::string consoleBody;
  for (const auto& line : splitLines(console.text())) {
    REQUIRE(line.rfind("[w]:", 0) == 0);
    consoleBody += line.substr(4);
  }
  CHECK(consoleBody == "partialnext" + big);
  REQUIRE(tail->size() == 3);
  CHECK((*tail)[0] == "partial");
  CHECK((*tail)[1].size() == dtrun::agent::kMaxTailLineBytes);  // cut for the report
}

TEST_CASE("LogForwarder never interleaves lines of many writers", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  LogForwarder fwd(io);
  constexpr int kWriters = 8;
  constexpr int kLines = 150;
  std::vector<LogForwarder::Opened> streams;
  std::vector<pid_t> pids;
  auto lineFor = [](int w, int i) {
    // "<writer>:<index>:" then 1000..24000 bytes of the writer's letter: longer than PIPE_BUF,
    // so the kernel splits them and reads see pieces.
    std::string head = std::to_string(w) + ":" + std::to_string(i) + ":";
    return head + std::string(1000 + (i * 7919 + w * 104729) % 23000, static_cast<char>('a' + w));
  };
  for (int w = 0; w < kWriters; ++w) {
    auto tee = (dir.path() / ("tee" + std::to_string(w))).string();
    streams.push_back(
        fwd.open(streamTo(console.fd.get(), "[default" + std::to_string(w) + "]:", tee)));
  }
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int fd = streams[w].writeEnd.get();
      for (int i = 0; i < kLines; ++i) {
        std::string line = lineFor(w, i) + "\n";
        // Odd-sized pieces, so segments straddle reads.
        for (std::size_t off = 0; off < line.size();) {
          std::size_t n = std::min<std::size_t>(777 + 131 * w, line.size() - off);
          ssize_t r = ::write(fd, line.data() + off, n);
          if (r <= 0) ::_exit(1);
          off += static_cast<std::size_t>(r);
        }
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (auto& s : streams) s.writeEnd.reset();
  std::size_t done = 0;
  std::vector<bool> exited(kWriters, false);
  // Keep the pipes flowing while the writers run; reap each one and drain its stream.
  REQUIRE(runUntil(io, [&] {
    for (int w = 0; w < kWriters; ++w) {
      int status = 0;
      if (!exited[w] && ::waitpid(pids[w], &status, WNOHANG) == pids[w]) {
        exited[w] = true;
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
        fwd.drainAndClose(streams[w].id, [&](std::vector<std::string>) { ++done; });
      }
    }
    return done == kWriters;
  }));

  auto lines = splitLines(console.text());
  REQUIRE(lines.size() == kWriters * kLines);
  std::vector<int> next(kWriters, 0);
  for (const auto& line : lines) {
    REQUIRE(line.rfind("[default", 0) == 0);
    int w = line[8] - '0';
    REQUIRE(w >= 0);
    REQUIRE(w < kWriters);
    // The whole line, intact, in this writer's order.
    REQUIRE(line == "[default" + std::to_string(w) + "]:" + lineFor(w, next[w]));
    ++next[w];
  }
  for (int w = 0; w < kWriters; ++w) {
    std::string expected;
    for (int i = 0; i < kLines; ++i) expected += lineFor(w, i) + "\n";
    CHECK(readFile(dir.path() / ("tee" + std::to_string(w))) == expected);
  }
}

TEST_CASE("LogForwarder copies filtered lines to the filter file", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  LogForwarder fwd(io);
  auto filtered = (dir.path() / "filtered_stderr.log").string();
  std::vector<std::string> filters = {"ERROR", "nan"};
  auto a = fwd.open(filteredTo("[r0]:", filters, filtered));
  auto b = fwd.open(filteredTo("[r1]:", filters, filtered));
  writeStr(a.writeEnd, "step 1 ok\nERROR: disk\nloss=nan\r");
  a.writeEnd.reset();
  auto ta = drain(io, fwd, a.id);
  writeStr(b.writeEnd, "fine\nanother ERROR here\n");
  b.writeEnd.reset();
  auto tb = drain(io, fwd, b.id);
  REQUIRE(ta);
  REQUIRE(tb);
  CHECK(readFile(filtered) == "[r0]:ERROR: disk\n[r0]:loss=nan\n[r1]:another ERROR here\n");
  CHECK(*ta == std::vector<std::string>{"step 1 ok", "ERROR: disk", "loss=nan"});
}

TEST_CASE("LogForwarder keeps only the last N lines", "[agent][logs]") {
  boost::asio::io_context io(1);
  LogForwarder fwd(io);
  auto s = fwd.open(streamTo(-1, "", "", 3));
  for (int i = 0; i < 10; ++i) writeStr(s.writeEnd, "line " + std::to_string(i) + "\n");
  writeStr(s.writeEnd, "progress 5%\r");
  REQUIRE(runUntil(
      io, [&] { return fwd.tail(s.id).size() == 3 && fwd.tail(s.id).back() == "progress 5%"; }));
  CHECK(fwd.tail(s.id) == std::vector<std::string>{"line 8", "line 9", "progress 5%"});
  auto none = fwd.open(streamTo(-1, "", "", 0));
  writeStr(none.writeEnd, "x\n");
  s.writeEnd.reset();
  none.writeEnd.reset();
  CHECK(drain(io, fwd, none.id)->empty());
  CHECK(*drain(io, fwd, s.id) == std::vector<std::string>{"line 8", "line 9", "progress 5%"});
}

TEST_CASE("drainAndClose returns promptly while a grandchild holds the pipe", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  LogForwarder fwd(io);
  auto s = fwd.open(streamTo(console.fd.get(), "[g]:"));
  // The worker starts a background job that inherits its stdout, says goodbye and exits.
  // Its stderr goes to /dev/null so that it holds no pipe of the test runner's.
  pid_t pid = spawnSh("sleep 120 2>/dev/null & echo $!; echo last words; printf 'partial'; exit 3",
                      s.writeEnd.get());
  s.writeEnd.reset();
  CHECK(waitExit(pid) == 3);
  auto start = std::chrono::steady_clock::now();
  auto tail = drain(io, fwd, s.id, 10s);
  auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(tail);
  CHECK(took < 5s);  // no wait for the grandchild's EOF (120 s away)
  REQUIRE(tail->size() == 3);
  int grandchild = std::stoi((*tail)[0]);
  REQUIRE(grandchild > 1);
  CHECK(dtrun::test::processAlive(grandchild));  // it really was still holding the write end
  ::kill(grandchild, SIGKILL);
  CHECK(pollUntil([&] { return !dtrun::test::processAlive(grandchild); }));
  CHECK((*tail)[1] == "last words");
  CHECK((*tail)[2] == "partial");
  CHECK(console.text() == "[g]:" + (*tail)[0] + "\n[g]:last words\n[g]:partial\n");
}

TEST_CASE("drainAndClose reads what the pipe still holds", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  LogForwarder fwd(io);
  auto s = fwd.open(streamTo(console.fd.get(), "> "));
  // Nothing runs the io_context while the worker writes and exits.
  pid_t pid =
      spawnSh("i=0; while [ $i -lt 500 ]; do echo \"line $i\"; i=$((i+1)); done", s.writeEnd.get());
  s.writeEnd.reset();
  CHECK(waitExit(pid) == 0);
  auto tail = drain(io, fwd, s.id);
  REQUIRE(tail);
  auto lines = splitLines(console.text());
  REQUIRE(lines.size() == 500);
  for (int i = 0; i < 500; ++i) CHECK(lines[i] == "> line " + std::to_string(i));
  CHECK(tail->back() == "line 499");
}

TEST_CASE("drainAndClose of an unknown id answers with no lines", "[agent][logs]") {
  boost::asio::io_context io(1);
  LogForwarder fwd(io);
  auto tail = drain(io, fwd, 12345);
  REQUIRE(tail);
  CHECK(tail->empty());
}

TEST_CASE("closeAll flushes and closes every stream", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  std::vector<UniqueFd> writeEnds;
  {
    LogForwarder fwd(io);
    for (int i = 0; i < 3; ++i) {
      auto s = fwd.open(streamTo(console.fd.get(), std::to_string(i) + ":"));
      writeStr(s.writeEnd, "unterminated " + std::to_string(i));
      writeEnds.push_back(std::move(s.writeEnd));  // like a worker that is still running
    }
    CHECK(fwd.openStreams() == 3);
    fwd.closeAll();
    CHECK(fwd.openStreams() == 0);
    CHECK(console.text() == "0:unterminated 0\n1:unterminated 1\n2:unterminated 2\n");
  }
  // Pending handlers run after the forwarder is gone and touch nothing of it.
  io.restart();
  io.poll();
  // The read ends are closed: a writer now gets EPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  CHECK(::write(writeEnds[0].get(), "x", 1) == -1);
  CHECK(errno == EPIPE);
  ::signal(SIGPIPE, SIG_DFL);
}

TEST_CASE("LogForwarder survives a console that went away", "[agent][logs]") {
  // `dtrun ... | head`: the reader of the agent's stdout exits. The agent ignores SIGPIPE; the
  // stream must go on feeding its tee file and tail.
  ::signal(SIGPIPE, SIG_IGN);
  boost::asio::io_context io(1);
  TempDir dir;
  int consolePipe[2];
  REQUIRE(::pipe2(consolePipe, O_CLOEXEC) == 0);
  ::close(consolePipe[0]);
  UniqueFd consoleWrite(consolePipe[1]);
  LogForwarder fwd(io);
  auto tee = (dir.path() / "t.log").string();
  auto s = fwd.open(streamTo(consoleWrite.get(), "[x]:", tee));
  writeStr(s.writeEnd, "one\ntwo\n");
  s.writeEnd.reset();
  auto tail = drain(io, fwd, s.id);
  ::signal(SIGPIPE, SIG_DFL);
  REQUIRE(tail);
  CHECK(*tail == std::vector<std::string>{"one", "two"});
  CHECK(readFile(tee) == "one\ntwo\n");
}

TEST_CASE("LogForwarder::open names a tee file it cannot create", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  LogForwarder fwd(io);
  auto bad = (dir.path() / "missing" / "stdout.log").string();
  try {
    fwd.open(streamTo(-1, "", bad));
    FAIL("no exception");
  } catch (const dtrun::Error& e) {
    CHECK(std::string(e.what()).find(bad) != std::string::npos);
  }
  CHECK(fwd.openStreams() == 0);
}

TEST_CASE("the write end reaches only the child it is given to", "[agent][logs]") {
  boost::asio::io_context io(1);
  TempDir dir;
  Console console(dir);
  LogForwarder fwd(io);
  auto s = fwd.open(streamTo(console.fd.get(), "[s]:"));
  CHECK((::fcntl(s.writeEnd.get(), F_GETFD) & FD_CLOEXEC) != 0);
  writeStr(s.writeEnd, "x");  // unterminated: only EOF puts it on the console
  // A sibling spawned while the write end is open must not inherit it, or EOF would wait
  // for the sibling too.
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  pid_t sibling = spawnSh("exec sleep 120", devnull);  // exec: the kill below reaches it
  ::close(devnull);
  s.writeEnd.reset();
  // No drainAndClose(): the EOF comes through the normal read path.
  CHECK(runUntil(io, [&] { return console.text() == "[s]:x\n"; }));
  CHECK(dtrun::test::processAlive(sibling));
  ::kill(sibling, SIGKILL);
  CHECK(waitExit(sibling) == 128 + SIGKILL);
  CHECK(drain(io, fwd, s.id) == std::vector<std::string>{"x"});
}

TEST_CASE("LogForwarder says when a stream, and any stream, last had output", "[agent][logs]") {
  boost::asio::io_context io(1);
  LogForwarder fwd(io);
  auto a = fwd.open(streamTo(-1, ""));
  auto b = fwd.open(streamTo(-1, ""));
  CHECK_FALSE(fwd.lastOutput());
  CHECK_FALSE(fwd.lastOutput(a.id));
  const auto before = std::chrono::steady_clock::now();
  writeStr(a.writeEnd, "step 1\n");
  REQUIRE(runUntil(io, [&] { return fwd.lastOutput(a.id).has_value(); }));
  const auto first = *fwd.lastOutput(a.id);
  CHECK(first >= before);
  CHECK(fwd.lastOutput() == first);
  CHECK_FALSE(fwd.lastOutput(b.id));  // b said nothing yet

  // Output on the other stream moves the group's time, not a's.
  writeStr(b.writeEnd, "partial line, no newline");
  REQUIRE(runUntil(io, [&] { return fwd.lastOutput(b.id).has_value(); }));
  CHECK(*fwd.lastOutput() >= *fwd.lastOutput(b.id));
  CHECK(fwd.lastOutput(a.id) == first);

  // Drained streams are forgotten; the group's last output stays.
  auto last = fwd.lastOutput();
  REQUIRE(drain(io, fwd, a.id));
  CHECK_FALSE(fwd.lastOutput(a.id));
  CHECK(fwd.lastOutput() == last);
}
