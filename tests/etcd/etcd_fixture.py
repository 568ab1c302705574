"""A real etcd cluster on loopback for the end-to-end tests and the benchmark.

`EtcdCluster(directory, members=3)` starts Debian's /usr/bin/etcd members, each with a client and
a peer port that were free a moment ago (bound to 0 and read back: etcd takes port numbers, not
sockets) and its own data directory under `directory`; `.endpoints` is "127.0.0.1:p0,...".
Members can be killed (SIGKILL) and started again on their data; `close()` kills them all.
Elections are fast (50 ms heartbeat, 500 ms election timeout). `enable_v2=True` serves etcd's v2
API too (torchrun 1.13's etcd backends speak only v2).

`hosts` and `netns` put member i on address hosts[i] inside network namespace netns[i] (the
partition tests' namespaces, scripts/fault/netns.py): a cut node then takes its member with it.
The cluster's own checks then run inside netns[0], which reaches every member.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from dtrun_testing import free_port, wait_for  # noqa: E402

ETCD = "/usr/bin/etcd"


class EtcdCluster:
    def __init__(self, directory, members=3, enable_v2=False, extra=(), hosts=None, netns=None):
        if not os.access(ETCD, os.X_OK):
            raise FileNotFoundError(f"{ETCD} is missing (Debian's etcd-server; scripts/setup.sh)")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra = list(extra) + (["--enable-v2"] if enable_v2 else [])
        self.names = [f"m{i}" for i in range(members)]
        self.hosts = list(hosts) if hosts else ["127.0.0.1"] * members
        self.netns = list(netns) if netns else None
        self.client_ports = [free_port() for _ in self.names]
        self.peer_ports = [free_port() for _ in self.names]
        self.procs = [None] * members
        for i in range(members):
            self.start(i, fresh=True)
        self.wait_healthy(60)

    @property
    def endpoints(self):
        return ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.client_ports))

    def _argv(self, i, fresh):
        cluster = ",".join(f"{n}=http://{h}:{p}"
                           for n, h, p in zip(self.names, self.hosts, self.peer_ports))
        client = f"http://{self.hosts[i]}:{self.client_ports[i]}"
        peer = f"http://{self.hosts[i]}:{self.peer_ports[i]}"
        inside = ["ip", "netns", "exec", self.netns[i]] if self.netns else []
        return inside + [ETCD, "--name", self.names[i], "--data-dir", str(self.dir / self.names[i]),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", cluster,
                "--initial-cluster-state", "new" if fresh else "existing",
                "--initial-cluster-token", self.dir.name,
                "--heartbeat-interval", "50", "--election-timeout", "500",
                "--log-level", "warn"] + self.extra

    def start(self, i, fresh=False):
        if self.procs[i] and self.procs[i].poll() is None:
            return
        log = open(self.dir / f"{self.names[i]}.log", "ab")
        self.procs[i] = subprocess.Popen(self._argv(i, fresh), stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        log.close()

    def kill(self, i):
        p = self.procs[i]
        if p and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def stop_all(self):
        for i in range(len(self.procs)):
            self.kill(i)

    def start_all(self):
        for i in range(len(self.procs)):
            self.start(i)
        self.wait_healthy(60)

    def _post(self, i, path, body, timeout):
        """POSTs `body` to member i's gateway; returns the JSON reply, or None when it fails."""
        url = f"http://{self.hosts[i]}:{self.client_ports[i]}{path}"
        if not self.netns:
            try:
                req = urllib.request.Request(url, data=body, method="POST")
                with urllib.request.urlopen(req, timeout=timeout) as r:
                    return json.load(r) if r.status == 200 else None
            except (OSError, ValueError):
                return None
        # Inside the namespaces only: a client there, with the same few lines.
        code = ("import sys,urllib.request;r=urllib.request.urlopen(urllib.request.Request("
                "sys.argv[1],data=sys.argv[2].encode(),method='POST'),timeout=float(sys.argv[3]));"
                "sys.stdout.write(r.read().decode())")
        try:
            out = subprocess.run(["ip", "netns", "exec", self.netns[0], sys.executable, "-c", code,
                                  url, body.decode(), str(timeout)], capture_output=True,
                                 text=True, timeout=timeout + 5)
            return json.loads(out.stdout) if out.returncode == 0 else None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None

    def healthy(self):
        """True when some member serves a linearizable read (the cluster has quorum)."""
        return any(self._post(i, "/v3/kv/range", b'{"key":"eA=="}', 2) is not None
                   for i in range(len(self.procs)))

    def wait_healthy(self, timeout):
        if not wait_for(self.healthy, timeout, interval=0.05):
            raise RuntimeError(f"etcd cluster in {self.dir} not healthy after {timeout} s")

    def keys(self, prefix):
        """How many keys start with `prefix` (a linearizable count)."""
        start = base64.b64encode(prefix.encode()).decode()
        end = bytearray(prefix.encode())
        end[-1] += 1
        body = json.dumps({"key": start, "range_end": base64.b64encode(bytes(end)).decode(),
                           "count_only": True}).encode()
        for i in range(len(self.procs)):
            reply = self._post(i, "/v3/kv/range", body, 5)
            if reply is not None:
                return int(reply.get("count", 0))
        raise RuntimeError("no etcd member answered")

    def close(self):
        self.stop_all()
