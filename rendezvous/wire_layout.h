// The frame layouts of the store protocol, shared by the encoder (rendezvous/wire.cpp) and the
// decoders (rendezvous/wire_decoder.cpp): each operation's opcode in both of torch's tables and
// the layout of its arguments, and the "programs" (lists of fields) a decoder runs for a request
// or a reply. Internal to the codec: nothing outside rendezvous/wire*.cpp includes it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "rendezvous/wire.h"

namespace dtrun::rendezvous::wire::detail {

// Argument layout of each operation after its opcode byte. Responses are not described here:
// the server writes them with append*() and the client reads them field by field.
enum class Layout : std::uint8_t {
  kNone,          // GETNUMKEYS, CANCEL_WAIT, LIST_KEYS
  kWord,          // VALIDATE magic, PING nonce, LEASE ms (u32)
  kKey,           // GET, DELETE_KEY, QUEUE_POP, QUEUE_LEN, WATCH_KEY
  kKeyValue,      // SET, APPEND, QUEUE_PUSH, WAIT_CHANGE
  kKeyTwoValues,  // COMPARE_SET
  kKeyNumber,     // ADD, BARRIER, ADD_ON_CLOSE
  kKeyList,       // CHECK, WAIT, MULTI_GET, DTRUN_HEARD
  kKeyValueList,  // MULTI_SET
  kValue,         // DTRUN_AUTH (a value, not a key: values never reach the logs)
};

struct OpInfo {
  const char* name;
  Layout layout;
  int torch113;  // opcode in the 1.13 table, -1 if absent
  int torch2;    // opcode in the 2.x table, -1 if absent
};

inline constexpr int kDtrunBase = 128;

// Indexed by Op. Sources: 1.13 TCPStore.cpp (anonymous-namespace QueryType) and newest
// TCPStoreBackend.hpp (torch/csrc/distributed/c10d/); both checked against real servers.
inline constexpr std::array<OpInfo, kOpCount> kOps = {{
    {"VALIDATE", Layout::kWord, -1, 0},
    {"SET", Layout::kKeyValue, 0, 1},
    {"COMPARE_SET", Layout::kKeyTwoValues, 1, 2},
    {"GET", Layout::kKey, 2, 3},
    {"ADD", Layout::kKeyNumber, 3, 4},
    {"CHECK", Layout::kKeyList, 4, 5},
    {"WAIT", Layout::kKeyList, 5, 6},
    {"GETNUMKEYS", Layout::kNone, 6, 7},
    {"DELETE_KEY", Layout::kKey, 8, 8},
    {"APPEND", Layout::kKeyValue, -1, 9},
    {"MULTI_GET", Layout::kKeyList, -1, 10},
    {"MULTI_SET", Layout::kKeyValueList, -1, 11},
    {"CANCEL_WAIT", Layout::kNone, -1, 12},
    {"PING", Layout::kWord, -1, 13},
    {"QUEUE_PUSH", Layout::kKeyValue, -1, 14},
    {"QUEUE_POP", Layout::kKey, -1, 15},
    {"QUEUE_LEN", Layout::kKey, -1, 16},
    {"LIST_KEYS", Layout::kNone, -1, 17},
    {"BARRIER", Layout::kKeyNumber, -1, 18},
    {"WATCH_KEY", Layout::kKey, 7, -1},
    {"DTRUN_ADD_ON_CLOSE", Layout::kKeyNumber, kDtrunBase + 0, kDtrunBase + 0},
    {"DTRUN_WAIT_CHANGE", Layout::kKeyValue, kDtrunBase + 1, kDtrunBase + 1},
    {"DTRUN_LEASE", Layout::kWord, kDtrunBase + 2, kDtrunBase + 2},
    {"DTRUN_AUTH", Layout::kValue, kDtrunBase + 3, kDtrunBase + 3},
    {"DTRUN_WRITER", Layout::kKey, kDtrunBase + 4, kDtrunBase + 4},
    {"DTRUN_HEARD", Layout::kKeyList, kDtrunBase + 5, kDtrunBase + 5},
}};

static_assert(kOps.size() == static_cast<std::size_t>(Op::kHeard) + 1, "kOps covers every Op");

inline const OpInfo& info(Op op) { return kOps[static_cast<std::size_t>(op)]; }

inline int opcodeIn(Dialect dialect, const OpInfo& i) {
  return dialect == Dialect::kTorch113 ? i.torch113 : i.torch2;
}

// The fields of a frame: `prefix` once, then `group` repeated as many times as the count field
// (or the preset count) says.
enum class Field : std::uint8_t {
  kStatus,   // u8
  kWord,     // u32
  kNumber,   // i64
  kCount,    // u64 number of groups, at most maxKeysPerRequest
  kPresent,  // i64: one group follows when it is > 0 (QUEUE_POP's reply)
  kListLen,  // i64 number of groups, at most maxKeysPerRequest x 1024 (LIST_KEYS' reply)
  kKey,      // u64 length (at most maxKeySize), then the bytes, into keys
  kValue,    // u64 length (at most maxValueSize), then the bytes, into values
};

struct Program {
  std::array<Field, 3> prefix;
  std::uint8_t prefixLen;
  std::array<Field, 2> group;
  std::uint8_t groupLen;
};

// Request arguments by Layout (in Layout's order).
inline constexpr std::array<Program, 9> kRequestPrograms = {{
    {{}, 0, {}, 0},                                           // kNone
    {{Field::kWord}, 1, {}, 0},                               // kWord
    {{Field::kKey}, 1, {}, 0},                                // kKey
    {{Field::kKey, Field::kValue}, 2, {}, 0},                 // kKeyValue
    {{Field::kKey, Field::kValue, Field::kValue}, 3, {}, 0},  // kKeyTwoValues
    {{Field::kKey, Field::kNumber}, 2, {}, 0},                // kKeyNumber
    {{Field::kCount}, 1, {Field::kKey}, 1},                   // kKeyList
    {{Field::kCount}, 1, {Field::kKey, Field::kValue}, 2},    // kKeyValueList
    {{Field::kValue}, 1, {}, 0},                              // kValue
}};

inline constexpr Program kNoReply = {{}, 0, {}, 0};
inline constexpr Program kStatusReply = {{Field::kStatus}, 1, {}, 0};
inline constexpr Program kWordReply = {{Field::kWord}, 1, {}, 0};
inline constexpr Program kNumberReply = {{Field::kNumber}, 1, {}, 0};
inline constexpr Program kValueReply = {{Field::kValue}, 1, {}, 0};
inline constexpr Program kValuesReply = {
    {}, 0, {Field::kValue}, 1};  // count preset: the request's keys
inline constexpr Program kQueuePopReply = {{Field::kPresent}, 1, {Field::kValue}, 1};
inline constexpr Program kListReply = {{Field::kListLen}, 1, {Field::kValue}, 1};

inline const Program& replyProgram(Op op) {
  switch (op) {
    case Op::kValidate:
    case Op::kSet:
    case Op::kAppend:
    case Op::kMultiSet:
    case Op::kQueuePush:
    case Op::kAddOnClose:
    case Op::kLease:
      return kNoReply;
    case Op::kCheck:
    case Op::kWait:
    case Op::kBarrier:
    case Op::kWaitChange:
    case Op::kCancelWait:
    case Op::kWatchKey:
    case Op::kAuth:
      return kStatusReply;
    case Op::kPing:
      return kWordReply;
    case Op::kAdd:
    case Op::kNumKeys:
    case Op::kDeleteKey:
    case Op::kQueueLen:
      return kNumberReply;
    case Op::kGet:
    case Op::kCompareSet:
    case Op::kWriter:
      return kValueReply;
    case Op::kMultiGet:
    case Op::kHeard:
      return kValuesReply;
    case Op::kQueuePop:
      return kQueuePopReply;
    case Op::kListKeys:
      return kListReply;
  }
  return kNoReply;
}

// Bookkeeping charged per string argument, on top of its bytes (std::string's own size).
inline constexpr std::size_t kPerArgument = 32;

inline std::string tooLong(const char* what, std::uint64_t len, std::size_t limit) {
  return std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
         std::to_string(limit);
}

}  // namespace dtrun::rendezvous::wire::detail
