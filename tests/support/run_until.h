// Stepping an io_context from a test's own thread, the way the agent's event loop runs it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>

namespace dtrun::test {

/// Runs `io` in steps of at most 20 ms until `done()` holds (true) or `timeout` passes (false):
/// handlers run on the calling thread, and the test waits on events, never on a sleep.
inline bool runUntil(boost::asio::io_context& io, const std::function<bool()>& done,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace dtrun::test
