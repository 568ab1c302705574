// PyTorch TCPStore wire codec: both opcode tables (1.13 and 2.x), requests and responses.
//
// Framing (torch/csrc/distributed/c10d/Utils.hpp): one opcode byte, then arguments. Strings and
// values are a little-endian u64 length plus the bytes; numbers are i64, the VALIDATE magic and
// PING nonce u32. A connection's dialect is decided once from its first bytes: a 2.x client
// always opens with VALIDATE (`00 CE F7 85 3C`); a 1.13 client never does.
//
// dtrun-only operations use opcodes from 128 up in both dialects (docs/design.md, decision 1).
// This file and rendezvous/wire_decoder.h own every byte on the wire: requests (encoded here by
// clients, decoded there by the server) and replies (encoded here by the server, decoded there by
// clients); docs/store.md has the layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store.h"

namespace dtrun::rendezvous::wire {

enum class Dialect : std::uint8_t {
  kUnknown,   // not enough bytes seen yet
  kTorch113,  // torch 1.13: SET=0 ... DELETE_KEY=8, no VALIDATE
  kTorch2,    // torch >= 2.2: VALIDATE=0 ... BARRIER=18
};

/// Operations, independent of their number in either table.
enum class Op : std::uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
  kWatchKey,  // 1.13 only; dtrun decodes it to refuse it by name
  // dtrun-only (opcodes >= 128, the same in both dialects):
  kAddOnClose,  // key, i64 delta: when this connection closes, add delta to key (membership)
  kWaitChange,  // key, bytes: wait until key's value differs from bytes (absent: keep waiting)
  kLease,       // u32 ms: the server closes this connection when it sends nothing for that long
  kAuth,        // bytes: the shared secret (docs/store.md, "Shared secret"); u8 reply
  kWriter,      // key: the address of the client that last wrote key (protected keys only)
  kHeard,       // keys: per key, ms since the connection with a close action on it last sent
                // anything ("" when no open connection has one): the agents' last heard
};
/// How many operations Op names (for tables indexed by Op).
inline constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::kHeard) + 1;

constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;
// CheckResponseType, WaitResponseType (torch/csrc/distributed/c10d/TCPStoreBackend.hpp).
constexpr std::uint8_t kCheckReady = 0;
constexpr std::uint8_t kCheckNotReady = 1;
constexpr std::uint8_t kStopWaiting = 0;
constexpr std::uint8_t kWaitCanceled = 1;
// DTRUN_AUTH's reply.
constexpr std::uint8_t kAuthAccepted = 0;
constexpr std::uint8_t kAuthRefused = 1;      // wrong token; the server then closes the connection
constexpr std::uint8_t kAuthNotRequired = 2;  // the server has no token

/// Bounds checked before any allocation; a request past them is a bad frame.
struct Limits {
  std::size_t maxKeySize = 64 * 1024;
  std::size_t maxValueSize = 64 * 1024 * 1024;
  std::size_t maxKeysPerRequest = 128 * 1024;
  /// Bytes one request may occupy while it arrives (keys, values and 32 bytes of bookkeeping per
  /// argument): what one connection may buffer.
  std::size_t maxRequestBytes = 128 * 1024 * 1024;
};

/// One decoded request. Which fields are used depends on `op` (see wire.cpp's table).
struct Request {
  Op op = Op::kSet;
  std::vector<std::string> keys;  // key arguments in wire order
  std::vector<Bytes> values;  // value arguments: SET/APPEND/QUEUE_PUSH value, CAS expected+desired,
                              // MULTI_SET values, WAIT_CHANGE old value
  std::int64_t number = 0;    // ADD delta, BARRIER world size, ADD_ON_CLOSE delta
  std::uint32_t word = 0;     // VALIDATE magic, PING nonce
};

/// The dialect announced by a connection's first bytes; kUnknown until enough bytes arrived.
Dialect detectDialect(std::string_view firstBytes);

/// A request of `op` with these arguments (which ones `op` takes: wire.cpp's table).
Request makeRequest(Op op, std::vector<std::string> keys = {}, std::vector<Bytes> values = {},
                    std::int64_t number = 0, std::uint32_t word = 0);

/// A decoded reply; which fields are set depends on the request's op.
struct Reply {
  std::uint8_t status = 0;    // u8 replies
  std::uint32_t word = 0;     // PING
  std::int64_t number = 0;    // i64 replies, QUEUE_POP's length, LIST_KEYS' count
  std::vector<Bytes> values;  // bytes replies, in order
};

/// Appends the encoding of `request`; throws ProtocolError when the dialect lacks the op.
void encodeRequest(Dialect dialect, const Request& request, std::string* out);
/// The encoding of makeRequest(op, ...), for tests and load generators.
std::string encodeFrame(Dialect dialect, Op op, std::vector<std::string> keys = {},
                        std::vector<Bytes> values = {}, std::int64_t number = 0,
                        std::uint32_t word = 0);

/// The opcode byte of `op` in `dialect`, if it has one.
std::optional<std::uint8_t> opcodeOf(Dialect dialect, Op op);
/// The operation an opcode byte means in `dialect`, if any.
std::optional<Op> opOf(Dialect dialect, std::uint8_t opcode);
/// "SET", "COMPARE_SET", ...: torch's names, for logs and errors.
const char* opName(Op op);

// Replies. The server appends them with the encode*Reply functions; a client decodes the reply
// to one request with decodeReply (rendezvous/wire_decoder.h). Layouts
// (torch/csrc/distributed/c10d/TCPStoreBackend.cpp):
//   none:   VALIDATE SET APPEND MULTI_SET QUEUE_PUSH DTRUN_ADD_ON_CLOSE DTRUN_LEASE
//   u8:     CHECK (ready/not ready), WAIT BARRIER DTRUN_WAIT_CHANGE (STOP_WAITING), CANCEL_WAIT,
//           DTRUN_AUTH (accepted, refused, not required)
//   u32:    PING (the nonce)
//   i64:    ADD GETNUMKEYS DELETE_KEY (1/0) QUEUE_LEN
//   bytes:  GET COMPARE_SET DTRUN_WRITER; MULTI_GET DTRUN_HEARD: one per key
//   QUEUE_POP: i64 length before the pop, then bytes when it was > 0
//   LIST_KEYS: i64 count, then that many bytes

void encodeStatusReply(std::string* out, std::uint8_t status);
void encodeWordReply(std::string* out, std::uint32_t word);
void encodeNumberReply(std::string* out, std::int64_t number);
void encodeValueReply(std::string* out, std::string_view value);
/// QUEUE_POP: the length before the pop, then the popped value when there was one.
void encodeQueuePopReply(std::string* out, std::int64_t lengthBefore, const Bytes* front);
/// Bytes encodeValueReply appends for a value of `size` bytes.
constexpr std::size_t valueReplySize(std::size_t size) { return 8 + size; }

/// True when `op`'s request is answered at all.
bool hasReply(Op op);

}  // namespace dtrun::rendezvous::wire
