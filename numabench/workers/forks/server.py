"""A side's fork server: Python and torch imported once, each worker forked from it.

A worker started by exec spends seconds importing torch before its set-up (3-5 s on the
GPU VMs, the largest part of a same-runner A/B's fixed cost, paid by both sides in every
pair). The server imports the side's ``numabench.workers.main`` and torch once; each
worker is then a fork of it that runs ``main()`` with the request's standard streams,
environment, working folder, CPUs and memory policy.

It is run by path (``python .../server.py SOCKET``) with the side's checkout first on
the path, so the worker code is the side's while this file and the client
(``client.py``) are the harness's. The client is what numactl (or the built-in
launcher) starts: it reads the policy and CPUs it was given and hands them over with its
streams (SCM_RIGHTS); the forked worker sets them before anything is allocated, so a
policy applies to every page the worker touches after the fork, as it would after exec.
The pages the server touched before (its imports) stay where they are, shared.

What exec would have varied and a fork would not is varied here: each worker reserves a
random number of pages first (up to 1 GiB of address space, nothing backed), so its buffers' addresses differ from worker to worker as
they would under address-space randomisation (a layout that happened to suit one side
would otherwise suit it in every pair).

Life cycle: the server ends when its standard input closes (its parent, the session,
ended or closed it) or on SIGTERM, killing its workers first, and it dies with its parent
(PR_SET_PDEATHSIG). A worker dies with the server, and is killed when its client goes
(the client's connection closes): a client SIGKILLed by a worker group takes its worker
with it. The server reports each worker's pid, then its exit status, to its client.

Only the standard library is imported at module level: the harness's memory-policy module
is loaded by path, and the side's numabench is imported by name.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import mmap
import os
import random
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
MAX_FDS = 3  # the worker's stdin, stdout, stderr
MAX_REQUEST = 1 << 20  # a request is the client's environment and a few fields
PAGE = mmap.PAGESIZE
PROT_NONE = 0  # not in the mmap module: reserved address space, never touched
# Up to 1 GiB of address space (reserved, never backed): where the kernel aligns big anonymous
# mappings to 2 MiB, a shift below 2 MiB would vanish; 512 huge-page slots and the page offset vary.
SHIFT_PAGES = (1 << 30) // PAGE


def _mempolicy() -> Any:
    """The harness's numabench/numa/mempolicy.py (standard library only), loaded by path."""
    path = Path(__file__).resolve().parents[2] / "numa" / "mempolicy.py"
    spec = importlib.util.spec_from_file_location("_numabench_harness_mempolicy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def address(name: str) -> str:
    """A socket name: "@NAME" is NAME in Linux's abstract namespace (nothing on disk), else a path."""
    return "\0" + name[1:] if name.startswith("@") else name


def _die_with_parent() -> None:
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: a length-prefixed JSON object, the client's three streams as its fds."""
    header, fds, _, _ = socket.recv_fds(conn, 8, MAX_FDS)
    if len(header) < 8:
        for fd in fds:
            os.close(fd)
        raise ValueError("request cut short")
    size = int(header.decode())
    if not 0 < size <= MAX_REQUEST:
        raise ValueError(f"request of {size} bytes: allowed 1..{MAX_REQUEST}")
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ValueError("request cut short")
        data += chunk
    if len(fds) != MAX_FDS:
        raise ValueError(f"{len(fds)} streams passed: allowed 3 (stdin, stdout, stderr)")
    return json.loads(data), fds


def _send(conn: socket.socket, msg: dict[str, Any]) -> None:
    try:
        conn.sendall(json.dumps(msg).encode() + b"\n")
    except OSError:
        pass  # the client went: its worker is being killed


def _become_worker(request: dict[str, Any], fds: list[int], keep: list[Any], mempolicy: Any,
                   worker_main: Any) -> int:
    """In the forked child: the request's CPUs, policy, streams, environment and folder, then
    the side's worker main(). Returns its exit code."""
    for obj in keep:  # the server's listening socket, connections and pidfds are not the worker's
        if isinstance(obj, int):
            os.close(obj)
        else:
            obj.close()
    os.setsid()
    _die_with_parent()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.sched_setaffinity(0, request["cpus"])
    if request["mode"] != 0:  # MPOL_DEFAULT is what a fork starts with
        mempolicy.set_mempolicy(request["mode"], request["nodes"])
    # address-space randomisation, redone: every later mapping lands a random number of pages lower
    shift = random.randrange(SHIFT_PAGES) * PAGE
    reserved = mmap.mmap(-1, shift + PAGE, flags=mmap.MAP_PRIVATE, prot=PROT_NONE)  # noqa: F841 (held till exit)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "tempfile" in sys.modules:  # its folder is read once and kept: the worker's TMPDIR is its group's scratch
        sys.modules["tempfile"].tempdir = None
    sys.argv = [worker_main.__file__, *request["argv"]]
    return int(worker_main.main() or 0)


def serve(sock_path: str) -> int:
    _die_with_parent()
    mempolicy = _mempolicy()
    started = time.perf_counter()
    import torch  # what every worker would import first (not CUDA: that is started in each worker)

    import numabench.workers.main as worker_main
    # Not torch._dynamo, though an optimizer's first step() imports it (5 s a worker on the GPU VMs;
    # the Adam checks' reference avoids step() for that, numabench/kernels/reference.py):
    # preloaded here, it came with slower, wider dataloader batches (16-19 ms against 14-15) and
    # train_step DDP steps (5.8-7.4 ms against 5.6-6.1) in a fresh H200 VM's A/As (docs/GATE.md),
    # and it grows every fork's heap from 170k Python objects to 290k
    preload_s = time.perf_counter() - started
    if torch.cuda.is_initialized():  # a fork of it could not use CUDA ("Cannot re-initialize CUDA")
        raise RuntimeError("CUDA was initialised while the worker code was imported: its workers cannot be "
                           "forked; run without --numa-forkserver (numabench ab: --workers exec)")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address(sock_path))
    listener.listen(64)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, ("accept", None))
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, ("parent", None))
    workers: dict[int, tuple[socket.socket, int]] = {}  # pid -> (its client's connection, pidfd)
    print(json.dumps({"ready": True, "pid": os.getpid(), "preload_s": round(preload_s, 3),
                      "worker_main": worker_main.__file__}), flush=True)
    try:
        while not stopping:
            for key, _ in sel.select(timeout=1.0):
                what, pid = key.data
                if what == "accept":
                    conn, _ = listener.accept()
                    _start(conn, listener, sel, workers, mempolicy, worker_main)
                elif what == "parent":
                    if not os.read(sys.stdin.fileno(), 4096):
                        stopping.append(True)
                elif what == "client":  # the client went (or wrote, which it never does): its worker goes
                    if pid not in workers:  # its worker's exit, in the same batch, closed the connection
                        continue
                    conn = key.fileobj
                    try:
                        gone = not conn.recv(1)
                    except OSError:
                        gone = True
                    if gone:
                        sel.unregister(conn)
                        _kill(pid)
                elif what == "exited":
                    conn, pidfd = workers.pop(pid)
                    _, status = os.waitpid(pid, 0)
                    sel.unregister(pidfd)
                    os.close(pidfd)
                    _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                    if _registered(sel, conn):  # not where its client went first
                        sel.unregister(conn)
                    conn.close()
    finally:
        for pid in list(workers):
            _kill(pid)
        for pid, (conn, pidfd) in workers.items():
            os.waitpid(pid, 0)
            conn.close()
            os.close(pidfd)
        listener.close()
        if not sock_path.startswith("@"):
            Path(sock_path).unlink(missing_ok=True)
    return 0


