// Which name of NCCL's async error handling variable the workers' torch reads. torchrun sets the
// one its own torch reads: NCCL_ASYNC_ERROR_HANDLING up to torch 2.1,
// TORCH_NCCL_ASYNC_ERROR_HANDLING from 2.2, where the old name still works but makes every rank
// print a deprecation warning. dtrun has no torch of its own, so it asks the workers' interpreter
// which torch it would import (without importing it) and sets what torchrun of that version sets;
// when it cannot know (no Python workers, no torch found) it sets both, which every version reads.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>

namespace dtrun::launcher {

/// (major, minor) of a torch version such as "2.3.1+cu121" or "1.13.0a0"; nullopt otherwise.
std::optional<std::pair<int, int>> torchMajorMinor(const std::string& version);

/// The __version__ assigned in the text of torch/version.py; nullopt when there is none.
std::optional<std::string> versionFromVersionPy(const std::string& text);

/// The version of the torch that `python`, run with the workers' environment `env`, would import:
/// python finds torch's module file without importing torch (importlib.util.find_spec), and
/// torch/version.py next to it says the version. nullopt when python cannot run, finds no torch,
/// or takes more than 10 s. Blocks on that one short python process (tens of milliseconds).
std::optional<std::string> probeTorchVersion(const std::string& python,
                                             const std::map<std::string, std::string>& env);

/// Adds to `env` (each kept when already set) what torchrun of `torchVersion` adds:
/// TORCH_NCCL_ASYNC_ERROR_HANDLING=1 from torch 2.2, NCCL_ASYNC_ERROR_HANDLING=1 before it,
/// both when the version is unknown. Pure.
void addNcclAsyncErrorHandling(std::map<std::string, std::string>& env,
                               const std::optional<std::string>& torchVersion);

}  // namespace dtrun::launcher
