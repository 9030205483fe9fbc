"""Shared test helpers (imported by test modules; tests/ is on sys.path under pytest)."""
from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psutil

from numabench.machine.capabilities import Capabilities


def fake_caps(**kw) -> Capabilities:
    """Capabilities as this 6.18 VM with numactl 2.0.16 has them; override any field."""
    base = dict(kernel_release="6.18.44-fc-v595", weighted_interleave_kernel=True, weighted_interleave_errno=0,
                preferred_many_kernel=True, weights_dir=True, weights_writable=True, weights_auto_mode=True,
                numactl_path="/usr/bin/numactl", numactl_version=None, numactl_weighted=False,
                numactl_preferred_many=True)
    base.update(kw)
    return Capabilities(**base)


def fake_weights_dir(tmp_path, auto: str = "true"):
    """A weighted_interleave sysfs folder with node0's weight and the auto-mode switch set to ``auto``."""
    wdir = tmp_path / "weighted_interleave"
    wdir.mkdir()
    (wdir / "node0").write_text("1\n")
    (wdir / "auto").write_text(f"{auto}\n")
    return wdir


# Children that run the suite: started with defined signal dispositions, in their own process
# group, and never outliving the test that started them.
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: a runner under nohup ignores it
END_GRACE_S = 20.0  # an interrupted run's time to end its workers and remove its scratch folders


def dispositions(ignored: Sequence[signal.Signals] = ()) -> Callable[[], None]:
    """A preexec_fn: SIGINT, SIGTERM and SIGHUP at their defaults in the child, whatever this test run
    inherited, except ``ignored`` (as `trap '' INT`, a background job of a non-interactive
    shell or a CI wrapper leaves them)."""
    def preexec() -> None:
        for sig in INTERRUPTS:
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    return preexec


def start_child(cmd: Sequence[str], ignored: Sequence[signal.Signals] = (), **kw: Any) -> subprocess.Popen:
    """``cmd`` in a new session (its own process group, which end_child kills), output as text."""
    # preexec_fn: the test processes start no threads that could hold a lock across the fork
    return subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=dispositions(ignored), **kw)  # noqa: PLW1509


def end_child(proc: subprocess.Popen, grace_s: float = END_GRACE_S) -> None:
    """Stop the child's whole process group: SIGTERM first (the suite ends its workers and removes
    their scratch folders), SIGKILL after ``grace_s``; workers die with their parent
    (PR_SET_PDEATHSIG). Also clears stragglers of a child that has exited."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    if proc.poll() is None:
        proc.communicate()


def finish(proc: subprocess.Popen, timeout_s: float) -> str:
    """The child's output once it exits; its group is ended whether it did or not (a timeout
    still raises TimeoutExpired, after that)."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        end_child(proc)
    return out


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def scratch_left(tmpdir: Path) -> list[str]:
    """WorkerGroup scratch folders (numabench-run-*) under a child's TMPDIR."""
    return sorted(p.name for p in tmpdir.glob("numabench-run-*"))


def cmdline_of(p: psutil.Process | int) -> str:
    """The process's command line, or "" once it has ended (it may end between any two calls)."""
    try:
        return " ".join((p if isinstance(p, psutil.Process) else psutil.Process(p)).cmdline())
    except psutil.Error:
        return ""


def running(p: psutil.Process | int) -> bool:
    """Whether the process still runs (not ended, not a zombie); it may end between any two calls."""
    try:
        proc = p if isinstance(p, psutil.Process) else psutil.Process(p)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants_of(pid: int) -> list[psutil.Process]:
    """The process's descendants, or [] once it has ended."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def workers_of(pid: int) -> list[psutil.Process]:
    """The numabench workers among the process's descendants."""
    return [p for p in descendants_of(pid) if "numabench.workers.main" in cmdline_of(p)]


