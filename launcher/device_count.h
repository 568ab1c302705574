// How many accelerators a worker would see, counted without CUDA, ROCm or Level Zero: from device
// files and sysfs, restricted by the visibility variables each runtime honours. This is what
// --nproc-per-node=gpu, xpu and auto count (torchrun asks torch.cuda, torch.xpu and
// torch.accelerator; dtrun has no torch on the launching side).
//
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

namespace dtrun::launcher {

/// Where devices are looked for; tests point both at fake trees.
struct DeviceDirs {
  std::filesystem::path dev = "/dev";
  std::filesystem::path sys = "/sys";
};

/// Counts the NVIDIA GPUs a CUDA program would see: the /dev/nvidiaN device files in `devDir`,
/// restricted by `cudaVisibleDevices` (unset = all) the way torch parses it: ordinals stop at the
/// first negative or out-of-range entry, GPU-/MIG- UUID lists count their entries, and a repeated
/// entry hides every device. Returns 0 when the directory cannot be read.
int countVisibleGpus(const std::filesystem::path& devDir,
                     const std::optional<std::string>& cudaVisibleDevices);

/// Counts the AMD GPUs a HIP program would see (see the file comment). 0 without amdgpu.
int countAmdGpus(const std::filesystem::path& sysDir,
                 const std::map<std::string, std::string>& env);

/// Counts the Intel GPUs (XPUs) a Level Zero program would see (see the file comment).
int countIntelXpus(const std::filesystem::path& sysDir,
                   const std::map<std::string, std::string>& env);

/// torch.cuda.device_count() as a CUDA or a ROCm build of torch would answer on this machine:
/// the NVIDIA count when there is an NVIDIA GPU, else the AMD count.
int countCudaDevices(const DeviceDirs& dirs, const std::map<std::string, std::string>& env);

}  // namespace dtrun::launcher
