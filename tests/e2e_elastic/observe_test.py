#!/usr/bin/env python3
"""What a running job shows of itself, end to end: `dtrun status` (JSON, --watch in a real tmux
terminal, the token, etcd), the agents' metrics read back through a real Prometheus, the
timeline of that job rendered by headless chromium, and the outcome a scheduler acts on (every
exit code of --exit-codes detailed, the summary line, the termination message).

  observe_test.py --dtrun build/bin/dtrun --case NAME      (exit 0 pass, 1 fail, 77 skip)

Each step waits for the event log or the workers' records, never for a fixed time.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import harness
import dtrun_testing  # noqa: E402 (harness puts tests/support on the path)
import observe_tools as tools
from harness import Failed, Skip, check, log, poll

EXIT_BOUND_S = 30
# A round 0 that waits for both first agents (3 s of last call), and quick rounds after.
CONF = {"last_call_timeout": 3}


def _exits(agents, code, timeout=EXIT_BOUND_S):
    for a in agents:
        rc = a.wait(timeout)
        check(rc == code, f"agent {a.index} exited {rc}, expected {code}\n{a.stderr()[-2000:]}")


def _by_member(st):
    return {(n["host"], n["pid"]): n for n in st["nodes"]}


def _agent_pids(st, state):
    return sorted(n["pid"] for n in st["nodes"] if n["state"] == state)


def _round_of(job, round_, nodes, world):
    return harness.check_round(job, job.wait_round(round_, world), round_, nodes=nodes,
                               world=world)


def status_through_changes(job):
    """Two agents; `dtrun status --json` after each step: the round and its world size, every
    agent's state and when the store last heard from it, the restarts used of the maximum and
    their causes, the last failure; through a worker failure, a node leaving (SIGTERM) and a
    node joining."""
    job.start_store()
    opts = dict(extra=["--max-restarts", "2"], env={"E2E_FAIL_ON": "0:1:3"}, conf=CONF)
    a, b = job.start_agent("1:3", **opts), job.start_agent("1:3", **opts)
    groups = _round_of(job, 0, 2, 4)
    st = tools.status_until(job, lambda s: s["round"] == 0 and s["counts"].get("running") == 2,
                            "round 0 with both agents running")
    check(st["phase"] == "running", f"phase {st['phase']}")
    check(st["restarts"] == {"used": 0, "max": 2, "list": []}, f"restarts {st['restarts']}")
    check([r["world_size"] for r in st["rounds"]] == [4], f"rounds {st['rounds']}")
    members = {n["pid"]: n for n in st["nodes"]}
    check(set(members) == {a.pid, b.pid}, f"members {members}")
    for g, pid in groups.items():
        n = members[pid]
        check(n["group_rank"] == g and n["local_world_size"] == 2 and n["round"] == 0,
              f"agent {pid}: {n}")
        check(n["heard_ms"] is not None and n["heard_ms"] < 10000, f"agent {pid}: heard {n}")
    check(st["last_failure"] is None, f"a failure before any: {st['last_failure']}")

    (job.dir / "fail-0-1").touch()  # rank 1 (on group rank 0) exits 3
    groups = _round_of(job, 1, 2, 4)
    st = tools.status_until(job, lambda s: s["round"] == 1 and s["counts"].get("running") == 2,
                            "round 1 with both agents running")
    check(st["restarts"]["used"] == 1 and [r["cause"] for r in st["restarts"]["list"]] ==
          ["worker_failure"], f"restarts {st['restarts']}")
    f = st["last_failure"]
    check(f and (f["round"], f["rank"], f["exit_code"], f["signal"]) == (0, 1, 3, None),
          f"last failure {f}")
    check("failing with exit code 3" in f["message"], f"the failure's last words: {f}")

    victim = next(x for x in (a, b) if x.pid == groups[1])
    survivor = a if victim is b else b
    victim.signal(signal.SIGTERM)
    check(victim.wait(EXIT_BOUND_S) != 0, "the agent told to stop claims success")
    _round_of(job, 2, 1, 2)
    st = tools.status_until(job, lambda s: s["round"] == 2 and s["counts"].get("running") == 1,
                            "round 2 with the survivor alone")
    states = {n["pid"]: n["state"] for n in st["nodes"]}
    check(states == {survivor.pid: "running", victim.pid: "left"}, f"states {states}")
    check([r["cause"] for r in st["restarts"]["list"]] == ["worker_failure", "node_left"] and
          st["restarts"]["used"] == 1, f"restarts {st['restarts']}")

    newcomer = job.start_agent("1:3", **opts)
    _round_of(job, 3, 2, 4)
    st = tools.status_until(job, lambda s: s["round"] == 3 and s["counts"].get("running") == 2,
                            "round 3 with the newcomer")
    check(_agent_pids(st, "running") == sorted([survivor.pid, newcomer.pid]),
          f"running {st['nodes']}")
    check([r["cause"] for r in st["restarts"]["list"]] ==
          ["worker_failure", "node_left", "node_joined"], f"restarts {st['restarts']}")
    check([r["world_size"] for r in st["rounds"]] == [4, 4, 2, 4], f"rounds {st['rounds']}")
    check(st["nodes"][0]["round"] == 3 and st["nodes"][1]["round"] == 3,
          "the current round's members are not listed first")

    job.finish()
    _exits([survivor, newcomer], 0)
    st = tools.status_until(job, lambda s: s["phase"] == "succeeded", "the job to succeed")
    states = {n["pid"]: n["state"] for n in st["nodes"]}
    check(states == {survivor.pid: "done", newcomer.pid: "done", victim.pid: "left"},
          f"final states {states}")
    # The last line of every agent sums its run up.
    last = survivor.stderr().strip().splitlines()[-1]
    check(re.fullmatch(rf"dtrun: job {job.run_id} succeeded after [\d.]+ s: 4 rounds \(world "
                       r"sizes 4, 4, 2, 4\); 3 restarts \(worker_failure after round 0, node_left "
                       r"after round 1, node_joined after round 2\)", last),
          f"the survivor's last line: {last}")


def status_watch_terminal(job):
    """`dtrun status --watch` in a real terminal (tmux): the picture is redrawn in place (one
    header on the screen, not one per redraw) and follows the job into its next round."""
    tmux = shutil.which("tmux")
    if not tmux:
        raise Skip("tmux is missing (scripts/setup.sh)")
    job.start_store()
    opts = dict(extra=["--max-restarts", "1"], env={"E2E_FAIL_ON": "0:0:5"}, conf=CONF)
    agents = [job.start_agent("1:2", **opts) for _ in range(2)]
    _round_of(job, 0, 2, 4)
    sock = f"dtrun-{os.getpid()}"
    base = [tmux, "-L", sock, "-f", "/dev/null"]
    cmd = (f"{job.dtrun} status --watch --interval 0.2 --rdzv-endpoint {job.store_addr} "
           f"--rdzv-id {job.run_id}")
    subprocess.run(base + ["new-session", "-d", "-s", "w", "-x", "160", "-y", "30", cmd],
                   check=True)
    try:
        def screen():
            return subprocess.run(base + ["capture-pane", "-p", "-t", "w"], capture_output=True,
                                  text=True).stdout

        poll(lambda: re.search(r"running, round 0, world size 4 on 2", screen()), 30,
             "the watch to show round 0")
        (job.dir / "fail-0-0").touch()
        _round_of(job, 1, 2, 4)
        text = poll(lambda: (lambda s: s if "round 1," in s and "restarts: 1 of 1" in s
                             else None)(screen()), 30, "the watch to show round 1")
        log(f"the watch's screen:\n{text}")
        headers = re.findall(r"^job .*$", text, re.M)
        check(len(headers) == 1 and "round 1," in headers[0],
              f"the watch did not redraw in place:\n{text}")
        check(len(re.findall(r" running ", text)) == 2, f"two running agents:\n{text}")
    finally:
        subprocess.run(base + ["kill-server"], capture_output=True)
    job.finish()
    _exits(agents, 0)


def status_token_and_errors(job):
    """A store with a shared secret: status without the token or with another one is refused in
    one line (non-zero), with it shows the job; a run id that is not there and a port where
    nothing listens are one line each too."""
    token = job.dir / "job.token"
    other = job.dir / "other.token"
    for path, text in ((token, "a-shared-secret-0123456789"), (other, "another-secret-987654321")):
        path.write_text(text)
        path.chmod(0o600)
    job.start_store(extra=["--token-file", str(token)])
    conf = dict(CONF, token_file=str(token))
    agents = [job.start_agent("1:2", conf=conf) for _ in range(2)]
    _round_of(job, 0, 2, 4)

    def one_line(rc, err, *needles):
        lines = err.strip().splitlines()
        check(rc == 1 and len(lines) == 1 and all(n in lines[0] for n in needles),
              f"expected one line naming {needles}, exit 1; got {rc}: {err}")

    rc, st, err = tools.status(job)
    one_line(rc, err, "has a token", "token_file")
    rc, st, err = tools.status(job, extra=["--rdzv-conf", f"token_file={other}"])
    one_line(rc, err, "refused this client's token")
    st = tools.status_until(job, lambda s: s["counts"].get("running") == 2, "the job, with its "
                            "token", extra=["--rdzv-conf", f"token_file={token}"])
    check(st["round"] == 0, f"round {st['round']}")
    saved = job.run_id
    job.run_id = "not-this-job"
    rc, _, err = tools.status(job, extra=["--rdzv-conf", f"token_file={token}"])
    job.run_id = saved
    one_line(rc, err, "no job 'not-this-job'")
    port = dtrun_testing.free_port()
    rc, _, err = tools.status(job, endpoint=f"127.0.0.1:{port}",
                              extra=["--rdzv-conf", "heartbeat_timeout=1"])
    one_line(rc, err, f"nothing answers at 127.0.0.1:{port}")
    job.finish()
    _exits(agents, 0)


def _timeline_checks(job, agents, html):
    """The timeline page holds one bar per worker lifetime with its outcome (the DOM), and the
    screenshot shows each bar in its outcome's colour where the DOM says it is."""
    started = [e for a in agents for e in a.events("worker_started")]
    exited = {e["pid"]: e for a in agents for e in a.events("worker_exited")}
    dom = tools.chromium_dom(html)
    bars = [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in
            re.findall(r'<rect class="worker" ([^>]*)>', dom)]
    check(len(bars) == len(started), f"{len(bars)} bars for {len(started)} worker lifetimes")
    by_pid = {int(b["data-pid"]): b for b in bars}
    check(set(by_pid) == {e["pid"] for e in started}, "the bars are not the workers started")
    for pid, bar in by_pid.items():
        check(bar["data-outcome"] == exited[pid]["outcome"],
              f"worker {pid}: bar {bar['data-outcome']}, event log {exited[pid]['outcome']}")
    outcomes = sorted({b["data-outcome"] for b in bars})
    check({"failed", "stopped", "succeeded"} <= set(outcomes), f"outcomes drawn: {outcomes}")
    check('data-kind="failure"' in dom and 'data-kind="restart"' in dom and
          'data-kind="membership"' in dom, "failure, restart and membership marks")
    height = int(re.search(r'<svg id="timeline"[^>]* height="(\d+)"', dom).group(1))
    png = job.dir / "timeline.png"
    tools.chromium_screenshot(html, png, 1200, height + 80)
    width, h, rows = tools.read_png(png)
    colours = {"succeeded": (0x2e, 0x7d, 0x32), "failed": (0xc6, 0x28, 0x28),
               "stopped": (0x9e, 0x9e, 0x9e), "hung": (0xef, 0x6c, 0x00)}
    for pid, bar in by_pid.items():
        cx = int(float(bar["x"]) + float(bar["width"]) / 2)
        cy = int(float(bar["y"]) + float(bar["height"]) / 2)
        got = rows[cy][cx]
        want = colours[bar["data-outcome"]]
        check(all(abs(g - w) <= 10 for g, w in zip(got, want)),
              f"worker {pid} ({bar['data-outcome']}) at ({cx}, {cy}): pixel {got}, want {want}")
    return bars


