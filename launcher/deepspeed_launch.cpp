// The deepspeed runner's command line (runner.py's parse_args and main, launch.py's worker
// command) translated into a plain dtrun run.
#include "launcher/deepspeed_launch.h"

#include <array>
#include <cctype>
#include <climits>

#include "common/host_port.h"
#include "launcher/deepspeed_resources.h"
#include "launcher/shell_words.h"

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;

constexpr std::string_view kRes = "Resources (DeepSpeed's hostfile and filters)";
constexpr std::string_view kRun = "Launch";
constexpr std::string_view kNot = "Accepted, not supported (refused with a line saying why)";

constexpr std::array<OptionSpec, 29> kOptions{{
    {"help", "-h", OptionKind::kHelp, "", "", "show this help message and exit"},
    {"hostfile", "-H", OptionKind::kValue, kRes, "",
     "Hosts of the job, lines 'HOST slots=N'. A missing file means this machine alone. "
     "(default: /job/hostfile)"},
    {"include", "-i", OptionKind::kValue, kRes, "",
     "Only these hosts and slots: HOST[:SLOT,...][@HOST[:SLOT,...]...] (a host alone: all its "
     "slots); without a hostfile the host is localhost, e.g. localhost:1,3."},
    {"exclude", "-e", OptionKind::kValue, kRes, "",
     "Every host and slot but these (the syntax of --include)."},
    {"num_nodes", "", OptionKind::kValue, kRes, "", "The first N hosts of the hostfile."},
    {"min_elastic_nodes", "", OptionKind::kValue, kNot, "",
     "Elastic training; see --elastic_training."},
    {"max_elastic_nodes", "", OptionKind::kValue, kNot, "",
     "Elastic training; see --elastic_training."},
    {"num_gpus", "", OptionKind::kValue, kRes, "",
     "Slots 0..N-1 on every host, whatever the device count.", "", "num_accelerators"},
    {"master_port", "", OptionKind::kValue, kRun, "",
     "Port of the rendezvous on the first host. (default: one machine: a free port; several: "
     "29500)"},
    {"master_addr", "", OptionKind::kValue, kRun, "",
     "Address of the first host for the workers (IPv6 as it is, ::1). Without a hostfile it is "
     "127.0.0.1, as in DeepSpeed. (default: with a hostfile of several hosts the first host's "
     "name; one machine: 127.0.0.1)"},
    {"node_rank", "", OptionKind::kValue, kRun, "",
     "With --no_ssh: this machine's rank among the hostfile's hosts."},
    {"launcher", "", OptionKind::kValue, kRun, "",
     "How several hosts are reached: pdsh (dtrun starts one agent per host over ssh); openmpi, "
     "mvapich, mpich, impi and slurm are refused. (default: pdsh)"},
    {"launcher_args", "", OptionKind::kValue, kRun, "",
     "pdsh's own arguments; refused for several hosts (--ssh_port, or dtrun's --ssh-command)."},
    {"module", "", OptionKind::kFlag, kRun, "", "Run the script as a module, python -u -m."},
    {"no_python", "", OptionKind::kFlag, kRun, "", "Run the script as a program, without python."},
    {"no_local_rank", "", OptionKind::kFlag, kRun, "",
     "Do not pass --local_rank=N to the script (it reads LOCAL_RANK)."},
    {"no_ssh", "", OptionKind::kFlag, kRun, "",
     "Run this machine's part of a hostfile's job only (every machine runs it with its "
     "--node_rank)."},
    {"no_ssh_check", "", OptionKind::kFlag, kRun, "",
     "Accepted; dtrun always checks every host before it starts anything."},
    {"force_multi", "", OptionKind::kFlag, kRun, "",
     "Reach the hosts over ssh even when there is one."},
    {"save_pid", "", OptionKind::kFlag, kRun, "", "Accepted and ignored (a warning says so)."},
    {"enable_each_rank_log", "", OptionKind::kValue, kRun, "",
     "Each rank's output to files under DIR (dtrun's --log-dir DIR --redirects 3 layout).", "DIR"},
    {"autotuning", "", OptionKind::kValue, kNot, "",
     "DeepSpeed's autotuner; run deepspeed itself."},
    {"elastic_training", "", OptionKind::kFlag, kNot, "",
     "Use plain dtrun for elastic jobs: --nnodes MIN:MAX --rdzv-endpoint HOST:PORT."},
    {"bind_cores_to_rank", "", OptionKind::kFlag, kNot, "", "Core binding through numactl."},
    {"bind_core_list", "", OptionKind::kValue, kNot, "", "Core binding through numactl."},
    {"ssh_port", "", OptionKind::kValue, kRun, "", "ssh's port on every host."},
    {"venv_script", "", OptionKind::kValue, kRun, "",
     "A script sourced before the job on every host; refused for several hosts (put the "
     "environment in .deepspeed_env)."},
    {"log_level", "", OptionKind::kValue, kRun, "",
     "dtrun's own log level: debug, info, warning, error or critical. (default: warning)"},
    {"quiet", "-q", OptionKind::kFlag, kRun, "", "dtrun's log level error."},
}};

