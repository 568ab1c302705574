// The part of etcd's v3 API dtrun speaks, as data (keys, ranges, transactions, watch events) and
// as the JSON of the v3 gateway every member serves on its client port: keys and values travel
// base64-encoded, 64-bit numbers as decimal strings, and zeros and false are left out. The
// client (rendezvous/etcd/etcd_client.h) sends and receives these; nothing here does I/O.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace dtrun::rendezvous::etcd {

struct KeyValue {
  std::string key, value;
  std::int64_t createRevision = 0, modRevision = 0, version = 0, lease = 0;
};

struct RangeResponse {
  std::int64_t revision = 0;  ///< the store's revision when it was read
  std::int64_t count = 0;
  std::vector<KeyValue> kvs;
};

/// One comparison of a transaction.
struct Compare {
  enum class Target { kCreate, kMod, kValue, kVersion };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kCreate;
  Result result = Result::kEqual;
  std::int64_t number = 0;
  std::string value;

  /// The key does not exist.
  static Compare missing(std::string key);
  /// The key was last changed at `revision` (0: does not exist).
  static Compare modRevision(std::string key, std::int64_t revision);
  static Compare valueIs(std::string key, std::string value);
};

/// One operation of a transaction.
struct Op {
  enum class Kind { kRange, kPut, kDelete };
  Kind kind = Kind::kRange;
  std::string key, value, rangeEnd;
  std::int64_t lease = 0;
  bool countOnly = false;

  static Op get(std::string key);
  static Op scan(std::string key, std::string rangeEnd);
  static Op put(std::string key, std::string value, std::int64_t lease = 0);
  static Op remove(std::string key, std::string rangeEnd = "");
};

struct TxnResponse {
  bool succeeded = false;
  std::int64_t revision = 0;
  std::vector<RangeResponse> ranges;  ///< the answers of the range operations, in order
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;
};

/// The smallest key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefixEnd(const std::string& prefix);

/// `in` in standard base64, padded. Pure.
std::string base64(const std::string& in);
/// The bytes of base64 text; characters outside the alphabet are skipped. Pure.
std::string unbase64(const std::string& in);
/// The 64-bit number j[name]: a decimal string as the gateway writes it, a JSON number, or 0
/// when left out. Throws ProtocolError when the string is not a number. Pure.
std::int64_t gatewayNumber(const nlohmann::json& j, const char* name);
/// A "kvs" element or a watch event's "kv". Pure.
KeyValue keyValue(const nlohmann::json& j);
/// A range answer (or a transaction's response_range). Pure.
RangeResponse rangeResponse(const nlohmann::json& j);
/// A transaction's operation: {"request_range" | "request_put" | "request_delete_range": ...}.
nlohmann::json opJson(const Op& op);
/// A transaction's comparison. Pure.
nlohmann::json compareJson(const Compare& c);

}  // namespace dtrun::rendezvous::etcd
