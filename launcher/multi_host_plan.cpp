#include "launcher/multi_host_plan.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "launcher/shell_words.h"

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kGroup =
    "Multi-node from one shell (DeepSpeed's hostfile; --master-addr and --master-port also apply)";

constexpr std::array<OptionSpec, 7> kHostfileOptions{{
    {"hostfile", "-H", OptionKind::kValue, kGroup, "",
     "Start the job on every host of FILE over ssh, one dtrun agent per host, from this shell: "
     "lines 'HOST slots=N' (N workers on local devices 0..N-1), '#' comments. Node ranks follow "
     "the file's order; the first host serves the rendezvous. Output comes back prefixed with "
     "the host; Ctrl-C or SIGTERM stops every host; the exit code is the job's.",
     "FILE", "", false},
    {"include", "-i", OptionKind::kValue, kGroup, "",
     "Use only these hosts and slots: HOST[:SLOT,...][@HOST[:SLOT,...]...], e.g. "
     "worker-0@worker-1:0,2 (all of worker-0, slots 0 and 2 of worker-1). A host's slots become "
     "its CUDA_VISIBLE_DEVICES.",
     "SPEC", "", false},
    {"exclude", "-e", OptionKind::kValue, kGroup, "",
     "Leave out these hosts or slots (syntax of --include, which it excludes).", "SPEC", "", false},
    {"num_nodes", "", OptionKind::kValue, kGroup, "",
     "Use the first N hosts of the hostfile (not with --include/--exclude).", "N", "", false},
    {"num_gpus", "", OptionKind::kValue, kGroup, "",
     "Use at most G devices on every host, 0..G-1 (not with --include/--exclude).", "G",
     "num_accelerators", false},
    {"ssh_command", "", OptionKind::kValue, kGroup, "",
     "How to reach a host, split into words as a shell would; dtrun appends the host and the "
     "command, e.g. 'ssh -F cluster.cfg -p 2222'. (default: ssh)",
     "CMD", "", false},
    {"remote_dtrun", "", OptionKind::kValue, kGroup, "",
     "Path of dtrun on the hosts. (default: this dtrun's own path)", "PATH", "", false},
}};

// What the hostfile decides, so the options that would say it too are refused.
constexpr std::array<std::string_view, 7> kPerNodeOptions{
    "nnodes",        "node_rank", "nproc_per_node", "rdzv_backend",
    "rdzv_endpoint", "rdzv_id",   "standalone"};

std::string sourceOf(const ParsedOptions& p, std::string_view dest) {
  if (const auto* g = p.value(dest)) return g->source;
  return p.flagSource(dest);
}

std::string readTextFile(const fs::path& path, const std::string& option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError(option + ": cannot read " + path.string() + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void readEnvFile(const fs::path& path, std::map<std::string, std::string>& into) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  for (auto& [k, v] : parseEnvFile(readTextFile(path, path.string()), path.string())) {
    into[k] = v;
  }
}

bool isOpenSsh(const std::vector<std::string>& words) {
  return fs::path(words.front()).filename() == "ssh";
}

}  // namespace

std::span<const OptionSpec> hostfileOptions() { return kHostfileOptions; }

bool isHostfileOption(std::string_view dest) {
  for (const auto& o : kHostfileOptions) {
    if (o.dest == dest) return true;
  }
  return false;
}

void checkHostfileOptions(const ParsedOptions& parsed) {
  if (parsed.given("hostfile")) {
    for (auto dest : kPerNodeOptions) {
      if (!parsed.given(dest)) continue;
      throw UsageError(sourceOf(parsed, dest) +
                       ": not with --hostfile, whose hosts are the nodes and whose slots are "
                       "their workers (choose them with --include, --exclude, --num-nodes or "
                       "--num-gpus)");
    }
    return;
  }
  for (const auto& o : kHostfileOptions) {
    if (parsed.given(o.dest)) {
      throw UsageError(sourceOf(parsed, o.dest) + ": only with --hostfile FILE");
    }
  }
}

