"""The training-script stand-in of prewarm_test.py: imports torch first, as training scripts do,
then one of these modes.

usage: prewarm_worker.py MODE [ARG]
  fields OUT   writes what the script can see of its process (environment, C environment,
               argv, sys.path, cwd, streams, process group, signals, descriptors, ...) to
               OUT/fields-<round>-<rank>.json, prints one line on each stream, exits 3
  restarts N   prints "round R", exits 1 until round N, where it exits 0
  wait FIFO    round 0: blocks until FIFO is written to, then exits 1; later rounds exit 0
  raise        raises ValueError under torch's @record (an error file for the report)
  block FIFO   blocks until FIFO is written to (never, in the tests that use it)
"""
import sys

TORCH_AT_START = "torch" in sys.modules  # before the script's own import: was it preloaded?

import os  # noqa: E402

import torch  # noqa: E402,F401  (what --prewarm torch imports ahead)

MODE = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else None
ROUND = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
RANK = int(os.environ["RANK"])
print(f"rank {RANK} round {ROUND} imported", flush=True)


def c_environ():
    import ctypes
    libc = ctypes.CDLL(None)
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    out, i = {}, 0
    while env[i]:
        key, _, value = env[i].decode().partition("=")
        out[key] = value
        i += 1
    return out


def stream(f, fd):
    import stat
    st = os.fstat(fd)
    import fcntl
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    return {"kind": stat.S_IFMT(st.st_mode), "flags": flags & (os.O_ACCMODE | os.O_APPEND),
            "seekable": f.seekable(), "isatty": f.isatty(), "encoding": f.encoding,
            "errors": f.errors, "line_buffering": f.line_buffering,
            "write_through": getattr(f, "write_through", None), "mode": f.mode,
            "buffer": type(f.buffer).__name__, "name": f.name}


def fields():
    import ctypes
    import resource
    import signal
    main = sys.modules["__main__"]
    libc = ctypes.CDLL(None, use_errno=True)
    sig = ctypes.c_int(0)
    libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
                  if ":\t" in line)
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            fds.append((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:
            pass  # the listing's own descriptor, closed by now
    parent = os.getppid()
    return {
        "environ": dict(os.environ),
        "c_environ": c_environ(),
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "executable": sys.executable,
        "flags": repr(sys.flags),
        "path": sys.path,
        "cwd": os.getcwd(),
        "main": {"name": main.__name__, "file": main.__file__, "spec": repr(main.__spec__),
                 "loader": type(main.__loader__).__name__, "package": repr(main.__package__)},
        "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
        "torch_preloaded": None,  # filled in below
        "streams": {"stdin": stream(sys.stdin, 0), "stdout": stream(sys.stdout, 1),
                    "stderr": stream(sys.stderr, 2)},
        "fds": sorted((fd, target) for fd, target in fds if not target.startswith("anon_inode")),
        "pgid_is_pid": os.getpgrp() == os.getpid(),
        "sid": os.getsid(0) == os.getsid(parent),
        "parent_exe": os.path.basename(os.readlink(f"/proc/{parent}/exe")),
        "pdeathsig": sig.value,
        "signals": {s.name: repr(signal.getsignal(s)) for s in signal.Signals
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "sig_masks": {k: status[k] for k in ("SigBlk", "SigIgn", "SigCgt")},
        "umask": os.umask(os.umask(0)),
        "nice": os.nice(0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource)
                    if n.startswith("RLIMIT_")},
        "threads": len(os.listdir("/proc/self/task")),
    }


if MODE == "fields":
    import json
    out = fields()
    out["torch_preloaded"] = TORCH_AT_START
    path = os.path.join(ARG, f"fields-{ROUND}-{RANK}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    os.rename(path + ".tmp", path)  # whole or absent, never half written
    # The first exit 3 stops the group: wait (bounded) until every rank has written its file, so
    # that a slower rank is not stopped before it did.
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(ARG, f"fields-{ROUND}-{r}.json"))
            for r in range(int(os.environ["WORLD_SIZE"]))):
        time.sleep(0.01)
    print(f"rank {RANK} stdout line", flush=True)
    print(f"rank {RANK} stderr line", file=sys.stderr, flush=True)
    sys.exit(3)
elif MODE == "restarts":
    print(f"round {ROUND}", flush=True)
    sys.exit(0 if ROUND >= int(ARG) else 1)
elif MODE == "wait":
    if ROUND == 0:
        with open(ARG) as f:
            f.read()
        sys.exit(1)
    print(f"rank {RANK} round {ROUND} done", flush=True)
elif MODE == "raise":
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        raise ValueError(f"boom in round {ROUND}")

    main()
elif MODE == "block":
    with open(ARG) as f:
        f.read()
else:
    sys.exit(f"unknown mode {MODE}")
