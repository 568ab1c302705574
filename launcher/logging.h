// Logger construction for the dtrun executable. Loggers are made here, in main's reach, and
// passed down to the libraries (docs/design.md, "House rules": one logger per subsystem, no
// globals).
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <string>

namespace dtrun::launcher {

/// A logger named `name` writing to stderr as "[dtrun <name>] <level>: <msg>". `level` is a
/// spdlog level name (trace, debug, info, warn, error, critical, off); throws ConfigError.
std::shared_ptr<spdlog::logger> makeLogger(const std::string& name, const std::string& level);

/// The level from $DTRUN_LOG_LEVEL, else `fallback`.
std::string logLevelFromEnv(const std::string& fallback);

}  // namespace dtrun::launcher
