// Steps an Asio io_context until a condition holds: the tests of code that runs on the agent's
// event loop wait for what they expect without a sleeping test thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>

namespace dtrun::test {

/// Runs `io` (blocking in it at most 20 ms at a time, so it wakes for every handler) until
/// `done()` holds or `timeout` passes; false on the deadline.
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
