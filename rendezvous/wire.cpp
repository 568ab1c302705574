#include "rendezvous/wire.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "common/error.h"
#include "rendezvous/wire_layout.h"

namespace dtrun::rendezvous::wire {

using detail::info;
using detail::kNoReply;
using detail::kOps;
using detail::Layout;
using detail::opcodeIn;
using detail::replyProgram;

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
