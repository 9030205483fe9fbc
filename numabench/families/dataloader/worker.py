"""Family ``dataloader``, per rank: a DataLoader feeding this rank's GPU (or host memory).

The rank's trainer process (this worker) iterates a DataLoader over
``datasets.SyntheticImages`` (random uint8 images decoded and augmented on the
CPU by the loader workers), with ``pin_memory`` where there is CUDA, and copies
each batch to its destination: the GPU (H2D from the pinned batch,
synchronized) or, on a CPU-only machine, a placed host buffer.

``binding`` (not a worker axis: it changes how the worker is launched):
- ``bound``: the worker runs on its GPU's node (--cpunodebind by the runner,
  memory by the case's policy), and every loader worker re-applies both in
  ``worker_init_fn`` (``bind_loader_worker``): loader workers are forked or
  spawned, and libraries (OpenMP runtimes, numa_bind in the trainer) change a
  thread's affinity or policy after start, so the seed re-binds them (seed 003).
- ``unbound``: no CPU binding anywhere; the policy still places memory.

Every loader worker reports what it sees from inside ``worker_init_fn``
(sched_getaffinity, get_mempolicy); in ``bound`` mode setup fails unless each
matches the node's CPUs and the case's policy. Placement is judged on the pages
of a received batch (pinned by the trainer, or the loader worker's shared
memory on the CPU) and, on the CPU, the destination buffer.

One timed round = ``batches_per_round`` batches: wait for the batch, copy it
to the destination, after ``drain_batches`` taken untimed (the batches the
loader workers prefetched while the round was not running); ``batch`` is the round's wall time per batch (after a
device synchronize), ``h2d`` the copy alone (CUDA events, or wall time on the
CPU).

Defaults (the knobs that set each, --numa-axis NAME=N, in brackets; a value
other than auto shows in the case id):
- CPU-only: 2 loader workers [loader_workers], 4 batches per round
  [loader_batches], 224x224 images [image_px].
- GPU: min(8, CPUs / nprocess) loader workers (the same for bound and
  unbound), 8 batches per round, 224x224 images, pin_memory.
- Both: the prefetch depth (loader workers x 2) drained untimed before each
  round [loader_drain].
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import time

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.dataloader.reply import DataloaderReply, LoaderWorkerReport
from numabench.numa import mempolicy
from numabench.numa.placement import numa_maps_report, pages_report
from numabench.numa.policy import Policy
from numabench.toolkit.rank_barrier import SCRATCH_ENV

DATASET_LENGTH = 1 << 16
PREFETCH_FACTOR = 2  # batches each loader worker keeps ready
REPORT_WAIT_S = 60.0


def apply_policy(pol: Policy) -> None:
    """Set the calling thread's memory policy to the resolved policy ``pol``."""
    if pol.kind == "default":
        mempolicy.set_mempolicy(mempolicy.MPOL_DEFAULT)
    else:
        mempolicy.set_mempolicy(pol.mode, pol.nodes)


def expected_mempolicy(pol: Policy) -> tuple[int, tuple[int, ...]]:
    return (mempolicy.MPOL_DEFAULT, ()) if pol.kind == "default" else (pol.mode, tuple(pol.nodes))


def bind_loader_worker(worker_id: int, cpus: list[int] | None = None, policy: Policy | None = None,
                       report_dir: str | None = None) -> None:
    """DataLoader ``worker_init_fn``: re-bind this loader worker to ``cpus`` and ``policy``
    (None: leave that alone), then write what it sees to ``report_dir``/worker-<id>.json."""
    if cpus:
        os.sched_setaffinity(0, set(cpus))
    if policy is not None:
        apply_policy(policy)
    if report_dir:
        mode, nodes = mempolicy.get_mempolicy()
        report = {"worker_id": worker_id, "pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
                  "mempolicy_mode": mode, "mempolicy_mode_name": mempolicy.MODE_NAMES.get(mode, str(mode)),
                  "mempolicy_nodes": list(nodes)}
        tmp = os.path.join(report_dir, f".worker-{worker_id}.json")
        with open(tmp, "w") as f:
            json.dump(report, f)
        os.replace(tmp, os.path.join(report_dir, f"worker-{worker_id}.json"))


