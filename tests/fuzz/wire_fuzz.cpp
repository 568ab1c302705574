// libFuzzer target for the TCPStore wire decoder (rendezvous/wire.cpp).
//
// Each input is read as a byte stream from one connection: detectDialect() decides its table,
// then decodeRequest() runs until the stream is incomplete or bad, in the detected dialect and in
// both explicit ones. Small limits keep the interesting lengths reachable. For every complete
// request the encoder must give back exactly the bytes it came from (the encoding is canonical),
// which must decode to the same request again; every proper prefix of a frame must need more
// bytes. Any violation aborts, and ASan/UBSan catch memory and arithmetic errors on the way.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "rendezvous/wire_decoder.h"

namespace wire = dtrun::rendezvous::wire;

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "wire_fuzz: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace {

bool same(const wire::Request& a, const wire::Request& b) {
  return a.op == b.op && a.keys == b.keys && a.values == b.values && a.number == b.number &&
         a.word == b.word;
}

void decodeStream(wire::Dialect dialect, std::string_view in, const wire::Limits& limits) {
  std::size_t pos = 0;
  while (pos < in.size()) {
    std::string_view rest = in.substr(pos);
    wire::Request req;
    wire::DecodeResult r = wire::decodeRequest(dialect, rest, limits, &req);
    if (r.status == wire::DecodeStatus::kNeedMore) {
      FUZZ_CHECK(r.consumed == 0);
      return;
    }
    if (r.status == wire::DecodeStatus::kBad) {
      FUZZ_CHECK(!r.error.empty());
      return;
    }
    FUZZ_CHECK(r.consumed > 0 && r.consumed <= rest.size());
    FUZZ_CHECK(req.keys.size() <= limits.maxKeysPerRequest);
    for (const auto& k : req.keys) FUZZ_CHECK(k.size() <= limits.maxKeySize);
    for (const auto& v : req.values) FUZZ_CHECK(v.size() <= limits.maxValueSize);
    std::string_view frame = rest.substr(0, r.consumed);

    // Round trip: encode gives back the frame's bytes, which decode to the same request.
    std::string encoded;
    try {
      wire::encodeRequest(dialect, req, &encoded);
    } catch (const dtrun::Error& e) {
      std::fprintf(stderr, "wire_fuzz: a decoded request does not encode: %s\n", e.what());
      std::abort();
    }
    FUZZ_CHECK(encoded == frame);
    wire::Request again;
    wire::DecodeResult r2 = wire::decodeRequest(dialect, encoded, limits, &again);
    FUZZ_CHECK(r2.status == wire::DecodeStatus::kComplete);
    FUZZ_CHECK(r2.consumed == encoded.size());
    FUZZ_CHECK(same(req, again));

    // Incremental decoding: the frame less its last byte, and its first half, are incomplete.
    for (std::size_t cut : {frame.size() - 1, frame.size() / 2}) {
      wire::Request partial;
      FUZZ_CHECK(wire::decodeRequest(dialect, frame.substr(0, cut), limits, &partial).status ==
                 wire::DecodeStatus::kNeedMore);
    }
    pos += r.consumed;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  wire::Limits limits;
  limits.maxKeySize = 64;
  limits.maxValueSize = 512;
  limits.maxKeysPerRequest = 8;

  wire::Dialect detected = wire::detectDialect(in);
  if (size >= 5 || (size >= 1 && data[0] != 0)) FUZZ_CHECK(detected != wire::Dialect::kUnknown);
  if (size >= 1 && data[0] != 0) FUZZ_CHECK(detected == wire::Dialect::kTorch113);
  if (detected != wire::Dialect::kUnknown) decodeStream(detected, in, limits);
  decodeStream(wire::Dialect::kTorch113, in, limits);
  decodeStream(wire::Dialect::kTorch2, in, limits);
  return 0;
}
