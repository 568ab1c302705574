// e2e_worker: the worker the end-to-end tests give dtrun. It runs the steps named on its command
// line, in order, and writes what it sees into $E2E_DIR so the test can check it afterwards:
//
//   e2e_worker pid env rank1,restart0:exit=3 sleep
//
// A step is [CONDITIONS:]ACTION[=VALUE]. CONDITIONS is a comma list of rankN (global rank),
// lrN (local rank) and restartN (TORCHELASTIC_RESTART_COUNT); the step runs only when all hold.
// Files are named <what>.<restart>.<local rank> in $E2E_DIR:
//
//   pid            pid.R.L      "<pid> <pgid> <sid>"
//   env            env.R.L      the whole environment, one NUL-terminated KEY=VALUE each
//   args           args.R.L     every command-line argument, one NUL-terminated each
//   fds            fds.R.L      the descriptors open at start, ascending, one per line
//   connect        connect.R.L  "ok", or "fail <errno text>": a TCP connect to MASTER_ADDR:PORT
//   child          child.R.L    pid of a forked child that stays in the worker's process group
//   daemon         daemon.R.L   pid of a grandchild that left the group (fork, setsid, fork)
//   trap=SIG       sig.R.L      the handler appends "<signo>\n"; the worker carries on
//   onsig=SIG      sig.R.L      the handler appends "<signo>\n", then dies by that signal
//   ignore=SIG                  SIG_IGN
//   mark=NAME      NAME.R.L     an empty file
//   stamp=NAME     NAME.R.L     the wall clock now, in nanoseconds since the epoch
//   wait=NAME                   blocks until $E2E_DIR/NAME exists
//   sleep                       blocks until a signal ends the process
//   exit=N                      exit(N)
//   raise=SIG                   dies by SIG (default disposition, no core file)
//   errorfile=MSG               writes torch's @record error file ($TORCHELASTIC_ERROR_FILE)
//   out=TEXT, err=TEXT          one line on stdout / stderr
//   lines=N                     N long numbered lines on stdout ("<rank>:<i>:xxx...")
//
// Arguments that start with '-' are not steps and are skipped (tests pass torchrun-looking
// options after the script to see them arrive untouched).
// SIG is a number or a name without SIG (TERM, USR1). Every process this program makes dies by
// SIGALRM after kSelfDestructSeconds, so a test that fails cannot leave processes behind for
// long; blocking steps give up after the same time.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr unsigned kSelfDestructSeconds = 120;

// The descriptors open when the worker started (the `fds` step), one per line.
std::string gOpenFds;

// Lists /proc/self/fd without the descriptor the listing itself uses.
std::string listOpenDescriptors() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return "";
  const int own = ::dirfd(dir);
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  std::string out;
  for (int fd : fds) out += std::to_string(fd) + "\n";
  return out;
}

// The signal handlers' file (sig.R.L), opened before any handler is installed.
int gSigFd = -1;

std::string env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string dir() { return env("E2E_DIR", "."); }
std::string restart() { return env("TORCHELASTIC_RESTART_COUNT", "0"); }
std::string localRank() { return env("LOCAL_RANK", "0"); }
std::string rank() { return env("RANK", "0"); }
std::string fileFor(const std::string& what) {
  return dir() + "/" + what + "." + restart() + "." + localRank();
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "e2e_worker: %s\n", why.c_str());
  std::exit(99);
}

// Written to a temporary name and renamed, so a test polling for the file never reads half.
void writeFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) die("cannot write " + tmp + ": " + std::strerror(errno));
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) die("cannot rename to " + path);
}

int parseSignal(const std::string& s) {
  if (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) return std::stoi(s);
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev && s == abbrev) return sig;
  }
  die("unknown signal " + s);
}

// Async-signal-safe: formats the number by hand and writes it with one write(2).
void recordSignal(int signo) {
  char buf[16];
  int n = 0;
  char digits[8];
  int d = 0;
  for (int v = signo; v > 0 && d < 8; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
  while (d > 0) buf[n++] = digits[--d];
  buf[n++] = '\n';
  if (gSigFd >= 0) {
    ssize_t ignored = ::write(gSigFd, buf, static_cast<std::size_t>(n));
    (void)ignored;
  }
}

void onTrap(int signo) { recordSignal(signo); }

void onFatal(int signo) {
  recordSignal(signo);
  ::signal(signo, SIG_DFL);
  ::raise(signo);
}

void openSigFile() {
  if (gSigFd >= 0) return;
  gSigFd = ::open(fileFor("sig").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (gSigFd < 0) die("cannot open " + fileFor("sig"));
}

void install(int signo, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking step sees EINTR and simply goes on
  if (::sigaction(signo, &sa, nullptr) != 0) die("sigaction failed");
}

// Sleeps in small steps until `done()` or the self-destruct time; signals interrupt the sleep
// and are handled (or end the process) as their disposition says.
template <typename Done>
void block(Done done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kSelfDestructSeconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) die("gave up waiting");
    timespec ts{0, 5'000'000};
    ::nanosleep(&ts, nullptr);
  }
}

// A process that only waits to be killed (or for its self-destruct alarm).
[[noreturn]] void idleForever() {
  ::alarm(kSelfDestructSeconds);
  for (;;) ::pause();
}

void doConnect() {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string host = env("MASTER_ADDR"), port = env("MASTER_PORT");
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    writeFile(fileFor("connect"), std::string("fail ") + ::gai_strerror(rc));
    return;
  }
  std::string result = "fail no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      result = "ok";
      ::close(fd);
      break;
    }
    result = std::string("fail ") + std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  writeFile(fileFor("connect"), result);
}