def metrics_prometheus_timeline(job):
    """Two agents serve --metrics-port 0 on loopback, one of them hosting the store; a real
    Prometheus scrapes both every second. A worker is SIGKILLed: the restart counter moves on
    both agents, read back through Prometheus' query API; the other agent leaves (SIGTERM): the
    survivor counts node_left. The job's timeline (both event logs) is then rendered by
    headless chromium: one bar per worker lifetime, in its outcome's colour."""
    port = dtrun_testing.free_port()
    endpoint = f"127.0.0.1:{port}"
    opts = dict(endpoint=endpoint, conf=CONF,
                extra=["--max-restarts", "3", "--metrics-port", "0", "--metrics-host", "127.0.0.1"])
    host = job.start_agent("1:2", **opts)
    poll(lambda: host.events("metrics_listening"), 20, "the first agent's metrics endpoint")
    other = job.start_agent("1:2", **opts)
    _round_of(job, 0, 2, 4)
    addresses = {a.index: a.wait_event("metrics_listening", 20)["address"] for a in (host, other)}
    log(f"metrics endpoints: {addresses}")
    for a in addresses.values():
        with urllib.request.urlopen(f"http://{a}/healthz", timeout=5) as r:
            check(r.status == 200 and r.read() == b"ok\n", f"{a}/healthz")
    prom = tools.Prometheus(job.dir / "prometheus", list(addresses.values()))
    try:
        def series(expr):
            return {s[0]["instance"]: s[1] for s in prom.query(expr)}

        poll(lambda: len(series("dtrun_round")) == 2 and set(series("dtrun_round").values()) ==
             {0.0}, 60, "Prometheus to scrape both agents in round 0")
        check(series('dtrun_restarts_total{cause="worker_failure"}') ==
              {a: 0.0 for a in addresses.values()}, "restarts before the kill")
        check(series("dtrun_store_connections").keys() == {addresses[host.index]} and
              list(series("dtrun_store_connections").values())[0] >= 4,
              "the store's connections, on its host only")
        job.fault("kill-worker", "--run-id", job.run_id, "--rank", "2")
        _round_of(job, 1, 2, 4)
        poll(lambda: series('dtrun_restarts_total{cause="worker_failure"}') ==
             {a: 1.0 for a in addresses.values()}, 60,
             "the worker_failure restart counter of both agents to read 1 in Prometheus")
        failed = series('dtrun_workers_exited_total{outcome="failed"}')
        check(sum(failed.values()) == 1.0, f"failed worker exits {failed}")
        check(series('sum(dtrun_rendezvous_duration_seconds_count) by (instance)') ==
              {a: 2.0 for a in addresses.values()}, "two rendezvous each")

        other.signal(signal.SIGTERM)
        check(other.wait(EXIT_BOUND_S) != 0, "the agent told to stop claims success")
        _round_of(job, 2, 1, 2)
        poll(lambda: series('dtrun_restarts_total{cause="node_left"}').get(
            addresses[host.index]) == 1.0, 60, "the survivor's node_left restart in Prometheus")
        poll(lambda: prom.targets_up().get(addresses[other.index]) == "down", 60,
             "Prometheus to see the agent that left go down")
    finally:
        prom.close()
    job.finish()
    _exits([host], 0)
    html = job.dir / "timeline.html"
    r = subprocess.run([job.dtrun, "timeline", str(host.events_path), str(other.events_path), "-o",
                        str(html)], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"dtrun timeline: {r.stderr}")
    bars = _timeline_checks(job, [host, other], html)
    log(f"timeline: {len(bars)} bars checked in the DOM and the screenshot")