const std::vector<OptionSpec>& table() {
  static const std::vector<OptionSpec> v(kOptions.begin(), kOptions.end());
  return v;
}

void refuse(const ParsedOptions& p, const char* dest, const std::string& why) {
  if (!p.given(dest)) return;
  const auto* g = p.value(dest);
  throw UsageError((g ? g->source : p.flagSource(dest)) + ": " + why);
}

std::string joined(const std::vector<int>& slots) {
  std::string s;
  for (int slot : slots) s += (s.empty() ? "" : ",") + std::to_string(slot);
  return s;
}

// The include spec that selects exactly `hosts` from the hostfile, as dtrun --hostfile reads it.
std::string includeSpec(const std::vector<HostSlots>& hosts) {
  std::string spec;
  for (const auto& h : hosts) spec += (spec.empty() ? "" : "@") + h.host + ":" + joined(h.slots);
  return spec;
}

// Several hosts over ssh: dtrun --hostfile with the hosts DeepSpeed selected.
void multiHost(FrontEndRun& run, const ParsedOptions& p, const DeepSpeedResources& res,
               const Env& env, const HostProbe& host) {
  const std::string launcher = p.text("launcher").value_or("pdsh");
  std::string lower = launcher;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "openmpi" || lower == "mvapich" || lower == "mpich" || lower == "impi") {
    refuse(p, "launcher",
           launcher +
               ": dtrun starts one agent per host over ssh and no workers through "
               "mpirun; leave --launcher out (pdsh's way, which dtrun follows)");
  }
  if (lower == "slurm") {
    refuse(p, "launcher",
           "slurm: run dtrun under srun instead, one agent per node: srun --ntasks-per-node=1 "
           "dtrun --nnodes=N --nproc-per-node=G SCRIPT (docs/slurm.md)");
  }
  if (lower != "pdsh")
    refuse(p, "launcher", launcher + ": unknown launcher (pdsh is DeepSpeed's default)");
  if (p.text("launcher_args").value_or("") != "") {
    refuse(p, "launcher_args",
           "pdsh's own arguments do not apply to dtrun's ssh; use --ssh_port "
           "or dtrun's --ssh-command");
  }
  refuse(p, "venv_script", "not for several hosts; put the environment in .deepspeed_env");
  // dtrun's --hostfile runs a host's workers on its hostfile slots: checked before the plan
  // does, naming the option that asked for more.
  for (const auto& h : res.hosts) {
    for (const auto& known : res.pool) {
      if (known.host != h.host || h.slots.back() < static_cast<int>(known.slots.size())) continue;
      const char* dest = p.given("num_gpus") ? "num_gpus" : "include";
      throw UsageError(p.value(dest)->source + ": host " + h.host +
                       " has slots=" + std::to_string(known.slots.size()) + " in " + res.hostfile +
                       "; over ssh dtrun runs a host's workers on its hostfile slots only");
    }
  }
  auto& c = run.command;
  c.option("hostfile", res.hostfile);
  c.option("include", includeSpec(res.hosts));
  if (const auto* g = p.value("master_addr"); g && !g->value.empty()) {
    c.option("master_addr", g->value);
  }
  if (p.given("master_port")) {
    c.option("master_port", std::to_string(*p.integer("master_port", 1, 65535)));
  }
  if (p.given("ssh_port") && p.given("ssh_command")) {
    refuse(p, "ssh_port", "not with --ssh-command, which says how to reach the hosts");
  }
  if (auto port = p.integer("ssh_port", 1, 65535)) {
    c.option("ssh_command", "ssh -p " + std::to_string(*port));
  }
  const fs::path workDir = host.workDir.empty() ? fs::current_path() : host.workDir;
  run.hostEnv = deepSpeedExports(env, workDir);
  run.caveats.push_back(
      "Every host also gets DeepSpeed's exports and .deepspeed_env, which plain dtrun reads from "
      ".dtrun_env instead.");
}

}  // namespace

