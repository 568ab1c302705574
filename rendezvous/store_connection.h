// StoreConnection: one client's side of the store protocol, with no I/O.
//
// The server feeds it the bytes a socket received and sends what it appends to its output; the
// fuzzer (tests/fuzz/store_fuzz.cpp) drives it the same way without sockets. Everything a
// request costs is decided before it is spent: the decoder refuses a frame past the limits as
// soon as its lengths arrive, a reply past maxReplyBytes or the store's quota is refused before
// it is built, and StoreCore refuses a write that would pass a value's limit or the quota. A
// refusal, a bad frame or any exception while serving (std::bad_alloc included) becomes the
// reason to close this one connection: receive() never throws (docs/store.md).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "rendezvous/store_core.h"
#include "rendezvous/wire_decoder.h"

namespace dtrun::rendezvous {

/// With a token set, keys under this prefix need it: the rendezvous' keys ("dtrun/<run id>/...")
/// and the abort keys, behind the "/" torch's client puts before every key (docs/store.md,
/// "Shared secret"). Workers' keys ("/worker/attempt_N/...", their own) stay open to torch.
inline constexpr std::string_view kProtectedKeyPrefix = "/dtrun/";
/// ... but anyone may read these: the abort keys (common/abort_key.h), which the workers'
/// runtime watches without the token. Writing them still needs it.
inline constexpr std::string_view kOpenReadKeyPrefix = "/dtrun/abort/";

/// Bytes every connection of one server holds (requests arriving, replies unsent), which
/// StoreCore's quota counts too.
struct ConnectionBytes {
  std::size_t held = 0;
};

/// Requests served, by operation, over every connection of one server (its metrics).
struct RequestCounts {
  std::array<std::uint64_t, wire::kOpCount> byOp{};
};

class StoreConnection {
 public:
  /// `peer` names the client as the core's writer records give it; `token` (empty: none) is the
  /// shared secret a client must present to touch protected keys; it must outlive this.
  StoreConnection(StoreCore& core, StoreCore::ClientId id, const wire::Limits& limits,
                  std::size_t maxReplyBytes, ConnectionBytes& total, std::string peer = {},
                  std::string_view token = {}, RequestCounts* counts = nullptr);
  /// close(), if not done yet. The core must still exist.
  ~StoreConnection();
  /// The client is gone: forgets its parked operation, runs its close actions, gives its bytes
  /// back. Idempotent; nothing may be fed afterwards.
  void close();
  StoreConnection(const StoreConnection&) = delete;
  StoreConnection& operator=(const StoreConnection&) = delete;

  /// Serves every request `bytes` completes, appending replies to output(). Returns "" to go on,
  /// or why the connection must close (already logged by nobody: the caller logs it once).
  std::string receive(std::string_view bytes);
  /// A parked WAIT/BARRIER/WAIT_CHANGE completed: appends STOP_WAITING.
  void stopWaiting();

  /// Replies not yet handed to the socket.
  bool hasOutput() const { return !out_.empty(); }
  /// Takes the unsent replies for one write; sent() says when it is done.
  std::string takeOutput();
  /// The write of what takeOutput() returned completed.
  void sent();
  /// Bytes of replies waiting or being written.
  std::size_t pendingOutput() const { return out_.size() + inFlight_; }

  /// A DTRUN_LEASE request arrived since the last call: the quiet time it asked for.
  std::optional<std::chrono::milliseconds> takeLease();
  /// True while a request has started arriving and is not complete.
  bool midRequest() const { return decoder_.midRequest(); }
  /// Bytes of the request arriving now, as received.
  std::size_t receivedRequest() const { return decoder_.received(); }
  wire::Dialect dialect() const { return decoder_.dialect(); }
  StoreCore::ClientId id() const { return id_; }
  /// The client presented the server's token (always false when the server has none).
  bool authenticated() const { return authenticated_; }

 private:
  /// Checks access, serves, notes writers.
  void handle(wire::Request& req);
  void serve(wire::Request& req);
  /// Refuses (StoreRefused) a request that touches protected keys before the token was shown.
  void checkAccess(const wire::Request& req) const;
  /// Records this client as the writer of the protected keys `req` wrote (COMPARE_SET: serve()
  /// does, when the swap happens).
  void noteWriters(const wire::Request& req);
  void noteWriter(const std::string& key);
  bool mayList(const std::string& key) const;
  /// Refuses (StoreRefused) a reply of `bytes` past maxReplyBytes or the quota.
  void admitReply(std::size_t bytes, const wire::Request& req) const;
  /// Brings this connection's share of ConnectionBytes up to date.
  void account();

  StoreCore& core_;
  StoreCore::ClientId id_;
  wire::RequestDecoder decoder_;
  std::size_t maxReplyBytes_;
  ConnectionBytes& total_;
  std::size_t accounted_ = 0;
  std::string out_;
  std::size_t inFlight_ = 0;
  std::optional<std::chrono::milliseconds> lease_;
  std::string peer_;
  std::string_view token_;
  RequestCounts* counts_;
  bool authenticated_ = false;
  bool hasCloseActions_ = false;  // DTRUN_HEARD times this connection
  bool closed_ = false;
};

}  // namespace dtrun::rendezvous
