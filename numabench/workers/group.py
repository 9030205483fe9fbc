"""Parent side: start one worker per rank, drive them in lockstep, end them all.

Each request goes to every rank before any reply is read, so ranks start each
step together (the parent is the barrier). Replies are awaited with a deadline;
a rank that dies, raises or stays silent fails the whole group with its rank
and the tail of its stderr, and every worker is killed (its process group
too) before the error propagates. The same happens when the parent itself is
interrupted (KeyboardInterrupt, SIGTERM turned into an exception): leaving
the ``with`` block on an exception ends every worker within about a second.
Workers also die with their parent (PR_SET_PDEATHSIG, set in workers.main),
so start a group from a thread that outlives it (the main thread).
"""
from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Sequence

from numabench.errors import WorkerError
from numabench.interrupts import stops_held
from numabench.toolkit.rank_barrier import SCRATCH_ENV
from numabench.workers import scratch
from numabench.workers.protocol import OP_EXIT, OP_SETUP, OP_STEP, decode, encode

STDERR_TAIL_LINES = 30
CLOSE_GRACE_S = 5.0  # a healthy worker's time to leave after OP_EXIT
FAIL_GRACE_S = 1.0  # the same when the group is failing or interrupted
# Setup starts Python, imports torch, may build kernels and touches every page:
# it gets at least this long, whatever the per-request timeout of the rounds.
SETUP_TIMEOUT_MIN_S = float(os.environ.get("NUMABENCH_SETUP_TIMEOUT_MIN_S") or 120.0)