void doChild() {
  pid_t pid = ::fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) idleForever();
  writeFile(fileFor("child"), std::to_string(pid));
}

void doDaemon() {
  int fds[2];
  if (::pipe(fds) != 0) die("pipe failed");
  pid_t mid = ::fork();
  if (mid < 0) die("fork failed");
  if (mid == 0) {
    ::close(fds[0]);
    ::setsid();
    pid_t leaf = ::fork();
    if (leaf == 0) {
      ::close(fds[1]);
      idleForever();
    }
    ssize_t ignored = ::write(fds[1], &leaf, sizeof(leaf));
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t leaf = 0;
  if (::read(fds[0], &leaf, sizeof(leaf)) != static_cast<ssize_t>(sizeof(leaf))) {
    die("daemon did not start");
  }
  ::close(fds[0]);
  ::waitpid(mid, nullptr, 0);
  writeFile(fileFor("daemon"), std::to_string(leaf));
}

void doErrorFile(const std::string& msg) {
  std::string path = env("TORCHELASTIC_ERROR_FILE");
  if (path.empty()) die("TORCHELASTIC_ERROR_FILE is not set");
  std::string ts = std::to_string(static_cast<long long>(std::time(nullptr)));
  // torch's @record format (errors/error_handler.py); the message has no characters JSON would
  // escape.
  std::string json = "{\"message\": {\"message\": \"RuntimeError: " + msg +
                     "\", \"extraInfo\": {\"py_callstack\": \"Traceback (most recent call "
                     "last):\\n  File \\\"e2e_worker\\\", line 1, in <module>\\nRuntimeError: " +
                     msg + "\", \"timestamp\": \"" + ts + "\"}}}";
  writeFile(path, json);
}

void doLines(int n) {
  std::string pad(180, 'x');
  for (int i = 0; i < n; ++i) std::printf("%s:%d:%s\n", rank().c_str(), i, pad.c_str());
  std::fflush(stdout);
}

bool conditionsHold(const std::string& conds) {
  std::size_t start = 0;
  while (start < conds.size()) {
    std::size_t comma = conds.find(',', start);
    std::string c =
        conds.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto is = [&](const char* prefix, const std::string& actual) {
      std::size_t n = std::strlen(prefix);
      return c.compare(0, n, prefix) == 0 ? std::optional<bool>(c.substr(n) == actual)
                                          : std::nullopt;
    };
    std::optional<bool> r = is("restart", restart());
    if (!r) r = is("rank", rank());
    if (!r) r = is("lr", localRank());
    if (!r) die("unknown condition " + c);
    if (!*r) return false;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

void runStep(const std::string& action, const std::string& value, int argc, char** argv) {
  if (action == "pid") {
    writeFile(fileFor("pid"), std::to_string(::getpid()) + " " + std::to_string(::getpgrp()) + " " +
                                  std::to_string(::getsid(0)));
  } else if (action == "env") {
    std::string all;
    for (char** e = environ; *e; ++e) all += std::string(*e) + '\0';
    writeFile(fileFor("env"), all);
  } else if (action == "fds") {
    writeFile(fileFor("fds"), gOpenFds);
  } else if (action == "args") {
    std::string all;
    for (int i = 1; i < argc; ++i) all += std::string(argv[i]) + '\0';
    writeFile(fileFor("args"), all);
  } else if (action == "connect") {
    doConnect();
  } else if (action == "child") {
    doChild();
  } else if (action == "daemon") {
    doDaemon();
  } else if (action == "trap") {
    openSigFile();
    install(parseSignal(value), onTrap);
  } else if (action == "onsig") {
    openSigFile();
    install(parseSignal(value), onFatal);
  } else if (action == "ignore") {
    ::signal(parseSignal(value), SIG_IGN);
  } else if (action == "stamp") {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    writeFile(fileFor(value),
              std::to_string(static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec));
  } else if (action == "mark") {
    writeFile(fileFor(value), "");
  } else if (action == "wait") {
    std::string path = dir() + "/" + value;
    block([&] { return ::access(path.c_str(), F_OK) == 0; });
  } else if (action == "sleep") {
    block([] { return false; });
  } else if (action == "exit") {
    std::fflush(nullptr);
    std::exit(std::stoi(value));
  } else if (action == "raise") {
    int sig = parseSignal(value);
    std::fflush(nullptr);
    ::signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(sig);
    die("still alive after raise(" + value + ")");
  } else if (action == "errorfile") {
    doErrorFile(value);
  } else if (action == "out") {
    std::printf("%s\n", value.c_str());
    std::fflush(stdout);
  } else if (action == "err") {
    std::fprintf(stderr, "%s\n", value.c_str());
    std::fflush(stderr);
  } else if (action == "lines") {
    doLines(std::stoi(value));
  } else {
    die("unknown step " + action);
  }
}

}  // namespace

int main(int argc, char** argv) {
  gOpenFds = listOpenDescriptors();
  ::alarm(kSelfDestructSeconds);
  // Deaths by SIGQUIT, SIGSEGV and the like must not leave core files in the test's directory.
  rlimit noCore{0, 0};
  ::setrlimit(RLIMIT_CORE, &noCore);
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    if (step.empty() || step[0] == '-') continue;
    std::string conds;
    // Conditions end at the first ':' that comes before any '='.
    auto colon = step.find(':');
    auto eq = step.find('=');
    if (colon != std::string::npos && (eq == std::string::npos || colon < eq)) {
      conds = step.substr(0, colon);
      step = step.substr(colon + 1);
      eq = step.find('=');
    }
    if (!conditionsHold(conds)) continue;
    std::string action = step.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : step.substr(eq + 1);
    runStep(action, value, argc, argv);
  }
  return 0;
}
