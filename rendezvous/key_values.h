// The values of the rendezvous' own keys, read back checked. Anyone who reaches the store can
// write them (unless it asks for a token), so a malformed value is a clear error naming the key
// and who wrote it, never a crash (docs/store.md). Used by DynamicRendezvous on every backend.
#pragma once

#include <cstdint>
#include <string>

#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/store.h"

namespace dtrun::rendezvous {

/// Throws ProtocolError "rendezvous key '<key>' holds <value>, <what>: written by <writer>, not
/// by a dtrun agent" (or "something other than a dtrun agent wrote it").
[[noreturn]] void malformedKey(Store& store, const std::string& key, const Bytes& value,
                               const std::string& what);
/// `value` of `key` as the decimal number a dtrun agent wrote; malformedKey() otherwise.
std::int64_t keyNumber(Store& store, const std::string& key, const Bytes& value);
/// `value` of `key` as a node description (NodeInfo JSON); malformedKey() otherwise.
NodeInfo keyNodeInfo(Store& store, const std::string& key, const Bytes& value);

}  // namespace dtrun::rendezvous
