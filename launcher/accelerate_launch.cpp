// accelerate's _validate_launch_command (the merge), launch_command (the dispatch) and the
// launchers' process arguments, over accelerate's namespace.
#include "launcher/accelerate_launch.h"

#include <optional>
#include <system_error>

#include "common/cpu_topology.h"
#include "common/devices.h"
#include "common/host_port.h"
#include "launcher/accelerate_config.h"
#include "launcher/accelerate_env.h"
#include "launcher/accelerate_options.h"

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;
using Kind = PyValue::Kind;

struct Merged {
  AccelerateArgs a;
  std::optional<AccelerateConfig> config;
  bool mpFromConfig = false;
  std::vector<std::string> defaulted;  // what accelerate warns it chose itself
  std::vector<std::string> warnings;
};

bool on(const AccelerateArgs& a, const char* dest) { return a.get(dest).truthy(); }

// An integer option or key, checked: accelerate would fail on anything else further on.
std::int64_t integer(const AccelerateArgs& a, const std::string& dest) {
  const PyValue& v = a.get(dest);
  if (v.kind == Kind::kInt) return v.i;
  std::int64_t i = 0;
  if (v.kind == Kind::kStr && pyParseInt(v.s, i)) return i;
  throw UsageError(a.source(dest, dest) + ": invalid value '" + v.text() +
                   "': expected an integer");
}

// int(os.environ.get(name, -1)), the first one >= 0, as accelerate's get_int_from_env.
std::int64_t intFromEnv(const Env& env, std::initializer_list<const char*> names,
                        std::int64_t fallback) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it == env.end()) continue;
    std::int64_t v = 0;
    if (!pyParseInt(it->second, v)) {
      throw UsageError(std::string(name) + "=" + it->second + ": expected an integer");
    }
    if (v >= 0) return v;
  }
  return fallback;
}

void set(AccelerateArgs& a, const std::string& dest, PyValue v, const std::string& source) {
  a.values[dest] = std::move(v);
  a.sources[dest] = source;
}

// Step 3 with a file: the file's mode, GPU ids, then the file's keys where the command line
// left the option at None, or (sections) did not give it.
void mergeFile(Merged& m, const AccelerateConfig& cfg) {
  auto& a = m.a;
  const std::string file = cfg.path.string();
  const std::string type = cfg.get("distributed_type").text();
  if (!on(a, "multi_gpu") && !on(a, "tpu") && !on(a, "tpu_cluster") && !on(a, "use_deepspeed") &&
      !on(a, "use_fsdp") && !on(a, "use_megatron_lm")) {
    a.values["use_deepspeed"] = PyValue::boolean(type == "DEEPSPEED");
    a.values["multi_gpu"] = PyValue::boolean(type.rfind("MULTI_", 0) == 0 && type != "MULTI_CPU");
    a.values["tpu"] = PyValue::boolean(type == "XLA");
    a.values["use_fsdp"] = PyValue::boolean(type == "FSDP");
    a.values["use_megatron_lm"] = PyValue::boolean(type == "MEGATRON_LM");
    const PyValue& pc = cfg.get("parallelism_config");
    a.values["use_parallelism_config"] =
        PyValue::boolean(!(pc.kind == Kind::kDict && pc.fields.empty()));
  }
  if (a.get("gpu_ids").isNone()) {
    const PyValue& ids = cfg.get("gpu_ids");
    set(a, "gpu_ids", ids.isNone() ? PyValue::str("all") : ids, file + ": gpu_ids");
  }
  if (on(a, "multi_gpu") && a.get("num_machines").isNone()) {
    set(a, "num_machines", cfg.get("num_machines"), file + ": num_machines");
  }
  const std::string ids = a.get("gpu_ids").text();
  if (on(a, "multi_gpu") && ids != "all" && splitOn(ids, ',').size() < 2 &&
      integer(a, "num_machines") <= 1) {
    throw UsageError(a.source("gpu_ids", "--gpu_ids") + " " + ids +
                     ": several GPUs on one machine need two ids or more (or all)");
  }
  for (const auto& [name, value] : cfg.fields) {
    if (value.kind == Kind::kDict) {
      for (const auto& [k, v] : value.fields) {
        std::string key = k;
        if (name == "fsdp_config" && key.rfind("fsdp", 0) != 0) key = "fsdp_" + key;
        if (name == "fp8_config" && key.rfind("fp8", 0) != 0) key = "fp8_" + key;
        if (name == "dynamo_config" && key.rfind("dynamo_", 0) != 0) key = "dynamo_" + key;
        if (!a.nondefault.count(key)) set(a, key, v, file + ": " + name + ": " + k);
      }
    } else if (name != "compute_environment" && name != "mixed_precision" &&
               name != "distributed_type" && a.get(name).isNone()) {
      set(a, name, value, file + ": " + name);
    }
  }
  if (!on(a, "debug")) a.values["debug"] = cfg.get("debug");
  if (!on(a, "mixed_precision")) {
    const PyValue& mp = cfg.get("mixed_precision");
    m.mpFromConfig = !mp.isNone();
    set(a, "mixed_precision", mp.isNone() ? PyValue::str("no") : mp, file + ": mixed_precision");
  }
  if (a.get("dynamo_backend").isNone()) a.values["dynamo_backend"] = PyValue::str("no");
  if (a.get("num_processes").kind == Kind::kInt && a.get("num_processes").i == -1) {
    throw UsageError(file + ": no num_processes for distributed_type " + type +
                     ": pass --num_processes (accelerate's rule)");
  }
}

