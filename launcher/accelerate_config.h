// accelerate's config file, found and read as `accelerate launch` finds and reads it:
//
//   where   --config_file FILE; else the default file when it exists and --cpu is not given:
//           $HF_HOME/accelerate/default_config.yaml (HF_HOME used as it is), else
//           $XDG_CACHE_HOME/huggingface/accelerate/default_config.yaml, else
//           ~/.cache/huggingface/accelerate/default_config.yaml ('~' is $HOME)
//   how     YAML with YAML 1.1's implicit types, as PyYAML's safe_load reads it (yaml-cpp parses,
//           launcher/py_value.h types the plain scalars); JSON for a FILE ending in .json
//   keys    accelerate's ClusterConfig: an unknown key is refused; the legacy `fp16: true` and a
//           top-level `dynamo_backend` are converted as accelerate converts them; the keys it
//           leaves out get its defaults
//
// Deliberately more lenient than accelerate in one place: the tutorials' unquoted
// `mixed_precision: no` (and `distributed_type: NO`), which YAML reads as false, is read as "no"
// ("NO"), as accelerate 0.19 to 0.33 did; newer accelerate fails on it.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/py_value.h"

namespace dtrun::launcher {

/// The default config file's path for `env` (see the file comment); HOME comes from `env` too.
/// Pure.
std::filesystem::path defaultAccelerateConfigFile(const std::map<std::string, std::string>& env);

/// A config file as accelerate's ClusterConfig holds it.
struct AccelerateConfig {
  std::filesystem::path path;
  /// Every ClusterConfig field in its declaration order (the order accelerate copies them in);
  /// the sections (deepspeed_config, fsdp_config, ...) are dicts in the file's order.
  std::vector<std::pair<std::string, PyValue>> fields;
  std::vector<std::string> warnings;  ///< one line each (the unquoted "no" read as "no")

  /// The field `key`, None when it has no value.
  const PyValue& get(const std::string& key) const;
};

/// Reads and checks the config file at `path`. Throws UsageError with one line naming the file
/// (and line) or the key: unreadable, not YAML (JSON), not a mapping, an unknown key, no
/// distributed_type, a compute_environment or distributed_type accelerate does not know.
AccelerateConfig loadAccelerateConfig(const std::filesystem::path& path);

}  // namespace dtrun::launcher
