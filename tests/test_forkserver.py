"""Workers forked from a side's fork server (``--numa-forkserver``) get what an exec'd worker
gets: the launcher's memory policy and CPUs, their streams, environment, folder and
arguments, an exit status their parent sees, a layout of their own; they die with their
client, and nothing outlives the server. The side here is a stand-in checkout whose
``numabench/workers/main.py`` reports what it was given."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from numabench.errors import WorkerError
from numabench.numa.mempolicy import MPOL_BIND, MPOL_DEFAULT
from numabench.workers.forks.pool import ForkServers, client_argv
from numabench.workers.sides import WorkerSide

ROOT = Path(__file__).resolve().parents[1]

# The stand-in worker: reports itself on stdout, then obeys one line of stdin.
REPORTER = textwrap.dedent('''
    import json, mmap, os, signal, sys, time
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


    def main():
        from _mempolicy import get_mempolicy
        buf = mmap.mmap(-1, 64 << 20)  # a big buffer: where the worker's arrays would go
        import ctypes
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        mode, nodes = get_mempolicy()
        print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[1:], "cwd": os.getcwd(),
                          "env": os.environ.get("FORK_TEST_VAR"), "cpus": sorted(os.sched_getaffinity(0)),
                          "mode": mode, "nodes": list(nodes), "address": address,
                          "stdin_is_pipe": os.path.islink(f"/proc/self/fd/0")}), flush=True)
        del buf
        what = sys.stdin.readline().strip()
        if what.startswith("exit "):
            return int(what.split()[1])
        if what == "hang":
            time.sleep(600)
        if what == "raise":
            raise RuntimeError("the worker failed")
        return 0
    ''')


@pytest.fixture
def side(tmp_path):
    """A stand-in checkout: numabench/workers/main.py is REPORTER (imports torch only through
    the server), with the harness's mempolicy module beside it."""
    root = tmp_path / "side"
    (root / "numabench" / "workers").mkdir(parents=True)
    (root / "numabench" / "__init__.py").write_text("")
    (root / "numabench" / "workers" / "__init__.py").write_text("")
    (root / "numabench" / "workers" / "main.py").write_text(REPORTER)
    shutil.copy(ROOT / "numabench" / "numa" / "mempolicy.py", root / "_mempolicy.py")
    return WorkerSide("head", root, {"FORK_TEST_VAR": "from the side"})


@pytest.fixture
def servers():
    s = ForkServers()
    yield s
    s.close()


def start_worker(side: WorkerSide, prefix: list[str] = (), env: dict | None = None,
                 cwd: Path | None = None) -> tuple[subprocess.Popen, dict]:
    cmd = [*prefix, *client_argv(side.fork_socket, "touch")]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd or side.cwd, env=env or side.environment(), start_new_session=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)


def finish(proc: subprocess.Popen, line: str, timeout: float = 30) -> int:
    """The worker told ``line``; its client's exit code (its stderr in proc.stderr_text)."""
    try:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    except BrokenPipeError:
        pass
    _, proc.stderr_text = proc.communicate(timeout=timeout)
    return proc.returncode


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def test_a_forked_worker_gets_its_streams_arguments_environment_and_folder(side, servers):
    served = servers.attach(side)
    proc, seen = start_worker(served)
    assert seen["argv"] == ["touch"]
    assert seen["env"] == "from the side"
    assert seen["cwd"] == str(side.path)
    assert seen["ppid"] != proc.pid  # a fork of the server, not a child of its stand-in
    assert finish(proc, "exit 0") == 0


@pytest.mark.skipif(shutil.which("numactl") is None, reason="needs numactl")
def test_a_forked_worker_gets_the_policy_and_cpus_numactl_gave_its_client(side, servers):
    served = servers.attach(side)
    cpu = min(os.sched_getaffinity(0))
    proc, seen = start_worker(served, ["numactl", f"--physcpubind={cpu}", "--membind=0", "--"])
    assert (seen["mode"], seen["nodes"], seen["cpus"]) == (MPOL_BIND, [0], [cpu])
    assert finish(proc, "exit 0") == 0
    proc, seen = start_worker(served)  # no launcher: the default policy, every CPU it may use
    assert (seen["mode"], seen["cpus"]) == (MPOL_DEFAULT, sorted(os.sched_getaffinity(0)))
    assert finish(proc, "exit 0") == 0


