// StoreServer::Session: one client connection of the store server, its socket, its timers, and
// the StoreConnection (rendezvous/store_connection.h) that speaks the protocol. Replies are
// written in batches, so a pipelining client costs one write per read. Reading is reactor style
// (wait for readability, then read into the server's one buffer): a session keeps only the
// request it is receiving, so thousands of idle connections cost little. One timer serves both
// deadlines, the lease (nothing received for that long) and the frame timeout (a request begun
// and not finished). Whatever a handler throws closes this connection only. Private to the
// server (rendezvous/store_server.cpp); touched on the server's io thread only.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/store_connection.h"
#include "rendezvous/store_server.h"

namespace dtrun::rendezvous {

class StoreServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(StoreServer& server, boost::asio::ip::tcp::socket socket, StoreCore::ClientId id);

  /// Starts reading requests.
  void start() { read(); }
  /// A parked WAIT/BARRIER/WAIT_CHANGE completed.
  void stopWaiting();
  /// Closes the socket; the pending handlers then finish with errors and the registry forgets us.
  void close();
  /// Logs why (once, rate-limited with every other session's) and closes. Replies already
  /// made (DTRUN_AUTH's "refused" among them) are sent first if the socket takes them now.
  void closeBecause(const std::string& kind, const std::string& why);
  /// "address:port" of the client.
  const std::string& peer() const { return peer_; }

 private:
  using Clock = std::chrono::steady_clock;
  // Replies wait while a write is in flight; past this much, reading pauses until it drains.
  static constexpr std::size_t kMaxPendingOut = 4 * 1024 * 1024;

  void read();
  // Runs a handler's body; whatever it throws closes this connection only.
  template <typename F>
  void guarded(F&& body);
  void onReadable();
  // The next deadline, lease or frame timeout, if any.
  std::optional<Clock::time_point> nextDeadline() const;
  // Re-armed lazily: a handler that finds the deadline moved waits again.
  void armTimer();
  void onTimer();
  void flush();

  StoreServer& server_;
  boost::asio::ip::tcp::socket socket_;
  std::string peer_;
  StoreConnection conn_;
  std::string out_;  // the write in flight
  bool writing_ = false;
  bool reading_ = false;
  bool closed_ = false;
  std::chrono::milliseconds lease_{0};
  Clock::time_point lastActivity_ = Clock::now();
  Clock::time_point requestStarted_ = Clock::now();
  boost::asio::steady_timer timer_;
  bool timerArmed_ = false;
  Clock::time_point timerAt_{};
};

}  // namespace dtrun::rendezvous
