// Device lists: what CUDA_VISIBLE_DEVICES says and how many GPUs a process would see, read the
// way torch reads them, without CUDA. The launcher counts GPUs for --nproc-per-node=gpu/auto and
// the agent maps local ranks to devices with --virtual-local-rank, from this one parser.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dtrun {

/// CUDA_VISIBLE_DEVICES as torch parses it (torch.cuda._parse_visible_devices): either a list
/// of ordinals, cut at the first entry that is not one (leading digits count, as strtoul reads
/// them; a negative entry stops the list), or a list of GPU-/MIG- UUIDs, cut at the first entry
/// without the prefix. A repeated entry makes the whole list empty (no device visible).
struct VisibleDevices {
  std::vector<long> ordinals;      ///< set for an ordinal list
  std::vector<std::string> uuids;  ///< set for a UUID list
  std::string uuidPrefix;          ///< "GPU-" or "MIG-" for a UUID list
  /// The entries, as they should be written into a child's CUDA_VISIBLE_DEVICES.
  std::vector<std::string> entries() const;
};
VisibleDevices parseVisibleDevices(const std::string& cudaVisibleDevices);

/// Counts the GPUs a CUDA program would see: the /dev/nvidiaN device files in `devDir`,
/// restricted by `cudaVisibleDevices` (unset = all): ordinals count up to the first one with no
/// device file, GPU- lists are capped at the number of device files, MIG- lists count their
/// entries. 0 when the directory cannot be read. Reads the directory; any thread.
int countVisibleGpus(const std::filesystem::path& devDir,
                     const std::optional<std::string>& cudaVisibleDevices);

}  // namespace dtrun