def test_the_built_in_launcher_works_through_the_client_too(side, servers):
    served = servers.attach(side)
    launcher = [sys.executable, "-m", "numabench.numa.launch", "--policy", "bind:0", "--cpus",
                str(min(os.sched_getaffinity(0))), "--"]
    env = {**served.environment(), "PYTHONPATH": str(ROOT)}
    proc, seen = start_worker(served, launcher, env=env, cwd=ROOT)  # the launcher is the harness's
    assert (seen["mode"], seen["nodes"], seen["cpus"]) == (MPOL_BIND, [0], [min(os.sched_getaffinity(0))])
    assert finish(proc, "exit 0") == 0


def test_each_forked_worker_has_a_layout_of_its_own(side, servers):
    served = servers.attach(side)
    addresses = set()
    for _ in range(4):
        proc, seen = start_worker(served)
        addresses.add(seen["address"])
        assert finish(proc, "exit 0") == 0
    assert len(addresses) > 1, "every fork put its buffer at the same address"
    # in other huge pages too: where the kernel aligns big mappings to 2 MiB, a smaller shift would vanish
    assert len({a >> 21 for a in addresses}) > 1, [hex(a) for a in addresses]


@pytest.mark.parametrize("line, code", [("exit 3", 3), ("raise", 1), ("exit 0", 0)])
def test_the_client_exits_with_the_workers_status(side, servers, line, code):
    proc, _ = start_worker(servers.attach(side))
    assert finish(proc, line) == code
    if line == "raise":
        assert "RuntimeError: the worker failed" in proc.stderr_text


def test_sigterm_to_the_client_reaches_the_worker_and_ends_both(side, servers):
    proc, seen = start_worker(servers.attach(side))
    proc.stdin.write("hang\n")
    proc.stdin.flush()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert gone(seen["pid"])


def test_a_killed_client_takes_its_worker_with_it(side, servers):
    proc, seen = start_worker(servers.attach(side))
    proc.stdin.write("hang\n")
    proc.stdin.flush()
    os.killpg(proc.pid, signal.SIGKILL)  # what a failing worker group does
    proc.communicate(timeout=30)
    assert gone(seen["pid"]), "the worker outlived its client"


def test_closing_the_servers_ends_them_and_their_workers(side, servers):
    served = servers.attach(side)
    proc, seen = start_worker(served)
    proc.stdin.write("hang\n")
    proc.stdin.flush()
    server_pid = seen["ppid"]
    servers.close()
    assert gone(seen["pid"]) and gone(server_pid)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL or proc.returncode == 1
    with pytest.raises(OSError):  # nothing listens on the name any more
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + served.fork_socket[1:])


def test_a_server_serves_only_its_own_user(side, servers):
    served = servers.attach(side)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # a process of another user asks for a worker
        try:
            os.close(reader)
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect("\0" + served.fork_socket[1:])
            body = b'{"argv": ["touch"]}'
            try:
                socket.send_fds(s, [b"%08d" % len(body) + body], [0, 1, 2])
            except BrokenPipeError:  # refused at once: the answer is there to read
                pass
            os.write(writer, s.makefile("rb").readline())
        except BaseException as e:
            os.write(writer, json.dumps({"raised": repr(e)}).encode())
        finally:
            os._exit(0)
    os.close(writer)
    os.waitpid(pid, 0)
    with os.fdopen(reader, "rb") as f:
        answer = json.loads(f.read() or b"{}")
    assert "allowed only this server's user" in answer.get("error", ""), answer


