// The hostile-client suite: what a buggy or malicious client can send a store, each case run
// against a store by address only, so the same cases run against an in-process StoreServer
// (rendezvous_tests), `dtrun store` and the store an agent hosts while a real job runs
// (tests/e2e/store_hostile_test.cpp).
//
// The store under test must run with the limits hostileLimits() names. Every case checks three
// things: the hostile connection is closed or refused, a bystander client is served while and
// after it happens (with a generous deadline, never a measured time), and a refused request
// leaves the store's contents as they were.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/tcp_store.h"
#include "store_test_util.h"

namespace dtrun::rendezvous::test {

/// The limits the cases assume: 1 MiB values, 16 MiB per request, a 2 s frame timeout, default
/// caps otherwise (128 MiB replies).
inline void applyHostileLimits(StoreServerOptions& o) {
  o.limits.maxValueSize = 1024 * 1024;
  o.limits.maxRequestBytes = 16 * 1024 * 1024;
  o.frameTimeout = std::chrono::seconds(2);
}
/// The same for `dtrun store`.
inline std::vector<std::string> hostileStoreArgs() {
  return {"--max-value-size=1M", "--max-request-size=16M", "--frame-timeout=2"};
}
/// The same as --rdzv-conf keys for an agent-hosted store.
inline std::string hostileRdzvConf() {
  return "store_max_value_size=1M,store_max_request_size=16M,store_frame_timeout=2";
}

inline std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

inline std::unique_ptr<TcpStore> bystander(std::uint16_t port) {
  TcpStoreOptions o;
  o.port = port;
  o.connectTimeout = std::chrono::seconds(20);
  o.timeout = std::chrono::seconds(20);  // "served within a bound": a deadline, not a timing
  o.keyPrefix = "/hostile/";
  return std::make_unique<TcpStore>(o);
}

/// The bystander's round trip: a SET, a GET and an ADD, each within its deadline.
inline void expectServed(TcpStore& s, const std::string& tag) {
  s.set("alive/" + tag, tag);
  CHECK(s.get("alive/" + tag, std::chrono::seconds(20)) == tag);
  CHECK(s.add("alive/count", 1) > 0);
}

inline std::vector<std::string> hostileCaseNames() {
  return {"multi_get_amplification",  "wait_on_128k_keys",       "multi_set_in_pieces",
          "multi_set_past_buffer",    "append_past_value_limit", "half_frame_then_silence",
          "add_on_text_with_newline", "flood_of_bad_frames"};
}

/// Runs one case against the store at 127.0.0.1:`port`.
inline void runHostileCase(const std::string& name, std::uint16_t port) {
  using namespace std::chrono_literals;
  using wire::Op;
  auto byOwner = bystander(port);
  TcpStore& by = *byOwner;
  const std::string p = "/hostile/" + name + "/";
  expectServed(by, name + "-before");
  INFO("hostile case " << name);

  if (name == "multi_get_amplification") {
    // One 512 KiB value named 400 times: a 200 MiB reply, past the 128 MiB reply cap.
    const Bytes big(512 * 1024, 'b');
    by.set(name + "/big", big);
    const auto keysBefore = by.numKeys();
    auto c = connect2(port);
    c->send(frame2(Op::kMultiGet, std::vector<std::string>(400, p + "big")));
    CHECK(c->closedByPeer());
    CHECK(by.numKeys() == keysBefore);
    CHECK(by.get(name + "/big", 20s) == big);
    expectServed(by, name);
  } else if (name == "wait_on_128k_keys") {
    // 131072 distinct missing keys: parked in linear time; the others go on being served.
    std::vector<std::string> keys;
    for (int i = 0; i < 131072; ++i) keys.push_back(p + "missing/" + std::to_string(i));
    auto c = connect2(port);
    c->send(frame2(Op::kWait, keys));
    expectServed(by, name);
    c->send(frame2(Op::kCancelWait));
    CHECK(c->recv(1, 60s) == std::string(1, static_cast<char>(wire::kWaitCanceled)));
  } else if (name == "multi_set_in_pieces") {
    // 12 MiB of MULTI_SET sent 32 KiB at a time: decoded once, not from the front per piece;
    // the bystander is served between the pieces. Accepted: every key is there afterwards.
    std::vector<std::string> keys;
    std::vector<Bytes> values;
    for (int i = 0; i < 24; ++i) {
      keys.push_back(p + "k" + std::to_string(i));
      values.push_back(Bytes(512 * 1024, static_cast<char>('a' + i % 26)));
    }
    const std::string f = frame2(Op::kMultiSet, keys, values);
    auto c = connect2(port);
    for (std::size_t pos = 0; pos < f.size(); pos += 32 * 1024) {
      REQUIRE(c->send(std::string_view(f).substr(pos, 32 * 1024)));
      if (pos % (2 * 1024 * 1024) == 0) expectServed(by, name + std::to_string(pos));
    }
    c->send(frame2(Op::kPing, {}, {}, 0, 77));
    CHECK(c->recvU32(60s) == 77);
    CHECK(by.get(name + "/k23", 20s) == values[23]);
  } else if (name == "multi_set_past_buffer") {
    // A MULTI_SET of 20 values of 1 MiB passes what one connection may buffer (16 MiB here):
    // refused when the length that crosses it arrives; none of its keys is written.
    auto c = connect2(port);
    std::string f = "\x0B" + le64(20);
    for (int i = 0; i < 20; ++i) {
      const std::string k = p + "k" + std::to_string(i);
      f += le64(k.size()) + k + le64(1024 * 1024) + std::string(1024 * 1024, 'v');
    }
    c->send(f);
    CHECK(c->closedByPeer(60s));
    expectServed(by, name);
    CHECK_FALSE(by.check({name + "/k0"}));
  } else if (name == "append_past_value_limit") {
    // 4 x 512 KiB APPENDs with a 1 MiB limit: the third is refused and the value stays 1 MiB.
    auto c = connect2(port);
    const Bytes piece(512 * 1024, 'a');
    for (int i = 0; i < 4; ++i) c->send(frame2(Op::kAppend, {p + "grow"}, {piece}));
    CHECK(c->closedByPeer());
    expectServed(by, name);
    CHECK(by.get(name + "/grow", 20s).size() == 1024 * 1024);
  } else if (name == "half_frame_then_silence") {
    // Half a SET, then nothing: dropped after the frame timeout (2 s), its buffer freed.
    auto c = connect2(port);
    const std::string f = frame2(Op::kSet, {p + "half"}, {Bytes(4096, 'h')});
    c->send(f.substr(0, f.size() / 2));
    expectServed(by, name);
    CHECK(c->closedByPeer(60s));
    CHECK_FALSE(by.check({name + "/half"}));
  } else if (name == "add_on_text_with_newline") {
    // ADD on a key holding text, the key full of control bytes: refused, value unchanged; the
    // log line (checked by the caller) shows the key escaped.
    by.set(name + "/t\nINJECTED", "text");
    auto c = connect2(port);
    c->send(frame2(Op::kAdd, {p + "t\nINJECTED"}, {}, 1));
    CHECK(c->closedByPeer());
    expectServed(by, name);
    CHECK(by.get(name + "/t\nINJECTED", 20s) == "text");
  } else if (name == "flood_of_bad_frames") {
    // 300 connections with an unknown opcode each: every one closed, the bystander served, and
    // the log (checked by the caller) holds a few lines and a count, not 300 lines.
    for (int i = 0; i < 300; ++i) {
      RawConn bad(port);
      bad.send(validateFrame() + "\x7F");
      CHECK(bad.closedByPeer());
    }
    expectServed(by, name);
  } else {
    FAIL("unknown hostile case " << name);
  }
  expectServed(by, name + "-after");
}

}  // namespace dtrun::rendezvous::test
