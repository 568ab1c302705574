// The TCPStore wire codec: golden bytes for every operation in both opcode tables, round trips,
// dialect detection, incremental decoding, limits and unknown opcodes.
//
// The golden frames are written out by hand from torch/csrc/distributed/c10d/TCPStore*.cpp (not
// produced by the encoder under test): one opcode byte, u64 little-endian lengths before keys and
// values, i64 numbers, u32 words.
#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/wire_decoder.h"

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
std::string v1() { return L1 + "76 "; }
std::string validateFrame2() { return std::string("\x00\xCE\xF7\x85\x3C", 5); }

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
      {Op::kAuth, {}, {"v"}, 0, 0, "83 " + v, "83 " + v},
      {Op::kWriter, {"k"}, {}, 0, 0, "84 " + k, "84 " + k},
      {Op::kHeard, {"a", "bc"}, {}, 0, 0, "85 " + twoKeys, "85 " + twoKeys},
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
            g.op == Op::kMultiSet || g.op == Op::kHeard) {
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
  CHECK(known113 == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 128, 129, 130, 131, 132, 133});
  CHECK(known2 == std::set<int>{0,  1,  2,  3,  4,  5,  6,   7,   8,   9,   10,  11, 12,
                                13, 14, 15, 16, 17, 18, 128, 129, 130, 131, 132, 133});
  CHECK(opOf(Dialect::kTorch113, 7) == Op::kWatchKey);
  CHECK(opOf(Dialect::kTorch2, 7) == Op::kNumKeys);
  CHECK(std::string(opName(Op::kCompareSet)) == "COMPARE_SET");
  CHECK(std::string(opName(Op::kNumKeys)) == "GETNUMKEYS");
  CHECK(std::string(opName(Op::kLease)) == "DTRUN_LEASE");
  CHECK(std::string(opName(Op::kAuth)) == "DTRUN_AUTH");
  CHECK(std::string(opName(Op::kWriter)) == "DTRUN_WRITER");
  CHECK(std::string(opName(Op::kHeard)) == "DTRUN_HEARD");
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

TEST_CASE("wire: replies encode to torch's golden bytes", "[store][wire]") {
  std::string out;
  encodeStatusReply(&out, kStopWaiting);
  CHECK(toHex(out) == "00");
  out.clear();
  encodeWordReply(&out, 0x3C85F7CE);
  CHECK(toHex(out) == toHex(hex("CE F7 85 3C")));
  out.clear();
  encodeNumberReply(&out, -1);
  CHECK(toHex(out) == toHex(hex("FF FF FF FF FF FF FF FF")));
  out.clear();
  encodeValueReply(&out, std::string("a\0", 2));
  CHECK(toHex(out) == toHex(hex(L2 + "61 00")));
  out.clear();
  Bytes front = "v";
  encodeQueuePopReply(&out, 2, &front);
  encodeQueuePopReply(&out, 0, nullptr);
  CHECK(toHex(out) == toHex(hex(L2 + v1() + L0)));
}

namespace {

struct GoldenReply {
  Request request;
  std::string bytes;  // hex
  Reply want;
};

std::vector<GoldenReply> goldenReplies() {
  auto req = [](Op op, std::vector<std::string> keys = {}) { return makeRequest(op, keys); };
  auto reply = [](std::uint8_t status, std::uint32_t word, std::int64_t number,
                  std::vector<Bytes> values) {
    Reply r;
    r.status = status;
    r.word = word;
    r.number = number;
    r.values = std::move(values);
    return r;
  };
  return {
      {req(Op::kGet, {"k"}), L1 + "76", reply(0, 0, 0, {"v"})},
      {req(Op::kCompareSet, {"k"}), L0, reply(0, 0, 0, {""})},
      {req(Op::kAdd, {"k"}), "05 00 00 00 00 00 00 00", reply(0, 0, 5, {})},
      {req(Op::kNumKeys), "FE FF FF FF FF FF FF FF", reply(0, 0, -2, {})},
      {req(Op::kCheck, {"k"}), "01", reply(kCheckNotReady, 0, 0, {})},
      {req(Op::kWait, {"k"}), "00", reply(kStopWaiting, 0, 0, {})},
      {req(Op::kCancelWait), "01", reply(kWaitCanceled, 0, 0, {})},
      {req(Op::kPing), "04 03 02 01", reply(0, 0x01020304, 0, {})},
      {req(Op::kMultiGet, {"a", "b"}), L1 + "76 " + L0, reply(0, 0, 0, {"v", ""})},
      {req(Op::kQueuePop, {"k"}), L1 + L1 + "76", reply(0, 0, 1, {"v"})},
      {req(Op::kQueuePop, {"k"}), L0, reply(0, 0, 0, {})},
      {req(Op::kListKeys), L2 + L1 + "61 " + L1 + "62", reply(0, 0, 2, {"a", "b"})},
      {req(Op::kAuth), "01", reply(kAuthRefused, 0, 0, {})},
      {req(Op::kWriter, {"k"}), L1 + "76", reply(0, 0, 0, {"v"})},
      {req(Op::kHeard, {"a", "b"}), L2 + "31 32 " + L0, reply(0, 0, 0, {"12", ""})},
  };
}

}  // namespace

