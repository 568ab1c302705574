"""A real OpenSSH server on loopback for the multi-host tests: "hosts" are loopback addresses.

The fixture makes everything of its own in a fresh directory: a host key, a client key, the
authorized_keys and known_hosts files, an sshd_config and a client ssh config. It starts
/usr/sbin/sshd in the foreground (-D) listening on a private port of each host address it is
given (127.0.0.2, 127.0.0.3, ...), and stops it on close(). Tests reach the hosts with
`ssh -F <dir>/ssh_config HOST`; an address in `unreachable` is in the client config with the same
port but has no server, so connecting to it is refused at once.

Needs root (sshd checks the login user and writes its privilege separation directory), the
openssh-server and openssh-client packages, and the loopback addresses (Linux routes all of
127.0.0.0/8 to lo). `SshdFixture.unavailable()` says why it cannot run here, or None.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from dtrun_testing import free_port, wait_for  # noqa: E402

SSHD = "/usr/sbin/sshd"


def _can_connect(address, port):
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


class SshdFixture:
    @staticmethod
    def unavailable():
        if os.geteuid() != 0:
            return "sshd needs root to serve logins (run the test as root)"
        for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen")):
            if not tool or not os.access(tool, os.X_OK):
                return "openssh-server and openssh-client are needed (scripts/setup.sh)"
        return None

    def __init__(self, hosts, unreachable=(), keep=False):
        self.hosts = list(hosts)
        self.dir = Path(tempfile.mkdtemp(prefix="dtrun-sshd-"))
        self.keep = keep
        self.proc = None
        self.port = None
        self._keys()
        self._start(list(unreachable))

    def _keys(self):
        d = self.dir
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"dtrun-test-{name}",
                            "-f", str(d / name)], check=True)
        shutil.copy(d / "client_key.pub", d / "authorized_keys")
        os.chmod(d / "authorized_keys", 0o600)

    def _write_configs(self, unreachable):
        d = self.dir
        listen = "\n".join(f"ListenAddress {h}:{self.port}" for h in self.hosts)
        (d / "sshd_config").write_text(f"""\
{listen}
HostKey {d}/host_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
AcceptEnv none
MaxStartups 64:30:128
MaxSessions 64
LogLevel VERBOSE
""")
        host_pub = (d / "host_key.pub").read_text().split()
        with open(d / "known_hosts", "w") as f:
            for h in self.hosts:
                f.write(f"[{h}]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        (d / "ssh_config").write_text(f"""\
Host {' '.join(self.hosts + unreachable)}
  Port {self.port}
  User root
  IdentityFile {d}/client_key
  IdentitiesOnly yes
  StrictHostKeyChecking yes
  UserKnownHostsFile {d}/known_hosts
  GlobalKnownHostsFile /dev/null
  PasswordAuthentication no
  ControlMaster no
  ConnectTimeout 10
  LogLevel ERROR
""")

    def _start(self, unreachable):
        # sshd refuses to start without its privilege separation directory (Debian: /run/sshd).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for _ in range(5):  # the port may be taken between the check and sshd's bind
            self.port = free_port(*self.hosts)
            self._write_configs(unreachable)
            log = open(self.dir / "sshd.log", "ab")
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            log.close()
            # Up once every host's address answers, or given up when sshd exits or 20 s pass.
            up = wait_for(lambda: self.proc.poll() is not None
                          or all(_can_connect(h, self.port) for h in self.hosts), 20)
            if up and self.proc.poll() is None:
                return
            self.stop()
        raise RuntimeError(f"sshd did not start; its log:\n{self.log()}")

    def ssh_command(self):
        """The --ssh-command value that reaches the hosts."""
        return f"ssh -F {self.dir / 'ssh_config'}"

    def log(self):
        try:
            return (self.dir / "sshd.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self):
        self.stop()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