def wait_for_workers(proc: subprocess.Popen, timeout_s: float = 120.0) -> list[psutil.Process]:
    """The child's workers once one runs (a case has started); AssertionError if the child
    ends or none starts within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        seen = workers_of(proc.pid)
        if seen:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no worker started within {timeout_s:g} s (exit code {proc.poll()})")


def import_seed_runs(tmp_path: Path) -> list[str]:
    """The seed's two-node CSVs (plain and weighted interleave, DRAM and CXL) imported as
    runs under tmp_path: the committed baselines have one node."""
    from numabench.cli import main

    seed = Path(__file__).parent / "data" / "seed"
    runs = []
    for kind in ("normal", "weighted"):
        path = tmp_path / f"{kind}.json"
        assert main(["import-csv", str(seed / f"qwen2.5-7B_{kind}_interleave.csv"), "--out", str(path),
                     "--gpu", "seed GPU", "--cpu", "seed host"]) == 0
        runs.append(str(path))
    return runs


def publish_seed_site(tmp_path: Path) -> Path:
    """A site published from the seed's imported runs (its advisor and model pages)."""
    from numabench.cli import main

    out = tmp_path / "site"
    assert main(["publish", *import_seed_runs(tmp_path), "--out", str(out)]) == 0
    return out


def git_in(repo: Path, *args: str) -> None:
    """Run git in ``repo`` as a fixed test identity, with no user or system configuration."""
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def plausible_reply(key: str, **fields: Any):
    """Family ``key``'s setup reply (its ``Family.setup_reply`` class) with plausible values, as a
    one-rank run on node 0 would report; ``fields`` override them."""
    from numabench.families import family
    from numabench.families.dataloader.reply import LoaderWorkerReport
    from numabench.families.pinned_alloc.reply import AllocatorReport
    from numabench.families.train_step.reply import GpuIdle
    from numabench.numa.placement import PlacementReport

    pages = PlacementReport({0: 64 * 2**20}, source="move_pages")
    allocator = dict(requested_bytes=271581184, reserved_bytes=2**29, resident_bytes=2**29,
                     torch_host_stats_bytes=None, placement=pages, honours_policy=True,
                     message="placement N0=100.0%", how="mmap + first touch + cudaHostRegister")
    common = dict(placement=pages, numa_maps=pages)
    values: dict[str, dict[str, Any]] = {
        "touch": dict(common, bytes=64 * 2**20),
        "host_membw": dict(common, threads=2, bytes_per_array=64 * 2**20),
        "cpu_adam": dict(common, threads=2, max_rel_error={"ours-adam": 1e-7}, simd="avx2",
                         bytes_per_element={"plain": 28}),
        "pinned_alloc": dict(placement=pages, bytes=271581184, device_name="NVIDIA H100",
                             allocators={a: AllocatorReport(**allocator)
                                         for a in ("register", "torch", "cudahostalloc")}),
        "transfer": dict(common, memory=["pinned", "pageable"], bytes=2**28, device_name="NVIDIA H100",
                         checked=True),
        "broadcast": dict(common, bytes=2**28, ngpus=2, chunk_bytes=2**24, peer_access=[True], checksum=12345,
                          methods=["pageable", "pinned"], devices=["NVIDIA H100", "NVIDIA H100"]),
        "adam_offload": dict(common, bytes_h2d=4 * 2**26, bytes_d2h=3 * 2**26,
                             max_rel_error={"ours": {"adam": 1e-7, "adamw": 1e-7}}, alloc="register",
                             chunk_elems=2**21, overlap_chunks=32, device_name="NVIDIA H100", limit_h2d_GBps=50.0,
                             limit_d2h_GBps=50.0, limit_d2d_GBps=2000.0, limit_bidir_h2d_GBps=40.0,
                             limit_bidir_d2h_GBps=40.0),
        "dataloader": dict(common, binding="bound", batch_per_rank=32, bytes_per_batch=32 * 3 * 224 * 224 * 4,
                           device="cpu", pin_memory=False, main_affinity=[0, 1], device_name="cpu",
                           num_workers=2, batches_per_round=4, image_side=224,
                           loader_workers=[LoaderWorkerReport(worker_id=0, pid=100, affinity=[0, 1],
                                                              mempolicy_mode=2, mempolicy_mode_name="bind",
                                                              mempolicy_nodes=[0])]),
        "train_step": dict(common, placed="host state", mempolicy={"mode": "bind", "mode_number": 2, "nodes": [0]},
                           case_policy="bind:0", kernel_max_rel_error=None, host_bytes_by_node=pages,
                           host_state_bytes=2**20, peak_gpu_bytes=2**30, setup_losses=[7.0, 6.5, 6.0],
                           param_digest="ab12", param_digests_all_ranks=["ab12"], n_params=10**6,
                           tokens_per_step=32 * 128, seq_len=128, batch_per_rank=32, impl="ddp",
                           backend="nccl", device_name="NVIDIA H100", threads=2, torch="2.5.0",
                           gpu_idle=GpuIdle(gpu_idle_fraction=0.2, sm_idle_fraction=0.3, window_s=0.1,
                                            profiled_steps=2, source="torch.profiler")),
    }
    if key not in values:
        raise KeyError(f"no plausible reply for family {key!r}: add one (allowed {', '.join(sorted(values))})")
    return family(key).setup_reply(**{**values[key], **fields})


