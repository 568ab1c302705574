// common/devices.h beyond NVIDIA: AMD GPUs from the KFD topology and Intel XPUs from DRM render
// nodes, each restricted by the variables its runtime honours, on fake /dev and /sys trees.
#include <catch2/catch.hpp>

#include "common/devices.h"
#include "tests/support/fake_devices.h"

using dtrun::countAmdGpus;
using dtrun::countCudaDevices;
using dtrun::countIntelXpus;
using dtrun::DeviceDirs;
using dtrun::test::FakeDeviceTree;

TEST_CASE("AMD GPUs come from the KFD topology, restricted like HIP", "[common][devices]") {
  FakeDeviceTree m;
  CHECK(countAmdGpus(m.sys(), {}) == 0);
  m.addAmd(4);
  CHECK(countAmdGpus(m.sys(), {}) == 4);
  CHECK(countAmdGpus(m.sys(), {{"HIP_VISIBLE_DEVICES", "1,2"}}) == 2);
  CHECK(countAmdGpus(m.sys(), {{"CUDA_VISIBLE_DEVICES", "3"}}) == 1);
  // HIP_VISIBLE_DEVICES wins over CUDA_VISIBLE_DEVICES; ROCR_VISIBLE_DEVICES applies first.
  CHECK(countAmdGpus(m.sys(), {{"HIP_VISIBLE_DEVICES", "0,1,2"}, {"CUDA_VISIBLE_DEVICES", "0"}}) ==
        3);
  CHECK(countAmdGpus(m.sys(),
                     {{"ROCR_VISIBLE_DEVICES", "0,1"}, {"HIP_VISIBLE_DEVICES", "0,1,2"}}) == 2);
  CHECK(countAmdGpus(m.sys(), {{"HIP_VISIBLE_DEVICES", ""}}) == 0);
  CHECK(countAmdGpus(m.sys(), {{"HIP_VISIBLE_DEVICES", "0,9"}}) == 1);
  CHECK(countAmdGpus(m.sys(), {{"HIP_VISIBLE_DEVICES", "GPU-a,GPU-b"}}) == 2);
}

TEST_CASE("Intel XPUs are the render nodes of i915 or xe, restricted by ZE_AFFINITY_MASK",
          "[common][devices]") {
  FakeDeviceTree m;
  CHECK(countIntelXpus(m.sys(), {}) == 0);
  m.addRenderNode(128, "i915");
  m.addRenderNode(129, "xe");
  m.addRenderNode(130, "amdgpu");  // not Intel
  m.addRenderNode(131, "nvidia");
  CHECK(countIntelXpus(m.sys(), {}) == 2);
  CHECK(countIntelXpus(m.sys(), {{"ZE_AFFINITY_MASK", "1"}}) == 1);
  CHECK(countIntelXpus(m.sys(), {{"ZE_AFFINITY_MASK", "0.0,0.1,1"}}) == 2);
  CHECK(countIntelXpus(m.sys(), {{"ZE_AFFINITY_MASK", "5"}}) == 0);
}

TEST_CASE("torch.cuda's count: NVIDIA when there is one, else AMD", "[common][devices]") {
  FakeDeviceTree nvidiaAndAmd;
  nvidiaAndAmd.addNvidia(8);
  nvidiaAndAmd.addAmd(2);
  DeviceDirs both{nvidiaAndAmd.dev(), nvidiaAndAmd.sys()};
  CHECK(countCudaDevices(both, {}) == 8);
  CHECK(countCudaDevices(both, {{"CUDA_VISIBLE_DEVICES", "2,3"}}) == 2);
  // NVIDIA GPUs all hidden: not the AMD ones instead.
  CHECK(countCudaDevices(both, {{"CUDA_VISIBLE_DEVICES", ""}}) == 0);

  FakeDeviceTree amd;
  amd.addAmd(8);
  DeviceDirs amdOnly{amd.dev(), amd.sys()};
  CHECK(countCudaDevices(amdOnly, {}) == 8);
  CHECK(countCudaDevices(amdOnly, {{"CUDA_VISIBLE_DEVICES", "0,1"}}) == 2);

  FakeDeviceTree none;
  CHECK(countCudaDevices(DeviceDirs{none.dev(), none.sys()}, {}) == 0);
}
