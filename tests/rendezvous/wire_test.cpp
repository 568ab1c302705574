// The TCPStore wire codec: golden bytes for every operation in both opcode tables, round trips,
// dialect detection, incremental decoding, limits and unknown opcodes.
//
// The golden frames are written out by hand from torch's TCPStore sources (not produced by the
// encoder under test; torch/csrc/distributed/c10d/TCPStore.cpp, TCPStoreBackend.cpp and 1.13's
// TCPStore.cpp for the older opcode table): one opcode byte, u64 little-endian lengths before keys
// and values, i64 numbers, u32 words.
#include "rendezvous/wire.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::wire;
using Catch::Matchers::Contains;

namespace {

// "00 CE f7" -> bytes; spaces are ignored.
std::string hex(const std::string& text) {
  std::string out;
  std::string digits;
  for (char c : text) {
    if (c == ' ') continue;
    digits += c;
    if (digits.size() == 2) {
      out.push_back(static_cast<char>(std::stoi(digits, nullptr, 16)));
      digits.clear();
    }
  }
  REQUIRE(digits.empty());
  return out;
}

std::string toHex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    if (!out.empty()) out += ' ';
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// Length prefixes, spelled out: u64 little-endian.
const std::string L0 = "00 00 00 00 00 00 00 00 ";
const std::string L1 = "01 00 00 00 00 00 00 00 ";
const std::string L2 = "02 00 00 00 00 00 00 00 ";

struct Golden {
  Op op;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  std::int64_t number;
  std::uint32_t word;
  std::string torch2;    // hex; "" when the 2.x table lacks the op
  std::string torch113;  // hex; "" when the 1.13 table lacks the op
};

// One canonical request per operation. Keys "k"=6B, "a"=61, "bc"=62 63; values "v"=76, "e"=65,
// "d"=64, "1"=31.
std::vector<Golden> goldens() {
  const std::string k = L1 + "6B ";
  const std::string v = L1 + "76 ";
  const std::string twoKeys = L2 + L1 + "61 " + L2 + "62 63";
  return {
      {Op::kValidate, {}, {}, 0, kValidationMagic, "00 CE F7 85 3C", ""},
      {Op::kSet, {"k"}, {"v"}, 0, 0, "01 " + k + v, "00 " + k + v},
      {Op::kCompareSet,
       {"k"},
       {"e", "d"},
       0,
       0,
       "02 " + k + L1 + "65 " + L1 + "64",
       "01 " + k + L1 + "65 " + L1 + "64"},
      {Op::kGet, {"k"}, {}, 0, 0, "03 " + k, "02 " + k},
      {Op::kAdd,
       {"k"},
       {},
       -2,
       0,
       "04 " + k + "FE FF FF FF FF FF FF FF",
       "03 " + k + "FE FF FF FF FF FF FF FF"},
      {Op::kCheck, {"a", "bc"}, {}, 0, 0, "05 " + twoKeys, "04 " + twoKeys},
      {Op::kWait, {"a", "bc"}, {}, 0, 0, "06 " + twoKeys, "05 " + twoKeys},
      {Op::kNumKeys, {}, {}, 0, 0, "07", "06"},
      {Op::kDeleteKey, {"k"}, {}, 0, 0, "08 " + k, "08 " + k},
      {Op::kAppend, {"k"}, {"v"}, 0, 0, "09 " + k + v, ""},
      {Op::kMultiGet, {"a", "bc"}, {}, 0, 0, "0A " + twoKeys, ""},
      {Op::kMultiSet,
       {"a", "k"},
       {"1", ""},
       0,
       0,
       "0B " + L2 + L1 + "61 " + L1 + "31 " + k + L0,
       ""},
      {Op::kCancelWait, {}, {}, 0, 0, "0C", ""},
      {Op::kPing, {}, {}, 0, 0x01020304, "0D 04 03 02 01", ""},
      {Op::kQueuePush, {"k"}, {"v"}, 0, 0, "0E " + k + v, ""},
      {Op::kQueuePop, {"k"}, {}, 0, 0, "0F " + k, ""},
      {Op::kQueueLen, {"k"}, {}, 0, 0, "10 " + k, ""},
      {Op::kListKeys, {}, {}, 0, 0, "11", ""},
      {Op::kBarrier, {"k"}, {}, 3, 0, "12 " + k + "03 00 00 00 00 00 00 00", ""},
      {Op::kWatchKey, {"k"}, {}, 0, 0, "", "07 " + k},
      {Op::kAddOnClose,
       {"k"},
       {},
       -1,
       0,
       "80 " + k + "FF FF FF FF FF FF FF FF",
       "80 " + k + "FF FF FF FF FF FF FF FF"},
      {Op::kWaitChange, {"k"}, {"v"}, 0, 0, "81 " + k + v, "81 " + k + v},
      {Op::kLease, {}, {}, 0, 1500, "82 DC 05 00 00", "82 DC 05 00 00"},
  };
}

Request requestOf(const Golden& g) {
  Request r;
  r.op = g.op;
  r.keys = g.keys;
  r.values = g.values;
  r.number = g.number;
  r.word = g.word;
  return r;
}

const char* dialectName(Dialect d) { return d == Dialect::kTorch113 ? "torch 1.13" : "torch 2.x"; }

void checkSame(const Request& got, const Request& want) {
  CHECK(got.op == want.op);
  CHECK(got.keys == want.keys);
  CHECK(got.values == want.values);
  CHECK(got.number == want.number);
  CHECK(got.word == want.word);
}

DecodeResult decode(Dialect d, const std::string& bytes, Request* out,
                    const Limits& limits = Limits{}) {
  return decodeRequest(d, bytes, limits, out);
}

}  // namespace

