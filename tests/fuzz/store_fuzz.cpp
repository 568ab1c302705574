// libFuzzer target for the store-serving path: StoreConnection (decoding, serving, refusing)
// over one StoreCore, the code the store's thread runs for every byte a client sends.
//
// The input is a script of chunks, each [connection][length][bytes]: the bytes are fed to one of
// three connections, as a socket would deliver them. Slots 0 and 1 are agents that know the
// store's token (they must present it with DTRUN_AUTH to reach /dtrun/ keys), slot 2 a stranger
// with an address; the writer records and the access rule run on every request. A connection whose
// receive() returns a reason is closed, as the server closes it, and a fresh one takes its slot.
// Small limits keep every refusal reachable. Checked after every chunk: receive() never throws (an
// exception aborts the fuzzer), the store stays within its quota and its value limit, and once
// every connection is closed no buffered byte is left on the books. ASan/UBSan watch the rest.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "rendezvous/store_connection.h"
#include "rendezvous/store_core.h"

namespace rdzv = dtrun::rendezvous;

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "store_fuzz: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kMaxValue = 256;
  constexpr std::size_t kQuota = 16 * 1024;
  static const std::string kToken = "fuzz-token-0123456789";
  rdzv::wire::Limits limits;
  limits.maxKeySize = 64;
  limits.maxValueSize = kMaxValue;
  limits.maxKeysPerRequest = 8;
  limits.maxRequestBytes = 2048;
  std::array<std::unique_ptr<rdzv::StoreConnection>, 3> conns;
  rdzv::StoreCore core(
      [&](rdzv::StoreCore::ClientId id) {
        for (auto& c : conns) {
          if (c && c->id() == id) c->stopWaiting();
        }
      },
      rdzv::StoreQuota{kMaxValue, kQuota});
  rdzv::ConnectionBytes held;
  rdzv::StoreCore::ClientId nextId = 1;

  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (in.size() >= 2) {
    const std::size_t slot = static_cast<std::uint8_t>(in[0]) % conns.size();
    const std::size_t len = std::min<std::size_t>(static_cast<std::uint8_t>(in[1]), in.size() - 2);
    std::string_view chunk = in.substr(2, len);
    in.remove_prefix(2 + len);
    auto& conn = conns[slot];
    if (!conn) {
      conn = std::make_unique<rdzv::StoreConnection>(core, nextId++, limits, 1024, held,
                                                     slot == 2 ? "10.0.0.2:4242" : "10.0.0.1:4242",
                                                     kToken);
    }
    const std::string why = conn->receive(chunk);
    // Replies leave as a socket would take them: all at once, then "sent".
    if (conn->hasOutput()) {
      conn->takeOutput();
      conn->sent();
    }
    if (!why.empty()) {
      conn->close();
      conn.reset();
    }
    FUZZ_CHECK(core.bytes() <= kQuota);
    for (const auto& k : core.keyNames()) FUZZ_CHECK(core.find(k.get())->size() <= kMaxValue);
  }
  for (auto& c : conns) {
    if (c) c->close();
  }
  FUZZ_CHECK(held.held == 0);
  return 0;
}