const OptionParser& deepSpeedParser() {
  static const OptionParser parser(CommandSpec{
      "dtrun deepspeed",
      "[-h] [options] user_script [user_args ...]",
      {table(), frontEndDtrunOptions(FrontEnd::kDeepSpeed)},
      true,
      {"The deepspeed launcher's command line on dtrun: deepspeed ARGS becomes dtrun deepspeed "
       "ARGS. The hosts and slots are DeepSpeed's (hostfile, --include/--exclude, --num_nodes, "
       "--num_gpus, else this machine's GPUs), every worker gets --local_rank=N before the "
       "script's own arguments (unless --no_local_rank) and DeepSpeed's variables (CROSS_RANK, "
       "CROSS_SIZE, LOCAL_SIZE, CUDA_VISIBLE_DEVICES) besides torchrun's, and dtrun's agent runs "
       "them, with its free ports, restarts, watchdogs and failure report. A notice, printed "
       "once, shows the same run as a plain dtrun command line."},
      {{"user_script", "Path of the training script (a module name with --module)."},
       {"user_args", "Arguments for the script, after --local_rank=N, passed on untouched."}},
      {"Exit codes: 0 when every worker succeeded; the first failed worker's exit code (256-N "
       "when signal N ended it), as DeepSpeed's launcher; 1 for other failures; 2 for a bad "
       "command line."}});
  return parser;
}

