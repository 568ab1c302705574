#include "common/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace dtrun {
namespace {

// PATH lookup in the parent (the child may not allocate): the first candidate that exists and is
// executable; "" when none is (spawnProcess then says the program is not found in PATH).
std::string findProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    auto colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? colon : colon - start);
    // Built by appending: GCC 12 reports a false -Wrestrict for `dir + "/" + name` at -O2.
    std::string candidate = dir.empty() ? std::string(".") : dir;
    candidate += '/';
    candidate += name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

// Closes every descriptor >= 3 but those in `keep` (sorted, all >= 3). Async-signal-safe:
// close_range(2) per gap, or a loop of close(2) on kernels older than 5.9.
void closeAllBut(const int* keep, std::size_t nkeep) {
  auto closeRange = [](int first, int last) {  // [first, last]
    if (first > last) return;
    if (::syscall(SYS_close_range, first, last, 0) == 0) return;
    rlimit lim{};
    const int max = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                        ? static_cast<int>(std::min<rlim_t>(lim.rlim_cur, 1 << 20))
                        : 65536;
    for (int fd = first; fd <= last && fd < max; ++fd) ::close(fd);
  };
  int next = 3;
  for (std::size_t i = 0; i < nkeep; ++i) {
    closeRange(next, keep[i] - 1);
    next = keep[i] + 1;
  }
  closeRange(next, ~0U >> 1);
}

// Where the child reports why it could not exec: a variable it shares with the parent (the
// vfork-style path) or the close-on-exec pipe (fork).
struct ChildReport {
  volatile int* shared = nullptr;
  int pipeFd = -1;
};

[[noreturn]] void childFail(const ChildReport& report, int err) {
  if (report.shared) {
    *report.shared = err;
  } else {
    while (::write(report.pipeFd, &err, sizeof(err)) < 0 && errno == EINTR) {
    }
  }
  ::_exit(127);
}

// What the child needs, all of it built by the parent (the child may not allocate).
struct ChildArgs {
  const SpawnSpec* spec;
  pid_t parent;
  const char* program;
  char* const* argv;
  char* const* envp;
  const std::vector<int>* keep;
  const std::vector<int>* spare;
  ChildReport report;
};

// The child's side, between fork (or clone) and exec: system calls only, nothing that allocates,
// takes a lock or writes memory the parent uses (with CLONE_VM it shares the parent's memory).
// `keep`: the user's descriptors; `spare`: those plus the error pipe, if any, sorted.
[[noreturn]] void child(const ChildArgs& a) {
  const SpawnSpec& spec = *a.spec;
  if (spec.ownProcessGroup && ::setpgid(0, 0) != 0) childFail(a.report, errno);
  if (spec.parentDeathSignal != 0) {
    if (::prctl(PR_SET_PDEATHSIG, spec.parentDeathSignal) != 0) childFail(a.report, errno);
    // The parent may have died before prctl: then nobody would ever send the signal.
    if (::getppid() != a.parent) ::_exit(128 + spec.parentDeathSignal);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  // Standard streams. A source that is itself 0..2 but not its own target is moved out of the
  // way first, so that one dup2 cannot overwrite another's source.
  int src[3] = {spec.stdinFd, spec.stdoutFd, spec.stderrFd};
  for (int t = 0; t < 3; ++t) {
    if (src[t] == kSpawnDevNull) {
      src[t] = ::open("/dev/null", t == 0 ? O_RDONLY : O_WRONLY);
      if (src[t] < 0) childFail(a.report, errno);
    }
    if (src[t] >= 0 && src[t] < 3 && src[t] != t) {
      src[t] = ::fcntl(src[t], F_DUPFD, 3);
      if (src[t] < 0) childFail(a.report, errno);
    }
  }
  for (int t = 0; t < 3; ++t) {
    if (src[t] < 0 || src[t] == t) continue;
    if (::dup2(src[t], t) < 0) childFail(a.report, errno);
  }
  if (spec.cwd.size() && ::chdir(spec.cwd.c_str()) != 0) childFail(a.report, errno);
  closeAllBut(a.spare->data(), a.spare->size());
  for (int fd : *a.keep) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
  }
  ::execve(a.program, a.argv, a.envp);
  childFail(a.report, errno);
}

