// readSecretFile: a shared secret kept in a file (the store's token, docs/store.md "Shared
// secret"), read with the checks ssh applies to a private key: a regular file, not readable or
// writable by group or others, of a length that makes guessing hopeless.
#pragma once

#include <cstddef>
#include <string>

namespace dtrun {

/// Shortest secret accepted, in bytes (after trailing whitespace is cut).
inline constexpr std::size_t kMinSecretBytes = 16;
/// Longest secret file read.
inline constexpr std::size_t kMaxSecretBytes = 4096;

/// The file's contents without trailing whitespace (a newline from `echo` or an editor). Throws
/// ConfigError "<what> <path>: <why>" for a missing or unreadable file, one that is not a regular
/// file, is readable or writable by group or others, is empty, shorter than kMinSecretBytes or
/// longer than kMaxSecretBytes; the message says how to fix it.
std::string readSecretFile(const std::string& path, const std::string& what);

}  // namespace dtrun