FrontEndRun translateDeepSpeed(const std::vector<std::string>& args, const Env& env,
                               const HostProbe& host) {
  const OptionParser& parser = deepSpeedParser();
  ParsedOptions p = parser.parse(args);
  parser.applyEnvironment(p, env);
  refuse(p, "autotuning", "DeepSpeed's autotuner is not run by dtrun; run deepspeed --autotuning");
  refuse(p, "elastic_training",
         "use plain dtrun for an elastic job: dtrun --nnodes=MIN:MAX --rdzv-endpoint=HOST:PORT");
  refuse(p, "bind_cores_to_rank", "dtrun does not bind workers to cores through numactl");
  refuse(p, "bind_core_list", "dtrun does not bind workers to cores through numactl");
  if (p.flag("module") && p.flag("no_python")) {
    throw UsageError(p.flagSource("no_python") + " and " + p.flagSource("module") +
                     " exclude each other");
  }
  DeepSpeedResources res = deepSpeedResources(p, env, host);

  FrontEndRun run;
  run.launcher = "deepspeed";
  run.warnings = res.warnings;
  if (p.flag("save_pid")) run.warnings.push_back(p.flagSource("save_pid") + " is ignored by dtrun");
  auto& c = run.command;
  const int nodeRank = static_cast<int>(p.integer("node_rank", INT_MIN, INT_MAX).value_or(-1));
  const bool noSsh = p.flag("no_ssh");
  if (noSsh && (nodeRank < 0 || nodeRank >= static_cast<int>(res.hosts.size()))) {
    throw UsageError("--no_ssh needs --node_rank from 0 to " +
                     std::to_string(res.hosts.size() - 1) +
                     " (this machine's host in the hostfile)");
  }
  const bool multi = (p.flag("force_multi") || res.hosts.size() > 1) && !noSsh;
  std::string addr;
  if (const auto* g = p.value("master_addr"); g && !g->value.empty() && !res.hostfile.empty()) {
    addr = g->value;  // without a hostfile DeepSpeed uses 127.0.0.1 whatever is given
  }
  const std::optional<std::int64_t> port = p.integer("master_port", 0, 65535);
  if (multi) {
    multiHost(run, p, res, env, host);
  } else {
    const HostSlots& mine = res.hosts[noSsh ? nodeRank : 0];
    if (!res.hostfile.empty() && !noSsh && res.hosts.size() == 1 && mine.host != "localhost") {
      run.warnings.push_back("one host left, " + mine.host +
                             ": DeepSpeed runs that on this machine, and so does dtrun deepspeed "
                             "(--force_multi runs it there)");
    }
    run.env["CUDA_VISIBLE_DEVICES"] = joined(mine.slots);
    c.option("nproc_per_node", std::to_string(mine.slots.size()));
    if (noSsh && res.hosts.size() > 1) {
      c.option("rdzv_backend", "static");
      c.option("nnodes", std::to_string(res.hosts.size()));
      c.option("node_rank", std::to_string(nodeRank));
      c.option("master_addr", addr.empty() ? res.hosts.front().host : addr);
      c.option("master_port", std::to_string(port.value_or(29500)));
    } else if (!port || *port == 0) {
      // One machine: nobody else needs the port, so a free one (DeepSpeed: 29500).
      c.option("rdzv_endpoint", hostPortText(addr.empty() ? "127.0.0.1" : addr, 0));
      run.caveats.push_back("The store listens on a free port (DeepSpeed: 29500).");
    } else {
      c.option("rdzv_backend", "static");
      c.option("master_addr", addr.empty() ? "127.0.0.1" : addr);
      c.option("master_port", std::to_string(*port));
    }
  }
  c.option("worker_variables", "deepspeed");
  c.option("exit_code", "worker");
  if (p.flag("module")) c.flag("module");
  if (p.flag("no_python")) c.flag("no_python");
  if (const auto* g = p.value("enable_each_rank_log"); g && g->value != "None") {
    c.option("log_dir", g->value);
    c.option("redirects", "3");
  }
  std::string level = p.flag("quiet") ? "error" : p.text("log_level").value_or("");
  if (!level.empty()) {
    if (level != "debug" && level != "info" && level != "warning" && level != "error" &&
        level != "critical") {
      throw UsageError(p.value("log_level")->source + ": invalid choice '" + level +
                       "': expected debug, info, warning, error or critical");
    }
    c.option("log_level", level == "warning" ? "warn" : level);
  }
  c.forward(parser, p, isFrontEndDtrunOption);
  std::vector<std::string> scriptArgs;
  if (!p.flag("no_local_rank")) scriptArgs.push_back("--local_rank=${local_rank}");
  scriptArgs.insert(scriptArgs.end(), p.scriptArgs().begin(), p.scriptArgs().end());
  c.script(*p.script(), scriptArgs);
  return run;
}

FrontEndLaunch parseDeepSpeedLaunch(const std::vector<std::string>& args, const Env& env,
                                    const HostProbe& host) {
  return resolveFrontEnd(translateDeepSpeed(args, env, host), env, host);
}

}  // namespace dtrun::launcher