# Ports. None is ever picked by binding port 0, closing the socket and handing the number on:
# any other process may take it in between (EADDRINUSE; two suites or two xdist workers on one
# runner). A port a test only needs to be refused is held; a server that takes its port as a
# number is started on a random port below Linux's ephemeral range (where port-0 binds never
# land) and started again on another where that one was taken.
SERVER_PORTS = range(20000, 32768)


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A local TCP port that refuses connections (bound, never listening) and that no other
    process can take while the ``with`` block holds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


class PortTaken(Exception):
    """A server could not bind the port it was given: start it again on another."""


def start_on_a_free_port(start: Callable[[int], Any], attempts: int = 20) -> Any:
    """``start(port)`` on random ports of SERVER_PORTS until one does not raise PortTaken."""
    tried = []
    for port in random.sample(SERVER_PORTS, attempts):
        try:
            return start(port)
        except PortTaken:
            tried.append(port)
    raise RuntimeError(f"every port tried was taken: {tried}")


def _machine_busy_s() -> float | None:
    """CPU seconds the machine spent busy since boot, all processes (/proc/stat: user, nice,
    system, irq, softirq, and steal: time the hypervisor gave another guest); None without it."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:9]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields)
    except (OSError, ValueError, IndexError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children that ended and were waited for (theirs too)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


class NeighbourCPU:
    """How many cores other processes kept busy while the block ran: the machine's busy CPU time
    less this process's and its children's (the children started in the block must have ended by
    its end), over the block's wall time. What makes a timing on a shared runner noisy; ``cores``
    is None where /proc/stat cannot be read."""

    def __init__(self) -> None:
        self.cores: float | None = None
        self.wall_s = 0.0

    def __enter__(self) -> "NeighbourCPU":
        self._t0, self._busy0, self._own0 = time.monotonic(), _machine_busy_s(), _own_cpu_s()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.monotonic() - self._t0
        busy = _machine_busy_s()
        if busy is not None and self._busy0 is not None and self.wall_s > 0:
            others = (busy - self._busy0) - (_own_cpu_s() - self._own0)
            self.cores = max(others, 0.0) / self.wall_s

    def __str__(self) -> str:
        return "unknown" if self.cores is None else f"{self.cores:.2f} cores for {self.wall_s:.0f} s"


class QuietJsonHandler(BaseHTTPRequestHandler):
    """A test HTTP server's handler base: no request log, JSON replies."""

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def adamw_reference_steps(init: Sequence[Any], grads: Sequence[Sequence[Any]], hyper: Any) -> tuple[list, Any]:
    """torch.optim.AdamW in float64 from ``init`` over each set of ``grads`` (``hyper``: lr, betas, eps,
    weight_decay): the parameters and the optimizer, to compare an update and its state against."""
    import torch

    ps = [t.detach().to(torch.float64).clone().requires_grad_(True) for t in init]
    opt = torch.optim.AdamW(ps, lr=hyper.lr, betas=hyper.betas, eps=hyper.eps, weight_decay=hyper.weight_decay,
                            foreach=False)
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = g.to(torch.float64).clone()
        opt.step()
    return ps, opt