class WorkerGroup:
    def __init__(self, commands: Sequence[Sequence[str]], env: dict[str, str] | Sequence[dict[str, str]],
                 timeout_s: float = 300.0, cwd: str | None = None) -> None:
        if not timeout_s > 0:
            raise ValueError(f"worker timeout {timeout_s!r} s: allowed a positive number of seconds")
        self.timeout_s = timeout_s
        self.closed = False
        self.doing = "start"  # the request in flight, named in every failure: setup, step N
        self._steps = 0
        self.step_cpus: list[int | None] = []  # the CPU each rank said it ended its last step on
        self.procs: list[subprocess.Popen] = []
        self._stderr = []
        self._buffers: list[bytes] = []
        # Workers' temporary files (theirs, and those of what they run: multiprocessing's pymp-*
        # folders, loader reports) go here, as their TMPDIR; the group removes it when it closes,
        # so a worker killed before its own clean-up leaves nothing behind. One whose owner was
        # killed before it could is removed by the next group (workers.scratch).
        scratch.sweep()
        self.scratch = scratch.make()
        self.started_at = time.time()  # wall clock: workers report theirs (start-up cost)
        envs = [env] * len(commands) if isinstance(env, dict) else list(env)
        envs = [{**e, SCRATCH_ENV: self.scratch, "TMPDIR": self.scratch} for e in envs]
        try:
            for cmd, e in zip(commands, envs):
                err = tempfile.TemporaryFile()
                self._stderr.append(err)
                with stops_held():  # an interrupt during the start is raised once close() can see the worker
                    self.procs.append(subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                       stderr=err, env=e, cwd=cwd, start_new_session=True))
                self._buffers.append(b"")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "WorkerGroup":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(grace_s=CLOSE_GRACE_S if exc_type is None else FAIL_GRACE_S)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stderr_tail(self, rank: int, lines: int = STDERR_TAIL_LINES) -> str:
        f = self._stderr[rank]
        if f.closed:
            return ""
        f.flush()
        f.seek(0)
        text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _send(self, msg: dict[str, Any]) -> None:
        data = encode(msg)
        for rank, p in enumerate(self.procs):
            try:
                assert p.stdin is not None
                p.stdin.write(data)
                p.stdin.flush()
            except (BrokenPipeError, OSError):
                self._fail(rank, f"exited with code {p.poll()} before it could take a request")

    def _fail(self, rank: int, message: str) -> None:
        tail = self.stderr_tail(rank)
        self.close(grace_s=FAIL_GRACE_S)
        raise WorkerError(f"{message} (during {self.doing})", rank=rank, stderr_tail=tail)

    def _receive(self, timeout_s: float) -> list[dict[str, Any]]:
        replies: list[dict[str, Any] | None] = [None] * len(self.procs)
        sel = selectors.DefaultSelector()
        for rank, p in enumerate(self.procs):
            assert p.stdout is not None
            sel.register(p.stdout, selectors.EVENT_READ, rank)
        deadline = time.monotonic() + timeout_s
        try:
            while any(r is None for r in replies):
                left = deadline - time.monotonic()
                if left <= 0:
                    rank = replies.index(None)
                    waiting = [ln for ln in self.stderr_tail(rank).splitlines() if "waiting for" in ln]
                    self._fail(rank, f"gave no answer within {timeout_s:g} s"
                               + (f" (it said: {waiting[-1].strip()})" if waiting else ""))
                for key, _ in sel.select(timeout=min(left, 1.0)):
                    rank = key.data
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        code = self.procs[rank].wait(timeout=10)
                        self._fail(rank, f"exited with code {code} ({_describe_exit(code)}) mid-request")
                    self._buffers[rank] += chunk
                    if b"\n" in self._buffers[rank]:
                        line, _, rest = self._buffers[rank].partition(b"\n")
                        self._buffers[rank] = rest
                        reply = decode(line)
                        if not reply.get("ok"):
                            tb = reply.get("traceback", "")
                            self._fail(rank, f"raised {reply.get('error')}" + (f"\n{tb}" if tb else ""))
                        replies[rank] = reply
                        sel.unregister(key.fileobj)
                # A worker that died without closing stdout (its child holds it) is caught here.
                for rank, p in enumerate(self.procs):
                    if replies[rank] is None and p.poll() is not None and not self._buffers[rank]:
                        self._fail(rank, f"exited with code {p.returncode} ({_describe_exit(p.returncode)})")
        finally:
            sel.close()
        return replies  # type: ignore[return-value]

    def request(self, msg: dict[str, Any], timeout_s: float | None = None) -> list[dict[str, Any]]:
        self._send(msg)
        return self._receive(timeout_s or self.timeout_s)

    def setup(self, specs: Sequence[dict[str, Any]], timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Send each rank its own spec; returns each rank's setup answer (a ``SetupDone`` as JSON,
        parsed by the caller with its family's reply class: numabench.replies). Waits at least
        SETUP_TIMEOUT_MIN_S unless ``timeout_s`` says otherwise."""
        self.send_setup(specs)
        return self.receive_setup(timeout_s)

    def send_setup(self, specs: Sequence[dict[str, Any]]) -> None:
        """The first half of :meth:`setup`: several groups set up at once when each is sent its
        specs before any answer is awaited."""
        self.doing = "setup"
        for rank, (p, spec) in enumerate(zip(self.procs, specs)):
            try:
                assert p.stdin is not None
                p.stdin.write(encode({"op": OP_SETUP, "spec": spec}))
                p.stdin.flush()
            except (BrokenPipeError, OSError):
                self._fail(rank, f"exited with code {p.poll()} before setup")

    def receive_setup(self, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """The second half of :meth:`setup`."""
        return [r["info"] for r in self._receive(timeout_s or max(self.timeout_s, SETUP_TIMEOUT_MIN_S))]

    def step(self, payload: dict[str, Any] | None = None, timeout_s: float | None = None) -> list[dict[str, float]]:
        """One lockstep round; ``payload`` (e.g. the variant) goes to every rank."""
        self._steps += 1
        self.doing = f"step {self._steps}"
        replies = self.request({"op": OP_STEP, **(payload or {})}, timeout_s)
        self.step_cpus = [r.get("cpu") if isinstance(r.get("cpu"), int) else None for r in replies]
        return [r["times"] for r in replies]

    def ask_exit(self) -> None:
        """Ask every worker to exit, without waiting (close waits): several groups asked first
        tear down together. Idempotent."""
        for p in self.procs:
            if p.poll() is None and p.stdin is not None and not p.stdin.closed:
                try:
                    p.stdin.write(encode({"op": OP_EXIT}))
                    p.stdin.close()
                except (OSError, ValueError):
                    pass

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Ask politely, then kill each worker's whole process group. Idempotent; safe to
        call while an exception (an interrupt) is propagating."""
        if self.closed:
            return
        self.ask_exit()
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:  # unkillable (D state); nothing more to do
                    pass
            else:
                try:  # grandchildren left behind in the worker's session
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
        for f in self._stderr:
            f.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.closed = True


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return "error" if code else "normal exit"
