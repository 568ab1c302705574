// CPU facts other launchers read from the machine, counted from sysfs the way those launchers
// count them, so that a front-end (launcher/front_end.h) gives the workers the same numbers:
//
//   physical cores   psutil.cpu_count(logical=False), which accelerate divides among its CPU
//                    workers for OMP_NUM_THREADS: the distinct sets of hardware threads that
//                    share a core (devices/system/cpu/cpuN/topology/core_cpus_list, else the
//                    older thread_siblings_list)
//   NUMA nodes       the nodes with CPUs (devices/system/node/nodeN/cpulist not empty), which
//                    DeepSpeed's CPU accelerator counts as its devices when no GPU is found
#pragma once

#include <filesystem>

namespace dtrun {

/// The physical cores under `sysDir` (see the file comment); 0 when none can be read. Reads
/// sysfs; any thread.
int countPhysicalCores(const std::filesystem::path& sysDir);

/// The NUMA nodes with at least one CPU under `sysDir`; 0 when none can be read (a kernel
/// without NUMA support has no node directory). Reads sysfs; any thread.
int countNumaNodesWithCpus(const std::filesystem::path& sysDir);

}  // namespace dtrun
