#include "rendezvous/key_values.h"

#include <nlohmann/json.hpp>

#include "common/decimal.h"
#include "common/error.h"
#include "common/log_text.h"

namespace dtrun::rendezvous {

// The rendezvous' own keys are checked when read: anyone who reaches the store can write them
// (unless it asks for a token), and a malformed value must be a clear error naming the key and
// who wrote it, never a crash (docs/store.md).
[[noreturn]] void malformedKey(Store& store, const std::string& key, const Bytes& value,
                               const std::string& what) {
  const std::string writer = store.writerOf(key);
  throw ProtocolError("rendezvous key '" + key + "' holds " + escapeForLog(value) + ", " + what +
                      ": " +
                      (writer.empty() ? std::string("something other than a dtrun agent wrote it")
                                      : "written by " + writer + ", not by a dtrun agent"));
}

std::int64_t keyNumber(Store& store, const std::string& key, const Bytes& value) {
  const auto out = parseDecimal(value);
  if (!out) malformedKey(store, key, value, "not a number");
  return *out;
}

NodeInfo keyNodeInfo(Store& store, const std::string& key, const Bytes& value) {
  try {
    return nlohmann::json::parse(value).get<NodeInfo>();
  } catch (const nlohmann::json::exception& e) {
    malformedKey(store, key, value, std::string("not a node description (") + e.what() + ")");
  }
}

}  // namespace dtrun::rendezvous
