// Device lists: what CUDA_VISIBLE_DEVICES says and how many GPUs a process would see, read the
// way torch reads them, without CUDA. The launcher counts GPUs for --nproc-per-node=gpu/xpu/auto
// and the agent maps local ranks to devices with --virtual-local-rank, from this one parser.
//
// Counted without CUDA, ROCm or Level Zero, from device files and sysfs, restricted by the
// visibility variables each runtime honours:
//   NVIDIA  /dev/nvidiaN device files, restricted by CUDA_VISIBLE_DEVICES
//   AMD     GPU nodes of the KFD topology (/sys/class/kfd/kfd/topology/nodes/N/properties with a
//           non-zero simd_count; CPU nodes have none), restricted by ROCR_VISIBLE_DEVICES and
//           then HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES (HIP reads it too)
//   Intel   DRM render nodes (/sys/class/drm/renderD*) driven by i915 or xe, restricted by
//           ZE_AFFINITY_MASK
#pragma once

#include <filesystem>
#include <map>
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

/// Where devices are looked for; tests point both at fake trees.
struct DeviceDirs {
  std::filesystem::path dev = "/dev";
  std::filesystem::path sys = "/sys";
};

/// Counts the AMD GPUs a HIP program would see (see the file comment); 0 without amdgpu.
/// Reads sysfs; any thread.
int countAmdGpus(const std::filesystem::path& sysDir,
                 const std::map<std::string, std::string>& env);

/// Counts the Intel GPUs (XPUs) a Level Zero program would see (see the file comment).
/// Reads sysfs; any thread.
int countIntelXpus(const std::filesystem::path& sysDir,
                   const std::map<std::string, std::string>& env);

/// torch.cuda.device_count() as a CUDA or a ROCm build of torch would answer on this machine:
/// the NVIDIA count when it has NVIDIA GPUs, else the AMD count. Reads /dev and sysfs.
int countCudaDevices(const DeviceDirs& dirs, const std::map<std::string, std::string>& env);

}  // namespace dtrun