std::vector<std::string> MultiHostPlan::agentArgv(std::size_t i) const {
  std::vector<std::string> argv{remoteDtrun};
  argv.insert(argv.end(), agentOptions.begin(), agentOptions.end());
  argv.push_back("--rdzv-backend=static");
  argv.push_back("--nnodes=" + std::to_string(hosts.size()));
  argv.push_back("--node-rank=" + std::to_string(i));
  argv.push_back("--master-addr=" + masterAddr);
  argv.push_back("--master-port=" + std::to_string(masterPort));
  argv.push_back("--nproc-per-node=" + std::to_string(hosts[i].slots.size()));
  argv.push_back("--stop-on-stdin-close");
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::string MultiHostPlan::remoteCommand(std::size_t i) const {
  std::vector<std::string> envWords{"env"};
  for (const auto& [k, v] : exportedEnv) envWords.push_back(k + "=" + v);
  std::string devices;
  for (int s : hosts[i].slots) devices += (devices.empty() ? "" : ",") + std::to_string(s);
  envWords.push_back("CUDA_VISIBLE_DEVICES=" + devices);
  return "cd " + shellQuote(workDir.string()) + " && exec " + shellJoin(envWords) + " " +
         shellJoin(agentArgv(i));
}

std::vector<std::string> MultiHostPlan::sshArgv(std::size_t i) const {
  std::vector<std::string> argv = sshCommand;
  // Never a password prompt nobody can answer; the user's own -o options come first and win.
  if (isOpenSsh(sshCommand)) argv.insert(argv.end(), {"-o", "BatchMode=yes"});
  argv.push_back(hosts[i].host);
  argv.push_back(remoteCommand(i));
  return argv;
}

std::vector<std::string> MultiHostPlan::checkArgv(std::size_t i) const {
  std::vector<std::string> argv = sshCommand;
  if (isOpenSsh(sshCommand)) {
    argv.insert(argv.end(), {"-o", "BatchMode=yes", "-o", "ConnectTimeout=20"});
  }
  argv.push_back(hosts[i].host);
  argv.push_back("cd " + shellQuote(workDir.string()) + " 2>/dev/null || exit 3; test -x " +
                 shellQuote(remoteDtrun) + " || exit 4");
  return argv;
}

MultiHostPlan planMultiHost(const ParsedOptions& parsed,
                            const std::map<std::string, std::string>& env,
                            const MultiHostInputs& in) {
  MultiHostPlan plan;
  const GivenValue* hostfile = parsed.value("hostfile");
  std::vector<HostSlots> pool =
      parseHostfile(readTextFile(hostfile->value, hostfile->source), hostfile->value);

  const GivenValue* include = parsed.value("include");
  const GivenValue* exclude = parsed.value("exclude");
  const GivenValue* numNodes = parsed.value("num_nodes");
  const GivenValue* numGpus = parsed.value("num_gpus");
  if ((include || exclude) && (numNodes || numGpus)) {
    throw UsageError((numNodes ? numNodes : numGpus)->source + ": not with " +
                     (include ? include : exclude)->source +
                     " (DeepSpeed's rule: choose hosts one way)");
  }
  plan.hosts = limitHosts(filterHosts(pool, include, exclude), numNodes, numGpus);

  if (const auto* g = parsed.value("master_addr")) {
    if (g->value.empty()) throw UsageError(g->source + ": expected a host name or IP address");
    plan.masterAddr = g->value;
  } else {
    plan.masterAddr = plan.hosts.front().host;
  }
  if (auto port = parsed.integer("master_port", 1, 65535)) {
    plan.masterPort = static_cast<std::uint16_t>(*port);
  }
  plan.sshCommand = splitShellWords("--ssh-command", parsed.text("ssh_command").value_or("ssh"));
  plan.remoteDtrun = parsed.text("remote_dtrun").value_or(in.selfExe);
  if (plan.remoteDtrun.empty()) throw UsageError("--remote-dtrun: expected a path");
  plan.workDir = in.workDir;

  for (const auto& [k, v] : env) {
    if (isExportedVariable(k)) plan.exportedEnv[k] = v;
  }
  fs::path home = env.count("HOME") ? fs::path(env.at("HOME")) : fs::path();
  if (!home.empty()) readEnvFile(home / ".dtrun_env", plan.exportedEnv);
  std::error_code ec;
  if (home.empty() || !fs::equivalent(home, in.workDir, ec)) {
    readEnvFile(in.workDir / ".dtrun_env", plan.exportedEnv);
  }
  plan.agentOptions = in.agentOptions;
  plan.command = in.command;
  return plan;
}

std::string selfExecutable() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("dtrun") : self.string();
}

}  // namespace dtrun::launcher