TEST_CASE("wire: every operation encodes to its golden bytes in both tables", "[store][wire]") {
  for (const auto& g : goldens()) {
    for (Dialect d : {Dialect::kTorch2, Dialect::kTorch113}) {
      const std::string& want = d == Dialect::kTorch2 ? g.torch2 : g.torch113;
      INFO(opName(g.op) << " in the " << dialectName(d) << " table");
      std::string out;
      if (want.empty()) {
        CHECK_FALSE(opcodeOf(d, g.op).has_value());
        CHECK_THROWS_AS(encodeRequest(d, requestOf(g), &out), dtrun::ProtocolError);
        continue;
      }
      encodeRequest(d, requestOf(g), &out);
      CHECK(toHex(out) == toHex(hex(want)));
    }
  }
}

TEST_CASE("wire: the newest VALIDATE is 00 CE F7 85 3C and 1.13 has none", "[store][wire]") {
  Request r;
  r.op = Op::kValidate;
  r.word = kValidationMagic;
  std::string out;
  encodeRequest(Dialect::kTorch2, r, &out);
  CHECK(out == std::string("\x00\xCE\xF7\x85\x3C", 5));
  CHECK_THROWS_AS(encodeRequest(Dialect::kTorch113, r, &out), dtrun::ProtocolError);
}

TEST_CASE("wire: golden frames decode to their requests and consume every byte", "[store][wire]") {
  for (const auto& g : goldens()) {
    for (Dialect d : {Dialect::kTorch2, Dialect::kTorch113}) {
      const std::string& want = d == Dialect::kTorch2 ? g.torch2 : g.torch113;
      if (want.empty()) continue;
      INFO(opName(g.op) << " in the " << dialectName(d) << " table");
      const std::string bytes = hex(want);
      Request got;
      auto r = decode(d, bytes, &got);
      REQUIRE(r.status == DecodeStatus::kComplete);
      CHECK(r.consumed == bytes.size());
      checkSame(got, requestOf(g));
      // Trailing bytes (the next request) are left alone.
      auto r2 = decode(d, bytes + "\x06\x07", &got);
      CHECK(r2.status == DecodeStatus::kComplete);
      CHECK(r2.consumed == bytes.size());
    }
  }
}

