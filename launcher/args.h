// Small helpers for command-line values: one line naming the option and the accepted forms.
#pragma once

#include <cstdint>
#include <string>

#include "rendezvous/error.h"

namespace dtrun::launcher {

/// A bad command line: dtrun prints the message on one line and exits with code 2.
class UsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// Parses a decimal integer in [min, max] given to `option`; UsageError otherwise.
std::int64_t parseInteger(const std::string& option, const std::string& text, std::int64_t min,
                          std::int64_t max);

/// Parses a size such as 4096, 64K, 8M or 1G (binary units) given to `option`.
std::uint64_t parseSize(const std::string& option, const std::string& text);

}  // namespace dtrun::launcher