def test_a_server_that_cannot_start_is_an_error_naming_the_side(side, servers):
    (side.path / "numabench" / "workers" / "main.py").write_text("raise ImportError('no such thing')\n")
    with pytest.raises(WorkerError, match=r"head \(.*\): its fork server did not start \(ImportError: no such thing\)"):
        servers.attach(side)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_session_stopped_mid_case_leaves_no_server_and_no_worker(tmp_path, sig):
    """A run with --numa-forkserver stopped inside a case (its worker hanging at step 1): the
    session's server and the worker forked from it end with it, SIGKILL included (they die
    with their parents), and no scratch folder is left."""
    from helpers import cmdline_of, descendants_of, end_child, running, scratch_left, start_child

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
           "--numa-policies=default", "--param-sizes=1M", "--numa-forkserver"]
    proc = start_child(cmd, cwd=ROOT, env={**os.environ, "NUMABENCH_FAULT": "hang@step1", "TMPDIR": str(tmpdir)})
    try:
        deadline = time.monotonic() + 120
        tree: list[psutil.Process] = []
        while time.monotonic() < deadline and proc.poll() is None:
            tree = descendants_of(proc.pid)
            if any("client.py" in cmdline_of(p) for p in tree if running(p)) and len(tree) >= 3:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"no forked worker started (exit code {proc.poll()})")
        time.sleep(0.5)  # the worker is past its set-up, hanging in its first step
        tree = descendants_of(proc.pid)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        left = [p for p in tree if not gone(p.pid, timeout=10)]
        assert not left, f"left running: {[(p.pid, cmdline_of(p)) for p in left]}"
        if sig != signal.SIGKILL:  # a killed session cannot remove its folder; the next run does
            assert not scratch_left(tmpdir)
    finally:
        end_child(proc)


def test_a_forked_worker_takes_its_own_tmpdir_not_the_servers(side, servers, tmp_path):
    """The server's imports may have asked tempfile for its folder (it keeps the answer): the
    worker's temporary files still go to its own TMPDIR (a worker group's scratch folder)."""
    main = side.path / "numabench" / "workers" / "main.py"
    main.write_text("import tempfile\ntempfile.gettempdir()\n" + main.read_text().replace(
        '"env": os.environ.get("FORK_TEST_VAR"),', '"env": __import__("tempfile").gettempdir(),'))
    served = servers.attach(side)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc, seen = start_worker(served, env={**served.environment(), "TMPDIR": str(scratch)})
    assert seen["env"] == str(scratch)
    assert finish(proc, "exit 0") == 0


def test_a_side_whose_import_starts_cuda_is_refused(side, servers):
    """A fork of a process that started CUDA cannot use it: such a side is an error at its start."""
    main = side.path / "numabench" / "workers" / "main.py"
    main.write_text("import torch\ntorch.cuda._initialized = True  # as a CUDA call at import would\n"
                    + main.read_text())
    with pytest.raises(WorkerError, match="CUDA was initialised while the worker code was imported"):
        servers.attach(side)


def test_a_failed_fork_fails_that_request_only(monkeypatch, tmp_path):
    """fork(2) refused (no memory, no pid left): the client is told, the streams it passed are
    closed, and the server keeps no record of a worker (it serves on)."""
    import errno
    import selectors

    from numabench.workers.forks import server as forkserver

    def no_fork() -> int:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(forkserver.os, "fork", no_fork)
    client, server_end = socket.socketpair()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    streams = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
    body = json.dumps({"argv": ["touch"], "mode": 0, "nodes": [], "cpus": [0], "cwd": str(tmp_path), "env": {}})
    socket.send_fds(client, [b"%08d" % len(body) + body.encode()], streams)
    workers: dict = {}
    with selectors.DefaultSelector() as sel:
        forkserver._start(server_end, listener, sel, workers, None, None)
        assert not sel.get_map()
    answer = json.loads(client.makefile("rb").readline())
    assert answer == {"error": "fork failed: [Errno 11] Resource temporarily unavailable"}
    assert workers == {}
    assert server_end.fileno() == -1  # its connection closed
    for fd in streams:
        os.close(fd)
    client.close()
    listener.close()