TEST_CASE("wire: golden replies decode whole, and not from any proper prefix", "[store][wire]") {
  for (const auto& g : goldenReplies()) {
    INFO("reply to " << opName(g.request.op) << ": " << g.bytes);
    const std::string bytes = hex(g.bytes);
    Reply got;
    auto r = decodeReply(g.request, bytes + "\x07", Limits{}, &got);
    REQUIRE(r.status == DecodeStatus::kComplete);
    CHECK(r.consumed == bytes.size());
    CHECK(got.status == g.want.status);
    CHECK(got.word == g.want.word);
    CHECK(got.number == g.want.number);
    CHECK(got.values == g.want.values);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      Reply partial;
      CHECK(decodeReply(g.request, bytes.substr(0, n), Limits{}, &partial).status ==
            DecodeStatus::kNeedMore);
    }
    // Fed one byte at a time, the incremental decoder gives the same reply.
    ReplyDecoder d;
    d.expect(g.request);
    DecodeResult last;
    for (char c : bytes) last = d.feed(std::string_view(&c, 1));
    CHECK(last.status == DecodeStatus::kComplete);
    CHECK(d.reply().values == g.want.values);
  }
}

TEST_CASE("wire: a reply value past the limit is bad before its bytes arrive", "[store][wire]") {
  Limits limits;
  limits.maxValueSize = 4;
  Reply got;
  auto r = decodeReply(makeRequest(Op::kGet, {"k"}), hex("05 00 00 00 00 00 00 00"), limits, &got);
  CHECK(r.status == DecodeStatus::kBad);
  CHECK_THAT(r.error, Contains("GET") && Contains("value of 5 bytes"));
  r = decodeReply(makeRequest(Op::kListKeys), hex("FF FF FF FF FF FF FF FF"), limits, &got);
  CHECK(r.status == DecodeStatus::kBad);
  CHECK_THROWS_AS(ReplyDecoder().expect(makeRequest(Op::kSet, {"k"}, {"v"})), dtrun::ProtocolError);
}

TEST_CASE("wire: a request arriving in pieces is decoded in time linear in its bytes",
          "[store][wire]") {
  // 4096 values of 4 KiB in one MULTI_SET, fed 1 KiB at a time: the decoder keeps its place,
  // so it copies each byte once (the old decoder started from the front on every piece).
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  for (int i = 0; i < 4096; ++i) {
    keys.push_back("k" + std::to_string(i));
    values.push_back(Bytes(4096, static_cast<char>('a' + i % 26)));
  }
  const std::string bytes =
      validateFrame2() + encodeFrame(Dialect::kTorch2, Op::kMultiSet, keys, values);
  RequestDecoder d;
  std::size_t pos = 0;
  int completed = 0;
  std::size_t maxBuffered = 0;
  while (pos < bytes.size()) {
    auto piece = std::string_view(bytes).substr(pos, 1024);
    while (!piece.empty()) {
      auto r = d.feed(piece);
      REQUIRE(r.status != DecodeStatus::kBad);
      piece.remove_prefix(r.consumed);
      maxBuffered = std::max(maxBuffered, d.buffered());
      if (r.status == DecodeStatus::kComplete) ++completed;
    }
    pos += 1024;
  }
  CHECK(completed == 2);
  CHECK(d.request().op == Op::kMultiSet);
  CHECK(d.request().keys == keys);
  CHECK(d.request().values == values);
  CHECK(d.dialect() == Dialect::kTorch2);
  // What the decoder says it holds is the bytes of the keys and values (plus 32 per argument).
  CHECK(maxBuffered <= 4096 * (4096 + 6 + 64));
  CHECK(maxBuffered >= 4096 * 4096);
}

TEST_CASE("wire: a request past the bytes a connection may buffer is bad when announced",
          "[store][wire]") {
  Limits limits;
  limits.maxRequestBytes = 1000;
  RequestDecoder d(limits);
  d.setDialect(Dialect::kTorch2);
  std::string frame =
      encodeFrame(Dialect::kTorch2, Op::kMultiSet, {"a", "b"}, {Bytes(600, 'x'), Bytes(600, 'y')});
  // Cut right after the second value's length: that length alone passes the limit.
  auto r = d.feed(std::string_view(frame).substr(0, 1 + 8 + 9 + 8 + 600 + 9 + 8));
  CHECK(r.status == DecodeStatus::kBad);
  CHECK_THAT(r.error, Contains("MULTI_SET") && Contains("a connection may buffer"));
}
