"""train_step's memory and traffic model (torch-free): bytes per parameter on the GPU and the host,
the activation estimate against the peaks measured on an H100, the fits-in-memory verdicts (host
memory it cannot have skips, GPU memory it cannot have is a predicted out-of-memory), each mode's
capacity, PCIe bytes each way and a CPU-side optimizer's host bytes; the pinned share of numa_maps."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from numabench.cases import Case
from numabench.families import family
from numabench.families.train_step import MODES, host_state_bytes, pcie_bytes_per_param
from numabench.families.train_step.configs import MODELS
from numabench.families.train_step.memory import (
    activation_bytes,
    capacity,
    gpu_bytes_per_param,
    host_bytes_per_param,
    memory_fit,
    need,
)
from numabench.families.train_step.traffic import host_optimizer_bytes, pcie_bytes_by_direction
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.numa.placement import parse_numa_maps, pinned_report

GIB = 2**30
H100_GPU = int(79.6 * GIB)  # what CUDA reports for an H100 80GB
H100_HOST = 128 * GIB  # the H100 x1 VM's memory
MACHINES = Path(__file__).resolve().parent / "data" / "machines"


@lru_cache(maxsize=None)
def topo(name: str):
    return discover(MACHINES / name)


def case(mode, model="5b", batch=4, dtype="bf16", nprocess=1):
    from numabench.numa.policy import Policy

    return Case("train_step", nprocess, batch, Policy.parse("bind:0"), dtype,
                (("mode", mode), ("model", model), ("cpu_bind", "node")))


def test_gpu_bytes_per_parameter_by_mode():
    one_rank = {m: gpu_bytes_per_param(m, "bf16") for m in MODES}
    assert one_rank == {"ddp": 22, "fsdp": 16, "fsdp-offload": 0, "deepspeed-zero2": 4, "deepspeed-zero3": 4,
                        "torchao-offload": 10, "streamed": 4, "no-offload": 22, "no-offload-master": 18,
                        "deepspeed-zenflow": pytest.approx(4.3), "streamed-split": 4}
    assert gpu_bytes_per_param("no-offload", "fp32") == 20 and gpu_bytes_per_param("streamed", "fp32") == 8
    # more ranks: sharded state splits, DDP adds the low-precision gradients and its buckets of them
    assert gpu_bytes_per_param("fsdp", "bf16", 4) == 4 and gpu_bytes_per_param("deepspeed-zero2", "bf16", 2) == 3
    assert gpu_bytes_per_param("streamed", "bf16", 2) == 8 and gpu_bytes_per_param("no-offload", "bf16", 2) == 22
    with pytest.raises(ValueError, match="unknown mode 'zero9'"):
        gpu_bytes_per_param("zero9", "bf16")
    with pytest.raises(ValueError, match="dtype 'fp16': allowed fp32 or bf16"):
        host_bytes_per_param("streamed", "fp16")


def test_host_bytes_per_parameter_are_the_measured_host_state():
    """The figures docs/RESULTS.md lists as found and checked on the GPU ranks; a replicated mode
    keeps a copy per rank, ZeRO and FSDP split theirs; the bounds for the plan stay the larger ones."""
    assert {m: host_bytes_per_param(m, "bf16") for m in MODES if host_bytes_per_param(m, "bf16")} == {
        "streamed": 12, "torchao-offload": 16, "deepspeed-zero2": 16, "deepspeed-zero3": 18, "fsdp-offload": 12,
        "deepspeed-zenflow": 24, "streamed-split": 12}
    assert host_bytes_per_param("deepspeed-zero2", "bf16", 2) == 8 and host_bytes_per_param("streamed", "bf16", 2) == 12
    # the time plan's figures stay the bounds (DeepSpeed's CPU accelerator keeps more)
    n = 5_099_462_656
    assert host_state_bytes(case("deepspeed-zero2", nprocess=2)) == 20 * n >= 2 * host_bytes_per_param(
        "deepspeed-zero2", "bf16", 2) * n


def test_the_activation_estimate_bounds_the_peaks_measured_on_an_h100():
    """The H100 x1 baseline's peaks (no-offload: small at batch 32 24.8 GiB, 1b at batch 8 27.7 GiB) and
    the bf16 + fp32 master recipe's measured on an H100 (small, 22.7 GiB): state plus the estimate
    lies above each, within 15%."""
    for model, batch, mode, peak in (("small", 32, "no-offload", 24.8 * GIB),
                                     ("small", 32, "no-offload-master", 22.7 * GIB), ("1b", 8, "no-offload", 27.7 * GIB)):
        nd = need(case(mode, model, batch))
        assert peak < nd.gpu_bytes < 1.15 * peak, (model, mode, nd.gpu_bytes / GIB)
    cfg = MODELS["5b"]
    assert activation_bytes(cfg, 4, "bf16") == 4 * 1024 * (4096 * 24 * 34 + 32000 * 14)
    assert activation_bytes(cfg, 4, "fp32") == 4 * 1024 * (4096 * 24 * 68 + 32000 * 12)


def test_the_5b_model_needs_offload_on_an_h100():
    """No-offload keeps 18-22 B per parameter: ~100 GiB or more at 5.1B, beyond 79.6 GiB: predicted
    to run out of GPU memory (it runs, and that is recorded). The offload modes fit the GPU and a
    128 GiB host; with 64 GiB of host none does (the streamed mode's 57 GiB is over its 80% share)."""
    fits = {m: memory_fit(case(m), H100_GPU, H100_HOST) for m in MODES}
    assert {m for m, f in fits.items() if f.out_of_memory} == {"no-offload", "no-offload-master", "ddp", "fsdp"}
    # ZenFlow keeps 24 B per parameter on the host (a second gradient buffer, a stale master copy)
    assert {m for m, f in fits.items() if f.skip} == {"deepspeed-zenflow"}
    oom = fits["no-offload-master"].out_of_memory
    assert oom.startswith("mode no-offload-master, model 5b (5.10B parameters) needs ~99.9 GiB per GPU (18 B per "
                          "parameter: 85.5 GiB, plus ~14.5 GiB of activations at 4 sequences); the GPU has 79.6 GiB")
    small_host = {m: memory_fit(case(m), H100_GPU, 64 * GIB) for m in ("streamed", "torchao-offload", "deepspeed-zero2")}
    assert all(f.skip for f in small_host.values())
    assert small_host["streamed"].skip == (
        "mode streamed, model 5b (5.10B parameters) needs 57.0 GiB of host memory (12 B per parameter of state per "
        "rank, the fp32 model while it is built on the host, the batches); the host has 64.0 GiB, 80% usable: "
        "51.2 GiB")
    # the 1b and small models fit every mode there
    assert not any(memory_fit(case(m, "1b", 8), H100_GPU, H100_HOST).out_of_memory for m in MODES)


def test_the_family_predicts_on_a_gpu_machine_and_checks_host_memory_alone_on_the_cpu():
    fam = family("train_step")
    gpus = topo("dgx-2socket-8gpu")
    caps = probe(first_node=0)
    mem = gpus.gpus[0].memory_bytes
    verdict = fam.memory_verdict(case("no-offload"), gpus, H100_HOST)
    assert (verdict.out_of_memory is not None) == (mem > 0 and 22 * 5.1e9 > 0.95 * mem)
    assert fam.skip_reason(case("no-offload"), gpus, caps, H100_HOST) is None  # it runs: its out-of-memory is a result
    cpu = topo("vm-1node")
    assert fam.memory_verdict(case("ddp", "tiny", 4, "fp32"), cpu, 8 * GIB).out_of_memory is None
    assert "host memory" in fam.skip_reason(case("streamed", "5b"), gpus, caps, 32 * GIB)


def test_capacity_is_the_smaller_of_what_the_gpu_and_the_host_allow():
    c = capacity("streamed", "bf16", 80 * GIB, 128 * GIB, activations=15 * GIB)
    assert c.limit == "host" and c.params == pytest.approx(0.8 * 128 * GIB / 12)
    assert c.gpu_params == pytest.approx((0.95 * 80 - 15) * GIB / 4)
    ref = capacity("no-offload", "bf16", 80 * GIB, 128 * GIB, activations=15 * GIB)
    assert ref.limit == "GPU" and ref.host_params is None and ref.params == pytest.approx((0.95 * 80 - 15) * GIB / 22)
    assert capacity("fsdp-offload", "bf16", 80 * GIB, 128 * GIB).gpu_params is None
    assert capacity("no-offload", "bf16", 10 * GIB, 128 * GIB, activations=20 * GIB).params == 0


def test_pcie_bytes_each_way_and_host_optimizer_bytes():
    assert pcie_bytes_by_direction("streamed", "bf16") == (12, 12)
    assert pcie_bytes_by_direction("deepspeed-zero2", "bf16") == (2, 4)
    assert pcie_bytes_by_direction("deepspeed-zero3", "fp32") == (4, 4)
    assert pcie_bytes_by_direction("fsdp-offload", "bf16") == (8, 4)
    assert pcie_bytes_by_direction("no-offload-master", "bf16") == (0, 0)
    assert pcie_bytes_per_param("torchao-offload", "bf16") == 8 == sum(pcie_bytes_by_direction("torchao-offload",
                                                                                              "bf16"))
    assert host_optimizer_bytes("deepspeed-zero2", "bf16") == 30 and host_optimizer_bytes("deepspeed-zero2", "fp32") == 28
    assert host_optimizer_bytes("torchao-offload", "bf16") == 28 and host_optimizer_bytes("streamed", "bf16") is None
    with pytest.raises(ValueError, match="unknown mode 'zero9'"):
        host_optimizer_bytes("zero9", "bf16")


NUMA_MAPS = """\
7f0000000000 default file=/dev/zero\\040(deleted) dirty=262144 N0=200000 N1=62144 kernelpagesize_kB=4
7f1000000000 default anon=1000 dirty=1000 N0=1000 kernelpagesize_kB=4
7f2000000000 default file=/usr/lib/libc.so.6 mapped=100 N1=100 kernelpagesize_kB=4
7f3000000000 default file=/dev/zero\\040(deleted) dirty=512 N0=512 kernelpagesize_kB=4
7f4000000000 default
"""


def test_pinned_share_counts_the_mappings_cuda_sees_pinned():
    maps = parse_numa_maps(NUMA_MAPS)
    pinned_at = {0x7F0000000000}  # a cudaHostAlloc'd buffer; the other /dev/zero mapping is a pageable mmap
    rep = pinned_report(maps, lambda address: address in pinned_at)
    assert rep.bytes_by_node == {0: 200000 * 4096, 1: 62144 * 4096}
    assert pinned_report(maps, lambda address: False).bytes_by_node == {}
    asked = []
    pinned_report(maps, lambda address: asked.append(address) or False)
    assert 0x7F4000000000 not in asked  # a mapping without resident pages is not asked about
