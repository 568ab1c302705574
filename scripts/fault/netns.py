#!/usr/bin/env python3
"""Network partitions for dtrun jobs: nodes in network namespaces, cut off and healed at will.

usage:
  scripts/fault/netns.py check                         # can this machine do it? (0 yes, 77 no)
  scripts/fault/netns.py setup    --name NAME --nodes K [--subnet 10.213.0]
  scripts/fault/netns.py exec     --name NAME --node I -- COMMAND [ARG...]
  scripts/fault/netns.py cut      --name NAME --node I  # node I loses the network, silently
  scripts/fault/netns.py heal     --name NAME --node I  # and gets it back
  scripts/fault/netns.py addr     --name NAME --node I  # prints node I's address
  scripts/fault/netns.py teardown --name NAME           # removes every namespace of NAME

`setup` builds, entirely inside namespaces it creates (the machine's own interfaces, routes and
addresses are never touched):

   NAME-hub:  bridge br0 -- v0 -- v1 -- ... -- v<K-1>      (one veth pair per node)
   NAME-0:    eth0 = SUBNET.1/24, lo up                    node 0 (run the store host here)
   NAME-1:    eth0 = SUBNET.2/24, lo up                    node 1 ...

Node I is reached at SUBNET.(I+1); SUBNET must be private (10/8, 172.16/12 or 192.168/16) and
is visible only inside NAME-*. `cut` takes the hub's end of node I's veth down: packets to and
from node I are dropped without a reset, as when a cable is pulled or a switch fails, so open TCP
connections go silent rather than closed. Needs root (or CAP_NET_ADMIN) and `ip` from iproute2.
Processes started with `exec` keep the namespace alive after `teardown` until they exit: stop
them first.
"""
import argparse
import ipaddress
import os
import subprocess
import sys

SKIP = 77
NETNS_DIR = "/run/netns"  # where `ip netns add` pins the namespaces it creates


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def node_ns(name, i):
    return f"{name}-{i}"


def hub_ns(name):
    return f"{name}-hub"


def check():
    """None when namespaces with veth pairs and a bridge work here, else the reason."""
    if os.geteuid() != 0:
        return "not root: creating network namespaces needs CAP_NET_ADMIN"
    probe = f"dtrun-netns-check-{os.getpid()}"
    try:
        subprocess.run(["ip", "-V"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"no usable `ip` (iproute2): {e}"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "br0", "type", "bridge")
        _ip("-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        _ip("-n", probe, "link", "set", "v0", "master", "br0")
        return None
    except RuntimeError as e:
        return str(e)
    finally:
        _ip("netns", "del", probe, check=False)


def _subnet(text):
    net = ipaddress.ip_network(text + ".0/24", strict=True)
    if not net.is_private or net.is_loopback or net.is_link_local:
        raise ValueError(f"--subnet {text}: only private addresses (10/8, 172.16/12, 192.168/16)")
    if not any(net.subnet_of(ipaddress.ip_network(p))
               for p in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")):
        raise ValueError(f"--subnet {text}: only private addresses (10/8, 172.16/12, 192.168/16)")
    return text


def address(subnet, i):
    return f"{subnet}.{i + 1}"


def setup(name, nodes, subnet):
    if not 1 <= nodes <= 250:
        raise ValueError("--nodes must be 1..250")
    hub = hub_ns(name)
    try:
        _ip("netns", "add", hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i in range(nodes):
            ns = node_ns(name, i)
            _ip("netns", "add", ns)
            # Created inside the hub namespace with its peer moved straight into the node's, so
            # no interface ever appears in the machine's own namespace.
            _ip("-n", hub, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", hub, "link", "set", f"v{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{address(subnet, i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except Exception:
        teardown(name)
        raise


def namespaces(name):
    r = _ip("netns", "list", check=False)
    out = []
    for line in r.stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if ns == hub_ns(name) or (ns.startswith(name + "-") and ns[len(name) + 1:].isdigit()):
            out.append(ns)
    return out


def teardown(name):
    for ns in namespaces(name):
        _ip("netns", "del", ns, check=False)


def set_link(name, i, up):
    _ip("-n", hub_ns(name), "link", "set", f"v{i}", "up" if up else "down")


def exec_argv(name, i, command):
    """The argv that runs `command` in node i's namespace."""
    return ["ip", "netns", "exec", node_ns(name, i), *command]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__[:__doc__.index("`setup` builds")],
        epilog=__doc__[__doc__.index("`setup` builds"):],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="exit 0 when namespaces work here, else print why and exit 77")
    p = sub.add_parser("setup", help="create NAME-hub and NAME-0..K-1")
    p.add_argument("--name", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--subnet", default="10.213.0", help="first three octets (10.213.0)")
    for cmd, what in (("cut", "drop node I's traffic"), ("heal", "restore node I's traffic"),
                      ("addr", "print node I's address"), ("exec", "run a command in node I")):
        p = sub.add_parser(cmd, help=what)
        p.add_argument("--name", required=True)
        p.add_argument("--node", type=int, required=True)
        if cmd == "addr":
            p.add_argument("--subnet", default="10.213.0")
        if cmd == "exec":
            p.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    p = sub.add_parser("teardown", help="delete every namespace of NAME")
    p.add_argument("--name", required=True)
    args = parser.parse_args(argv)

    try:
        if args.command == "check":
            why = check()
            if why:
                print(f"netns: network namespaces unusable here: {why}")
                return SKIP
            print("netns: network namespaces, veth pairs and bridges work here")
            return 0
        if args.command == "setup":
            setup(args.name, args.nodes, _subnet(args.subnet))
            for i in range(args.nodes):
                print(f"{node_ns(args.name, i)} {address(args.subnet, i)}")
            return 0
        if args.command == "addr":
            print(address(_subnet(args.subnet), args.node))
            return 0
        if args.command in ("cut", "heal"):
            set_link(args.name, args.node, args.command == "heal")
            return 0
        if args.command == "exec":
            command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not command:
                parser.error("exec needs -- COMMAND")
            os.execvp("ip", exec_argv(args.name, args.node, command))
        if args.command == "teardown":
            teardown(args.name)
            return 0
    except (RuntimeError, ValueError) as e:
        print(f"netns: {e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
