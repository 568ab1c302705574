#!/usr/bin/python3
"""Hosts torch's own TCPStore server (is_master=True) for scripts/bench/store.

usage: store_torch_server.py [--host 127.0.0.1]
Prints "host:port" as its first stdout line (like `dtrun store`), then serves until SIGTERM or
SIGINT. Needs torch (Debian's python3-torch, /usr/bin/python3).
"""
import argparse
import datetime
import signal
import threading

import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    store = dist.TCPStore(args.host, 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=600))
    print(f"{args.host}:{store.port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    del store


if __name__ == "__main__":
    main()
