"""The session's fork servers (``--numa-forkserver``): one per side, started at its first
worker, ended with the session.

A side's server (forks/server.py) runs in the side's checkout with the side's environment and
imports the side's worker code and torch once; its workers are forks of it, started through
client.py under the same launcher (numactl or the built-in one) as an exec'd worker. The
socket is in the abstract namespace (nothing on disk to leave behind) and the server serves
only processes of its own user (SO_PEERCRED).
"""
from __future__ import annotations

import dataclasses
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from numabench.errors import WorkerError
from numabench.interrupts import stops_held
from numabench.workers.sides import WorkerSide

HERE = Path(__file__).resolve().parent
SERVER = str(HERE / "server.py")
CLIENT = str(HERE / "client.py")
START_TIMEOUT_S = float(os.environ.get("NUMABENCH_SETUP_TIMEOUT_MIN_S") or 120.0)  # imports torch
STOP_GRACE_S = 10.0


def client_argv(socket_name: str, family_key: str) -> list[str]:
    """What the launcher starts for a worker of a side served by ``socket_name``."""
    return [sys.executable, "-I", "-S", CLIENT, socket_name, family_key]


@dataclasses.dataclass
class _Server:
    proc: subprocess.Popen
    socket_name: str
    stderr: tempfile._TemporaryFileWrapper


class ForkServers:
    """One server per side label; ``attach(side)`` is the side with its server's socket."""

    def __init__(self) -> None:
        self._servers: dict[str, _Server] = {}

    def attach(self, side: WorkerSide) -> WorkerSide:
        server = self._servers.get(side.label)
        if server is None or server.proc.poll() is not None:
            if server is not None:
                self._stop(server)
            server = self._servers[side.label] = self._start(side)
        return dataclasses.replace(side, fork_socket=server.socket_name)

    def _start(self, side: WorkerSide) -> _Server:
        name = f"@numabench-fork-{os.getpid()}-{side.label}-{os.urandom(4).hex()}"
        err = tempfile.TemporaryFile()
        with stops_held():  # an interrupt during the start is raised once close() can see the server
            proc = subprocess.Popen([sys.executable, SERVER, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=err, cwd=side.cwd, env=side.environment(), start_new_session=True)
            server = _Server(proc, name, err)
            self._servers[side.label] = server
        ready = _first_line(proc, START_TIMEOUT_S)
        try:
            msg = json.loads(ready) if ready else {}
        except ValueError:
            msg = {}
        if not msg.get("ready"):
            err.seek(0)
            tail = " | ".join(err.read().decode(errors="replace").strip().splitlines()[-4:])
            self._stop(server)
            self._servers.pop(side.label, None)
            why = msg.get("error") or (f"no answer within {START_TIMEOUT_S:g} s" if ready is None else "exited")
            raise WorkerError(f"{side.describe()}: its fork server did not start ({why}){': ' + tail if tail else ''}")
        return server

    def close(self) -> None:
        """End every server (closing its stdin ends it; its workers are killed with it)."""
        for server in self._servers.values():
            self._stop(server)
        self._servers.clear()

    @staticmethod
    def _stop(server: _Server) -> None:
        proc = server.proc
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        server.stderr.close()


def _first_line(proc: subprocess.Popen, timeout_s: float) -> str | None:
    """The server's first line of output: "" if it exited first, None past ``timeout_s``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
                return proc.stdout.readline().decode(errors="replace")
            if proc.poll() is not None:
                return ""
    return None
