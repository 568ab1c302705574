// common/node_id.h: the agent's name among agents ("host:pid[:nonce]") and the nonce, once
// written out in the rendezvous, the etcd backend and the etcd store each.
#include "common/node_id.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

using dtrun::makeNonce;
using dtrun::nodeId;
using dtrun::randomHex;

TEST_CASE("randomHex and makeNonce: lowercase hex of the asked length, new every call",
          "[common]") {
  for (std::size_t n : {0, 1, 7, 8, 9, 16, 33}) {
    const std::string h = randomHex(n);
    INFO(h);
    CHECK(h.size() == n);
    CHECK(h.find_first_not_of("0123456789abcdef") == std::string::npos);
  }
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    const std::string nonce = makeNonce();
    CHECK(nonce.size() == 8);
    seen.insert(nonce);
  }
  // 64 draws of 32 bits: a repeat has odds of about 1 in 2^21.
  CHECK(seen.size() == 64);
  // Every digit value turns up (4096 digits): no nibble is stuck.
  const std::string many = randomHex(4096);
  CHECK(std::set<char>(many.begin(), many.end()).size() == 16);
}

TEST_CASE("nodeId is host:pid, with the nonce after a third ':'", "[common]") {
  CHECK(nodeId("node-7", 4242) == "node-7:4242");
  CHECK(nodeId("node-7", 4242, "0badf00d") == "node-7:4242:0badf00d");
  CHECK(nodeId("", 1) == ":1");
}
