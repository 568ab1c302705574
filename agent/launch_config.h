// LaunchConfig: everything the command line, PET_* and SLURM_* variables say, parsed once by the
// launcher (launcher/cli.h) and passed by const& to the store, the rendezvous and the agent.
// Nothing here is read from the environment again later.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/outcome.h"

namespace dtrun::agent {

/// torchrun's Std: which of a worker's streams go to a file (bit 1 stdout, bit 2 stderr).
enum class Std : std::uint8_t { kNone = 0, kOut = 1, kErr = 2, kAll = 3 };

/// A --redirects/--tee value: one Std for every local rank, or a map from local rank to Std
/// (ranks missing from a map get kNone, as in torchrun).
struct StdSpec {
  std::optional<Std> all;           ///< set for the single-value form ("3")
  std::map<int, Std> perLocalRank;  ///< the map form ("0:1,1:2")
  Std forRank(int localRank) const;
};

/// --rdzv-backend: c10d (dtrun's store), static (torchrun's legacy fixed ranks) or etcd (torchrun's
/// etcd and etcd-v2 spellings both).
enum class RendezvousBackend { kC10d, kStatic, kEtcd };

/// The backend's name as --rdzv-backend spells it ("c10d", "static", "etcd"). Pure.
const char* backendName(RendezvousBackend backend);

/// Rendezvous settings: --rdzv-* options, --rdzv-conf keys with torch's defaults, and the static
/// backend's --node-rank/--master-*.
struct RendezvousConfig {
  RendezvousBackend backend = RendezvousBackend::kC10d;
  /// etcd: --rdzv-endpoint as given, the comma-separated members (host:port or URLs).
  std::string etcdEndpoints;
  std::string host;            ///< endpoint host (brackets of [v6] removed)
  std::uint16_t port = 29400;  ///< endpoint port; 0 = pick a free one (standalone)
  std::string runId = "none";
  int minNodes = 1;
  int maxNodes = 1;
  std::chrono::milliseconds joinTimeout = std::chrono::seconds(600);
  std::chrono::milliseconds lastCallTimeout = std::chrono::seconds(30);
  std::chrono::milliseconds closeTimeout = std::chrono::seconds(30);
  std::chrono::milliseconds heartbeatTimeout = std::chrono::seconds(5);
  std::chrono::milliseconds keepAliveInterval = std::chrono::seconds(5);
  int keepAliveMaxAttempt = 3;
  std::chrono::milliseconds readTimeout = std::chrono::seconds(60);
  /// rdzv-conf "timeout": the static backend's join timeout (torch's static_tcp_rendezvous: 600)
  std::chrono::milliseconds storeTimeout = std::chrono::seconds(600);
  std::optional<bool> isHost;  ///< rdzv-conf is_host; unset = decide from the endpoint host
  std::map<std::string, std::string> conf;  ///< every --rdzv-conf key as given
  /// The store's shared secret (--rdzv-conf token_file, or DTRUN_RDZV_TOKEN_FILE); empty: none.
  std::string token;
  // Static backend (torchrun's legacy mode).
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  std::optional<std::uint16_t> masterPort;
  std::string localAddr;  ///< --local-addr: how other nodes reach this one ("" = hostname)
};

/// Which launcher's per-worker variables the workers get (--worker-variables). The front-ends
/// for other launchers (launcher/front_end.h) choose the one their launcher gives.
enum class WorkerVariables {
  kTorchrun,   ///< torchrun's: RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, TORCHELASTIC_*, ...
  kDeepSpeed,  ///< torchrun's, and DeepSpeed's launcher's CROSS_RANK, CROSS_SIZE, LOCAL_SIZE
  kNone,       ///< none: the launcher's environment only (accelerate's single-process launcher)
};

struct LaunchConfig {
  // What to run.
  std::vector<std::string> entrypoint;  ///< argv before the script's own arguments
  std::string script;                   ///< training_script as typed
  std::vector<std::string> scriptArgs;  ///< passed on untouched (${local_rank} substituted)
  bool module = false;                  ///< -m
  bool noPython = false;                ///< --no-python
  bool runPath = false;                 ///< --run-path
  std::string python = "python3";       ///< --python / $DTRUN_PYTHON
  std::string entrypointName;           ///< the name in the failure report's title