def _sub(job, name):
    d = job.dir / name
    d.mkdir()
    sub = harness.Job(f"{job.name}-{name}", job.dtrun, directory=d)
    job.subjobs = getattr(job, "subjobs", []) + [sub]
    return sub


def _last_line(agent):
    lines = agent.stderr().strip().splitlines()
    return lines[-1] if lines else ""


def exit_codes_detailed(job):
    """Every code of --exit-codes detailed from a job that ends that way, the torchrun scheme's
    code beside it, and the summary line naming the outcome."""
    detailed = ["--exit-codes", "detailed"]
    try:
        cases = []

        def expect(agent, code, outcome, scheme="detailed"):
            cases.append((agent, code, outcome, scheme))

        # 0: success.
        ok = _sub(job, "ok")
        ok.finish()
        expect(ok.start_agent(1, nproc=1, extra=["--standalone", *detailed]), 0, "succeeded")
        # 1: workers failed, no restarts left.
        fail = _sub(job, "fail")
        expect(fail.start_agent(1, nproc=1, extra=["--standalone", *detailed],
                                env={"E2E_FAIL": "0:0:7"}), 1, "workers_failed")
        # 3: the final failure was a hang (--stall-timeout: the worker prints nothing); 1 under
        # torchrun's scheme.
        for scheme, code in (("detailed", 3), ("torchrun", 1)):
            hang = _sub(job, f"hang-{scheme}")
            expect(hang.start_agent(1, nproc=1, extra=["--standalone", "--exit-codes", scheme,
                                                       "--stall-timeout", "1"]), code, "hung",
                   scheme)
        # 4: the rendezvous never formed (a second node never came).
        alone = _sub(job, "alone")
        alone.start_store()
        expect(alone.start_agent(2, nproc=1, conf={"join_timeout": 2}, extra=detailed), 4,
               "rendezvous_failed")
        # 6 and 1: rank 0 fails on one node; the other node's worker was only stopped.
        elsewhere = _sub(job, "elsewhere")
        elsewhere.start_store()
        two = [elsewhere.start_agent(2, nproc=1, conf=CONF, env={"E2E_FAIL": "0:0:9"},
                                     extra=detailed) for _ in range(2)]
        for agent, code, outcome, scheme in cases:
            rc = agent.wait(60)
            last = _last_line(agent)
            log(f"{agent.job.name}: exit {rc}: {last}")
            check(rc == code, f"{agent.job.name} ({scheme}): exit {rc}, expected {code}\n"
                  f"{agent.stderr()[-2000:]}")
            # (--standalone draws its own run id)
            check(re.match(rf"dtrun: job \S+ {outcome} after", last),
                  f"{agent.job.name}: last line {last!r}")
        codes = sorted(a.wait(60) for a in two)
        check(codes == [1, 6], f"the failing node and the other: exits {codes}, expected [1, 6]")
        ended = sorted(_last_line(a).split()[3] for a in two)
        check(ended == ["failed_on_another_node", "workers_failed"], f"outcomes {ended}")
    finally:
        for s in getattr(job, "subjobs", []):
            s.close()


