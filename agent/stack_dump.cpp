#include "agent/stack_dump.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "agent/process_tree.h"
#include "common/error.h"
#include "common/file_util.h"

namespace dtrun::agent {

namespace {

// How often the dump files are looked at while a collection runs (a few times per dump).
constexpr std::chrono::milliseconds kCheckEvery(20);
// A dump larger than this is cut (thousands of threads); the report is for people.
constexpr std::size_t kMaxDumpBytes = 256 * 1024;

// Runs at interpreter start (site.py imports sitecustomize). It must never make a worker fail
// or behave differently: every step is guarded, and the shadowed sitecustomize runs last, so
// its errors surface as Python reports them anyway ("Error in sitecustomize").
constexpr const char* kSiteCustomize =
    R"PY(# Written by dtrun (--dump-stacks): arms faulthandler so that dtrun can ask a hung worker
# for its Python stacks, then runs the sitecustomize this file shadows. Safe to delete.
def _dtrun_arm_stacks():
    import os
    folder = os.environ.get("DTRUN_STACK_DUMP_DIR")
    signum = os.environ.get("DTRUN_STACK_DUMP_SIGNAL")
    if not folder or not signum:
        return
    try:
        import faulthandler
        signum = int(signum)

        def arm():
            # faulthandler keeps the file object alive; one file per process.
            dump = open(os.path.join(folder, "%d.txt" % os.getpid()), "w")
            faulthandler.register(signum, file=dump, all_threads=True, chain=False)

        def rearm():
            try:
                arm()
            except Exception:
                pass

        arm()
        os.register_at_fork(after_in_child=rearm)
    except Exception:
        pass


def _dtrun_chain_sitecustomize():
    import importlib.machinery
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_dtrun_arm_stacks()
_dtrun_chain_sitecustomize()
)PY";

std::string dumpPath(const std::string& dir, int pid) {
  return dir + "/" + std::to_string(pid) + ".txt";
}

off_t fileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

}  // namespace

bool catchesSignal(int pid, int signo) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return signo >= 1 && signo <= 64 && ((mask >> (signo - 1)) & 1ULL) != 0;
  }
  return false;
}

struct StackDump::Pending {
  struct Target {
    int pid;
    std::string file;
    off_t start = 0;  // the file's size before this request: earlier dumps stay before it
    off_t lastSize = -1;
    bool settled = false;
  };
  std::vector<Target> targets;
  std::chrono::steady_clock::time_point deadline;
  std::function<void(std::string)> done;
};

StackDump::StackDump(boost::asio::io_context& io) : io_(io), signal_(SIGRTMIN + 6), timer_(io) {
  dir_ = makePrivateTempDir("dtrun-stacks", "hang stacks");
  writeWholeFile(dir_ + "/sitecustomize.py", kSiteCustomize, 0600, "the stack-dump hook");
}

StackDump::~StackDump() {
  timer_.cancel();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void StackDump::addTo(std::map<std::string, std::string>& env) const {
  auto& path = env["PYTHONPATH"];
  path = path.empty() ? dir_ : dir_ + ":" + path;
  env["DTRUN_STACK_DUMP_DIR"] = dir_;
  env["DTRUN_STACK_DUMP_SIGNAL"] = std::to_string(signal_);
}

void StackDump::collect(std::vector<int> pids, std::chrono::milliseconds bound,
                        std::function<void(std::string)> done) {
  auto p = std::make_shared<Pending>();
  p->done = std::move(done);
  if (collecting_) {
    boost::asio::post(io_, [p] { p->done(""); });
    return;
  }
  for (int pid : pids) {
    if (pid <= 0 || !catchesSignal(pid, signal_)) continue;
    const std::string file = dumpPath(dir_, pid);
    const off_t start = fileSize(file);
    if (start < 0) continue;  // armed by something else than our sitecustomize
    if (::kill(pid, signal_) != 0) continue;
    p->targets.push_back({pid, file, start});
  }
  if (p->targets.empty()) {
    boost::asio::post(io_, [p] { p->done(""); });
    return;
  }
  collecting_ = true;
  p->deadline = std::chrono::steady_clock::now() + bound;
  timer_.expires_after(kCheckEvery);
  timer_.async_wait([this, p](boost::system::error_code ec) {
    if (!ec) check(p);
  });
}

void StackDump::check(std::shared_ptr<Pending> p) {
  bool all = true;
  for (auto& t : p->targets) {
    if (t.settled) continue;
    const off_t size = fileSize(t.file);
    // faulthandler writes a dump in many small writes: done when it stopped growing.
    t.settled = size > t.start && size == t.lastSize;
    t.lastSize = size;
    all = all && t.settled;
  }
  if (!all && std::chrono::steady_clock::now() < p->deadline) {
    timer_.expires_after(kCheckEvery);
    timer_.async_wait([this, p](boost::system::error_code ec) {
      if (!ec) check(p);
    });
    return;
  }
  collecting_ = false;
  std::string text;
  for (const auto& t : p->targets) {
    std::ifstream in(t.file, std::ios::binary);
    in.seekg(t.start);
    std::string dump(kMaxDumpBytes, '\0');
    in.read(dump.data(), static_cast<std::streamsize>(dump.size()));
    dump.resize(static_cast<std::size_t>(in.gcount()));
    if (dump.empty()) continue;
    if (!text.empty()) text += "\n";
    text += "Python stacks of pid " + std::to_string(t.pid) + ":\n" + dump;
    if (text.back() == '\n') text.pop_back();
  }
  p->done(text);
}

void StackDump::prune() {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.compare(name.size() - 4, 4, ".txt") != 0) continue;
    const int pid = std::atoi(name.c_str());
    if (pid > 0 && !readProcStat(pid)) ::unlink((dir_ + "/" + name).c_str());
  }
  ::closedir(d);
}

}  // namespace dtrun::agent
