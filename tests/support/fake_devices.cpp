#include "tests/support/fake_devices.h"

namespace dtrun::test {

namespace fs = std::filesystem;

FakeDeviceTree::FakeDeviceTree() : dev_(root_.path() / "dev"), sys_(root_.path() / "sys") {
  fs::create_directories(dev_);
  fs::create_directories(sys_);
}

void FakeDeviceTree::addNvidia(int n) {
  for (int i = 0; i < n; ++i) writeFile(dev_ / ("nvidia" + std::to_string(i)), "");
  for (const char* other : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
    writeFile(dev_ / other, "");
  }
}

void FakeDeviceTree::addAmd(int n) {
  const fs::path nodes = sys_ / "class/kfd/kfd/topology/nodes";
  for (int i = 0; i <= n; ++i) {
    const fs::path node = nodes / std::to_string(i);
    fs::create_directories(node);
    writeFile(node / "properties", std::string("cpu_cores_count ") + (i == 0 ? "64" : "0") +
                                       "\nsimd_count " + (i == 0 ? "0" : "440") +
                                       "\nmax_waves_per_simd 8\n");
  }
}

void FakeDeviceTree::addRenderNode(int minor, const std::string& driver) {
  const std::string n = std::to_string(minor);
  const fs::path drivers = sys_ / "bus/pci/drivers" / driver;
  fs::create_directories(drivers);
  const fs::path pci = sys_ / "devices/pci0000:00" / ("0000:00:0" + n);
  fs::create_directories(pci);
  fs::create_directory_symlink(drivers, pci / "driver");
  const fs::path node = pci / "drm" / ("renderD" + n);
  fs::create_directories(node);
  fs::create_directory_symlink(pci, node / "device");
  fs::create_directories(sys_ / "class/drm");
  fs::create_directory_symlink(node, sys_ / "class/drm" / ("renderD" + n));
}

void FakeDeviceTree::addCpus(int cores, int threadsPerCore, bool legacy) {
  const fs::path cpus = sys_ / "devices/system/cpu";
  for (int c = 0; c < cores; ++c) {
    std::string siblings;
    for (int t = 0; t < threadsPerCore; ++t) {
      siblings += (t ? "," : "") + std::to_string(c + t * cores);
    }
    for (int t = 0; t < threadsPerCore; ++t) {
      const fs::path topology = cpus / ("cpu" + std::to_string(c + t * cores)) / "topology";
      fs::create_directories(topology);
      writeFile(topology / (legacy ? "thread_siblings_list" : "core_cpus_list"), siblings + "\n");
    }
  }
  writeFile(cpus / "online", "0-" + std::to_string(cores * threadsPerCore - 1) + "\n");
}

void FakeDeviceTree::addNumaNodes(const std::vector<std::string>& cpulists) {
  const fs::path nodes = sys_ / "devices/system/node";
  for (std::size_t i = 0; i < cpulists.size(); ++i) {
    const fs::path node = nodes / ("node" + std::to_string(i));
    fs::create_directories(node);
    writeFile(node / "cpulist", cpulists[i] + "\n");
  }
  writeFile(nodes / "online", "0-" + std::to_string(cpulists.size() - 1) + "\n");
}

}  // namespace dtrun::test
