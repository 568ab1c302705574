#include "rendezvous/store_connection.h"

#include <algorithm>
#include <exception>
#include <new>
#include <utility>

#include "common/error.h"
#include "common/log_text.h"

namespace dtrun::rendezvous {

StoreConnection::StoreConnection(StoreCore& core, StoreCore::ClientId id,
                                 const wire::Limits& limits, std::size_t maxReplyBytes,
                                 ConnectionBytes& total, std::string peer, std::string_view token,
                                 RequestCounts* counts)
    : core_(core),
      id_(id),
      decoder_(limits),
      maxReplyBytes_(maxReplyBytes),
      total_(total),
      peer_(std::move(peer)),
      token_(token),
      counts_(counts) {}

StoreConnection::~StoreConnection() { close(); }

void StoreConnection::close() {
  if (closed_) return;
  closed_ = true;
  out_.clear();
  inFlight_ = 0;
  total_.held -= accounted_;  // gives this connection's bytes back
  accounted_ = 0;
  core_.setExternalBytes(total_.held);
  try {
    core_.dropClient(id_);
  } catch (...) {
    // dropClient's ADDs swallow their own errors; nothing else in it allocates much. A failure
    // here must not escape a destructor.
  }
}

std::string StoreConnection::receive(std::string_view bytes) {
  std::string reason;
  try {
    // Only connections with close actions (agents' membership) are timed: workers' traffic
    // costs nothing here.
    if (hasCloseActions_ && !bytes.empty()) core_.noteHeard(id_, StoreCore::Clock::now());
    while (!bytes.empty()) {
      wire::DecodeResult r = decoder_.feed(bytes);
      bytes.remove_prefix(r.consumed);
      if (r.status == wire::DecodeStatus::kBad) {
        reason = r.error;
        break;
      }
      if (r.status == wire::DecodeStatus::kNeedMore) break;
      account();  // the request is complete: its bytes are no longer buffered input
      wire::Request& req = decoder_.request();
      try {
        handle(req);
      } catch (const std::exception& e) {
        reason = std::string(wire::opName(req.op)) + " failed: " + e.what();
        break;
      }
    }
    account();
    if (reason.empty() && decoder_.midRequest()) {
      // A request still arriving counts against the quota; past it, this connection goes.
      core_.admit(0, "request arriving on this connection");
    }
  } catch (const std::bad_alloc&) {
    reason = "out of memory while serving it";
  } catch (const std::exception& e) {
    reason = e.what();
  }
  return reason;
}

void StoreConnection::stopWaiting() {
  wire::encodeStatusReply(&out_, wire::kStopWaiting);
  account();
}

std::string StoreConnection::takeOutput() {
  std::string out = std::move(out_);
  out_.clear();
  inFlight_ += out.size();
  return out;
}

void StoreConnection::sent() {
  inFlight_ = 0;
  account();
}

std::optional<std::chrono::milliseconds> StoreConnection::takeLease() {
  return std::exchange(lease_, std::nullopt);
}

void StoreConnection::account() {
  const std::size_t now = decoder_.buffered() + out_.size() + inFlight_;
  total_.held = total_.held - accounted_ + now;
  accounted_ = now;
  core_.setExternalBytes(total_.held);
}

void StoreConnection::admitReply(std::size_t bytes, const wire::Request& req) const {
  if (bytes > maxReplyBytes_) {
    throw StoreRefused("reply of " + std::to_string(bytes) + " bytes to " +
                       std::to_string(req.keys.size()) + " keys refused: past the limit of " +
                       std::to_string(maxReplyBytes_) + " bytes per reply");
  }
  core_.admit(bytes, "reply");
}

namespace {

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Operations that only read the keys they name.
bool readsOnly(wire::Op op) {
  switch (op) {
    case wire::Op::kGet:
    case wire::Op::kCheck:
    case wire::Op::kWait:
    case wire::Op::kMultiGet:
    case wire::Op::kWaitChange:
    case wire::Op::kHeard:
      return true;
    default:
      return false;
  }
}

// Compares every byte whatever the first difference, so the time taken tells nothing of the
// token but its length.
bool sameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

void StoreConnection::checkAccess(const wire::Request& req) const {
  if (token_.empty() || authenticated_) return;
  for (const auto& k : req.keys) {
    if (!startsWith(k, kProtectedKeyPrefix)) continue;
    if (readsOnly(req.op) && startsWith(k, kOpenReadKeyPrefix)) continue;
    throw StoreRefused(std::string(wire::opName(req.op)) + " " + escapeForLog(k) +
                       " refused: keys under " + std::string(kProtectedKeyPrefix) +
                       " need the store's token, and this connection has not presented it");
  }
}

bool StoreConnection::mayList(const std::string& key) const {
  return token_.empty() || authenticated_ || !startsWith(key, kProtectedKeyPrefix);
}

void StoreConnection::noteWriter(const std::string& key) {
  if (!peer_.empty() && startsWith(key, kProtectedKeyPrefix)) core_.noteWriter(key, peer_);
}

void StoreConnection::noteWriters(const wire::Request& req) {
  switch (req.op) {
    case wire::Op::kSet:
    case wire::Op::kAdd:
    case wire::Op::kAppend:
    case wire::Op::kMultiSet:
    case wire::Op::kQueuePush:
    case wire::Op::kBarrier:
      for (const auto& k : req.keys) noteWriter(k);
      break;
    default:
      break;
  }
}

void StoreConnection::handle(wire::Request& req) {
  if (counts_) ++counts_->byOp[static_cast<std::size_t>(req.op)];
  checkAccess(req);
  serve(req);
  noteWriters(req);
}

void StoreConnection::serve(wire::Request& req) {
  StoreCore& core = core_;
  std::string& out = out_;
  switch (req.op) {
    case wire::Op::kValidate:
      if (req.word != wire::kValidationMagic) throw ProtocolError("bad validation magic");
      break;
    case wire::Op::kPing:
      wire::encodeWordReply(&out, req.word);
      break;
    case wire::Op::kSet:
      core.set(req.keys[0], std::move(req.values[0]));
      break;
    case wire::Op::kCompareSet: {
      const Bytes* current = core.find(req.keys[0]);
      // The reply is at most the larger of the stored and the desired value.
      admitReply(wire::valueReplySize(std::max(current ? current->size() : req.values[0].size(),
                                               req.values[1].size())),
                 req);
      // Only a swap that happens makes this client the key's writer (noteWriters skips CAS).
      const bool swaps = current ? *current == req.values[0] : req.values[0].empty();
      wire::encodeValueReply(&out,
                             core.compareSet(req.keys[0], req.values[0], std::move(req.values[1])));
      if (swaps) noteWriter(req.keys[0]);
      break;
    }
    case wire::Op::kGet: {
      // GET follows a WAIT in every torch client; a missing key answers empty, as libuv does.
      const Bytes* v = core.find(req.keys[0]);
      admitReply(wire::valueReplySize(v ? v->size() : 0), req);
      wire::encodeValueReply(&out, v ? std::string_view(*v) : std::string_view());
      break;
    }
    case wire::Op::kAdd:
      wire::encodeNumberReply(&out, core.add(req.keys[0], req.number));
      break;
    case wire::Op::kCheck:
      wire::encodeStatusReply(&out,
                              core.check(req.keys) ? wire::kCheckReady : wire::kCheckNotReady);
      break;
    case wire::Op::kWait:
      if (core.wait(id_, req.keys)) wire::encodeStatusReply(&out, wire::kStopWaiting);
      break;
    case wire::Op::kNumKeys:
      wire::encodeNumberReply(&out, core.numKeys());
      break;
    case wire::Op::kDeleteKey:
      wire::encodeNumberReply(&out, core.deleteKey(req.keys[0]) ? 1 : 0);
      break;
    case wire::Op::kAppend:
      core.append(req.keys[0], req.values[0]);
      break;
    case wire::Op::kMultiGet: {
      // The whole reply's size is known before a byte of it is built (one key named 200 times
      // must not make the store copy its value 200 times).
      std::size_t size = 0;
      for (const auto& k : req.keys) {
        const Bytes* v = core.find(k);
        size += wire::valueReplySize(v ? v->size() : 0);
        if (size > maxReplyBytes_) break;
      }
      admitReply(size, req);
      out.reserve(out.size() + size);
      for (const auto& k : req.keys) {
        const Bytes* v = core.find(k);
        wire::encodeValueReply(&out, v ? std::string_view(*v) : std::string_view());
      }
      break;
    }
    case wire::Op::kMultiSet:
      core.multiSet(req.keys, std::move(req.values));
      break;
    case wire::Op::kCancelWait:
      // A STOP_WAITING that completed first is already in out_, ahead of this reply.
      core.cancelWait(id_);
      wire::encodeStatusReply(&out, wire::kWaitCanceled);
      break;
    case wire::Op::kQueuePush:
      core.queuePush(req.keys[0], std::move(req.values[0]));
      break;
    case wire::Op::kQueuePop: {
      std::int64_t before = 0;
      auto front = core.queuePop(req.keys[0], &before);
      wire::encodeQueuePopReply(&out, before, front ? &*front : nullptr);
      break;
    }
    case wire::Op::kQueueLen:
      wire::encodeNumberReply(&out, core.queueLen(req.keys[0]));
      break;
    case wire::Op::kListKeys: {
      auto keys = core.keyNames();
      if (!token_.empty() && !authenticated_) {
        std::erase_if(keys, [this](const std::string& k) { return !mayList(k); });
      }
      std::size_t size = 8;
      for (const auto& k : keys) {
        size += wire::valueReplySize(k.get().size());
        if (size > maxReplyBytes_) break;
      }
      admitReply(size, req);
      wire::encodeNumberReply(&out, static_cast<std::int64_t>(keys.size()));
      for (const auto& k : keys) wire::encodeValueReply(&out, k.get());
      break;
    }
    case wire::Op::kBarrier:
      if (core.barrier(id_, req.keys[0], req.number)) {
        wire::encodeStatusReply(&out, wire::kStopWaiting);
      }
      break;
    case wire::Op::kWatchKey:
      throw ProtocolError("WATCH_KEY (torch 1.13 only, unused by torchrun) is not supported");
    case wire::Op::kAddOnClose:
      core.addOnClose(id_, req.keys[0], req.number);
      hasCloseActions_ = true;
      core.noteHeard(id_, StoreCore::Clock::now());
      break;
    case wire::Op::kLease:
      lease_ = std::chrono::milliseconds(req.word);
      break;
    case wire::Op::kWaitChange:
      if (core.waitChange(id_, req.keys[0], req.values[0])) {
        wire::encodeStatusReply(&out, wire::kStopWaiting);
      }
      break;
    case wire::Op::kAuth:
      if (token_.empty()) {
        wire::encodeStatusReply(&out, wire::kAuthNotRequired);
      } else if (sameSecret(req.values[0], token_)) {
        authenticated_ = true;
        wire::encodeStatusReply(&out, wire::kAuthAccepted);
      } else {
        // The reply goes out before the connection closes, so a dtrun client can say why.
        wire::encodeStatusReply(&out, wire::kAuthRefused);
        throw StoreRefused("the token presented is not the store's");
      }
      break;
    case wire::Op::kWriter: {
      const std::string* who = core.writerOf(req.keys[0]);
      wire::encodeValueReply(&out, who ? std::string_view(*who) : std::string_view());
      break;
    }
    case wire::Op::kHeard: {
      // At most 20 digits per key, known before a byte is built.
      admitReply(req.keys.size() * wire::valueReplySize(20), req);
      const auto now = StoreCore::Clock::now();
      for (const auto& k : req.keys) {
        const auto ago = core.heardAgo(k, now);
        wire::encodeValueReply(&out, ago ? std::to_string(ago->count()) : std::string());
      }
      break;
    }
  }
}

}  // namespace dtrun::rendezvous
