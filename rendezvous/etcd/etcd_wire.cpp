#include "rendezvous/etcd/etcd_wire.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/decimal.h"
#include "common/error.h"

namespace dtrun::rendezvous::etcd {

using json = nlohmann::json;

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string prefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Compare Compare::missing(std::string key) { return modRevision(std::move(key), 0); }

Compare Compare::modRevision(std::string key, std::int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = revision == 0 ? Target::kCreate : Target::kMod;
  c.number = revision;
  return c;
}

Compare Compare::valueIs(std::string key, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.value = std::move(value);
  return c;
}

Op Op::get(std::string key) {
  Op op;
  op.key = std::move(key);
  return op;
}

Op Op::scan(std::string key, std::string rangeEnd) {
  Op op;
  op.key = std::move(key);
  op.rangeEnd = std::move(rangeEnd);
  return op;
}

Op Op::put(std::string key, std::string value, std::int64_t lease) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}

Op Op::remove(std::string key, std::string rangeEnd) {
  Op op;
  op.kind = Kind::kDelete;
  op.key = std::move(key);
  op.rangeEnd = std::move(rangeEnd);
  return op;
}

std::string base64(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string unbase64(const std::string& in) {
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : in) {
    const char* p = std::strchr(kAlphabet, c);
    if (c == '=' || c == '\0' || !p) continue;
    v = (v << 6) | static_cast<unsigned>(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

std::int64_t gatewayNumber(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) {
    const auto& text = it->get_ref<const std::string&>();
    if (auto n = parseDecimal(text)) return *n;
    throw ProtocolError(std::string("etcd answered ") + name + " '" + text.substr(0, 40) +
                        "', not a number");
  }
  return it->get<std::int64_t>();
}

KeyValue keyValue(const json& j) {
  KeyValue kv;
  kv.key = unbase64(j.value("key", ""));
  kv.value = unbase64(j.value("value", ""));
  kv.createRevision = gatewayNumber(j, "create_revision");
  kv.modRevision = gatewayNumber(j, "mod_revision");
  kv.version = gatewayNumber(j, "version");
  kv.lease = gatewayNumber(j, "lease");
  return kv;
}

RangeResponse rangeResponse(const json& j) {
  RangeResponse r;
  if (auto h = j.find("header"); h != j.end()) r.revision = gatewayNumber(*h, "revision");
  r.count = gatewayNumber(j, "count");
  if (auto kvs = j.find("kvs"); kvs != j.end()) {
    for (const auto& kv : *kvs) r.kvs.push_back(keyValue(kv));
  }
  return r;
}

json opJson(const Op& op) {
  json body{{"key", base64(op.key)}};
  switch (op.kind) {
    case Op::Kind::kRange:
      if (!op.rangeEnd.empty()) body["range_end"] = base64(op.rangeEnd);
      if (op.countOnly) body["count_only"] = true;
      return {{"request_range", body}};
    case Op::Kind::kPut:
      body["value"] = base64(op.value);
      if (op.lease) body["lease"] = std::to_string(op.lease);
      return {{"request_put", body}};
    case Op::Kind::kDelete:
      if (!op.rangeEnd.empty()) body["range_end"] = base64(op.rangeEnd);
      return {{"request_delete_range", body}};
  }
  return body;
}

json compareJson(const Compare& c) {
  static const char* targets[] = {"CREATE", "MOD", "VALUE", "VERSION"};
  static const char* results[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  json j{{"key", base64(c.key)},
         {"target", targets[static_cast<int>(c.target)]},
         {"result", results[static_cast<int>(c.result)]}};
  switch (c.target) {
    case Compare::Target::kCreate:
      j["create_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kMod:
      j["mod_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kVersion:
      j["version"] = std::to_string(c.number);
      break;
    case Compare::Target::kValue:
      j["value"] = base64(c.value);
      break;
  }
  return j;
}

}  // namespace dtrun::rendezvous::etcd