def exit_codes_lost_signals_late(job):
    """--exit-codes detailed: 5 when the store goes away under a running job; 128+n for a
    signal (SIGTERM 143, SIGINT 130; 1 under torchrun's scheme); 0 with the line "finished
    without this node" for a node that arrives after the job succeeded; 2 for a bad command
    line."""
    detailed = ["--exit-codes", "detailed"]
    try:
        lost = _sub(job, "lost")
        lost.start_store()
        agents = [lost.start_agent(2, nproc=1, conf=dict(CONF, heartbeat_timeout=1),
                                   extra=detailed) for _ in range(2)]
        _round_of(lost, 0, 2, 2)
        lost.store_proc.kill()
        for a in agents:
            check(a.wait(EXIT_BOUND_S) == 5, f"store lost: exit {a.proc.returncode}\n"
                  f"{a.stderr()[-1500:]}")
            check(_last_line(a).startswith(f"dtrun: job {lost.run_id} job_lost after"),
                  _last_line(a))
        for sig, scheme, code in ((signal.SIGTERM, "detailed", 143),
                                  (signal.SIGINT, "detailed", 130),
                                  (signal.SIGTERM, "torchrun", 1)):
            s = _sub(job, f"sig{int(sig)}-{scheme}")
            a = s.start_agent(1, nproc=1, extra=["--standalone", "--exit-codes", scheme])
            s.wait_round(0, 1)
            a.signal(sig)
            check(a.wait(EXIT_BOUND_S) == code, f"{sig.name} ({scheme}): exit "
                  f"{a.proc.returncode}, expected {code}")
            check(f" signaled (signal {int(sig)}) after" in _last_line(a), _last_line(a))
        late = _sub(job, "late")
        late.start_store()
        late.finish()
        first = late.start_agent("1:2", nproc=1, conf={"last_call_timeout": 0.1}, extra=detailed)
        check(first.wait(EXIT_BOUND_S) == 0, f"the first node: exit {first.proc.returncode}")
        for scheme in ("detailed", "torchrun"):
            second = late.start_agent("1:2", nproc=1, extra=["--exit-codes", scheme])
            check(second.wait(EXIT_BOUND_S) == 0, f"the late node ({scheme}): exit "
                  f"{second.proc.returncode}\n{second.stderr()[-1500:]}")
            check(f"dtrun: job {late.run_id} finished without this node" in _last_line(second),
                  f"the late node's last line: {_last_line(second)}")
        r = subprocess.run([job.dtrun, "--exit-codes", "detailed", "--nnodes", "x", "t.py"],
                           capture_output=True, text=True)
        check(r.returncode == 2 and "--nnodes" in r.stderr, f"usage error: {r.returncode}")
    finally:
        for s in getattr(job, "subjobs", []):
            s.close()