TEST_CASE("wire: every proper prefix of a frame needs more bytes", "[store][wire]") {
  for (const auto& g : goldens()) {
    for (Dialect d : {Dialect::kTorch2, Dialect::kTorch113}) {
      const std::string& want = d == Dialect::kTorch2 ? g.torch2 : g.torch113;
      if (want.empty()) continue;
      const std::string bytes = hex(want);
      for (std::size_t n = 0; n < bytes.size(); ++n) {
        INFO(opName(g.op) << " in the " << dialectName(d) << " table, first " << n << " bytes");
        Request got;
        auto r = decode(d, bytes.substr(0, n), &got);
        CHECK(r.status == DecodeStatus::kNeedMore);
        CHECK(r.consumed == 0);
      }
    }
  }
}

TEST_CASE("wire: a stream fed one byte at a time decodes every request in order", "[store][wire]") {
  for (Dialect d : {Dialect::kTorch2, Dialect::kTorch113}) {
    std::string stream;
    std::vector<Request> sent;
    for (const auto& g : goldens()) {
      const std::string& want = d == Dialect::kTorch2 ? g.torch2 : g.torch113;
      if (want.empty()) continue;
      stream += hex(want);
      sent.push_back(requestOf(g));
    }
    // The server's loop: append what arrived, decode until incomplete, keep the tail.
    std::string buffer;
    std::vector<Request> received;
    for (char c : stream) {
      buffer.push_back(c);
      for (;;) {
        Request req;
        auto r = decode(d, buffer, &req);
        REQUIRE(r.status != DecodeStatus::kBad);
        if (r.status == DecodeStatus::kNeedMore) break;
        received.push_back(req);
        buffer.erase(0, r.consumed);
      }
    }
    CHECK(buffer.empty());
    REQUIRE(received.size() == sent.size());
    for (std::size_t i = 0; i < sent.size(); ++i) checkSame(received[i], sent[i]);
  }
}