int childEntry(void* args) { child(*static_cast<const ChildArgs*>(args)); }

// Under AddressSanitizer or ThreadSanitizer the child would run their interceptors (sigaction,
// open, ...) on runtime state it shares with the parent: those builds fork.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kShareMemory = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kShareMemory = false;
#else
constexpr bool kShareMemory = true;
#endif
#else
constexpr bool kShareMemory = true;
#endif

// The vfork-style start (docs/design.md, "Starting processes"): clone(CLONE_VM | CLONE_VFORK)
// copies no page tables and takes no copy-on-write faults, which fork does for every page the
// agent touches afterwards; the calling thread waits until the child has exec'd or died. Every
// signal is blocked around it, so no handler of the parent ever runs on the child's stack; the
// child resets the handlers and unblocks before exec. Returns the pid; `err` is the child's
// errno when it could not exec.
pid_t cloneAndExec(ChildArgs& args, volatile int* err) {
  constexpr std::size_t kStackBytes = 64 * 1024;
  void* stack = ::mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  args.report.shared = err;
  const pid_t pid = ::clone(childEntry, static_cast<char*>(stack) + kStackBytes,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int cloneErr = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStackBytes);
  errno = cloneErr;
  return pid;
}

// The child failed before or at exec and exits 127 at once: reap it, then say why.
[[noreturn]] void reapAndThrow(pid_t pid, const std::string& program, int err) {
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  throw SpawnError("cannot execute '" + program + "': " + std::strerror(err), err);
}

}  // namespace

int spawnProcess(const SpawnSpec& spec) {
  if (spec.argv.empty()) throw SpawnError("cannot start a process: empty command", ENOENT);
  const std::string program = findProgram(spec.argv[0]);
  if (program.empty()) {
    throw SpawnError("'" + spec.argv[0] + "' not found in PATH", ENOENT);
  }
  // Everything the child needs is built before it starts: the child may not allocate.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (spec.env) {
    for (const auto& e : *spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  std::vector<int> keep = spec.keepFds;
  std::sort(keep.begin(), keep.end());
  keep.erase(std::remove_if(keep.begin(), keep.end(), [](int fd) { return fd < 3; }), keep.end());
  ChildArgs args{
      &spec, ::getpid(), program.c_str(), argv.data(), spec.env ? envp.data() : environ, &keep,
      &keep, {}};

  if (kShareMemory) {
    volatile int err = 0;
    const pid_t pid = cloneAndExec(args, &err);
    if (pid < 0) {
      throw Error(std::string("cannot start ") + spec.argv[0] + ": clone: " + std::strerror(errno));
    }
    if (err != 0) reapAndThrow(pid, program, err);
    return pid;
  }

  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) {
    throw Error(std::string("cannot start ") + spec.argv[0] + ": pipe: " + std::strerror(errno));
  }
  std::vector<int> spare = keep;
  spare.insert(std::upper_bound(spare.begin(), spare.end(), pipeFds[1]), pipeFds[1]);
  args.spare = &spare;
  args.report.pipeFd = pipeFds[1];
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(pipeFds[0]);
    ::close(pipeFds[1]);
    throw Error(std::string("cannot start ") + spec.argv[0] + ": fork: " + std::strerror(err));
  }
  if (pid == 0) {
    ::close(pipeFds[0]);
    child(args);
  }
  ::close(pipeFds[1]);
  int err = 0;
  ssize_t n;
  while ((n = ::read(pipeFds[0], &err, sizeof(err))) < 0 && errno == EINTR) {
  }
  ::close(pipeFds[0]);
  if (n == 0) return pid;  // the pipe closed on exec: the program runs
  reapAndThrow(pid, program, n == static_cast<ssize_t>(sizeof(err)) ? err : EIO);
}

std::vector<int> inheritedDescriptors() {
  std::vector<int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  const int own = ::dirfd(dir);
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || end == e->d_name || fd < 3 || fd == own) continue;
    int flags = ::fcntl(static_cast<int>(fd), F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) out.push_back(static_cast<int>(fd));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace dtrun
