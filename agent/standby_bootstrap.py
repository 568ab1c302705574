# Written by dtrun (--prewarm) as sitecustomize.py into a private directory that only its
# standby interpreters find first on their PYTHONPATH. Safe to delete.
#
# A standby is a fresh interpreter started with the worker's own command line
# (python -u script args, or -m module), so that once this hook returns, Python itself runs the
# script exactly as in a cold start: __main__, sys.argv, sys.path[0], tracebacks and exit codes
# are Python's own. Before returning, the hook
#   1. imports the modules dtrun was asked to import ahead (DTRUN_STANDBY_MODULES), with the
#      standby's environment: every variable of the worker's that is the same in every round;
#      those that change from round to round (DTRUN_STANDBY_ROUND_VARS) are not set yet;
#   2. checks that the result can safely become a worker (no Python thread, no GPU device open,
#      no per-round variable read, the -m module not imported) and says "ready" (or why not)
#      on the control socket dtrun gave it (DTRUN_STANDBY_FD);
#   3. waits there for its round: the round's whole environment (a memfd) and its standard
#      streams arrive as descriptors; they replace os.environ and the C environment, and fds
#      0, 1 and 2; what the imports printed meanwhile is written to the new streams;
#   4. runs the sitecustomize this file shadows, as Python would have at start-up, and returns.
# Any failure before the hand-over ends the standby (os._exit), never the script's run with a
# standby's environment; a standby that can no longer become the worker safely at hand-over
# replaces itself with a cold start (exec of the same command line and environment).
# Only builtin modules are used, so that the worker's sys.modules holds nothing of this hook's
# beyond _socket.


def _dtrun_chain_sitecustomize(here):
    # The sitecustomize this file shadows (the stack-dump hook's, the user's, the distribution's),
    # found and run the way site.py would have.
    import sys

    machinery = sys.modules["_frozen_importlib_external"]
    bootstrap = sys.modules["_frozen_importlib"]
    path = [p for p in sys.path if _dtrun_abspath(p) != here]
    spec = machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = bootstrap.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _dtrun_abspath(p):
    import os

    return os.path.abspath(p or os.curdir)


def _dtrun_send(sock, text):
    try:
        sock.send(text.encode("utf-8", "replace")[:4000])
    except OSError:
        pass


def _dtrun_gpu_files():
    import os

    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if target.startswith(("/dev/nvidia", "/dev/dri/")) or target == "/dev/kfd":
            found.append(target)
    return sorted(set(found))


def _dtrun_unfit(main_module, reads):
    # Why this interpreter must not become a worker, or "" when it may.
    import os
    import sys

    threads = len(sys._current_frames()) - 1
    if threads > 0:
        return "the imports started %d Python thread(s), which would run on with the standby's " \
               "state" % threads
    gpu = _dtrun_gpu_files()
    cuda = sys.modules.get("torch.cuda")
    if gpu or (cuda is not None and getattr(cuda, "is_initialized", lambda: False)()):
        return "the imports initialised a GPU (%s): a standby must not hold the device of the " \
               "running round's worker" % (", ".join(gpu) or "torch.cuda")
    if reads:
        return "the imports read %s, which no round has set yet" % ", ".join(sorted(set(reads)))
    if main_module and main_module in sys.modules:
        return "the imports imported %s, which -m runs as __main__" % main_module
    return ""


def _dtrun_path0(main_module):
    # What Python puts first on sys.path once site is done: the script's directory, or the
    # working directory for -m (nothing with -P). The imports see it as the script would.
    import os
    import sys

    if getattr(sys.flags, "safe_path", False):
        return None
    if main_module:
        return os.getcwd()
    return os.path.dirname(os.path.realpath(sys.argv[0]))


def _dtrun_import(modules, main_module, round_vars):
    import os
    import sys

    environ_type = type(os.environ)
    watched = frozenset(v for v in round_vars.split(",") if v)
    reads = []

    class _Watch(environ_type):
        def __getitem__(self, key):
            if key in watched:
                reads.append(key)
            return environ_type.__getitem__(self, key)

    path0 = _dtrun_path0(main_module)
    if path0 is not None:
        sys.path.insert(0, path0)
    os.environ.__class__ = _Watch
    try:
        for name in modules:
            __import__(name)
    finally:
        os.environ.__class__ = environ_type
        if path0 is not None and sys.path and sys.path[0] == path0:
            del sys.path[0]
    return reads


def _dtrun_drain(fd):
    import os

    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _dtrun_captured(fd):
    # What the imports wrote on one stream: the capture pipe's read end, drained, or the memfd
    # that stood in for a log file, read from its start.
    import os
    import stat

    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        return os.pread(fd, st.st_size, 0)
    return _dtrun_drain(fd)


def _dtrun_write_all(fd, data):
    import os

    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return
        data = data[n:]


def _dtrun_receive(sock):
    # One hand-over packet: b"H" and one role letter per descriptor sent along (0, 1, 2: the
    # streams; e: the environment; o, r: the capture pipes of stdout and stderr).
    import _socket
    import sys

    msg, ancdata, _, _ = sock.recvmsg(256, _socket.CMSG_SPACE(16 * 4))
    fds = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += [int.from_bytes(data[i:i + 4], sys.byteorder) for i in range(0, usable, 4)]
    if not msg.startswith(b"H") or len(msg) - 1 != len(fds):
        return None
    return dict(zip(msg[1:].decode("ascii"), fds))


