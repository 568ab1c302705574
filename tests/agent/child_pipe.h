// A pipe whose read end the test keeps while the write end becomes a child's stdout or stderr.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

namespace dtrun::agent::testing {

struct ChildPipe {
  int read = -1;
  int write = -1;
  ChildPipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    read = fds[0];
    write = fds[1];
  }
  ~ChildPipe() {
    closeWrite();
    if (read >= 0) ::close(read);
  }
  ChildPipe(const ChildPipe&) = delete;
  ChildPipe& operator=(const ChildPipe&) = delete;
  /// The test's copy of the write end: closed once the child has its own, or EOF never comes.
  void closeWrite() {
    if (write >= 0) ::close(write);
    write = -1;
  }
  /// One line the child wrote (without its '\n'), within 20 s.
  std::string line() {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    char c = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{read, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      if (::read(read, &c, 1) != 1 || c == '\n') break;
      out += c;
    }
    return out;
  }
  /// Everything to end-of-file, within 20 s of silence.
  std::string all() {
    std::string text;
    char buf[4096];
    for (;;) {
      pollfd p{read, POLLIN, 0};
      REQUIRE(::poll(&p, 1, 20000) == 1);
      ssize_t n = ::read(read, buf, sizeof(buf));
      if (n <= 0) return text;
      text.append(buf, static_cast<std::size_t>(n));
    }
  }
};

}  // namespace dtrun::agent::testing
