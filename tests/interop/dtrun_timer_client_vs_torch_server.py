#!/usr/bin/python3
"""dtrun_worker's timer client (worker_probe timer: the C++ TimerScope and the C API) against
torch's own FileTimerServer (Debian's torch 1.13), as torchrun runs it: a native worker that
overstays its deadline is killed with SIGKILL by torch's server; one that finishes inside it is
never touched; torch's server parses every request the client sends (no error logged).

usage: dtrun_timer_client_vs_torch_server.py --probe BUILD/bin/worker_probe
Exit status: 0 pass, 1 fail, 77 skipped (torch not importable by this interpreter).
"""

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from dtrun_testing import Checks  # noqa: E402
from interop_util import require_torch_timer  # noqa: E402


class Errors(logging.Handler):
    """Collects the server's error records (a request it could not parse shows up here)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    args = parser.parse_args()
    FileTimerServer = require_torch_timer().FileTimerServer
    errors = Errors()
    logging.getLogger().addHandler(errors)
    c = Checks(collect=True)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "watchdog_timer")
        events = []
        # torchrun's settings (local_elastic_agent.py): max_interval=0.1, a daemon thread.
        server = FileTimerServer(path, max_interval=0.1, daemon=True,
                                 log_event=lambda name, request: events.append((name, request)))
        server.start()
        env = dict(os.environ, TORCHELASTIC_TIMER_FILE=path)

        def run(*argv):
            return subprocess.Popen([args.probe, "timer", *argv], env=env,
                                    stdout=subprocess.PIPE, text=True)

        for api in ([], ["--c-api"]):
            name = "C API" if api else "C++ TimerScope"
            # Finishes its step (0.2 s) well inside the deadline (10 s): released, never killed.
            ok = run("10", "0.2", *api)
            out, _ = ok.communicate(timeout=60)
            c.equal(ok.returncode, 0, f"{name}: a punctual worker exits 0 ({out.strip()!r})")
            c.check("timer released" in out, f"{name}: it released its scope")
            # Hangs past a 0.5 s deadline: torch's server kills it with SIGKILL.
            hung = run("0.5", "-1", *api)
            first = hung.stdout.readline()
            c.check(first.startswith("timer armed"), f"{name}: the hung worker armed ({first!r})")
            try:
                rc = hung.wait(60)
            except subprocess.TimeoutExpired:
                hung.kill()
                rc = "still running after 60 s"
            c.equal(rc, -signal.SIGKILL, f"{name}: torch's server killed the hung worker")

        kills = [r for name, r in events if name == "kill worker process"]
        c.equal(len(kills), 2, "torch's server logged two kills")
        c.equal({r.scope_id for r in kills}, {"probe-step"}, "of the scope the client named")
        sets = [r for name, r in events if name == "set timer"]
        c.check(all(r.signal == signal.SIGKILL for r in sets), "every acquire asked for SIGKILL")
        # Everything released or reaped: torch keeps no timer of ours.
        c.poll(lambda: not server._timers, 30, "no timer left in torch's server")
        server.stop()
    c.equal(errors.records, [], "torch's server logged no error (every request parsed)")
    c.finish()


if __name__ == "__main__":
    main()