// Step 3 without a file: the GPUs decide.
void mergeDefaults(Merged& m, const Env& env, const HostProbe& host) {
  auto& a = m.a;
  const int gpus = countCudaDevices(DeviceDirs{host.devDir, host.sysDir}, env);
  if (a.get("num_processes").isNone()) {
    a.values["num_processes"] = PyValue::integer(gpus);
    m.defaulted.push_back("--num_processes " + std::to_string(gpus) + " (this machine's GPUs)");
  }
  if (a.get("debug").isNone()) a.values["debug"] = PyValue::boolean(false);
  if (!on(a, "multi_gpu") && integer(a, "num_processes") > 1 && gpus > 1) {
    a.values["multi_gpu"] = PyValue::boolean(true);
    m.defaulted.push_back("--multi_gpu (more than one GPU)");
  }
  if (a.get("num_machines").isNone()) {
    a.values["num_machines"] = PyValue::integer(1);
    m.defaulted.push_back("--num_machines 1");
  }
  if (a.get("mixed_precision").isNone()) {
    a.values["mixed_precision"] = PyValue::str("no");
    m.defaulted.push_back("--mixed_precision no");
  }
  a.values["use_cpu"] = a.get("cpu");
  if (a.get("dynamo_backend").isNone()) {
    a.values["dynamo_backend"] = PyValue::str("no");
    m.defaulted.push_back("--dynamo_backend no");
  }
}

