// front_end_parse: what reading another launcher's command line costs dtrun at start, for
// scripts/bench/launch (a benchmark, not a test). It resolves, N times each, the command line of
// plain dtrun (--nproc-per-node=2), of dtrun accelerate (a two-process MULTI_GPU config file
// read, typed and merged) and of dtrun deepspeed (--num_gpus=2), each into the Invocation the
// agent runs, and prints the CPU time per resolution, so that the figure holds on a busy machine.
//
//   front_end_parse [N]     (default 2000)
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/accelerate_launch.h"
#include "launcher/cli.h"
#include "launcher/deepspeed_launch.h"

extern char** environ;

namespace {

double cpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrun::launcher;
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  env["HOME"] = "/nonexistent";  // no default config file: only the one given is read
  const auto dir =
      std::filesystem::temp_directory_path() / ("front_end_parse." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cfg = (dir / "cfg.yaml").string();
  std::ofstream(cfg) << "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
                        "mixed_precision: 'no'\nnum_machines: 1\nnum_processes: 2\n"
                        "gpu_ids: all\nrdzv_backend: static\nsame_network: true\n";
  const HostProbe host;
  const std::vector<std::pair<std::string, std::function<void()>>> cases{
      {"dtrun",
       [&] {
         parseCommandLine({"--nproc-per-node=2", "--no-python", "/bin/true"}, env);
       }},
      {"dtrun accelerate --config_file",
       [&] {
         parseAccelerateLaunch({"--config_file", cfg, "--no_python", "/bin/true"}, env, host);
       }},
      {"dtrun deepspeed --num_gpus=2",
       [&] {
         parseDeepSpeedLaunch({"--num_gpus=2", "--no_python", "/bin/true"}, env, host);
       }},
  };
  for (const auto& [name, resolve] : cases) {
    resolve();  // warm: the parsers' tables are built once
    const double start = cpuSeconds();
    for (int i = 0; i < n; ++i) resolve();
    std::printf("%s\t%.1f\n", name.c_str(), (cpuSeconds() - start) / n * 1e6);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
