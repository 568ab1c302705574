// The option table of dtrun's main command line: torchrun's options in torchrun's order, then
// dtrun's own, each with its help text, section, environment variable and metavar. A table, not
// logic: launcher/cli.cpp resolves what it parses.
#include <array>
#include <string_view>

#include "launcher/cli.h"

namespace dtrun::launcher {
namespace {

// Help sections. The first four are the sections of torchrun's get_args_parser (its comments;
// its help prints one flat list). Options torchrun appended later under "Backwards compatible"
// sit where they belong instead: --local-addr with the rendezvous, the worker and log options
// with the launch options.
constexpr std::string_view kSize = "Worker/node size related arguments";
constexpr std::string_view kRdzv = "Rendezvous related arguments";
constexpr std::string_view kLaunch = "User-code launch related arguments";
constexpr std::string_view kLegacy =
    "Backwards compatible parameters with caffe2.distributed.launch";
constexpr std::string_view kDtrun = "dtrun options";
constexpr std::string_view kPet = "PET";

// In torchrun's order, so the help reads like torchrun's (and `dtrun launch` forwards them in it).
constexpr std::array<OptionSpec, 50> kOptions{{
    {"help", "-h", OptionKind::kHelp, "", "", "show this help message and exit"},
    {"version", "", OptionKind::kVersion, "", "", "show dtrun's version and commit and exit", "",
     "", false},
    // Worker/node size.
    {"nnodes", "", OptionKind::kValue, kSize, kPet,
     "Number of nodes, or the range of nodes in form MIN:MAX. (default: 1:1)"},
    {"nproc_per_node", "", OptionKind::kValue, kSize, kPet,
     "Number of workers per node: an integer, gpu (the NVIDIA GPUs this node shows, restricted "
     "by CUDA_VISIBLE_DEVICES, else its AMD GPUs), xpu (its Intel GPUs), cpu (the online CPUs) "
     "or auto (gpu, else xpu, else cpu). (default: 1)"},
    // Rendezvous.
    {"rdzv_backend", "", OptionKind::kValue, kRdzv, kPet,
     "Rendezvous backend: c10d (elastic, dtrun's store), etcd (elastic, an etcd cluster as "
     "the store, no single point of failure; etcd-v2 is the same) or static (fixed --nnodes N, "
     "--node-rank, --master-addr, --master-port). (default: c10d; static when --master-addr, "
     "--master-port or --node-rank is given without --rdzv-endpoint, as torchrun)"},
    {"rdzv_endpoint", "", OptionKind::kValue, kRdzv, kPet,
     "Rendezvous endpoint HOST[:PORT] or [IPV6][:PORT]; the default port is 29400. etcd: the "
     "members, comma-separated, HOST[:PORT] or URLs (port 2379). (default: a "
     "free localhost port with --nnodes 1, else localhost:29400)"},
    {"rdzv_id", "", OptionKind::kValue, kRdzv, kPet,
     "User-defined group id, the same on every node. (default: none; a random UUID with "
     "--standalone or a single-node c10d run)"},
    {"rdzv_conf", "", OptionKind::kValue, kRdzv, kPet,
     "Additional rendezvous configuration KEY=VALUE,...: join_timeout (600), last_call_timeout "
     "(30), close_timeout (30), heartbeat_timeout (5), keep_alive_interval (5), "
     "keep_alive_max_attempt (3), read_timeout (60) in seconds, timeout (600: the static "
     "backend's join timeout, as torch's), is_host (true/false), token_file (the store's shared "
     "secret, also DTRUN_RDZV_TOKEN_FILE; docs/store.md), store_* (the hosted store's limits). "
     "etcd: protocol (http/https), cacert, cert, key (PEM files), user, password, "
     "quorum_timeout (60)."},
    {"standalone", "", OptionKind::kFlag, kRdzv, kPet,
     "Start a local standalone rendezvous (a c10d store on a free port). Useful for single-node, "
     "multi-worker jobs. --rdzv-backend, --rdzv-endpoint and --rdzv-id are then auto-assigned "
     "and any explicitly set values are ignored."},
    {"local_addr", "", OptionKind::kValue, kRdzv, kPet,
     "Address other nodes use to reach this one. (default: this machine's FQDN)"},
    // User-code launch.
    {"max_restarts", "", OptionKind::kValue, kLaunch, kPet,
     "Maximum number of worker group restarts before failing. (default: 0)"},
    {"monitor_interval", "", OptionKind::kValue, kLaunch, kPet,
     "Interval, in seconds, to poll what cannot be watched (dtrun sees worker exits at once). "
     "(default: 0.1)"},
    {"start_method", "", OptionKind::kValue, kLaunch, kPet,
     "spawn, fork or forkserver; accepted for compatibility (workers are always new processes). "
     "(default: spawn)"},
    {"event_log_handler", "", OptionKind::kValue, kLaunch, kPet,
     "torchrun's event handler: console prints every lifecycle event as one JSON line on "
     "stderr (the lines of --event-log); null and dynamic_rendezvous print nothing. (default: "
     "null)"},
    {"role", "", OptionKind::kValue, kLaunch, kPet,
     "User-defined role for the workers. (default: default)"},
    {"module", "-m", OptionKind::kFlag, kLaunch, kPet,
     "Run the training script as a Python module, like 'python -m'."},
    {"no_python", "", OptionKind::kFlag, kLaunch, kPet,
     "Execute the training script directly instead of through python; for programs that are not "
     "Python scripts."},
    {"run_path", "", OptionKind::kFlag, kLaunch, kPet,
     "Run the training script as a path with the Python interpreter (torchrun: runpy.run_path). "
     "Takes precedence over --no-python and -m."},
    {"log_dir", "", OptionKind::kValue, kLaunch, kPet,
     "Base directory for log files; a job sub-directory named after the run id is made in it. "
     "/dev/null writes none. (default: a new torchelastic_* temporary directory)"},
    {"redirects", "-r", OptionKind::kValue, kLaunch, kPet,
     "Redirect std streams into log files in the log directory: 0 none, 1 stdout, 2 stderr, 3 "
     "both, for all workers (-r 3), or per local rank (-r 0:1,1:2). (default: 0)"},
    {"tee", "-t", OptionKind::kValue, kLaunch, kPet,
     "Tee std streams into log files and also to the console (format as --redirects). "
     "(default: 0)"},
    {"local_ranks_filter", "", OptionKind::kValue, kLaunch, kPet,
     "Only show the console output of these local ranks, e.g. 0,1,2; log files keep everything."},
    {"duplicate_stdout_filters", "", OptionKind::kValue, kLaunch, kPet,
     "Copy stdout lines containing any of these comma-separated strings to another file (,, is "
     "a literal comma)."},
    {"duplicate_stderr_filters", "", OptionKind::kValue, kLaunch, kPet,
     "Copy stderr lines containing any of these strings to another file (as above)."},
    {"logs_specs", "", OptionKind::kValue, kLaunch, "",
     "torchrun.logs_specs entry-point name; accepted for compatibility, dtrun has no Python "
     "plugins and keeps its default log layout."},
    {"numa_binding", "", OptionKind::kValue, kLaunch, "",
     "Bind workers to the CPUs near their GPU: node, socket, exclusive or core-complex."},
    {"signals_to_handle", "", OptionKind::kValue, kLaunch, kPet,
     "Comma-separated signals forwarded to every worker group. (default: "
     "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2; torchrun's lacks SIGUSR1,SIGUSR2)"},
    {"shutdown_timeout", "", OptionKind::kValue, kLaunch, kPet,
     "Seconds between SIGTERM and SIGKILL when stopping workers. (default: "
     "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)"},
    {"virtual_local_rank", "", OptionKind::kFlag, kLaunch, kPet,
     "Give every worker LOCAL_RANK=0 and a CUDA_VISIBLE_DEVICES holding only its own GPU: "
     "entry LOCAL_RANK of the launcher's CUDA_VISIBLE_DEVICES when set (more workers than "
     "entries is an error), else LOCAL_RANK."},
    // Backwards compatible with caffe2.distributed.launch (static rendezvous).
    {"node_rank", "", OptionKind::kValue, kLegacy, kPet,
     "Rank of this node, 0 to N-1, with the static backend. (default: 0)"},
    {"master_addr", "", OptionKind::kValue, kLegacy, kPet,
     "Address of node rank 0 for the static backend: a host name or IP address; IPv6 as "
     "[0:0:0:0:0:0:0:1]. (default: 127.0.0.1)"},
    {"master_port", "", OptionKind::kValue, kLegacy, kPet,
     "Port on node rank 0 for the static backend. (default: 29500)"},
    // dtrun's own.
    {"python", "", OptionKind::kValue, kDtrun, "DTRUN_PYTHON",
     "Interpreter that runs the training script. (default: $DTRUN_PYTHON, else $PYTHON_EXEC, "
     "else python3 on PATH)",
     "PATH"},
    {"no_agent_store", "", OptionKind::kFlag, kDtrun, "DTRUN_NO_AGENT_STORE",
     "Let worker rank 0 host the store at MASTER_PORT, as torchrun 1.13, instead of dtrun's "
     "store (TORCHELASTIC_USE_AGENT_STORE=False). Also set by "
     "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1. [env DTRUN_NO_AGENT_STORE=1]"},
    {"event_log", "", OptionKind::kValue, kDtrun, "DTRUN_EVENT_LOG",
     "Append one JSON object per lifecycle event (rendezvous, worker start and exit, restart, "
     "shutdown) to FILE. [env DTRUN_EVENT_LOG]",
     "FILE"},
    {"log_line_prefix_template", "", OptionKind::kValue, kDtrun,
     "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
     "Prefix of teed console lines, with ${role_name}, ${rank}, ${local_rank}, ${host}, "
     "${node_rank}, ${restart}. (default: $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else "
     "[${role_name}${local_rank}]:)"},
    {"file_timer", "", OptionKind::kFlag, kDtrun, "DTRUN_FILE_TIMER",
     "Serve torch's file-timer watchdog: workers get TORCHELASTIC_TIMER_FILE (that variable's "
     "path, else a private FIFO) for FileTimerClient or dtrun_worker's TimerScope, and one that "
     "overstays a deadline is signalled (its process group), reported as hung, and counted "
     "against --max-restarts. Also on with TORCHELASTIC_ENABLE_FILE_TIMER=1, as torchrun. [env "
     "DTRUN_FILE_TIMER=1]"},
    {"stall_timeout", "", OptionKind::kValue, kDtrun, "DTRUN_STALL_TIMEOUT",
     "Treat this many seconds without output from any worker of the group (and without file "
     "timer requests) as a hang: the group is killed, reported as hung and restarted. (default: "
     "off) [env DTRUN_STALL_TIMEOUT]",
     "SECONDS"},
    {"dump_stacks", "", OptionKind::kFlag, kDtrun, "DTRUN_DUMP_STACKS",
     "Before killing a hung Python worker, ask it for every thread's stack (faulthandler, set up "
     "through a sitecustomize on PYTHONPATH that changes nothing else) and put them in the "
     "report. [env DTRUN_DUMP_STACKS=1]"},
    {"exit_barrier_timeout", "", OptionKind::kValue, kDtrun, "DTRUN_EXIT_BARRIER_TIMEOUT",
     "Seconds a node whose workers all succeeded waits for the other nodes' outcome after one "
     "of them stopped answering; it never runs its workers again. (default: 300, torch's exit "
     "barrier) [env DTRUN_EXIT_BARRIER_TIMEOUT]",
     "SECONDS"},
    {"prewarm", "", OptionKind::kValue, kDtrun, "DTRUN_PREWARM",
     "Keep one standby Python interpreter per local rank that has already imported these "
     "modules (e.g. torch), started while the rendezvous waits and again after every round's "
     "start, so that workers start without paying for the imports. The script still runs as "
     "`python -u script` would, with its round's environment and streams (docs/agent.md, "
     "\"Warm starts\"); the standbys' memory is reported. Python workers only. [env "
     "DTRUN_PREWARM]",
     "MODULE[,MODULE...]"},
    {"prewarm_timeout", "", OptionKind::kValue, kDtrun, "DTRUN_PREWARM_TIMEOUT",
     "Seconds a round's start waits for a standby still importing the --prewarm modules; past "
     "them prewarming is turned off and the workers start cold. (default: 60) [env "
     "DTRUN_PREWARM_TIMEOUT]",
     "SECONDS"},
    {"log_level", "", OptionKind::kValue, kDtrun, "DTRUN_LOG_LEVEL",
     "dtrun's own log level: trace, debug, info, warn, error, critical or off. (default: "
     "$DTRUN_LOG_LEVEL, else torch's $LOGLEVEL, else warn)"},
    {"worker_variables", "", OptionKind::kValue, kDtrun, "",
     "Which launcher's per-worker variables the workers get: torchrun (RANK, LOCAL_RANK, "
     "WORLD_SIZE, GROUP_RANK, TORCHELASTIC_* and the rest), deepspeed (torchrun's, and "
     "DeepSpeed's CROSS_RANK = the node's rank, CROSS_SIZE = the node count, LOCAL_SIZE = the "
     "node's worker count; no OMP_NUM_THREADS=1, which DeepSpeed does not set) or none (no "
     "per-worker variable at all: one process started with the "
     "launcher's environment, as accelerate's single-process launcher; --nproc-per-node 1 "
     "only). (default: torchrun)"},
    {"exit_code", "", OptionKind::kValue, kDtrun, "",
     "What a failed job exits with: torchrun (1) or worker (the exit code of the first worker "
     "that failed, 256-N when signal N ended it, as DeepSpeed's launcher). (default: torchrun)"},
    {"exit_codes", "", OptionKind::kValue, kDtrun, "DTRUN_EXIT_CODES",
     "How the exit code tells the outcome: torchrun (0 success, 1 any failure, 2 a bad command "
     "line) or detailed (also 3 the last failure was a hang, 4 the rendezvous never formed, 5 "
     "the store or etcd quorum was lost, 6 the job failed on another node, 128+N stopped by "
     "signal N; docs/observe.md). (default: torchrun) [env DTRUN_EXIT_CODES]",
     "SCHEME"},
    {"termination_log", "", OptionKind::kValue, kDtrun, "DTRUN_TERMINATION_LOG",
     "Write why the job ended (the outcome, the root cause, the summary line; at most 4096 "
     "bytes) to PATH, for Kubernetes' terminationMessagePath. (default: /dev/termination-log "
     "when it exists and is writable) [env DTRUN_TERMINATION_LOG]",
     "PATH", "",
     // Spelled out: --t and --te stay torchrun's abbreviations of --tee.
     false},
    {"metrics_port", "", OptionKind::kValue, kDtrun, "DTRUN_METRICS_PORT",
     "Serve Prometheus metrics on this port (/metrics, and /healthz for liveness probes); 0 "
     "picks a free port, named in the log, the event log and `dtrun status`. (default: off) "
     "[env DTRUN_METRICS_PORT]",
     "PORT"},
    {"metrics_host", "", OptionKind::kValue, kDtrun, "DTRUN_METRICS_HOST",
     "Address the metrics endpoint binds. (default: 0.0.0.0) [env DTRUN_METRICS_HOST]", "ADDR"},
    {"stop_on_stdin_close", "", OptionKind::kFlag, kDtrun, "",
     "Stop the job, as SIGTERM does, when standard input reaches its end. dtrun --hostfile gives "
     "it to every agent it starts over ssh, so that a launcher gone for any reason stops them.",
     "", "", false},
}};

}  // namespace

std::span<const OptionSpec> torchrunOptions() { return kOptions; }

}  // namespace dtrun::launcher
