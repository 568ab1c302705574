// A fake /dev and /sys for the device counting tests: NVIDIA device files, AMD GPUs in the KFD
// topology, DRM render nodes with the driver each is bound to, laid out as Linux shows them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace dtrun::test {

class FakeDeviceTree {
 public:
  FakeDeviceTree();
  const std::filesystem::path& dev() const { return dev_; }
  const std::filesystem::path& sys() const { return sys_; }

  /// /dev/nvidia0..n-1, plus the control files that are not GPUs.
  void addNvidia(int n);
  /// KFD topology: node 0 a CPU (no SIMD units), then `n` GPU nodes.
  void addAmd(int n);
  /// class/drm/renderD<minor> -> its node, whose "device" is a PCI device bound to `driver`.
  void addRenderNode(int minor, const std::string& driver);
  /// devices/system/cpu/cpuN for `cores` cores of `threadsPerCore` hardware threads each (core c
  /// holds CPUs c, c + cores, ... as Linux numbers them); `legacy` writes only the deprecated
  /// thread_siblings_list instead of core_cpus_list.
  void addCpus(int cores, int threadsPerCore, bool legacy = false);
  /// devices/system/node/node0..: one per entry, with that cpulist ("" for a node without CPUs).
  void addNumaNodes(const std::vector<std::string>& cpulists);

 private:
  TempDir root_;
  std::filesystem::path dev_;
  std::filesystem::path sys_;
};

}  // namespace dtrun::test
