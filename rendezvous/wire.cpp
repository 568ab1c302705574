#include "rendezvous/wire.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "common/error.h"

namespace dtrun::rendezvous::wire {
namespace {

// Argument layout of each operation after its opcode byte. Responses are not described here:
// the server writes them with append*() and the client reads them field by field.
enum class Layout : std::uint8_t {
  kNone,          // GETNUMKEYS, CANCEL_WAIT, LIST_KEYS
  kWord,          // VALIDATE magic, PING nonce, LEASE ms (u32)
  kKey,           // GET, DELETE_KEY, QUEUE_POP, QUEUE_LEN, WATCH_KEY
  kKeyValue,      // SET, APPEND, QUEUE_PUSH, WAIT_CHANGE
  kKeyTwoValues,  // COMPARE_SET
  kKeyNumber,     // ADD, BARRIER, ADD_ON_CLOSE
  kKeyList,       // CHECK, WAIT, MULTI_GET
  kKeyValueList,  // MULTI_SET
  kValue,         // DTRUN_AUTH (a value, not a key: values never reach the logs)
};

struct OpInfo {
  const char* name;
  Layout layout;
  int torch113;  // opcode in the 1.13 table, -1 if absent
  int torch2;    // opcode in the 2.x table, -1 if absent
};

constexpr int kDtrunBase = 128;

// Indexed by Op. Sources: 1.13 TCPStore.cpp (anonymous-namespace QueryType) and newest
// TCPStoreBackend.hpp (torch/csrc/distributed/c10d/); both checked against real servers.
constexpr std::array<OpInfo, 25> kOps = {{
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
}};

static_assert(kOps.size() == static_cast<std::size_t>(Op::kWriter) + 1, "kOps covers every Op");

const OpInfo& info(Op op) { return kOps[static_cast<std::size_t>(op)]; }

int opcodeIn(Dialect dialect, const OpInfo& i) {
  return dialect == Dialect::kTorch113 ? i.torch113 : i.torch2;
}

}  // namespace

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

namespace detail {
struct Program {
  std::array<Field, 3> prefix;
  std::uint8_t prefixLen;
  std::array<Field, 2> group;
  std::uint8_t groupLen;
};
}  // namespace detail

namespace {

using detail::Program;

// Request arguments by Layout (in Layout's order).
constexpr std::array<Program, 9> kRequestPrograms = {{
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

constexpr Program kNoReply = {{}, 0, {}, 0};
constexpr Program kStatusReply = {{Field::kStatus}, 1, {}, 0};
constexpr Program kWordReply = {{Field::kWord}, 1, {}, 0};
constexpr Program kNumberReply = {{Field::kNumber}, 1, {}, 0};
constexpr Program kValueReply = {{Field::kValue}, 1, {}, 0};
constexpr Program kValuesReply = {{}, 0, {Field::kValue}, 1};  // count preset: the request's keys
constexpr Program kQueuePopReply = {{Field::kPresent}, 1, {Field::kValue}, 1};
constexpr Program kListReply = {{Field::kListLen}, 1, {Field::kValue}, 1};

const Program& replyProgram(Op op) {
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
      return kValuesReply;
    case Op::kQueuePop:
      return kQueuePopReply;
    case Op::kListKeys:
      return kListReply;
  }
  return kNoReply;
}

// Bookkeeping charged per string argument, on top of its bytes (std::string's own size).
constexpr std::size_t kPerArgument = 32;

std::string tooLong(const char* what, std::uint64_t len, std::size_t limit) {
  return std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
         std::to_string(limit);
}

}  // namespace

Dialect detectDialect(std::string_view b) {
  if (b.empty()) return Dialect::kUnknown;
  if (b[0] != 0) return Dialect::kTorch113;
  if (b.size() < 5) return Dialect::kUnknown;
  std::uint32_t magic = 0;
  std::memcpy(&magic, b.data() + 1, sizeof(magic));
  // A 1.13 SET whose key length started with these 4 bytes would be a key of >= 1 GiB.
  return magic == kValidationMagic ? Dialect::kTorch2 : Dialect::kTorch113;
}

std::optional<std::uint8_t> opcodeOf(Dialect dialect, Op op) {
  int code = opcodeIn(dialect, info(op));
  if (code < 0) return std::nullopt;
  return static_cast<std::uint8_t>(code);
}

std::optional<Op> opOf(Dialect dialect, std::uint8_t opcode) {
  for (std::size_t i = 0; i < kOps.size(); ++i) {
    if (opcodeIn(dialect, kOps[i]) == opcode) return static_cast<Op>(i);
  }
  return std::nullopt;
}

const char* opName(Op op) { return info(op).name; }

namespace detail {

void FieldReader::start(const Program* program, std::vector<std::string>* keys,
                        std::vector<Bytes>* values, std::uint8_t* status, std::uint32_t* word,
                        std::int64_t* number, std::uint64_t presetItems) {
  program_ = program;
  keys_ = keys;
  values_ = values;
  status_ = status;
  word_ = word;
  number_ = number;
  head_.clear();
  field_ = 0;
  groupPos_ = 0;
  itemsLeft_ = presetItems;
  inString_ = false;
  string_ = nullptr;
  stringLeft_ = 0;
  buffered_ = 0;
}

// Reads an n-byte little-endian number, keeping a partial one in head_.
DecodeStatus FieldReader::fixed(std::string_view& in, std::size_t n, std::uint64_t* v) {
  if (head_.empty() && in.size() >= n) {
    *v = 0;
    std::memcpy(v, in.data(), n);  // little-endian hosts only (x86-64, arm64)
    in.remove_prefix(n);
    return DecodeStatus::kComplete;
  }
  std::size_t take = std::min(n - head_.size(), in.size());
  head_.append(in.data(), take);
  in.remove_prefix(take);
  if (head_.size() < n) return DecodeStatus::kNeedMore;
  *v = 0;
  std::memcpy(v, head_.data(), n);
  head_.clear();
  return DecodeStatus::kComplete;
}

DecodeStatus FieldReader::run(std::string_view& in, std::string* error) {
  while (program_) {
    if (inString_) {
      std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(stringLeft_, in.size()));
      string_->append(in.data(), take);
      in.remove_prefix(take);
      stringLeft_ -= take;
      buffered_ += take;
      if (stringLeft_ > 0) return DecodeStatus::kNeedMore;
      inString_ = false;
    } else {
      const Program& p = *program_;
      Field f;
      if (field_ < p.prefixLen) {
        f = p.prefix[field_];
      } else if (p.groupLen != 0 && itemsLeft_ > 0) {
        f = p.group[groupPos_];
      } else {
        program_ = nullptr;
        return DecodeStatus::kComplete;
      }
      std::size_t size = f == Field::kStatus ? 1 : f == Field::kWord ? 4 : 8;
      std::uint64_t v = 0;
      if (fixed(in, size, &v) == DecodeStatus::kNeedMore) return DecodeStatus::kNeedMore;
      switch (f) {
        case Field::kStatus:
          *status_ = static_cast<std::uint8_t>(v);
          break;
        case Field::kWord:
          *word_ = static_cast<std::uint32_t>(v);
          break;
        case Field::kNumber:
          *number_ = static_cast<std::int64_t>(v);
          break;
        case Field::kCount:
          if (v > limits_.maxKeysPerRequest) {
            *error = "request names " + std::to_string(v) + " keys, limit " +
                     std::to_string(limits_.maxKeysPerRequest);
            return DecodeStatus::kBad;
          }
          itemsLeft_ = v;
          break;
        case Field::kPresent:
          *number_ = static_cast<std::int64_t>(v);
          itemsLeft_ = *number_ > 0 ? 1 : 0;
          break;
        case Field::kListLen:
          *number_ = static_cast<std::int64_t>(v);
          if (*number_ < 0 || v > limits_.maxKeysPerRequest * std::uint64_t{1024}) {
            *error = "implausible key count " + std::to_string(*number_);
            return DecodeStatus::kBad;
          }
          itemsLeft_ = v;
          break;
        case Field::kKey:
        case Field::kValue: {
          const bool isKey = f == Field::kKey;
          const std::size_t limit = isKey ? limits_.maxKeySize : limits_.maxValueSize;
          if (v > limit) {
            *error = tooLong(isKey ? "key" : "value", v, limit);
            return DecodeStatus::kBad;
          }
          if (buffered_ + kPerArgument + v > limits_.maxRequestBytes) {
            *error = "frame of more than " + std::to_string(limits_.maxRequestBytes) +
                     " bytes exceeds the limit of bytes a connection may buffer";
            return DecodeStatus::kBad;
          }
          auto& list = isKey ? *keys_ : *values_;
          list.emplace_back();
          string_ = &list.back();
          buffered_ += kPerArgument;
          stringLeft_ = v;
          inString_ = true;  // no reserve: only bytes that arrive take memory
          break;
        }
      }
      if (field_ < p.prefixLen) {
        ++field_;
      } else if (++groupPos_ == p.groupLen) {
        groupPos_ = 0;
        --itemsLeft_;
      }
    }
  }
  return DecodeStatus::kComplete;
}

}  // namespace detail

DecodeStatus RequestDecoder::step(std::string_view& in, DecodeResult& result) {
  const std::size_t before = in.size();
  DecodeStatus s = stepFrame(in, result);
  received_ = s == DecodeStatus::kComplete ? 0 : received_ + (before - in.size());
  return s;
}

DecodeStatus RequestDecoder::stepFrame(std::string_view& in, DecodeResult& result) {
  if (!reader_.active()) {
    if (in.empty()) return DecodeStatus::kNeedMore;
    const auto code = static_cast<std::uint8_t>(in[0]);
    auto op = opOf(dialect_, code);
    if (!op) {
      result.error =
          "unknown opcode " + std::to_string(code) +
          (dialect_ == Dialect::kTorch113 ? " (torch 1.13 table)" : " (torch 2.x table)");
      return DecodeStatus::kBad;
    }
    in.remove_prefix(1);
    // Cleared, not replaced: the vectors keep their capacity from one request to the next.
    req_.keys.clear();
    req_.values.clear();
    req_.number = 0;
    req_.word = 0;
    req_.op = *op;
    reader_.start(&kRequestPrograms[static_cast<std::size_t>(info(*op).layout)], &req_.keys,
                  &req_.values, nullptr, &req_.word, &req_.number, 0);
  }
  DecodeStatus s = reader_.run(in, &result.error);
  if (s == DecodeStatus::kBad) result.error = std::string(opName(req_.op)) + ": " + result.error;
  return s;
}

DecodeResult RequestDecoder::feed(std::string_view data) {
  DecodeResult result;
  std::string_view in = data;
  if (dialect_ == Dialect::kUnknown) {
    // A connection's first bytes decide its table: up to 5 of them are held until they do.
    std::size_t take = std::min<std::size_t>(5 - detect_.size(), in.size());
    detect_.append(in.data(), take);
    in.remove_prefix(take);
    dialect_ = detectDialect(detect_);
    if (dialect_ == Dialect::kUnknown) {
      result.consumed = data.size();
      return result;
    }
    // Give back what detection took beyond what it needed, then decode the held bytes first.
    std::string held = std::move(detect_);
    detect_.clear();
    std::string_view h = held;
    result.status = step(h, result);
    if (result.status == DecodeStatus::kBad) return result;
    if (result.status == DecodeStatus::kComplete && !h.empty()) {
      // Only a whole VALIDATE fits in the first 5 bytes, so this cannot happen; refuse anyway.
      result.status = DecodeStatus::kBad;
      result.error = "request shorter than its dialect check";
      return result;
    }
    if (result.status == DecodeStatus::kComplete) {
      result.consumed = data.size() - in.size();
      return result;
    }
  }
  result.status = step(in, result);
  result.consumed = data.size() - in.size();
  return result;
}

void ReplyDecoder::expect(const Request& request) {
  if (!hasReply(request.op)) {
    throw ProtocolError(std::string(opName(request.op)) + " has no reply to wait for");
  }
  op_ = request.op;
  reply_.status = 0;
  reply_.word = 0;
  reply_.number = 0;
  reply_.values.clear();
  reader_.start(&replyProgram(request.op), &unusedKeys_, &reply_.values, &reply_.status,
                &reply_.word, &reply_.number,
                request.op == Op::kMultiGet ? request.keys.size() : 0);
}

DecodeResult ReplyDecoder::feed(std::string_view data) {
  DecodeResult result;
  std::string_view in = data;
  result.status = reader_.run(in, &result.error);
  if (result.status == DecodeStatus::kBad) {
    result.error = std::string("reply to ") + opName(op_) + ": " + result.error;
  }
  result.consumed = data.size() - in.size();
  return result;
}

DecodeResult decodeRequest(Dialect dialect, std::string_view data, const Limits& limits,
                           Request* out) {
  RequestDecoder decoder(limits);
  decoder.setDialect(dialect);
  DecodeResult r = decoder.feed(data);
  if (r.status == DecodeStatus::kComplete) {
    *out = std::move(decoder.request());
  } else {
    r.consumed = 0;
  }
  return r;
}

DecodeResult decodeReply(const Request& request, std::string_view data, const Limits& limits,
                         Reply* out) {
  ReplyDecoder decoder(limits);
  decoder.expect(request);
  DecodeResult r = decoder.feed(data);
  if (r.status == DecodeStatus::kComplete) {
    *out = std::move(decoder.reply());
  } else {
    r.consumed = 0;
  }
  return r;
}

bool hasReply(Op op) { return &replyProgram(op) != &kNoReply; }

Request makeRequest(Op op, std::vector<std::string> keys, std::vector<Bytes> values,
                    std::int64_t number, std::uint32_t word) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  r.word = word;
  return r;
}

