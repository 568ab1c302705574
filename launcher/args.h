// Small helpers for command-line values: each parses one value given to one option and throws a
// UsageError whose one line names the option (or the environment variable the value came from)
// and the accepted forms. No helper reads the environment or keeps state.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/launch_config.h"
#include "common/devices.h"
#include "common/error.h"
#include "common/signals.h"

namespace dtrun::launcher {

/// A bad command line: dtrun prints the message on one line and exits with code 2.
class UsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// `s` without the blanks (isspace) at either end. Pure.
std::string trimBlanks(std::string_view s);

/// `s` cut at every `sep`, empty pieces kept ("a,,b" -> a, "", b; "" -> one empty piece). Pure.
std::vector<std::string> splitOn(const std::string& s, char sep);

/// Parses a decimal integer in [min, max] given to `option`; UsageError otherwise.
std::int64_t parseInteger(const std::string& option, const std::string& text, std::int64_t min,
                          std::int64_t max);

/// Parses a size such as 4096, 64K, 8M or 1G (binary units) given to `option`.
std::uint64_t parseSize(const std::string& option, const std::string& text);

/// Parses seconds as an integer or a float ("30", "0.5", "1e3"), finite, > 0 (>= 0 when
/// `allowZero`), at most 1e9; returns them rounded up to whole milliseconds (0.0001 -> 1 ms).
std::chrono::milliseconds parseSeconds(const std::string& option, const std::string& text,
                                       bool allowZero = false);

/// Parses a boolean as torch's RendezvousParameters.get_as_bool does: 1/true/t/yes/y and
/// 0/false/f/no/n, in any case.
bool parseBool(const std::string& option, const std::string& text);

/// Parses a flag's environment value as torchrun's check_env does (bool(int(v))): an integer,
/// non-zero = on. "true" is an error, as it is in torchrun.
bool parseEnvFlag(const std::string& variable, const std::string& text);

/// Parses a --redirects/--tee value: one of 0-3 for every local rank, or a map "lr:v,lr:v" with
/// v in 0-3 (newest torchrun allows one digit per local rank; dtrun allows any number).
agent::StdSpec parseStdSpec(const std::string& option, const std::string& text);

/// Parses a comma list of signal names (SIGTERM, sigterm or TERM) into signal numbers, without
/// duplicates, in the order given. Signals no process can catch or that dtrun needs itself
/// (KILL, STOP, CHLD, SEGV, BUS, FPE, ILL) are errors.
std::vector<int> parseSignalList(const std::string& option, const std::string& text);

/// Splits a comma list where ",," stands for a literal comma (torchrun's comma_separated_list);
/// empty items are dropped.
std::vector<std::string> splitEscapedCommaList(const std::string& text);

/// Parses a non-empty comma list of local ranks ("0,1,2") into a set.
std::set<int> parseRankSet(const std::string& option, const std::string& text);

/// Parses --nproc-per-node: a positive integer; cpu = `cpuCount`; gpu = the CUDA (or ROCm)
/// devices, xpu = the Intel XPUs (none is an error for both); auto = gpu, else xpu, else cpu, as
/// torch.accelerator. Reads the device trees of `dirs` only for gpu, xpu and auto.
int parseNprocPerNode(const std::string& option, const std::string& text, const DeviceDirs& dirs,
                      const std::map<std::string, std::string>& env, int cpuCount);

/// A log level as dtrun's loggers take it (trace, debug, info, warn, error, critical, off) from
/// any case of those or of Python's names (WARNING, FATAL, ...); nullopt for anything else.
std::optional<std::string> normalizeLogLevel(const std::string& text);

/// Checks a console prefix template (string.Template syntax): only ${role_name}, ${rank},
/// ${local_rank}, ${host}, ${node_rank} and ${restart} (or $name) may appear; $$ is a dollar.
void checkLogLinePrefixTemplate(const std::string& option, const std::string& text);

}  // namespace dtrun::launcher