// Step 3, threads: OMP_NUM_THREADS, or on the CPU the physical cores shared by the processes.
void mergeThreads(Merged& m, const Env& env, const HostProbe& host) {
  auto& a = m.a;
  if (!a.get("num_cpu_threads_per_process").isNone()) return;
  a.values["num_cpu_threads_per_process"] =
      PyValue::integer(intFromEnv(env, {"OMP_NUM_THREADS"}, 1));
  const std::int64_t n = integer(a, "num_processes");
  if (!on(a, "use_cpu") || n < 1 || intFromEnv(env, {"OMP_NUM_THREADS"}, 0) != 0) return;
  const std::int64_t machines = std::max<std::int64_t>(integer(a, "num_machines"), 1);
  const std::int64_t local = intFromEnv(
      env, {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"},
      std::max<std::int64_t>(n / machines, 1));
  const std::int64_t threads = local > 0 ? countPhysicalCores(host.sysDir) / local : 0;
  if (threads > 1) {
    a.values["num_cpu_threads_per_process"] = PyValue::integer(threads);
    m.defaulted.push_back("--num_cpu_threads_per_process " + std::to_string(threads) +
                          " (the physical cores shared by the processes)");
  }
}

Merged merge(AccelerateArgs args, const Env& env, const HostProbe& host) {
  Merged m;
  m.a = std::move(args);
  auto& a = m.a;
  int modes = 0;
  for (const char* f : {"multi_gpu", "cpu", "tpu", "use_deepspeed", "use_fsdp"}) modes += on(a, f);
  if (modes > 1) {
    throw UsageError(
        "--cpu, --multi_gpu, --tpu, --use_deepspeed and --use_fsdp exclude each "
        "other: give one of them");
  }
  if (on(a, "multi_gpu") && !a.get("num_processes").isNone() && integer(a, "num_processes") < 2) {
    throw UsageError(a.source("num_processes", "--num_processes") +
                     ": --multi_gpu needs 2 processes or more");
  }
  if (on(a, "use_parallelism_config") && !on(a, "use_fsdp")) {
    throw UsageError("--use_parallelism_config needs --use_fsdp (and --fsdp_version 2)");
  }
  std::optional<fs::path> file;
  if (const PyValue& given = a.get("config_file"); !given.isNone()) {
    std::error_code ec;
    if (!fs::is_regular_file(given.s, ec)) {
      throw UsageError(a.source("config_file", "--config_file") + " " + given.s +
                       ": no such config file");
    }
    file = given.s;
  } else if (!on(a, "cpu")) {
    std::error_code ec;
    const fs::path def = defaultAccelerateConfigFile(env);
    if (fs::is_regular_file(def, ec)) file = def;
  }
  if (file) {
    m.config = loadAccelerateConfig(*file);
    m.warnings = m.config->warnings;
    mergeFile(m, *m.config);
  } else {
    mergeDefaults(m, env, host);
  }
  mergeThreads(m, env, host);
  return m;
}

AcceleratePath dispatch(const Merged& m) {
  const auto& a = m.a;
  const bool cpu = on(a, "cpu");
  if ((on(a, "tpu") || on(a, "tpu_cluster")) && !cpu) {
    throw UsageError(
        "TPU training (--tpu, or distributed_type XLA) is not launched by dtrun; "
        "use accelerate launch for it");
  }
  if (on(a, "use_deepspeed") && !cpu) return AcceleratePath::kDeepSpeed;
  if ((on(a, "use_fsdp") || on(a, "use_megatron_lm") || on(a, "multi_gpu")) && !cpu) {
    return AcceleratePath::kMultiGpu;
  }
  if (!a.get("mpirun_hostfile").isNone()) {
    throw UsageError(a.source("mpirun_hostfile", "--mpirun_hostfile") +
                     ": a multi-CPU job through mpirun is not launched by dtrun; use "
                     "distributed_type MULTI_GPU-style processes under dtrun instead "
                     "(--multi_gpu --num_processes N), or accelerate launch for mpirun");
  }
  return AcceleratePath::kSimple;
}

// The rendezvous and sizes of the torchrun-agent paths (prepare_multi_gpu_env's arguments).
void torchrunShape(FrontEndRun& run, const AccelerateArgs& a) {
  auto& c = run.command;
  const std::int64_t n = integer(a, "num_processes");
  const std::int64_t machines = integer(a, "num_machines");
  const PyValue& port = a.get("main_process_port");
  const std::string backend = a.get("rdzv_backend").text();
  if (machines > 1) {
    const std::int64_t each = n / machines;
    if (each < 1) {
      throw UsageError(a.source("num_processes", "--num_processes") + " " + std::to_string(n) +
                       " over " + std::to_string(machines) + " machines leaves none per machine");
    }
    const PyValue& ip = a.get("main_process_ip");
    if (ip.isNone()) throw UsageError("--main_process_ip: needed with several machines");
    if (a.get("machine_rank").isNone()) {
      throw UsageError("--machine_rank: needed with several machines");
    }
    const std::int64_t p = port.isNone() ? 29500 : integer(a, "main_process_port");
    if (p < 0 || p > 65535) {
      throw UsageError(a.source("main_process_port", "--main_process_port") + " " +
                       std::to_string(p) + ": expected a port from 1 to 65535");
    }
    if (p == 0) {
      throw UsageError(a.source("main_process_port", "--main_process_port") +
                       " 0 with several machines: the others cannot find a free port chosen "
                       "here; give a port");
    }
    c.option("nnodes", std::to_string(machines));
    c.option("node_rank", std::to_string(integer(a, "machine_rank")));
    c.option("nproc_per_node", std::to_string(each));
    c.option("rdzv_backend", backend);
    if (on(a, "same_network")) {
      c.option("master_addr", ip.text());
      c.option("master_port", std::to_string(p));
    } else {
      c.option("rdzv_endpoint", hostPortText(ip.text(), static_cast<std::uint16_t>(p)));
    }
    return;
  }
  c.option("nproc_per_node", std::to_string(n));
  if (backend != "static") {
    c.option("rdzv_backend", backend);  // dtrun's single-node c10d picks its own free port
  } else if (port.isNone() || integer(a, "main_process_port") == 0) {
    // One machine: nobody else needs to know the port, so a free one (accelerate: 29500).
    c.option("rdzv_endpoint", "127.0.0.1:0");
    run.caveats.push_back("The store listens on a free port of 127.0.0.1 (accelerate: 29500).");
  } else {
    c.option("rdzv_backend", "static");
    c.option("master_addr", "127.0.0.1");
    c.option("master_port", std::to_string(integer(a, "main_process_port")));
  }
}

// Options accelerate passes on to torchrun, written only where plain dtrun would otherwise take
// another value (its default, or a PET_* variable).
void runOptions(FrontEndRun& run, const AccelerateArgs& a, const Env& env) {
  auto& c = run.command;
  auto pass = [&](const char* dest, const std::string& value, const std::string& plainDefault) {
    std::string var = "PET_" + std::string(dest);
    for (char& ch : var) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (value != plainDefault || env.count(var)) c.option(dest, value);
  };
  pass("max_restarts", std::to_string(integer(a, "max_restarts")), "0");
  pass("monitor_interval", a.get("monitor_interval").text(), "0.1");
  pass("role", a.get("role").text(), "default");
  pass("tee", a.get("tee").text(), "0");
  if (!a.get("log_dir").isNone()) c.option("log_dir", a.get("log_dir").text());
  if (!a.get("rdzv_conf").text().empty()) c.option("rdzv_conf", a.get("rdzv_conf").text());
  if (on(a, "module") && on(a, "no_python")) {
    throw UsageError("--module and --no_python cannot be used together");
  }
  if (on(a, "module")) c.flag("module");
  if (on(a, "no_python")) c.flag("no_python");
}

}  // namespace