def check_loader_reports(reports: list[dict], cpus: list[int] | None, policy: Policy | None) -> list[str]:
    """Problems with the loader workers' own view of their binding (empty: all re-bound)."""
    problems = []
    want_mode = expected_mempolicy(policy) if policy is not None else None
    for r in reports:
        if cpus and sorted(r["affinity"]) != sorted(cpus):
            problems.append(f"loader worker {r['worker_id']} runs on CPUs {r['affinity']}, expected {sorted(cpus)}")
        if want_mode and (r["mempolicy_mode"], tuple(r["mempolicy_nodes"])) != want_mode:
            problems.append(f"loader worker {r['worker_id']} has memory policy {r['mempolicy_mode_name']} "
                            f"{r['mempolicy_nodes']}, expected {policy}")
    return problems


def loader_settings(spec: WorkerSpec, cuda: bool) -> dict:
    """The loader's settings: the case's knobs (loader_workers, loader_batches, loader_drain,
    image_px), else defaults."""
    knob = spec.knob
    nproc = max(1, spec.nprocess)
    workers = int(knob("loader_workers") or (2 if not cuda else max(2, min(8, (os.cpu_count() or 2) // nproc))))
    drain = knob("loader_drain")
    return {"num_workers": workers,
            "batches_per_round": int(knob("loader_batches") or (8 if cuda else 4)),
            "drain_batches": int(drain) if drain is not None else workers * PREFETCH_FACTOR,
            "image_side": int(knob("image_px") or 224)}


class Worker(BaseWorker):
    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec
        import torch

        self.cuda = spec.gpu is not None
        self.device = torch.device("cuda", spec.gpu) if self.cuda else torch.device("cpu")
        self.batch = spec.batch  # samples per batch for this rank
        variants = spec.variants
        self.binding = variants[0].get("binding", "bound")
        if self.binding not in ("bound", "unbound"):
            raise ValueError(f"unknown binding {self.binding!r}: allowed bound, unbound")
        self.bound = self.binding == "bound"
        self.cpus = list(spec.cpus) if self.bound and spec.cpus else None
        self.settings = loader_settings(spec, self.cuda)
        # In the group's scratch folder (removed by the parent even if this worker is killed)
        self.report_dir = tempfile.mkdtemp(prefix="numabench-loader-", dir=os.environ.get(SCRATCH_ENV))
        self.loader = self.it = None
        self.host_dest = None

    def setup(self) -> DataloaderReply:
        import torch
        from torch.utils.data import DataLoader

        from numabench.families.dataloader.datasets import InfiniteSampler, SyntheticImages
        from numabench.toolkit.hostmem import allocate

        if self.cuda:
            torch.cuda.set_device(self.device)
        s = self.settings
        side = s["image_side"]
        self.dataset = SyntheticImages(DATASET_LENGTH, side=side, seed=1 + self.spec.rank)
        init = functools.partial(bind_loader_worker, cpus=self.cpus,
                                 policy=self.spec.policy if self.bound else None, report_dir=self.report_dir)
        self.loader = DataLoader(self.dataset, batch_size=self.batch, sampler=InfiniteSampler(DATASET_LENGTH),
                                 num_workers=s["num_workers"], pin_memory=self.cuda, persistent_workers=True,
                                 prefetch_factor=PREFETCH_FACTOR, worker_init_fn=init, drop_last=True)
        self.it = iter(self.loader)
        shape = (self.batch, 3, side, side)
        numel = self.batch * 3 * side * side
        if self.cuda:
            self.dest = torch.empty(shape, dtype=torch.float32, device=self.device)
            self.dest_labels = torch.empty(self.batch, dtype=torch.int64, device=self.device)
        else:
            self.host_dest = allocate(numel, torch.float32, "pageable")
            self.dest = self.host_dest.tensor.view(shape)
            self.dest_labels = torch.empty(self.batch, dtype=torch.int64)
        # Correct before timed: the first batch is samples 0..B-1, decoded as the dataset says,
        # and it arrives intact at the destination.
        x, y = next(self.it)
        want = torch.stack([self.dataset[i][0] for i in range(min(2, self.batch))])
        # (allclose: the loader worker runs 1 intra-op thread, this process several; SIMD tails differ in ulps)
        if not torch.allclose(x[: len(want)], want, rtol=0, atol=1e-5) or \
                not torch.equal(y, torch.arange(self.batch) % 1000):
            raise RuntimeError("the loader's first batch differs from the dataset's samples 0..B-1")
        if self.cuda and not x.is_pinned():
            raise RuntimeError("pin_memory=True but the batch is not in pinned memory")
        self._copy(x, y)
        if self.cuda:
            torch.cuda.synchronize(self.device)
        if not torch.equal(self.dest.cpu(), x) or float(self.dest.abs().sum()) == 0:
            raise RuntimeError("the batch copied to the destination differs from the loaded batch")
        for _ in range(2 * s["num_workers"]):  # every loader worker has started and delivered
            x, y = next(self.it)
        reports = self._read_reports(s["num_workers"])
        problems = check_loader_reports(reports, self.cpus, self.spec.policy if self.bound else None)
        if problems:
            raise RuntimeError("loader workers not re-bound: " + "; ".join(problems))
        ranges = [(x.data_ptr(), x.numel() * x.element_size())]
        if self.host_dest is not None:
            ranges.append((self.host_dest.address, self.host_dest.nbytes))
        placement = pages_report(ranges)
        del x, y
        return DataloaderReply(placement=placement, numa_maps=numa_maps_report(),
                               loader_workers=[LoaderWorkerReport.from_dict(r) for r in reports],
                               binding=self.binding, batch_per_rank=self.batch, bytes_per_batch=numel * 4,
                               device=str(self.device), pin_memory=self.cuda,
                               main_affinity=sorted(os.sched_getaffinity(0)),
                               device_name=torch.cuda.get_device_name(self.device) if self.cuda else "cpu", **s)

    def _read_reports(self, n: int) -> list[dict]:
        deadline = time.monotonic() + REPORT_WAIT_S
        while True:
            names = sorted(f for f in os.listdir(self.report_dir) if f.startswith("worker-"))
            if len(names) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if len(names) < n:
            raise RuntimeError(f"only {len(names)} of {n} loader workers reported from worker_init_fn")
        out = []
        for name in names:
            with open(os.path.join(self.report_dir, name)) as f:
                out.append(json.load(f))
        return sorted(out, key=lambda r: r["worker_id"])

    def _copy(self, x, y) -> None:
        self.dest.copy_(x, non_blocking=self.cuda)
        self.dest_labels.copy_(y, non_blocking=self.cuda)

    def step(self, variant: dict | None = None) -> dict[str, float]:
        import torch

        k = self.settings["batches_per_round"]
        # Between rounds (the other variants', the other A/B side's) the loader workers refill their
        # queue: timed, those batches would measure how long the worker waited, not how fast the
        # loader makes batches. Taken untimed, the timed ones are made while the round runs.
        for _ in range(self.settings["drain_batches"]):
            next(self.it)
        copy_s = 0.0
        if self.cuda:
            stream = torch.cuda.current_stream(self.device)
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(k)]
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter_ns()
        for i in range(k):
            x, y = next(self.it)
            if self.cuda:
                events[i][0].record(stream)
                self._copy(x, y)
                events[i][1].record(stream)
            else:
                c0 = time.perf_counter_ns()
                self._copy(x, y)
                copy_s += (time.perf_counter_ns() - c0) * 1e-9
        if self.cuda:
            torch.cuda.synchronize(self.device)
            copy_s = sum(a.elapsed_time(b) for a, b in events) / 1e3
        self.pad.cpu(t0)  # an injected slowdown of the phase (batch): inside its wall time
        wall = (time.perf_counter_ns() - t0) * 1e-9
        return {"batch": wall / k, "h2d": copy_s / k}

    def close(self) -> None:
        self.it = None
        self.loader = None
        shutil.rmtree(self.report_dir, ignore_errors=True)