  // Workers.
  int nprocPerNode = 1;
  std::string role = "default";
  int maxRestarts = 0;
  std::chrono::milliseconds monitorInterval = std::chrono::milliseconds(100);
  std::string startMethod = "spawn";  ///< accepted for compatibility; only --run-path uses it
  std::chrono::milliseconds shutdownTimeout = std::chrono::seconds(30);  ///< SIGTERM->SIGKILL
  std::vector<int> signalsToHandle;  ///< forwarded to every worker group
  bool virtualLocalRank = false;
  bool agentStore = true;  ///< false: worker rank 0 hosts MASTER_PORT, as torchrun 1.13
  bool standalone = false;
  bool stopOnStdinClose = false;  ///< --stop-on-stdin-close (the launcher watches stdin)
  WorkerVariables workerVariables = WorkerVariables::kTorchrun;  ///< --worker-variables

  RendezvousConfig rdzv;

  // Logs and reports.
  std::optional<std::string> logDir;  ///< --log-dir; unset = a fresh torchelastic_ temp dir
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::set<int>> localRanksFilter;  ///< --local-ranks-filter
  std::string logLinePrefixTemplate;  ///< "" = "[${role_name}${local_rank}]:" when teeing
  std::vector<std::string> duplicateStdoutFilters;
  std::vector<std::string> duplicateStderrFilters;
  std::string eventLog;  ///< --event-log FILE ("" = none)
  std::string logLevel = "warn";
  std::string eventLogHandler = "null";    ///< --event-log-handler (accepted, see the CLI)
  std::optional<std::string> logsSpecs;    ///< --logs-specs NAME (accepted; no plugins)
  std::optional<std::string> numaBinding;  ///< node, socket, exclusive or core-complex

  // Hangs (docs/hangs.md).
  /// --file-timer, or TORCHELASTIC_ENABLE_FILE_TIMER=1 as torchrun: serve torch's file timer.
  bool fileTimer = false;
  std::string timerFile;  ///< TORCHELASTIC_TIMER_FILE ("" = a private FIFO)
  /// --stall-timeout: this long without output or timer activity from the group is a hang.
  std::optional<std::chrono::milliseconds> stallTimeout;
  bool dumpStacks = false;  ///< --dump-stacks: Python stacks into the report before the kill
  /// --exit-barrier-timeout: how long a node whose workers succeeded waits for the others'
  /// outcome once one of them stopped answering (torch's exit barrier: 300 s).
  std::chrono::milliseconds exitBarrierTimeout = std::chrono::seconds(300);

  // Warm starts (docs/agent.md, "Warm starts").
  /// --prewarm: modules every local rank's standby interpreter imports ahead ("" = none).
  std::vector<std::string> prewarm;
  /// --prewarm-timeout: how long a round's start waits for a standby still importing.
  std::chrono::milliseconds prewarmTimeout = std::chrono::seconds(60);
  // What the job shows of itself (docs/observe.md).
  /// --exit-codes (DTRUN_EXIT_CODES), --exit-code worker (the deepspeed front-end): how the
  /// outcome becomes dtrun's exit code (agent/outcome.h).
  ExitCodeScheme exitCodes = ExitCodeScheme::kTorchrun;
  /// --termination-log PATH: where the root cause goes at the end ("" = /dev/termination-log
  /// when it exists and is writable, as in a Kubernetes container).
  std::string terminationLog;
  /// --metrics-port: serve Prometheus metrics on this port (0 = a free one); unset = off.
  std::optional<std::uint16_t> metricsPort;
  std::string metricsHost = "0.0.0.0";  ///< --metrics-host

  // What the parser noticed, for main to report once.
  bool ompNumThreadsSet = false;      ///< baseEnv got OMP_NUM_THREADS=1: log torchrun's notice
  std::vector<std::string> warnings;  ///< one line each, to log at warning level
  /// Options given on the command line or through their variable (PET_*, DTRUN_*), by argparse
  /// dest ("nnodes", "rdzv_endpoint", ...), so later defaults (Slurm) never override them.
  std::set<std::string> givenOptions;

  /// Environment given to every worker before the per-rank variables (the launcher's own
  /// environment, plus OMP_NUM_THREADS when it was set for the workers, and
  /// TORCHELASTIC_SIGNALS_TO_HANDLE as newest torchrun exports it).
  std::map<std::string, std::string> baseEnv;
};

}  // namespace dtrun::agent
