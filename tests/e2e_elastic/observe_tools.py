"""Real services the observability tests drive (stdlib only): `dtrun status`, a Prometheus server,
headless chromium, and a PNG decoder for chromium's screenshots.

  status(job, extra)          `dtrun status --json` of the job's store: the parsed object
  Prometheus(dir, targets)    Debian's /usr/bin/prometheus on a free loopback port, scraping
                              `targets` every second, with a temporary storage directory;
                              .query(expr) reads /api/v1/query
  chromium_dom(html), chromium_screenshot(html, w, h)   /usr/bin/chromium --headless
  read_png(path)              width, height and rows of RGB(A) pixels
"""
import json
import os
import struct
import subprocess
import tempfile
import urllib.parse
import urllib.request
import zlib
from pathlib import Path

import harness
import dtrun_testing  # noqa: E402 (harness puts tests/support on the path)
from harness import Skip, poll

PROMETHEUS = "/usr/bin/prometheus"
CHROMIUM = "/usr/bin/chromium"


def status(job, endpoint=None, extra=(), timeout=30):
    """`dtrun status --json` for the job (its store by default): (exit code, object or None,
    stderr)."""
    argv = [job.dtrun, "status", "--rdzv-endpoint", endpoint or job.store_addr,
            "--rdzv-id", job.run_id, "--json", *extra]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    obj = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
    return r.returncode, obj, r.stderr


def status_until(job, pred, what, timeout=30, **kw):
    """Polls `dtrun status --json` until pred(object) holds; returns that object."""
    last = {}

    def attempt():
        rc, obj, err = status(job, **kw)
        last["seen"] = obj if obj is not None else err
        return obj if obj is not None and pred(obj) else None

    try:
        return poll(attempt, timeout, what, interval=0.1)
    except harness.Failed as e:
        raise harness.Failed(f"{e}; last status: {json.dumps(last.get('seen'))[:3000]}")


class Prometheus:
    def __init__(self, directory, targets, interval="1s"):
        if not os.access(PROMETHEUS, os.X_OK):
            raise Skip(f"{PROMETHEUS} is missing (Debian's prometheus; scripts/setup.sh)")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  evaluation_interval: {interval}\n"
            "scrape_configs:\n"
            "  - job_name: dtrun\n"
            f"    scrape_interval: {interval}\n"
            "    static_configs:\n"
            "      - targets: [" + ", ".join(f"'{t}'" for t in targets) + "]\n")
        self.port = dtrun_testing.free_port()  # prometheus takes a port number, not a socket
        self.log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
            preexec_fn=harness._die_with_parent)
        poll(self._ready, 60, f"prometheus on 127.0.0.1:{self.port} to be ready")

    def _ready(self):
        if self.proc.poll() is not None:
            raise harness.Failed(f"prometheus exited {self.proc.returncode}: "
                                 f"{(self.dir / 'prometheus.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr):
        """The instant vector of `expr`: [(labels, float)]."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise harness.Failed(f"prometheus query {expr}: {body}")
        return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]

    def targets_up(self):
        """The scrape targets' health, {instance: 'up' | 'down' | 'unknown'}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/targets", timeout=5) as r:
            body = json.load(r)
        return {t["labels"]["instance"]: t["health"] for t in body["data"]["activeTargets"]}

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _chromium(args, timeout=120):
    if not os.access(CHROMIUM, os.X_OK):
        raise Skip(f"{CHROMIUM} is missing (Debian's chromium; scripts/setup.sh)")
    with tempfile.TemporaryDirectory(prefix="dtrun-chromium-") as profile:
        argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={profile}", "--force-device-scale-factor=1",
                *args]
        return subprocess.run(argv, capture_output=True, timeout=timeout)


def chromium_dom(html_path):
    """The page's DOM after it loaded, as chromium serialises it."""
    r = _chromium(["--dump-dom", f"file://{Path(html_path).resolve()}"])
    harness.check(r.returncode == 0 and r.stdout, f"chromium --dump-dom failed: {r.stderr[-2000:]}")
    return r.stdout.decode()


def chromium_screenshot(html_path, png_path, width, height):
    r = _chromium([f"--screenshot={png_path}", f"--window-size={width},{height}",
                   "--hide-scrollbars", f"file://{Path(html_path).resolve()}"])
    harness.check(r.returncode == 0 and Path(png_path).exists(),
                  f"chromium --screenshot failed: {r.stderr.decode(errors='replace')[-2000:]}")


def read_png(path):
    """(width, height, rows): rows[y][x] is an (r, g, b) tuple. 8-bit RGB or RGBA, not
    interlaced (what chromium writes)."""
    data = Path(path).read_bytes()
    harness.check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
    pos, idat = 8, b""
    while pos < len(data):
        n, = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    harness.check(depth == 8 and ctype in (2, 6) and interlace == 0,
                  f"{path}: an 8-bit RGB(A) PNG was expected (depth {depth}, type {ctype})")
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows
