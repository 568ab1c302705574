#!/usr/bin/env python3
"""Faults for dtrun jobs: kill a worker, kill an agent, stop and continue an agent, cut a node
off the network and heal it.

usage:
  scripts/fault/fault.py ps          --run-id ID
  scripts/fault/fault.py kill-worker (--pid PID | --run-id ID (--rank R | --group-rank G --local-rank L))
  scripts/fault/fault.py kill-agent  (--pid PID | --run-id ID --group-rank G)
  scripts/fault/fault.py stop-agent  (--pid PID | --run-id ID --group-rank G)   # SIGSTOP: a hang
  scripts/fault/fault.py cont-agent  (--pid PID | --run-id ID --group-rank G)   # SIGCONT
  scripts/fault/fault.py partition   (--pid PID | --run-id ID --group-rank G) [--for SECONDS]
  scripts/fault/fault.py heal        (--pid PID | --run-id ID --group-rank G)
common options: --signal NAME (kill-*: default KILL), --wait SECONDS (wait that long for the
target to appear, default 0), --json (print one JSON object per fault).

`partition` cuts the node of the agent (or of any process, say a `dtrun store`) off the network:
its packets are dropped, its TCP connections go silent rather than closed, as when a cable is
pulled. With --for it heals the node after that many seconds, else `heal` does. It works on jobs
whose nodes run in network namespaces of scripts/fault/netns.py (`netns.py setup`, then each
agent under `netns.py exec --node I`): the node is the namespace the process lives in, and the
cut takes that node's veth down in the namespaces' own hub; the machine's own interfaces are
never touched. Needs root (CAP_NET_ADMIN).

How targets are found (no guessing by process name, and nothing outside the job is touched):
  * a worker is a process whose environment has TORCHELASTIC_RUN_ID=ID and that leads its own
    process group (dtrun starts every worker so); RANK, GROUP_RANK, LOCAL_RANK and
    TORCHELASTIC_RESTART_COUNT come from that environment; of several rounds the newest counts;
  * an agent is the parent of a worker of that group rank. So `--group-rank` finds an agent only
    while it runs workers; an agent that is still joining needs `--pid`.
Only processes of the given run id are signalled, and each is named on stdout, with the time the
signal was sent (epoch seconds): `agent (group rank 1) pid 1234 SIGKILL at 1796015441.546`.
Exit status: 0 when something was signalled, 1 when no target was found, 2 on bad usage.
"""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402  (beside this file)


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _stat(pid):
    """(state, ppid, pgid) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            line = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = line[line.rfind(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def _live_processes_of(run_id):
    """(pid, environment, stat) of every live process whose environment names the run."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        env = _environ(pid)
        if not env or env.get("TORCHELASTIC_RUN_ID") != run_id:
            continue
        st = _stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        yield pid, env, st


def workers(run_id):
    """Every live worker of the run: dicts with pid, agent (its parent), rank, local_rank,
    group_rank, round."""
    found = []
    for pid, env, st in _live_processes_of(run_id):
        if "RANK" not in env or st[2] != pid:
            continue  # not a worker, or a child of a worker (it inherited the environment)
        try:
            found.append({
                "pid": pid,
                "agent": st[1],
                "rank": int(env["RANK"]),
                "local_rank": int(env.get("LOCAL_RANK", "-1")),
                "group_rank": int(env.get("GROUP_RANK", "-1")),
                "round": int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
            })
        except ValueError:
            continue
    return found


def job_processes(run_id):
    """Every live process whose environment names the run: the workers, their children, and
    processes a worker started with its environment (for dtrun with --prewarm also the standby
    interpreters, whose /proc environment is the one they were started with). What must be
    gone once the job's agents have returned. Dicts with pid and ppid."""
    return [{"pid": pid, "ppid": st[1]} for pid, _, st in _live_processes_of(run_id)]


def _newest(candidates):
    if not candidates:
        return []
    top = max(w["round"] for w in candidates)
    return [w for w in candidates if w["round"] == top]


def find_workers(run_id, rank=None, group_rank=None, local_rank=None):
    ws = workers(run_id)
    if rank is not None:
        ws = [w for w in ws if w["rank"] == rank]
    if group_rank is not None:
        ws = [w for w in ws if w["group_rank"] == group_rank]
    if local_rank is not None:
        ws = [w for w in ws if w["local_rank"] == local_rank]
    return _newest(ws)


def find_agent(run_id, group_rank):
    """The pid of the agent that runs group rank `group_rank`, or None."""
    agents = {w["agent"] for w in find_workers(run_id, group_rank=group_rank)}
    return agents.pop() if len(agents) == 1 else None


def _signal_number(name):
    name = name.upper()
    if name.isdigit():
        return int(name)
    if not name.startswith("SIG"):
        name = "SIG" + name
    return int(getattr(signal, name))


def send(pid, signo, what, as_json=False):
    # The time is taken just before the signal goes: anything the target's peers log about it
    # happens after this time.
    now = time.time()
    os.kill(pid, signo)
    name = signal.Signals(signo).name
    if as_json:
        print(json.dumps({"target": what, "pid": pid, "signal": name, "ts": now}), flush=True)
    else:
        print(f"{what} pid {pid} {name} at {now:.3f}", flush=True)
    return now


def node_of(pid):
    """(namespace set name, node index) of the netns.py node that process `pid` runs in; raises
    LookupError when it runs in no such namespace."""
    try:
        inode = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError as e:
        raise LookupError(f"process {pid}: {e.strerror}") from None
    for name in os.listdir(netns.NETNS_DIR) if os.path.isdir(netns.NETNS_DIR) else []:
        try:
            if os.stat(os.path.join(netns.NETNS_DIR, name)).st_ino != inode:
                continue
        except OSError:
            continue
        base, sep, index = name.rpartition("-")
        if sep and index.isdigit() and netns.hub_ns(base) in netns.namespaces(base):
            return base, int(index)
    raise LookupError(f"process {pid} does not run in a node namespace of scripts/fault/netns.py "
                      "(start the job's agents with `netns.py exec --node I`)")


def partition(pid, what, heal_after=None, up=False, as_json=False):
    """Cuts (or heals, `up`) the node of `pid`; with `heal_after` seconds, heals it after that."""
    name, node = node_of(pid)
    now = time.time()
    netns.set_link(name, node, up)
    record = {"target": what, "pid": pid, "fault": "heal" if up else "partition",
              "netns": netns.node_ns(name, node), "ts": now}
    if heal_after is not None and not up:
        time.sleep(heal_after)  # the fault's length itself, not a synchronisation
        record["healed_ts"] = time.time()
        netns.set_link(name, node, True)
    if as_json:
        print(json.dumps(record), flush=True)
    else:
        healed = f", healed at {record['healed_ts']:.3f}" if "healed_ts" in record else ""
        print(f"{what} pid {pid} in {record['netns']} {record['fault']} at {now:.3f}{healed}",
              flush=True)
    return record


def _poll(find, wait):
    deadline = time.monotonic() + wait
    while True:
        found = find()
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__[:__doc__.index("How targets")],
        epilog=__doc__[__doc__.index("How targets"):],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ps = sub.add_parser("ps", help="list the run's agents and workers")
    ps.add_argument("--run-id", required=True)
    for cmd, default, what in (("kill-worker", "KILL", "signal one worker (default SIGKILL)"),
                               ("kill-agent", "KILL", "signal an agent (default SIGKILL)"),
                               ("stop-agent", "STOP", "SIGSTOP an agent (it hangs)"),
                               ("cont-agent", "CONT", "SIGCONT a stopped agent"),
                               ("partition", None, "cut an agent's node off the network"),
                               ("heal", None, "give a cut-off node its network back")):
        p = sub.add_parser(cmd, help=what)
        p.add_argument("--pid", type=int, help="the process itself")
        p.add_argument("--run-id", help="the job's --rdzv-id")
        p.add_argument("--group-rank", type=int, help="the node (GROUP_RANK)")
        if cmd == "kill-worker":
            p.add_argument("--rank", type=int, help="the worker's global RANK")
            p.add_argument("--local-rank", type=int, help="the worker's LOCAL_RANK")
        if cmd.startswith("kill"):
            p.add_argument("--signal", default=default, help=f"signal name or number ({default})")
        if cmd == "partition":
            p.add_argument("--for", dest="heal_after", type=float,
                           help="heal after this many seconds (default: stay cut; see heal)")
        p.set_defaults(signal=default)
        p.add_argument("--wait", type=float, default=0.0,
                       help="seconds to wait for the target to appear (0)")
        p.add_argument("--json", action="store_true", help="one JSON object per signal sent")
    args = parser.parse_args(argv)

    if args.command == "ps":
        ws = sorted(workers(args.run_id), key=lambda w: (w["round"], w["rank"]))
        print(f"{'agent':>8} {'group':>5} {'round':>5} {'rank':>5} {'local':>5} {'worker':>8}")
        for w in ws:
            print(f"{w['agent']:>8} {w['group_rank']:>5} {w['round']:>5} {w['rank']:>5} "
                  f"{w['local_rank']:>5} {w['pid']:>8}")
        return 0

    signo = _signal_number(args.signal) if args.signal else None
    if args.pid is not None:
        targets = [(args.pid, "worker" if args.command == "kill-worker" else "agent")]
    elif args.run_id is None:
        parser.error("give --pid, or --run-id with a rank")
    elif args.command == "kill-worker":
        if args.rank is None and (args.group_rank is None or args.local_rank is None):
            parser.error("kill-worker needs --rank, or --group-rank and --local-rank")
        found = _poll(lambda: find_workers(args.run_id, args.rank, args.group_rank,
                                           args.local_rank), args.wait)
        targets = [(w["pid"], f"worker rank {w['rank']} (round {w['round']})") for w in found]
    else:
        if args.group_rank is None:
            parser.error(f"{args.command} needs --group-rank (or --pid)")
        agent = _poll(lambda: find_agent(args.run_id, args.group_rank), args.wait)
        targets = [(agent, f"agent (group rank {args.group_rank})")] if agent else []
    if not targets:
        print(f"fault: no target found in run {args.run_id}", file=sys.stderr)
        return 1
    for pid, what in targets:
        if args.command in ("partition", "heal"):
            try:
                partition(pid, what, getattr(args, "heal_after", None), args.command == "heal",
                          args.json)
            except (LookupError, RuntimeError) as e:
                print(f"fault: {e}", file=sys.stderr)
                return 1
            continue
        send(pid, signo, what, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
