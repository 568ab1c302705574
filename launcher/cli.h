// dtrun's command line: torchrun's options (spec §1), both spellings, unique-prefix
// abbreviations, PET_* fallbacks, plus dtrun's own options, parsed once into a LaunchConfig.
//
// The parser reads nothing but its arguments: argv, the environment as a map, and a HostProbe
// for the two facts it needs from the machine (GPU device files, CPU count), so tests inject all
// three. Errors are UsageErrors (launcher/args.h) with one line naming the option or variable.
#pragma once

#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/launch_config.h"
#include "launcher/args.h"

namespace dtrun::launcher {

/// What the parser asks the machine; tests point it at a fake /dev and a fixed CPU count.
struct HostProbe {
  std::filesystem::path devDir = "/dev";  ///< where /dev/nvidiaN device files are counted
  int cpuCount = 0;                       ///< 0: ask the OS (online CPUs, as os.cpu_count())
};

/// Thrown for -h/--help: text() is the help to print on stdout before exiting with code 0.
class HelpRequested : public std::exception {
 public:
  explicit HelpRequested(std::string text) : text_(std::move(text)) {}
  const char* what() const noexcept override { return text_.c_str(); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

/// torchrun's notice, logged once at warning level when LaunchConfig::ompNumThreadsSet is true.
inline constexpr std::string_view kOmpNumThreadsNotice =
    "\n*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
    "your system being overloaded, please further tune the variable for optimal performance in "
    "your application as needed. \n"
    "*****************************************";

/// Parses `args` (argv without argv[0]) and `env` (the launcher's environment) into a
/// LaunchConfig. Does not block; throws UsageError for any bad option or value, HelpRequested
/// for -h/--help. Everything after the training script is kept untouched in scriptArgs.
agent::LaunchConfig parseCommandLine(const std::vector<std::string>& args,
                                     const std::map<std::string, std::string>& env,
                                     const HostProbe& host);

/// parseCommandLine with the real machine (/dev, the online CPU count).
agent::LaunchConfig parseCommandLine(const std::vector<std::string>& args,
                                     const std::map<std::string, std::string>& env);

/// The -h text: torchrun's option groups, then dtrun's own options, with defaults and variables.
std::string helpText();

/// The one usage line printed above a usage error ("usage: dtrun [-h] [options] ...").
std::string usageText();

/// A random version-4 UUID as text, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" (torchrun's run id for
/// --standalone). Reads std::random_device.
std::string randomUuid4();

}  // namespace dtrun::launcher
