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
};

struct OpInfo {
  const char* name;
  Layout layout;
  int torch113;  // opcode in the 1.13 table, -1 if absent
  int torch2;    // opcode in the 2.x table, -1 if absent
};

constexpr int kDtrunBase = 128;

// Indexed by Op. Sources: 1.13 TCPStore.cpp (anonymous-namespace QueryType) and newest
// TCPStoreBackend.hpp; both checked against real servers (reference/torchrun-spec.md §3.2).
constexpr std::array<OpInfo, 23> kOps = {{
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
}};

static_assert(kOps.size() == static_cast<std::size_t>(Op::kLease) + 1, "kOps covers every Op");

const OpInfo& info(Op op) { return kOps[static_cast<std::size_t>(op)]; }

int opcodeIn(Dialect dialect, const OpInfo& i) {
  return dialect == Dialect::kTorch113 ? i.torch113 : i.torch2;
}

// A cursor over received bytes. Every read first checks that the bytes are there (kNeedMore) and
// that a length is within its limit (kBad) before anything is copied or allocated.
class Reader {
 public:
  Reader(std::string_view data, const Limits& limits) : data_(data), limits_(limits) {}

  bool need(std::size_t n) {
    if (data_.size() - pos_ >= n) return true;
    status_ = DecodeStatus::kNeedMore;
    return false;
  }
  bool fail(std::string why) {
    status_ = DecodeStatus::kBad;
    error_ = std::move(why);
    return false;
  }
  template <typename T>
  bool fixed(T* v) {
    if (!need(sizeof(T))) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));  // little-endian hosts only (x86-64, arm64)
    pos_ += sizeof(T);
    return true;
  }
  bool string(std::size_t limit, const char* what, std::string* out) {
    std::uint64_t len = 0;
    if (!fixed(&len)) return false;
    if (len > limit) {
      return fail(std::string(what) + " of " + std::to_string(len) +
                  " bytes exceeds the limit of " + std::to_string(limit));
    }
    if (!need(len)) return false;
    out->assign(data_.data() + pos_, len);
    pos_ += len;
    return true;
  }
  bool key(std::string* out) { return string(limits_.maxKeySize, "key", out); }
  bool value(std::string* out) { return string(limits_.maxValueSize, "value", out); }
  bool count(std::uint64_t* n) {
    if (!fixed(n)) return false;
    if (*n > limits_.maxKeysPerRequest) {
      return fail("request names " + std::to_string(*n) + " keys, limit " +
                  std::to_string(limits_.maxKeysPerRequest));
    }
    return true;
  }

  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }
  DecodeStatus status() const { return status_; }
  std::string& error() { return error_; }

 private:
  std::string_view data_;
  const Limits& limits_;
  std::size_t pos_ = 0;
  DecodeStatus status_ = DecodeStatus::kComplete;
  std::string error_;
};

bool decodeArgs(Layout layout, Reader& r, Request* out) {
  switch (layout) {
    case Layout::kNone:
      return true;
    case Layout::kWord:
      return r.fixed(&out->word);
    case Layout::kKey:
      out->keys.resize(1);
      return r.key(&out->keys[0]);
    case Layout::kKeyValue:
      out->keys.resize(1);
      out->values.resize(1);
      return r.key(&out->keys[0]) && r.value(&out->values[0]);
    case Layout::kKeyTwoValues:
      out->keys.resize(1);
      out->values.resize(2);
      return r.key(&out->keys[0]) && r.value(&out->values[0]) && r.value(&out->values[1]);
    case Layout::kKeyNumber:
      out->keys.resize(1);
      return r.key(&out->keys[0]) && r.fixed(&out->number);
    case Layout::kKeyList: {
      std::uint64_t n = 0;
      if (!r.count(&n)) return false;
      // Each key takes at least 8 bytes, so what has arrived bounds what is worth reserving.
      out->keys.reserve(std::min<std::uint64_t>(n, r.remaining() / 8));
      for (std::uint64_t i = 0; i < n; ++i) {
        out->keys.emplace_back();
        if (!r.key(&out->keys.back())) return false;
      }
      return true;
    }
    case Layout::kKeyValueList: {
      std::uint64_t n = 0;
      if (!r.count(&n)) return false;
      out->keys.reserve(std::min<std::uint64_t>(n, r.remaining() / 16));
      out->values.reserve(std::min<std::uint64_t>(n, r.remaining() / 16));
      for (std::uint64_t i = 0; i < n; ++i) {
        out->keys.emplace_back();
        out->values.emplace_back();
        if (!r.key(&out->keys.back()) || !r.value(&out->values.back())) return false;
      }
      return true;
    }
  }
  return r.fail("unreachable layout");
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

DecodeResult decodeRequest(Dialect dialect, std::string_view data, const Limits& limits,
                           Request* out) {
  DecodeResult result;
  if (data.empty()) return result;
  auto op = opOf(dialect, static_cast<std::uint8_t>(data[0]));
  if (!op) {
    result.status = DecodeStatus::kBad;
    result.error = "unknown opcode " + std::to_string(static_cast<std::uint8_t>(data[0])) +
                   (dialect == Dialect::kTorch113 ? " (torch 1.13 table)" : " (torch 2.x table)");
    return result;
  }
  // Cleared, not replaced: a caller that reuses one Request keeps its buffers' capacity, so a
  // steady stream of requests decodes without allocating.
  out->keys.clear();
  out->values.clear();
  out->number = 0;
  out->word = 0;
  out->op = *op;
  Reader r(data.substr(1), limits);
  if (decodeArgs(info(*op).layout, r, out)) {
    result.status = DecodeStatus::kComplete;
    result.consumed = 1 + r.pos();
  } else {
    result.status = r.status();
    if (result.status == DecodeStatus::kBad) {
      result.error = std::string(opName(*op)) + ": " + r.error();
    }
  }
  return result;
}

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
  }
}

void appendU8(std::string* out, std::uint8_t v) { out->push_back(static_cast<char>(v)); }

template <typename T>
static void appendFixed(std::string* out, T v) {
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

}  // namespace dtrun::rendezvous::wire
