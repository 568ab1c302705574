// rendezvous/etcd/etcd_wire.h: the v3 gateway's JSON, without etcd: base64 keys and values,
// 64-bit numbers as strings (read strictly), and the shape of transaction operations.
#include "rendezvous/etcd/etcd_wire.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

using namespace dtrun::rendezvous::etcd;
using nlohmann::json;

TEST_CASE("etcd wire: base64 both ways, any bytes", "[etcd]") {
  CHECK(base64("") == "");
  CHECK(base64("f") == "Zg==");
  CHECK(base64("fo") == "Zm8=");
  CHECK(base64("foo") == "Zm9v");
  CHECK(base64(std::string("\0\xff\x01", 3)) == "AP8B");
  for (std::string bytes : {std::string(), std::string("a"), std::string("dtrun/job/r0/alive/x"),
                            std::string("\0\x01\x02\xfe\xff k\n", 8)}) {
    INFO(bytes.size() << " bytes");
    CHECK(unbase64(base64(bytes)) == bytes);
  }
}

TEST_CASE("etcd wire: numbers are strings, zeros left out, junk refused", "[etcd]") {
  const json j = json::parse(R"({"revision": "9223372036854775807", "count": 3, "neg": "-2",
                                 "bad": "12abc", "null": null})");
  CHECK(gatewayNumber(j, "revision") == INT64_C(9223372036854775807));
  CHECK(gatewayNumber(j, "count") == 3);
  CHECK(gatewayNumber(j, "neg") == -2);
  CHECK(gatewayNumber(j, "missing") == 0);
  CHECK(gatewayNumber(j, "null") == 0);
  CHECK_THROWS_AS(gatewayNumber(j, "bad"), dtrun::ProtocolError);
  CHECK_THROWS_WITH(gatewayNumber(j, "bad"), Catch::Contains("'12abc', not a number"));
}

TEST_CASE("etcd wire: a range answer and its key-values", "[etcd]") {
  const json j = {{"header", {{"revision", "42"}}},
                  {"count", "1"},
                  {"kvs", json::array({json{{"key", base64("k")},
                                            {"value", base64("v")},
                                            {"create_revision", "5"},
                                            {"mod_revision", "7"},
                                            {"version", "2"}}})}};
  const RangeResponse r = rangeResponse(j);
  CHECK(r.revision == 42);
  CHECK(r.count == 1);
  REQUIRE(r.kvs.size() == 1);
  CHECK(r.kvs[0].key == "k");
  CHECK(r.kvs[0].value == "v");
  CHECK(r.kvs[0].createRevision == 5);
  CHECK(r.kvs[0].modRevision == 7);
  CHECK(r.kvs[0].version == 2);
  CHECK(r.kvs[0].lease == 0);  // left out: zero
}

TEST_CASE("etcd wire: transaction operations and comparisons", "[etcd]") {
  CHECK(opJson(Op::put("k", "v", 9)) ==
        json{{"request_put", {{"key", base64("k")}, {"value", base64("v")}, {"lease", "9"}}}});
  CHECK(opJson(Op::scan("a", "b")) ==
        json{{"request_range", {{"key", base64("a")}, {"range_end", base64("b")}}}});
  CHECK(opJson(Op::remove("k")) == json{{"request_delete_range", {{"key", base64("k")}}}});
  CHECK(compareJson(Compare::missing("k")) == json{{"key", base64("k")},
                                                   {"target", "CREATE"},
                                                   {"result", "EQUAL"},
                                                   {"create_revision", "0"}});
  CHECK(compareJson(Compare::modRevision("k", 12))["mod_revision"] == "12");
  CHECK(compareJson(Compare::valueIs("k", "x"))["value"] == base64("x"));
  CHECK(prefixEnd("a/") == "a0");
  CHECK(prefixEnd(std::string("a\xff", 2)) == "b");
  CHECK(prefixEnd("") == std::string(1, '\0'));
}
