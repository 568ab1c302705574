#include "launcher/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>

#include "common/error.h"

namespace dtrun::launcher {

std::shared_ptr<spdlog::logger> makeLogger(const std::string& name, const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  // from_str maps anything unknown to "off"; only accept that when it was asked for.
  if (lvl == spdlog::level::off && level != "off") {
    throw ConfigError("log level '" + level +
                      "' is not one of trace, debug, info, warn, error, critical, off");
  }
  // One sink per logger would interleave; stderr_sink_mt writes each line with one fwrite.
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(name, sink);
  logger->set_pattern("[dtrun " + name + "] %Y-%m-%d %H:%M:%S.%e %l: %v");
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::trace);
  return logger;
}

std::string logLevelFromEnv(const std::string& fallback) {
  const char* v = std::getenv("DTRUN_LOG_LEVEL");
  return v && *v ? std::string(v) : fallback;
}

}  // namespace dtrun::launcher
