// Counting accelerators without their runtimes (launcher/device_count.h), on fake /dev and /sys
// trees: AMD GPUs from the KFD topology, Intel GPUs from DRM render nodes, and what
// --nproc-per-node=gpu, xpu and auto make of them.
#include "launcher/device_count.h"

#include <catch2/catch.hpp>

#include "launcher/cli.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using Env = std::map<std::string, std::string>;
namespace fs = std::filesystem;

namespace {

struct FakeMachine {
  dtrun::test::TempDir root;
  DeviceDirs dirs;
  FakeMachine() {
    dirs.dev = root.path() / "dev";
    dirs.sys = root.path() / "sys";
    fs::create_directories(dirs.dev);
    fs::create_directories(dirs.sys);
  }
  void nvidia(int n) {
    for (int i = 0; i < n; ++i)
      dtrun::test::writeFile(dirs.dev / ("nvidia" + std::to_string(i)), "");
    dtrun::test::writeFile(dirs.dev / "nvidiactl", "");
  }
  // KFD topology: node 0 is the CPU (no SIMD units), then `n` GPUs.
  void amd(int n) {
    fs::path nodes = dirs.sys / "class/kfd/kfd/topology/nodes";
    for (int i = 0; i <= n; ++i) {
      fs::create_directories(nodes / std::to_string(i));
      dtrun::test::writeFile(nodes / std::to_string(i) / "properties",
                             "cpu_cores_count " + std::string(i == 0 ? "64" : "0") +
                                 "\nsimd_count " + std::string(i == 0 ? "0" : "440") +
                                 "\nmax_waves_per_simd 8\n");
    }
  }
  // A DRM render node as sysfs shows it: class/drm/renderDN -> its node, whose "device" is the
  // PCI device, whose "driver" is the driver bound to it.
  void render(int minor, const std::string& driver) {
    const std::string n = std::to_string(minor);
    fs::path drivers = dirs.sys / "bus/pci/drivers" / driver;
    fs::create_directories(drivers);
    fs::path pci = dirs.sys / "devices/pci0000:00" / ("0000:00:0" + n);
    fs::create_directories(pci);
    fs::create_directory_symlink(drivers, pci / "driver");
    fs::path node = pci / "drm" / ("renderD" + n);
    fs::create_directories(node);
    fs::create_directory_symlink(pci, node / "device");
    fs::create_directories(dirs.sys / "class/drm");
    fs::create_directory_symlink(node, dirs.sys / "class/drm" / ("renderD" + n));
  }
  int nproc(const std::string& v, const Env& env = {}) const {
    return parseNprocPerNode("--nproc-per-node", v, dirs, env, 16);
  }
};

}  // namespace

TEST_CASE("AMD GPUs come from the KFD topology, restricted like HIP", "[launcher][devices]") {
  FakeMachine m;
  CHECK(countAmdGpus(m.dirs.sys, {}) == 0);
  m.amd(4);
  CHECK(countAmdGpus(m.dirs.sys, {}) == 4);
  CHECK(countAmdGpus(m.dirs.sys, {{"HIP_VISIBLE_DEVICES", "1,2"}}) == 2);
  CHECK(countAmdGpus(m.dirs.sys, {{"CUDA_VISIBLE_DEVICES", "3"}}) == 1);
  // HIP_VISIBLE_DEVICES wins over CUDA_VISIBLE_DEVICES; ROCR_VISIBLE_DEVICES comes first.
  CHECK(countAmdGpus(m.dirs.sys,
                     {{"HIP_VISIBLE_DEVICES", "0,1,2"}, {"CUDA_VISIBLE_DEVICES", "0"}}) == 3);
  CHECK(countAmdGpus(m.dirs.sys,
                     {{"ROCR_VISIBLE_DEVICES", "0,1"}, {"HIP_VISIBLE_DEVICES", "0,1,2"}}) == 2);
  CHECK(countAmdGpus(m.dirs.sys, {{"HIP_VISIBLE_DEVICES", ""}}) == 0);
  CHECK(countAmdGpus(m.dirs.sys, {{"HIP_VISIBLE_DEVICES", "0,9"}}) == 1);
}

TEST_CASE("Intel XPUs are the render nodes of i915 or xe, restricted by ZE_AFFINITY_MASK",
          "[launcher][devices]") {
  FakeMachine m;
  CHECK(countIntelXpus(m.dirs.sys, {}) == 0);
  m.render(128, "i915");
  m.render(129, "xe");
  m.render(130, "amdgpu");  // not Intel
  m.render(131, "nvidia");
  CHECK(countIntelXpus(m.dirs.sys, {}) == 2);
  CHECK(countIntelXpus(m.dirs.sys, {{"ZE_AFFINITY_MASK", "1"}}) == 1);
  CHECK(countIntelXpus(m.dirs.sys, {{"ZE_AFFINITY_MASK", "0.0,0.1,1"}}) == 2);
  CHECK(countIntelXpus(m.dirs.sys, {{"ZE_AFFINITY_MASK", "5"}}) == 0);
}

TEST_CASE("--nproc-per-node gpu, xpu, auto as torchrun 2.x counts them", "[launcher][devices]") {
  SECTION("NVIDIA") {
    FakeMachine m;
    m.nvidia(8);
    m.amd(2);  // NVIDIA first: a CUDA build of torch does not see AMD GPUs
    CHECK(m.nproc("gpu") == 8);
    CHECK(m.nproc("auto") == 8);
    CHECK(m.nproc("gpu", {{"CUDA_VISIBLE_DEVICES", "2,3"}}) == 2);
    // NVIDIA GPUs all hidden: not the AMD ones instead.
    CHECK_THROWS_AS(m.nproc("gpu", {{"CUDA_VISIBLE_DEVICES", ""}}), UsageError);
  }
  SECTION("AMD") {
    FakeMachine m;
    m.amd(8);
    CHECK(m.nproc("gpu") == 8);
    CHECK(m.nproc("auto", {{"HIP_VISIBLE_DEVICES", "0,1,2"}}) == 3);
    CHECK_THROWS_WITH(m.nproc("xpu"),
                      Catch::Matchers::StartsWith("--nproc-per-node: xpu: no Intel XPU found"));
  }
  SECTION("Intel") {
    FakeMachine m;
    m.render(128, "xe");
    CHECK(m.nproc("xpu") == 1);
    CHECK(m.nproc("auto") == 1);
    CHECK_THROWS_WITH(m.nproc("gpu"),
                      Catch::Matchers::StartsWith("--nproc-per-node: gpu: no GPU found"));
  }
  SECTION("none") {
    FakeMachine m;
    CHECK(m.nproc("auto") == 16);
    CHECK(m.nproc("cpu") == 16);
  }
}
