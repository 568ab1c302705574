#include "launcher/child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rendezvous/error.h"

extern char** environ;

namespace dtrun::launcher {

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ChildPipes startWithPipes(const std::vector<std::string>& argv) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw Error(std::string("pipe2 failed: ") + std::strerror(errno));
  }
  UniqueFd childIn(in[0]), childOut(out[1]), childErr(err[1]);
  ChildPipes c;
  c.stdinWrite = UniqueFd(in[1]);
  c.stdoutRead = UniqueFd(out[0]);
  c.stderrRead = UniqueFd(err[0]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, childIn.get(), 0);
  posix_spawn_file_actions_adddup2(&fa, childOut.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, childErr.get(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw Error("cannot start " + argv[0] + ": " + std::strerror(rc));
  c.pid = pid;
  return c;
}

}  // namespace dtrun::launcher
