// Decimal numbers in text: the two readings dtrun needs, in one place. Values dtrun writes itself
// (store counters, etcd revisions, ports, round numbers in keys) are read strictly; the old value
// of a store key that ADD increments is read as torch's TCPStore reads it, with std::stoll.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dtrun {

/// The number `text` spells in full: an optional '-' and decimal digits, nothing before or
/// after, within int64. nullopt for anything else ("", " 1", "+1", "1x", overflow). Pure.
std::optional<std::int64_t> parseDecimal(std::string_view text);

/// std::stoll's reading (torch's TCPStore applies it to the value an ADD increments): leading
/// blanks skipped, one sign, the digits that follow, the rest ignored. nullopt where stoll
/// throws: no digit, or a value outside int64. Pure.
std::optional<std::int64_t> parseLeadingDecimal(std::string_view text);

}  // namespace dtrun