TEST_CASE("wire: random requests survive encode then decode", "[store][wire]") {
  std::mt19937 rng(20240601);
  auto randomBytes = [&](std::size_t maxLen) {
    std::string s(rng() % (maxLen + 1), '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  for (int iter = 0; iter < 300; ++iter) {
    for (Dialect d : {Dialect::kTorch2, Dialect::kTorch113}) {
      for (const auto& g : goldens()) {
        if (!opcodeOf(d, g.op)) continue;
        Request req;
        req.op = g.op;
        // Keep the golden's argument shape, with random contents.
        std::size_t nKeys = g.keys.size();
        if (g.op == Op::kCheck || g.op == Op::kWait || g.op == Op::kMultiGet ||
            g.op == Op::kMultiSet) {
          nKeys = rng() % 5;
        }
        for (std::size_t i = 0; i < nKeys; ++i) req.keys.push_back(randomBytes(20));
        std::size_t nValues = g.op == Op::kMultiSet ? nKeys : g.values.size();
        for (std::size_t i = 0; i < nValues; ++i) req.values.push_back(randomBytes(300));
        if (!g.keys.empty() && g.number != 0) {
          req.number = static_cast<std::int64_t>((std::uint64_t{rng()} << 32) | rng());
        }
        if (g.word != 0) req.word = static_cast<std::uint32_t>(rng());
        std::string bytes;
        encodeRequest(d, req, &bytes);
        Request got;
        auto r = decode(d, bytes, &got);
        INFO(opName(g.op) << " in the " << dialectName(d) << " table");
        REQUIRE(r.status == DecodeStatus::kComplete);
        REQUIRE(r.consumed == bytes.size());
        checkSame(got, req);
      }
    }
  }
}

TEST_CASE("wire: detectDialect decides from the first bytes", "[store][wire]") {
  CHECK(detectDialect("") == Dialect::kUnknown);
  // A zero first byte is either VALIDATE (2.x) or SET (1.13): the next four bytes decide.
  CHECK(detectDialect(std::string("\x00", 1)) == Dialect::kUnknown);
  CHECK(detectDialect(std::string("\x00\xCE\xF7\x85", 4)) == Dialect::kUnknown);
  CHECK(detectDialect(std::string("\x00\xCE\xF7\x85\x3C", 5)) == Dialect::kTorch2);
  CHECK(detectDialect(std::string("\x00\xCE\xF7\x85\x3C\x0D", 6)) == Dialect::kTorch2);
  // 1.13 SET of a 5-byte key: the length bytes are not the magic.
  CHECK(detectDialect(std::string("\x00\x05\x00\x00\x00", 5)) == Dialect::kTorch113);
  // 1.13's usual first message is ADD (03) of "init/"; any non-zero opcode means 1.13.
  CHECK(detectDialect(std::string("\x03", 1)) == Dialect::kTorch113);
  CHECK(detectDialect(std::string("\x05\x01", 2)) == Dialect::kTorch113);
  CHECK(detectDialect(std::string("\xff", 1)) == Dialect::kTorch113);
  CHECK(detectDialect(std::string("\x00\xCE\xF7\x85\x3D", 5)) == Dialect::kTorch113);
}

TEST_CASE("wire: the opcode tables are exactly torch's, plus dtrun's from 128", "[store][wire]") {
  std::set<int> known113, known2;
  for (int b = 0; b < 256; ++b) {
    auto code = static_cast<std::uint8_t>(b);
    if (auto op = opOf(Dialect::kTorch113, code)) {
      known113.insert(b);
      CHECK(opcodeOf(Dialect::kTorch113, *op) == code);
    }
    if (auto op = opOf(Dialect::kTorch2, code)) {
      known2.insert(b);
      CHECK(opcodeOf(Dialect::kTorch2, *op) == code);
    }
  }
  CHECK(known113 == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 128, 129, 130});
  CHECK(known2 == std::set<int>{0,  1,  2,  3,  4,  5,  6,  7,  8,   9,   10,
                                11, 12, 13, 14, 15, 16, 17, 18, 128, 129, 130});
  CHECK(opOf(Dialect::kTorch113, 7) == Op::kWatchKey);
  CHECK(opOf(Dialect::kTorch2, 7) == Op::kNumKeys);
  CHECK(std::string(opName(Op::kCompareSet)) == "COMPARE_SET");
  CHECK(std::string(opName(Op::kNumKeys)) == "GETNUMKEYS");
  CHECK(std::string(opName(Op::kLease)) == "DTRUN_LEASE");
}

TEST_CASE("wire: unknown opcodes are bad frames in either table", "[store][wire]") {
  const std::string padding(64, '\0');
  for (Dialect d : {Dialect::kTorch2, Dialect::kTorch113}) {
    for (int b = 0; b < 256; ++b) {
      auto code = static_cast<std::uint8_t>(b);
      if (opOf(d, code)) continue;
      INFO("opcode " << b << " in the " << dialectName(d) << " table");
      Request got;
      auto r = decode(d, std::string(1, static_cast<char>(code)) + padding, &got);
      CHECK(r.status == DecodeStatus::kBad);
      CHECK_THAT(r.error, Contains("unknown opcode " + std::to_string(b)));
    }
  }
  // 1.13 clients never send APPEND (9) and friends: in that table they are unknown.
  Request got;
  CHECK(decode(Dialect::kTorch113, hex("09 " + L1 + "6B " + L1 + "76"), &got).status ==
        DecodeStatus::kBad);
}