def _registered(sel: selectors.BaseSelector, obj: Any) -> bool:
    try:
        sel.get_key(obj)
    except KeyError:
        return False
    return True


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the worker leads its own session: its group is its tree
    except (ProcessLookupError, PermissionError):
        pass


def _start(conn: socket.socket, listener: socket.socket, sel: selectors.BaseSelector,
           workers: dict[int, tuple[socket.socket, int]], mempolicy: Any, worker_main: Any) -> None:
    try:
        conn.settimeout(10.0)
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.getuid():  # an abstract socket is reachable by any user of the host
            raise ValueError(f"client of uid {uid}: allowed only this server's user ({os.getuid()})")
        request, fds = _read_request(conn)
    except (OSError, ValueError) as e:
        _send(conn, {"error": f"bad request: {e}"})
        conn.close()
        return
    keep = [listener, conn] + [k.fileobj for k in sel.get_map().values() if k.data[0] in ("client", "exited")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch's idle helper thread: it holds no lock we need
            pid = os.fork()
    except OSError as e:  # no memory or no pid left: this worker fails, the server serves on
        for fd in fds:
            os.close(fd)
        _send(conn, {"error": f"fork failed: {e}"})
        conn.close()
        return
    if pid == 0:
        code = 1
        try:
            sel.close()
            code = _become_worker(request, fds, keep, mempolicy, worker_main)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    pidfd = os.pidfd_open(pid)
    workers[pid] = (conn, pidfd)
    sel.register(conn, selectors.EVENT_READ, ("client", pid))
    sel.register(pidfd, selectors.EVENT_READ, ("exited", pid))
    _send(conn, {"pid": pid})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python server.py SOCKET", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(serve(sys.argv[1]))
    except Exception as e:  # start-up failed: one line for the session, which names the side
        print(json.dumps({"ready": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(1)
