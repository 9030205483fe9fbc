"""cpu_adam: the ZeRO-Offload optimizer on the CPU, over NUMA-placed host state."""
from __future__ import annotations

from numabench.cases import Case, CaseResult
from numabench.families.base import Family
from numabench.families.cpu_adam.reply import CpuAdamReply
from numabench.numa.budget import KindDemand

DEFAULT_ROUNDS = 15
DEFAULT_WARMUP = 2

IMPLS = ("ours", "ours+copy", "torch-fused", "torch-fused+copy", "torch-foreach", "deepspeed")


# The host state per rank by tensor kind (the ``place`` axis): which kind each buffer is, and how
# many times a step touches each byte of a kind (the update reads param, grad and the moments and
# writes param and the moments back; the +copy impls write the bf16 copy of the weights).
STATE_BUFFERS = {"param": "master", "grad": "grads", "exp_avg": "moments", "exp_avg_sq": "moments",
                 "copy_out": "weights"}
TOUCHES = {"master": 2, "moments": 2, "grads": 1, "weights": 1}
COPY_OUT_ITEMSIZE = 2  # bf16


def state_kinds(case: Case) -> tuple[KindDemand, ...]:
    n = case.numel_per_rank
    size = {"master": n * case.itemsize, "grads": n * case.itemsize, "moments": 2 * n * case.itemsize,
            "weights": n * COPY_OUT_ITEMSIZE}
    return tuple(KindDemand(k, size[k], t) for k, t in TOUCHES.items())


def skip_reason(case) -> str | None:
    if case.param("impl") == "deepspeed":
        from numabench.families.cpu_adam.worker import deepspeed_available

        if not deepspeed_available():
            return ("impl deepspeed needs the optional 'deepspeed' package (pip install 'numabench[deepspeed]'; "
                    "docs/RESULTS.md pins the version): not importable")
    if case.param("impl", "").endswith("+copy") and case.dtype != "fp32":
        return "the fused bf16 copy-out is the fp32-master-state layout; it runs with dtype fp32 only"
    return None


def metrics(result: CaseResult, phase: str) -> dict:
    impl = result.case.param("impl")
    itemsize = result.case.itemsize
    n = result.case.numel_per_rank * result.case.nprocess
    # read p, g, m, v; write p, m, v; +2 B for the bf16 copy; write-allocate not counted
    per_elem = 7 * itemsize + (2 if impl and impl.endswith("+copy") else 0)
    med = result.median(phase)
    info = result.setup_info[0]
    return {"bytes": per_elem * n, "bytes_per_element": per_elem, "GBps": round(per_elem * n / med / 1e9, 3),
            "write_allocate_counted": False, "threads_per_rank": info.threads, "simd": info.simd,
            "max_rel_error": info.max_rel_error}


FAMILY = Family(
    kernels=("cpu_adam",),
    variant_kernels=lambda v: ("cpu_adam",) if v.get("impl", "ours").startswith("ours") else (),
    key="cpu_adam",
    description=("Adam on the CPU over host-resident state placed by the policy (ZeRO-Offload), one rank "
                 "per CPU node: ours (`csrc/cpu_adam.cpp`, AVX-512/AVX2, optional fused bf16 copy-out), "
                 "torch fused, torch foreach, DeepSpeedCPUAdam if installed"),
    needs="nothing (`numabench[deepspeed]` for DeepSpeed's)",
    phases=("step",),
    setup_reply=CpuAdamReply,
    rank_kind="cpu-node",
    # 512 MiB per fp32 tensor: past a GPU host's last-level cache (300 MiB on the H100 VMs' Xeon), so
    # a step reads the memory a policy placed; at 64 MiB a tensor its time was the cache's, and two
    # sides of an A/B evicting each other's arrays moved it by 2-7x
    default_sizes=(128 * 2**20,),
    default_dtypes=("fp32",),
    extra_axes={"impl": IMPLS},
    worker_axes=("impl",),
    knobs=("simd_level", "place"),  # our kernel's SIMD level (auto: the best this CPU has); per-kind placement
    state_kinds=state_kinds,
    host_bytes_per_element=lambda case: 4 * case.itemsize + 2,
    case_skip_reason=skip_reason,
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    ab_rounds=30,  # its pairs' spread is its rounds' (H200 x1: 6.2% a pair at 5 rounds, 4.1% at 10)
    default_warmup=DEFAULT_WARMUP,
    injects_slowdown=True,
    rewarm_every_round=True,  # its threads fill the node's CPUs (docs/GATE.md: the untimed step)
)