def termination_message(job):
    """--termination-log PATH: the outcome, the root cause with its last words, and the summary,
    at most 4096 bytes; a worker whose last words are longer than that still fits."""
    path = job.dir / "termination-log"
    job.finish()
    a = job.start_agent(1, nproc=2, extra=["--standalone", "--termination-log", str(path)],
                        program=["/bin/sh", "-c", 'if [ "$RANK" = 1 ]; then printf "%05000d '
                                 'boom\\n" 0 >&2; exit 4; fi; exec sleep 30'])
    check(a.wait(EXIT_BOUND_S) == 1, f"exit {a.proc.returncode}")
    text = path.read_bytes()
    log(f"termination message ({len(text)} bytes): {text[:300]!r}...")
    check(len(text) <= 4096, f"{len(text)} bytes")
    message = text.decode()
    check(message.startswith("dtrun: workers_failed: round 0: rank 1 (local_rank 1, pid "),
          f"message {message[:200]!r}")
    check("exit code 4: 0000" in message, "the root cause's last words")
    check(re.search(r"\.\.\.\ndtrun: job \S+ workers_failed after [\d.]+ s: 1 round \(world "
                    r"size 2\); 0 restarts$", message),
          f"the summary after the shortened root cause: {message[-300:]!r}")
    # Written again by the next run: never appended.
    b = job.start_agent(1, nproc=1, extra=["--standalone", "--termination-log", str(path)])
    check(b.wait(EXIT_BOUND_S) == 0, f"exit {b.proc.returncode}")
    check(re.match(r"dtrun: succeeded\ndtrun: job \S+ succeeded after", path.read_text()),
          path.read_text()[:300])