FrontEndRun translateAccelerate(const std::vector<std::string>& argsIn, const Env& env,
                                const HostProbe& host) {
  std::vector<std::string> args = argsIn;
  if (!args.empty() && args.front() == "launch") args.erase(args.begin());
  const OptionParser& parser = accelerateParser();
  ParsedOptions parsed = parser.parse(args);
  parser.applyEnvironment(parsed, env);
  Merged m = merge(accelerateArgs(parsed), env, host);
  const AcceleratePath path = dispatch(m);
  const auto& a = m.a;

  FrontEndRun run;
  run.launcher = "accelerate launch";
  run.warnings = m.warnings;
  if (!m.defaulted.empty()) {
    std::string line = "accelerate's defaults, without a config file:";
    for (std::size_t i = 0; i < m.defaulted.size(); ++i) {
      line += (i ? ", " : " ") + m.defaulted[i];
    }
    run.warnings.push_back(line + " (accelerate config writes a config file)");
  }
  std::string dsFields;
  if (path == AcceleratePath::kDeepSpeed) {
    if (m.config) {
      const PyValue& section = m.config->get("deepspeed_config");
      if (section.kind != Kind::kDict) {
        throw UsageError(m.config->path.string() +
                         ": deepspeed_config must be a mapping of accelerate's DeepSpeed keys "
                         "(a DeepSpeed JSON file is deepspeed_config_file: PATH inside it)");
      }
      for (const auto& [k, v] : section.fields) dsFields += (dsFields.empty() ? "" : ",") + k;
    }
    if (m.mpFromConfig) dsFields += (dsFields.empty() ? "" : ",") + std::string("mixed_precision");
    const std::string launcher = a.get("deepspeed_multinode_launcher").text();
    if (integer(a, "num_machines") > 1 && launcher != "standard") {
      throw UsageError("deepspeed_multinode_launcher " +
                       (a.get("deepspeed_multinode_launcher").isNone() ? "pdsh" : launcher) +
                       " with several machines is not supported by dtrun accelerate: set it to "
                       "standard (every machine runs dtrun accelerate), or start the job with "
                       "dtrun deepspeed --hostfile");
    }
  }
  const fs::path cwd = host.workDir.empty() ? fs::current_path() : host.workDir;
  run.env = accelerateWorkerEnv(path, a, dsFields, env, cwd);

  if (path == AcceleratePath::kSimple) {
    if (integer(a, "num_machines") > 1) {
      if (a.get("main_process_ip").isNone()) {
        throw UsageError("--main_process_ip: needed with several machines");
      }
      if (a.get("main_process_port").isNone()) {
        throw UsageError("--main_process_port: needed with several machines");
      }
    }
    // One plain process on this machine, whatever the job's size: the script (or an MPI
    // launcher's variables) decides the rest.
    run.command.option("nproc_per_node", "1");
    run.command.option("rdzv_endpoint", "127.0.0.1:0");
    run.command.option("worker_variables", "none");
    run.rules.unbuffered = false;
    run.caveats.push_back(
        "accelerate's single-process launcher: one process and no rank variables; plain dtrun "
        "would run python with -u.");
  } else {
    torchrunShape(run, a);
  }
  runOptions(run, a, env);
  run.command.forward(parser, parsed, isFrontEndDtrunOption);
  run.command.script(a.script, a.scriptArgs);
  return run;
}

FrontEndLaunch parseAccelerateLaunch(const std::vector<std::string>& args, const Env& env,
                                     const HostProbe& host) {
  return resolveFrontEnd(translateAccelerate(args, env, host), env, host);
}

}  // namespace dtrun::launcher