std::string encodeFrame(Dialect dialect, Op op, std::vector<std::string> keys,
                        std::vector<Bytes> values, std::int64_t number, std::uint32_t word) {
  std::string out;
  encodeRequest(dialect, makeRequest(op, std::move(keys), std::move(values), number, word), &out);
  return out;
}

namespace {

void appendU8(std::string* out, std::uint8_t v) { out->push_back(static_cast<char>(v)); }

template <typename T>
void appendFixed(std::string* out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out->append(buf, sizeof(T));
}

void appendU32(std::string* out, std::uint32_t v) { appendFixed(out, v); }
void appendI64(std::string* out, std::int64_t v) { appendFixed(out, v); }
void appendU64(std::string* out, std::uint64_t v) { appendFixed(out, v); }

void appendBytes(std::string* out, std::string_view bytes) {
  appendU64(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

}  // namespace

void encodeRequest(Dialect dialect, const Request& req, std::string* out) {
  auto code = opcodeOf(dialect, req.op);
  if (!code) {
    throw ProtocolError(std::string(opName(req.op)) + " is not part of the " +
                        (dialect == Dialect::kTorch113 ? "torch 1.13" : "torch 2.x") + " protocol");
  }
  appendU8(out, *code);
  auto need = [&](std::size_t keys, std::size_t values) {
    if (req.keys.size() != keys || req.values.size() != values) {
      throw ProtocolError(std::string(opName(req.op)) + ": wrong number of arguments");
    }
  };
  switch (info(req.op).layout) {
    case Layout::kNone:
      break;
    case Layout::kWord:
      appendU32(out, req.word);
      break;
    case Layout::kKey:
      need(1, 0);
      appendBytes(out, req.keys[0]);
      break;
    case Layout::kKeyValue:
      need(1, 1);
      appendBytes(out, req.keys[0]);
      appendBytes(out, req.values[0]);
      break;
    case Layout::kKeyTwoValues:
      need(1, 2);
      appendBytes(out, req.keys[0]);
      appendBytes(out, req.values[0]);
      appendBytes(out, req.values[1]);
      break;
    case Layout::kKeyNumber:
      need(1, 0);
      appendBytes(out, req.keys[0]);
      appendI64(out, req.number);
      break;
    case Layout::kKeyList:
      appendU64(out, req.keys.size());
      for (const auto& k : req.keys) appendBytes(out, k);
      break;
    case Layout::kKeyValueList:
      need(req.keys.size(), req.keys.size());
      appendU64(out, req.keys.size());
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        appendBytes(out, req.keys[i]);
        appendBytes(out, req.values[i]);
      }
      break;
    case Layout::kValue:
      need(0, 1);
      appendBytes(out, req.values[0]);
      break;
  }
}

void encodeStatusReply(std::string* out, std::uint8_t status) { appendU8(out, status); }
void encodeWordReply(std::string* out, std::uint32_t word) { appendU32(out, word); }
void encodeNumberReply(std::string* out, std::int64_t number) { appendI64(out, number); }
void encodeValueReply(std::string* out, std::string_view value) { appendBytes(out, value); }

void encodeQueuePopReply(std::string* out, std::int64_t lengthBefore, const Bytes* front) {
  appendI64(out, lengthBefore);
  if (front) appendBytes(out, *front);
}

}  // namespace dtrun::rendezvous::wire