def status_etcd(job):
    """`dtrun status --rdzv-backend etcd` on a real 3-member etcd: both agents running and
    heard from; one SIGKILLed: it stopped answering (its lease lapsed), the survivor goes on."""
    sys.path.insert(0, str(harness.HERE.parent / "etcd"))
    from etcd_fixture import EtcdCluster
    try:
        cluster = EtcdCluster(job.dir / "etcd")
    except FileNotFoundError as e:
        raise Skip(str(e))
    try:
        opts = dict(endpoint=cluster.endpoints, conf=CONF, extra=["--rdzv-backend", "etcd"])
        agents = [job.start_agent("1:2", **opts) for _ in range(2)]
        groups = _round_of(job, 0, 2, 4)
        etcd = ["--rdzv-backend", "etcd"]
        st = tools.status_until(job, lambda s: s["counts"].get("running") == 2, "both running",
                                endpoint=cluster.endpoints, extra=etcd)
        check(all(n["heard_ms"] is not None and n["heard_ms"] <= 2000 for n in st["nodes"]),
              f"heard {st['nodes']}")
        victim = next(a for a in agents if a.pid == groups[1])
        victim.signal(signal.SIGKILL)
        _round_of(job, 1, 1, 2)
        st = tools.status_until(job, lambda s: s["round"] == 1 and s["counts"].get(
            "stopped answering") == 1, "the killed agent to stop answering",
                                endpoint=cluster.endpoints, extra=etcd)
        states = {n["pid"]: n["state"] for n in st["nodes"]}
        check(states[victim.pid] == "stopped answering" and
              list(states.values()).count("running") == 1, f"states {states}")
        check([r["cause"] for r in st["restarts"]["list"]] == ["node_left"], st["restarts"])
        job.finish()
        _exits([a for a in agents if a is not victim], 0)
    finally:
        cluster.close()


CASES = {f.__name__: f for f in [
    status_through_changes,
    status_watch_terminal,
    status_token_and_errors,
    metrics_prometheus_timeline,
    exit_codes_detailed,
    exit_codes_lost_signals_late,
    termination_message,
    status_etcd,
]}

if __name__ == "__main__":
    sys.exit(harness.run(CASES))
