// common/fd.h: UniqueFd owns a descriptor; writeAll delivers every byte or says the reader is
// gone. A full non-blocking descriptor is where the two writers dtrun had disagreed: one waited,
// the other dropped the output.
#include "common/fd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>

using dtrun::UniqueFd;
using dtrun::writeAll;
using namespace std::chrono_literals;

namespace {

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe makePipe(int flags = O_CLOEXEC) {
  int fds[2];
  REQUIRE(::pipe2(fds, flags) == 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

bool isOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// Reads from `fd` until `want` bytes came or 20 s passed; returns what came.
std::string readUpTo(int fd, std::size_t want) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  char buf[65536];
  while (out.size() < want && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace

TEST_CASE("UniqueFd closes what it owns, once, and moves ownership", "[common][fd]") {
  Pipe p = makePipe();
  const int fd = p.read.get();
  REQUIRE(isOpen(fd));
  {
    UniqueFd moved(std::move(p.read));
    CHECK_FALSE(p.read);
    CHECK(p.read.get() == -1);
    CHECK(moved.get() == fd);
    UniqueFd assigned;
    assigned = std::move(moved);
    CHECK(assigned.get() == fd);
    CHECK(isOpen(fd));
  }
  CHECK_FALSE(isOpen(fd));  // closed by the last owner only

  const int w = p.write.get();
  const int released = p.write.release();
  CHECK(released == w);
  CHECK_FALSE(p.write);
  CHECK(isOpen(w));  // release() does not close
  UniqueFd again(released);
  Pipe other = makePipe();
  const int next = other.read.get();
  again.reset(other.read.release());
  CHECK_FALSE(isOpen(w));      // reset() closes the old one...
  CHECK(again.get() == next);  // ...and holds the new one
}

TEST_CASE("writeAll delivers every byte to a descriptor", "[common][fd]") {
  Pipe p = makePipe();
  CHECK(writeAll(p.write.get(), "one line\n"));
  CHECK(writeAll(p.write.get(), ""));
  p.write.reset();
  CHECK(readUpTo(p.read.get(), 9) == "one line\n");
}

TEST_CASE("writeAll waits for a full non-blocking descriptor instead of dropping output",
          "[common][fd]") {
  // A console another process made non-blocking, filled up: EAGAIN is no reason to lose bytes.
  Pipe p = makePipe(O_CLOEXEC | O_NONBLOCK);
  std::size_t filled = 0;
  const std::string chunk(4096, 'f');
  for (;;) {
    ssize_t n = ::write(p.write.get(), chunk.data(), chunk.size());
    if (n < 0) break;
    filled += static_cast<std::size_t>(n);
  }
  REQUIRE(errno == EAGAIN);  // the pipe is full now
  const std::string tail = "the line written while the console was full\n";
  auto writer = std::async(std::launch::async, [&] { return writeAll(p.write.get(), tail); });
  const std::string got = readUpTo(p.read.get(), filled + tail.size());
  REQUIRE(writer.wait_for(20s) == std::future_status::ready);
  CHECK(writer.get());
  REQUIRE(got.size() == filled + tail.size());
  CHECK(got.substr(filled) == tail);
}

TEST_CASE("writeAll says false once the reader is gone", "[common][fd]") {
  Pipe p = makePipe();
  p.read.reset();
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGPIPE, &ignore, &old) == 0);  // dtrun ignores SIGPIPE too
  const bool ok = writeAll(p.write.get(), "nobody reads this\n");
  const int err = errno;
  ::sigaction(SIGPIPE, &old, nullptr);
  CHECK_FALSE(ok);
  CHECK(err == EPIPE);
  CHECK_FALSE(writeAll(-1, "x"));  // EBADF
}
