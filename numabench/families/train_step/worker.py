"""Family ``train_step``, per rank: one training step of a small decoder-only transformer
(numabench.families.train_step.model) in a torch.distributed process group of all the case's ranks.

Modes (``mode`` axis, each its own worker run):
- ``ddp``: DistributedDataParallel; NCCL on GPUs, gloo on a CPU-only machine.
- ``fsdp``: FSDP2 ``fully_shard`` per block and at the root (FSDP1 with a
  block wrap policy where torch lacks fully_shard).
- ``fsdp-offload``: the same with torch's CPU offload of parameters, gradients
  and optimizer state (``CPUOffloadPolicy``; FSDP1 ``CPUOffload(offload_params=True)``):
  the ZeRO-Offload analogue, its host state placed by the case's NUMA policy.
  Needs CUDA.

``Trainer`` is the model + wrapper + optimizer + step, shared with the
torchrun entry point ``python -m numabench.tools.train_step_cli``.

The process group: rank = spec.rank, world = spec.nprocess, rendezvous
at spec.extra['master_addr']:spec.extra['master_port'] (the family passes a free port);
without them 127.0.0.1 and a port derived from the parent's pid and the case.

Setup runs ``SETUP_STEPS`` untimed steps on one fixed batch and checks that the
loss falls (the model learns), and in DDP that all ranks hold bit-identical
parameters afterwards (an all_gather of a parameter digest); peak GPU memory
(torch.cuda.max_memory_allocated) and the process's host memory per node
(/proc/self/numa_maps) are taken after them. Placement is judged on the
CPU-resident parameters and optimizer state (offload, or the CPU run), else on
the process's anonymous memory.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import time
import zlib

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.train_step import MODES, POOL

SETUP_STEPS = 4


def fsdp2_available() -> bool:
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard  # noqa: F401
    except ImportError:
        return False
    return True


def _local(t):
    """The local shard of a DTensor, the tensor itself otherwise."""
    return t.to_local() if hasattr(t, "to_local") else t


class Trainer:
    def __init__(self, mode: str, model: str, dtype: str, batch: int, device, *, seed: int = 0,
                 lr: float | None = None, data_seed: int = 0) -> None:
        import torch
        import torch.distributed as dist

        from numabench.families.train_step.configs import model_config
        from numabench.families.train_step.model import build_model, count_params

        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: allowed {', '.join(MODES)}")
        if dtype not in ("fp32", "bf16"):
            raise ValueError(f"dtype {dtype!r}: train_step runs fp32 or bf16 (mixed precision)")
        self.mode, self.model_name, self.dtype, self.batch = mode, model, dtype, batch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if mode == "fsdp-offload" and not self.cuda:
            raise RuntimeError("fsdp-offload needs a CUDA GPU (torch's CPU offload copies to a device)")
        self.cfg = model_config(model)
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        net = build_model(model, seed=seed)
        self.n_params = count_params(net)
        self.autocast = None
        bf16 = dtype == "bf16"
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            net = net.to(self.device)
            self.model = DDP(net, device_ids=[self.device.index] if self.cuda else None) if dist.is_initialized() \
                else net
            if bf16:
                self.autocast = torch.bfloat16
            self.impl = "DDP"
        elif fsdp2_available():
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

            mesh = init_device_mesh(self.device.type, (self.world,))
            kw = {"mesh": mesh,
                  "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if bf16 else MixedPrecisionPolicy()}
            if mode == "fsdp-offload":
                kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
            else:
                net = net.to(self.device)
            for blk in net.blocks:
                fully_shard(blk, **kw)
            fully_shard(net, **kw)
            self.model = net
            self.impl = "FSDP2 fully_shard" + (" + CPUOffloadPolicy" if mode == "fsdp-offload" else "")
        else:  # FSDP1
            from torch.distributed.fsdp import CPUOffload, MixedPrecision
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy

            from numabench.families.train_step.model import Block

            mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
            self.model = FSDP(net, auto_wrap_policy=ModuleWrapPolicy({Block}), mixed_precision=mp,
                              cpu_offload=CPUOffload(offload_params=mode == "fsdp-offload"),
                              device_id=self.device if self.cuda else None)
            self.impl = "FSDP1" + (" + CPUOffload(offload_params=True)" if mode == "fsdp-offload" else "")
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr if lr is None else lr, betas=(0.9, 0.95), weight_decay=0.01)
        g = torch.Generator().manual_seed(10_007 * (data_seed + 1))
        self.pool = [torch.randint(0, self.cfg.vocab, (batch, self.cfg.seq_len + 1), generator=g).to(self.device)
                     for _ in range(POOL)]
        self.k = 0

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one step over all ranks."""
        return self.batch * self.cfg.seq_len * self.world

    def step(self, batch=None):
        """One optimizer step; returns the loss tensor (not synchronized)."""
        import torch

        from numabench.families.train_step.model import lm_loss

        if batch is None:
            batch = self.pool[self.k % len(self.pool)]
            self.k += 1
        x, y = batch[:, :-1], batch[:, 1:]
        if self.autocast is not None:
            with torch.autocast(self.device.type, dtype=self.autocast):
                loss = lm_loss(self.model(x), y)
        else:
            loss = lm_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()

    def timed_step(self) -> float:
        """Seconds of one step: CUDA events on the current stream (synchronized), or wall time."""
        import torch

        if self.cuda:
            s = torch.cuda.current_stream(self.device)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(s)
            self.step()
            e1.record(s)
            e1.synchronize()
            return e0.elapsed_time(e1) / 1e3
        t0 = time.perf_counter_ns()
        self.step()
        return (time.perf_counter_ns() - t0) * 1e-9

    def param_digest(self) -> str:
        """sha256 over this rank's parameters (its shards under FSDP)."""
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(_local(p.detach()).float().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def host_state_ranges(self) -> list[tuple[int, int]]:
        """(address, bytes) of the CPU-resident parameters and optimizer state."""
        out = []
        tensors = [_local(p.detach()) for p in self.model.parameters()]
        for st in self.opt.state.values():
            tensors += [_local(v) for v in st.values() if hasattr(v, "data_ptr")]
        for t in tensors:
            if t.device.type == "cpu" and t.numel() > 1:
                out.append((t.data_ptr(), t.numel() * t.element_size()))
        return out


def anon_report(pid: int | str = "self"):
    """Pages per node of the process's anonymous mappings (heap, malloc, pinned, mmap'd)."""
    from numabench.numa.placement import PlacementReport, read_numa_maps

    totals: dict[int, int] = {}
    for e in read_numa_maps(pid):
        if "anon" in e.attrs and "file" not in e.attrs:
            for n, b in e.node_bytes.items():
                totals[n] = totals.get(n, 0) + b
    return PlacementReport(totals, source=f"/proc/{pid}/numa_maps anon")


def derived_port(spec: WorkerSpec) -> int:
    key = json.dumps({"nprocess": spec.nprocess, "numel": spec.numel, "dtype": spec.dtype,
                      "variants": [dict(v) for v in spec.variants]}, sort_keys=True)
    return 20000 + zlib.crc32(f"{os.getppid()}:{key}".encode()) % 30000


def rank_threads(spec: WorkerSpec, env: dict | None = None) -> int | None:
    """torch's intra-op threads for this rank: its CPUs shared among the ranks
    bound to the same node (``cpu_share``), so that ranks side by side do not
    run more threads than there are cores (GPU ranks too: FSDP's CPU offload
    runs the optimizer on the host). ``NUMABENCH_RANK_THREADS=N`` sets N, ``0``
    leaves torch's default (one thread per CPU the process may run on). None:
    leave torch's default (no CPUs known)."""
    env = os.environ if env is None else env
    forced = env.get("NUMABENCH_RANK_THREADS", "").strip()
    if forced:
        if not forced.isdigit():
            raise ValueError(f"NUMABENCH_RANK_THREADS={forced!r}: allowed a whole number (0: torch's default)")
        return int(forced) or None
    cpus = spec.cpus
    if not cpus:
        return None
    share = spec.cpu_share or 1
    return max(1, len(cpus) // share)


class Worker(BaseWorker):
    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec
        v = spec.variants[0]
        self.mode, self.model_name = v.get("mode", "ddp"), v.get("model", "tiny")
        self.trainer = None

    def setup(self) -> dict:
        import torch
        import torch.distributed as dist

        from numabench.numa.placement import numa_maps_report, pages_report

        spec = self.spec
        rank, world = spec.rank, spec.nprocess
        cuda = spec.gpu is not None
        device = torch.device("cuda", spec.gpu) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        threads = rank_threads(spec)
        if threads:
            torch.set_num_threads(threads)
        addr = str(spec.extra.get("master_addr") or "127.0.0.1")
        port = int(spec.extra.get("master_port") or derived_port(spec))
        with self.setup_part("dist_init"):
            dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                                    world_size=world, timeout=datetime.timedelta(seconds=300),
                                    **({"device_id": device} if cuda else {}))
        with self.setup_part("model"):
            self.trainer = tr = Trainer(self.mode, self.model_name, spec.dtype, spec.numel, device,
                                        data_seed=rank)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        # Correct before timed: the loss on one fixed batch falls over the setup steps.
        fixed = tr.pool[0]
        with self.setup_part("check"):
            losses = [float(tr.step(fixed)) for _ in range(SETUP_STEPS)]
        if not all(map(lambda v: v == v and abs(v) != float("inf"), losses)) or not losses[-1] < losses[0]:
            raise RuntimeError(f"loss does not fall over {SETUP_STEPS} steps on a fixed batch: {losses}")
        digest = tr.param_digest()
        digests = [None] * world
        dist.all_gather_object(digests, digest)
        if self.mode == "ddp" and len(set(digests)) != 1:
            raise RuntimeError(f"DDP ranks hold different parameters after {SETUP_STEPS} steps: {digests}")
        if cuda:
            torch.cuda.synchronize(device)
        ranges = tr.host_state_ranges()
        placement = pages_report(ranges) if ranges else anon_report()
        return {"placement": placement.to_dict(), "placed": "host state" if ranges else "process anon memory",
                "numa_maps": numa_maps_report().to_dict(), "host_bytes_by_node": anon_report().to_dict(),
                "host_state_bytes": sum(n for _, n in ranges),
                "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
                "setup_losses": losses, "param_digest": digest, "param_digests_all_ranks": digests,
                "n_params": tr.n_params, "tokens_per_step": tr.tokens_per_step, "seq_len": tr.cfg.seq_len,
                "batch_per_rank": tr.batch, "impl": tr.impl, "backend": dist.get_backend(),
                "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
                "threads": torch.get_num_threads(), "torch": torch.__version__}

    def step(self, variant: dict | None = None) -> dict[str, float]:
        return {"step": self.trainer.timed_step()}

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
