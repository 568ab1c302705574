// PyTorch TCPStore wire codec: both opcode tables (1.13 and 2.x), requests and responses.
//
// Framing (torch/csrc/distributed/c10d/Utils.hpp): one opcode byte, then arguments. Strings and
// values are a little-endian u64 length plus the bytes; numbers are i64, the VALIDATE magic and
// PING nonce u32. A connection's dialect is decided once from its first bytes: a 2.x client
// always opens with VALIDATE (`00 CE F7 85 3C`); a 1.13 client never does.
//
// dtrun-only operations use opcodes from 128 up in both dialects (DESIGN.md, decision 1).
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
};

constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;
// CheckResponseType, WaitResponseType (torch/csrc/distributed/c10d/TCPStoreBackend.hpp).
constexpr std::uint8_t kCheckReady = 0;
constexpr std::uint8_t kCheckNotReady = 1;
constexpr std::uint8_t kStopWaiting = 0;
constexpr std::uint8_t kWaitCanceled = 1;

/// Bounds checked before any allocation; a request past them is a bad frame.
struct Limits {
  std::size_t maxKeySize = 64 * 1024;
  std::size_t maxValueSize = 64 * 1024 * 1024;
  std::size_t maxKeysPerRequest = 128 * 1024;
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

enum class DecodeStatus { kComplete, kNeedMore, kBad };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kNeedMore;
  std::size_t consumed = 0;  // bytes of one whole request when kComplete
  std::string error;         // why, when kBad
};

/// The dialect announced by a connection's first bytes; kUnknown until enough bytes arrived.
Dialect detectDialect(std::string_view firstBytes);

/// Decodes one request from the front of `data` into `out` (reusing its buffers). Never
/// allocates past `limits`.
DecodeResult decodeRequest(Dialect dialect, std::string_view data, const Limits& limits,
                           Request* out);

/// Appends the encoding of `request`; throws ProtocolError when the dialect lacks the op.
void encodeRequest(Dialect dialect, const Request& request, std::string* out);

/// The opcode byte of `op` in `dialect`, if it has one.
std::optional<std::uint8_t> opcodeOf(Dialect dialect, Op op);
/// The operation an opcode byte means in `dialect`, if any.
std::optional<Op> opOf(Dialect dialect, std::uint8_t opcode);
/// "SET", "COMPARE_SET", ...: torch's names, for logs and errors.
const char* opName(Op op);

// Response pieces, appended to an output buffer.
void appendU8(std::string* out, std::uint8_t v);
void appendU32(std::string* out, std::uint32_t v);
void appendI64(std::string* out, std::int64_t v);
void appendU64(std::string* out, std::uint64_t v);
void appendBytes(std::string* out, std::string_view bytes);

}  // namespace dtrun::rendezvous::wire
