"""A worker's stand-in that a fork server (forks/server.py) turns into the worker.

``python -I -S .../client.py SOCKET FAMILY`` is what numactl (or the built-in launcher)
starts in place of ``python -m numabench.workers.main FAMILY``. It reads the memory policy
and CPUs it was started with, hands them to the server with its standard streams, its
environment and its working folder, and then stands for the worker until it ends: it passes
SIGTERM, SIGINT and SIGHUP on to the worker's process group, and exits with the worker's
exit status (a worker killed by a signal: that signal, here too). Killed itself (SIGKILL by a
worker group), its connection closes and the server kills the worker.

It starts in tens of milliseconds: the standard library and the harness's (torch-free)
memory-policy module only.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any


def request(argv: list[str]) -> bytes:
    """This process's policy, CPUs, folder and environment, for the worker."""
    # the harness's package (this file's): the stand-in runs none of the side's code
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from numabench.numa.mempolicy import get_mempolicy

    mode, nodes = get_mempolicy()
    body = json.dumps({"argv": argv, "mode": mode, "nodes": list(nodes), "cpus": sorted(os.sched_getaffinity(0)),
                       "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    return b"%08d" % len(body) + body


def main(args: list[str]) -> int:
    if len(args) < 2:
        print("usage: python client.py SOCKET FAMILY [ARGS...]", file=sys.stderr)
        return 2
    sock_path, argv = args[0], args[1:]
    worker: list[int] = []
    pending: list[int] = []

    def pass_on(signum: int, frame: Any) -> None:
        if worker:
            try:
                os.killpg(worker[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, pass_on)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect("\0" + sock_path[1:] if sock_path.startswith("@") else sock_path)
        socket.send_fds(conn, [request(argv)], [0, 1, 2])
    except OSError as e:
        print(f"numabench fork client: cannot reach the fork server at {sock_path}: {e}", file=sys.stderr)
        return 1
    # the worker holds the streams now: a closed stdin or stdout means the worker, not this stand-in
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    reader = conn.makefile("rb")
    for line in reader:
        msg = json.loads(line)
        if "pid" in msg:
            worker.append(msg["pid"])
            for signum in pending:
                pass_on(signum, None)
        elif "exit" in msg:
            code = msg["exit"]
            if code < 0:  # killed by a signal: so is its stand-in, for whoever waits on it
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            return code
        elif "error" in msg:
            print(f"numabench fork server: {msg['error']}", file=sys.stderr)
            return 1
    print("numabench fork client: the fork server went before the worker ended", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