TEST_CASE("wire: oversize keys, values and counts are bad before any payload arrives",
          "[store][wire]") {
  Limits limits;
  limits.maxKeySize = 16;
  limits.maxValueSize = 32;
  limits.maxKeysPerRequest = 4;
  auto u64 = [](std::uint64_t v) {
    std::string s(8, '\0');
    std::memcpy(s.data(), &v, 8);
    return s;
  };
  const std::string set = "\x01";  // SET in the 2.x table
  Request got;

  SECTION("key") {
    // Only the length has arrived: a length past the limit is refused now, not after 2^63 bytes.
    for (std::uint64_t len : {std::uint64_t{17}, std::uint64_t{1} << 40, ~std::uint64_t{0}}) {
      auto r = decodeRequest(Dialect::kTorch2, set + u64(len), limits, &got);
      CHECK(r.status == DecodeStatus::kBad);
      CHECK_THAT(r.error, Contains("SET") && Contains("key of " + std::to_string(len)));
    }
    auto ok = decodeRequest(Dialect::kTorch2, set + u64(16) + std::string(16, 'k') + u64(0), limits,
                            &got);
    CHECK(ok.status == DecodeStatus::kComplete);
  }
  SECTION("value") {
    const std::string key = u64(1) + "k";
    auto r = decodeRequest(Dialect::kTorch2, set + key + u64(33), limits, &got);
    CHECK(r.status == DecodeStatus::kBad);
    CHECK_THAT(r.error, Contains("value of 33 bytes exceeds the limit of 32"));
    r = decodeRequest(Dialect::kTorch113, "\x01" + key + u64(1) + "e" + u64(~std::uint64_t{0}),
                      limits, &got);  // 1.13 COMPARE_SET, huge `desired`
    CHECK(r.status == DecodeStatus::kBad);
    auto ok =
        decodeRequest(Dialect::kTorch2, set + key + u64(32) + std::string(32, 'v'), limits, &got);
    CHECK(ok.status == DecodeStatus::kComplete);
  }
  SECTION("count") {
    for (const char* op : {"\x05", "\x06", "\x0A", "\x0B"}) {  // CHECK, WAIT, MULTI_GET, MULTI_SET
      INFO("opcode " << static_cast<int>(op[0]));
      auto r = decodeRequest(Dialect::kTorch2, op + u64(5), limits, &got);
      CHECK(r.status == DecodeStatus::kBad);
      CHECK_THAT(r.error, Contains("5 keys"));
      r = decodeRequest(Dialect::kTorch2, op + u64(~std::uint64_t{0}), limits, &got);
      CHECK(r.status == DecodeStatus::kBad);
    }
    // Within the limit but not yet arrived: nothing is reserved for keys that may never come.
    Limits roomy;
    auto r = decodeRequest(Dialect::kTorch2, "\x06" + u64(roomy.maxKeysPerRequest), roomy, &got);
    CHECK(r.status == DecodeStatus::kNeedMore);
    CHECK(got.keys.capacity() < 16);
  }
}

TEST_CASE("wire: encodeRequest refuses a request with the wrong arguments", "[store][wire]") {
  Request r;
  r.op = Op::kSet;
  r.keys = {"k"};  // no value
  std::string out;
  CHECK_THROWS_AS(encodeRequest(Dialect::kTorch2, r, &out), dtrun::ProtocolError);
  r.op = Op::kMultiSet;
  r.keys = {"a", "b"};
  r.values = {"1"};
  CHECK_THROWS_AS(encodeRequest(Dialect::kTorch2, r, &out), dtrun::ProtocolError);
  r.op = Op::kAppend;
  r.values = {"1"};
  r.keys = {"a"};
  CHECK_THROWS_WITH(encodeRequest(Dialect::kTorch113, r, &out), Contains("APPEND"));
}

TEST_CASE("wire: response pieces are little-endian", "[store][wire]") {
  std::string out;
  appendU8(&out, 1);
  appendU32(&out, 0x3C85F7CE);
  appendI64(&out, -1);
  appendU64(&out, 258);
  appendBytes(&out, std::string("a\0", 2));
  CHECK(toHex(out) == toHex(hex("01 CE F7 85 3C FF FF FF FF FF FF FF FF 02 01 00 00 00 00 00 00 "
                                "02 00 00 00 00 00 00 00 61 00")));
}