def _dtrun_read_environment(fd):
    import os

    data = os.pread(fd, os.fstat(fd).st_size, 0)
    env = []
    for entry in data.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            env.append((os.fsdecode(key), os.fsdecode(value)))
    return env


def _dtrun_startup_changes():
    # What the interpreter's own start-up changed in its environment (PEP 538's LC_CTYPE
    # coercion): the kernel's copy of the exec-time environment against os.environ.
    import os

    with open("/proc/self/environ", "rb") as f:
        given = dict(e.partition(b"=")[::2] for e in f.read().split(b"\0") if b"=" in e)
    changes = {}
    for key, value in os.environb.items():
        if not key.startswith(b"DTRUN_STANDBY_") and given.get(key) != value:
            changes[os.fsdecode(key)] = (None if key not in given else os.fsdecode(given[key]),
                                         os.fsdecode(value))
    return changes


def _dtrun_as_started(env, changes):
    # The round's environment as a cold interpreter would hold it after its start-up: the same
    # change where it started from the same value.
    env = dict(env)
    for key, (before, after) in changes.items():
        if env.get(key) == before:
            env[key] = after
    return list(env.items())


def _dtrun_replace_environment(env):
    # os.environ and the C environment (putenv/unsetenv through os.environ), and posix.environ,
    # the start-up copy, so that no view of the environment keeps the standby's.
    import os
    import posix

    os.environ.clear()
    for key, value in env:
        os.environ[key] = value
    posix.environ.clear()
    posix.environ.update((os.fsencode(k), os.fsencode(v)) for k, v in env)


def _dtrun_cold(sock, env, keep, why):
    # The round's worker cannot be this interpreter after all: become a cold start of the same
    # command line, in the same process (pid, process group, parent-death signal and streams
    # stay), with exec's clean slate for signals and descriptors, as dtrun's spawn gives it.
    import _signal
    import os
    import sys

    _dtrun_send(sock, "F " + why)
    sock.close()
    for signo in range(1, _signal.NSIG):
        try:
            if _signal.getsignal(signo) == _signal.SIG_IGN:
                _signal.signal(signo, _signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    for fd in keep:
        os.set_inheritable(fd, True)
    with open("/proc/self/cmdline", "rb") as f:  # the command line exactly as exec'd
        argv = f.read().split(b"\0")[:-1]
    try:
        os.execve(sys.executable, argv, dict(env))
    except OSError as e:
        _dtrun_write_all(2, ("cannot execute '%s': %s\n" % (sys.executable, e)).encode())
    os._exit(127)


def _dtrun_standby(here):
    import _socket
    import os
    import sys

    changes = _dtrun_startup_changes()
    env = os.environ
    fd = int(env.pop("DTRUN_STANDBY_FD"))
    probe = env.pop("DTRUN_STANDBY_PROBE", None)
    modules = [m for m in env.pop("DTRUN_STANDBY_MODULES", "").split(",") if m]
    round_vars = env.pop("DTRUN_STANDBY_ROUND_VARS", "")
    main_module = env.pop("DTRUN_STANDBY_MAIN_MODULE", "")
    keep = {int(k) for k in env.pop("DTRUN_STANDBY_KEEP_FDS", "").split(",") if k}
    pythonpath = env.pop("DTRUN_STANDBY_PYTHONPATH", None)
    if pythonpath is None:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = pythonpath
    sys.path[:] = [p for p in sys.path if _dtrun_abspath(p) != here]
    sys.path_importer_cache.pop(here, None)
    sock = _socket.socket(fileno=fd)
    if probe is not None:
        _dtrun_send(sock, "P")
        os._exit(0)

    try:
        reads = _dtrun_import(modules, main_module, round_vars)
    except BaseException as e:  # the import's own traceback goes to the captured stderr
        sys.excepthook(type(e), e, e.__traceback__)
        _dtrun_send(sock, "E importing %s failed: %s: %s" % (",".join(modules),
                                                            type(e).__name__, e))
        os._exit(1)
    why = _dtrun_unfit(main_module, reads)
    if why:
        _dtrun_send(sock, "U " + why)
        os._exit(3)
    tasks = len(os.listdir("/proc/self/task"))
    _dtrun_send(sock, "R %d" % (tasks - 1))

    handover = _dtrun_receive(sock)
    if handover is None:  # dtrun closed the socket: this standby is not needed any more
        os._exit(0)
    new_env = _dtrun_as_started(_dtrun_read_environment(handover["e"]), changes)
    try:
        for target, role in ((0, "0"), (1, "1"), (2, "2")):
            if role in handover:  # absent: the agent has none, and the worker keeps this one
                os.dup2(handover[role], target)
        captured = {1: _dtrun_captured(handover["o"]) if "o" in handover else b"",
                    2: _dtrun_captured(handover["r"]) if "r" in handover else b""}
        for passed in handover.values():
            if passed > 2:
                os.close(passed)
        for target, data in captured.items():
            _dtrun_write_all(target, data)
        why = _dtrun_unfit(main_module, [])
        if not why:
            _dtrun_replace_environment(new_env)
    except Exception as e:
        why = "the hand-over failed: %s: %s" % (type(e).__name__, e)
    if why:
        _dtrun_cold(sock, new_env, keep, why)
    sock.close()


def _dtrun_main():
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    if "DTRUN_STANDBY_FD" in os.environ:
        try:
            _dtrun_standby(here)
        except BaseException as e:  # never the script with a standby's environment
            try:
                import sys

                sys.excepthook(type(e), e, e.__traceback__)
            finally:
                os._exit(1)
    _dtrun_chain_sitecustomize(here)


_dtrun_main()
