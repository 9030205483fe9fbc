"""CPU side of the GPU copy families (transfer, pinned_alloc, broadcast) and the
adam_offload alloc axis: case ids, worker-run grouping, skip reasons on the
recorded machines, default matrix sizes, and that on this CPU machine every
case of the three families is skipped with one clear reason."""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest
from helpers import fake_caps, plausible_reply

from numabench.cases import Case, default_policies
from numabench.families import family
from numabench.families.pinned_alloc.reply import AllocatorReport
from numabench.machine.capabilities import Capabilities
from numabench.machine.topology import Topology, discover
from numabench.numa.placement import PlacementReport
from numabench.numa.policy import Policy

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ROOT / "tests" / "data" / "machines"
COPY_FAMILIES = ("transfer", "pinned_alloc", "broadcast")


@lru_cache(maxsize=None)
def topo(name: str) -> Topology:
    return discover(MACHINES / name)


def caps(**kw) -> Capabilities:
    return fake_caps(**kw)


def default_cases(key: str, t: Topology) -> list[Case]:
    """The default matrix as fixtures/parametrize.family_cases builds it."""
    fam = family(key)
    nps = sorted({1, max(1, len(t.gpus))}) if fam.rank_kind == "gpu" else [1]
    extras: list[tuple] = [()]
    for axis, values in fam.axis_values().items():
        extras = [e + ((axis, v),) for e in extras for v in values]
    return [Case(key, n, size, pol, dt, ex) for n in nps for size in fam.default_sizes
            for pol in default_policies(t) for dt in fam.default_dtypes for ex in extras]


def runnable_worker_runs(key: str, t: Topology, c: Capabilities) -> set:
    fam = family(key)
    runs = set()
    for case in default_cases(key, t):
        if fam.skip_reason(case, t, c) is None:
            runs.add((case.nprocess, case.numel, case.policy.id, case.dtype,
                      tuple((k, v) for k, v in case.extra if k not in fam.worker_axes)))
    return runs


# -- the families' shape ---------------------------------------------------------------

@pytest.mark.parametrize("key, phases, axis, values", [
    ("transfer", ("h2d", "d2h", "bidir"), "memory", ("pinned", "pageable")),
    ("pinned_alloc", ("alloc", "free"), "allocator", ("register", "torch", "cudahostalloc")),
    ("broadcast", ("broadcast",), "method", ("pageable", "pinned", "pipelined", "relay")),
])
def test_family_shape(key, phases, axis, values):
    fam = family(key)
    assert fam.key == key and fam.needs_gpu and fam.phases == phases
    assert fam.extra_axes == {axis: values} and fam.worker_axes == (axis,)
    assert callable(fam.metrics) and fam.description


@pytest.mark.parametrize("key, extra, expected", [
    ("transfer", (("memory", "pinned"),), "np8-268M-bind:1-fp32-pinned"),
    ("pinned_alloc", (("allocator", "cudahostalloc"),), "np8-268M-bind:1-fp32-cudahostalloc"),
    ("broadcast", (("method", "relay"),), "np8-268M-bind:1-fp32-relay"),
])
def test_case_ids(key, extra, expected):
    assert Case(key, 8, 256 * 2**20, Policy.parse("bind:1"), "fp32", extra).id == expected


def test_adam_offload_alloc_axis_is_a_case_axis_not_a_worker_axis():
    fam = family("adam_offload")
    assert list(fam.extra_axes) == ["impl", "schedule", "alloc"]
    assert fam.extra_axes["alloc"] == ("register", "torch")  # the default first
    assert "alloc" not in fam.worker_axes
    case = Case("adam_offload", 1, 1835008, Policy.parse("default"), "fp32",
                (("impl", "ours"), ("schedule", "serial"), ("alloc", "register")))
    assert case.id == "np1-1.84M-default-fp32-ours-serial-register"
    torch_case = replace(case, extra=(("impl", "ours"), ("schedule", "serial"), ("alloc", "torch")))
    assert fam.host_bytes_per_element(torch_case) == 2 * fam.host_bytes_per_element(case)
    # by default only register runs (torch via --numa-axis alloc=register,torch);
    # impl x schedule share one worker run
    assert fam.axis_values()["alloc"] == ("register",)
    assert fam.axis_values({"alloc": ["register", "torch"]})["alloc"] == ("register", "torch")
    runs = runnable_worker_runs("adam_offload", topo("h200x2-vm"), caps())
    assert {r[4] for r in runs} == {(("alloc", "register"),)}


def test_adam_offload_worker_reads_alloc_from_its_variants():
    pytest.importorskip("torch")
    from numabench.families.adam_offload.worker import Worker

    base = {"rank": 0, "gpu": 0, "numel": 1 << 20, "dtype": "fp32"}
    v = [{"impl": "ours", "schedule": s, "alloc": "torch"} for s in ("serial", "overlap")]
    assert Worker({**base, "variants": v}).alloc == "torch"
    assert Worker({**base, "variants": [{"impl": "ours"}]}).alloc == "register"
    with pytest.raises(ValueError, match="different alloc"):
        Worker({**base, "variants": [{"alloc": "torch"}, {"alloc": "register"}]})


# -- skip reasons on the recorded machines -------------------------------------------------

@pytest.mark.parametrize("key", COPY_FAMILIES)
def test_no_gpu_machine_skips_with_one_reason(key):
    t = topo("vm-1node")
    fam = family(key)
    reasons = {fam.skip_reason(c, t, caps()) for c in default_cases(key, t)}
    assert reasons == {f"{key} needs a CUDA GPU; none is visible (no NVIDIA driver or CUDA_VISIBLE_DEVICES empty)"}


@pytest.mark.parametrize("tree", ["h200x2-vm", "dgx-2socket-8gpu"])
@pytest.mark.parametrize("key", COPY_FAMILIES)
def test_gpu_machines_run_the_one_node_policies(tree, key):
    t = topo(tree)
    fam = family(key)
    for c in default_cases(key, t):
        if c.nprocess == 1 and c.policy.id in ("default", "local", "bind:0", "interleave:all"):
            assert fam.skip_reason(c, t, caps()) is None, c.id


def test_h200x2_second_node_templates_skip_with_the_node_reason():
    t = topo("h200x2-vm")
    fam = family("transfer")
    c = Case("transfer", 2, 16 * 2**20, Policy.parse("bind:1"), "fp32", (("memory", "pinned"),))
    assert "needs NUMA node(s) 1 with memory" in fam.skip_reason(c, t, caps())


def test_transfer_and_pinned_alloc_use_every_gpu_at_once():
    t = topo("dgx-2socket-8gpu")
    for key in ("transfer", "pinned_alloc"):
        nps = {c.nprocess for c in default_cases(key, t)}
        assert nps == {1, 8}
        c = Case(key, 8, 256 * 2**20, Policy.parse("interleave:0,1"), "fp32",
                 ((family(key).worker_axes[0], "pinned" if key == "transfer" else "torch"),))
        assert family(key).skip_reason(c, t, caps()) is None


def test_broadcast_is_one_process_driving_every_gpu():
    fam = family("broadcast")
    t = topo("dgx-2socket-8gpu")
    assert {c.nprocess for c in default_cases("broadcast", t)} == {1}
    c = Case("broadcast", 1, 256 * 2**20, Policy.parse("bind:1"), "fp32", (("method", "pinned"),))
    assert fam.skip_reason(c, t, caps()) is None
    [rank] = fam.ranks(c, t)
    assert rank.index == 0 and rank.gpu is None and rank.cpu_node == 0
    two = replace(c, nprocess=2)
    assert "one process that drives every GPU" in fam.skip_reason(two, t, caps())


def test_broadcast_needs_two_gpus():
    fam = family("broadcast")
    h200 = topo("h200x2-vm")
    one_gpu = replace(h200, gpus=h200.gpus[:1])
    c = Case("broadcast", 1, 16 * 2**20, Policy.parse("default"), "fp32", (("method", "pageable"),))
    assert fam.skip_reason(c, h200, caps()) is None
    assert fam.skip_reason(c, one_gpu, caps()) == "broadcast needs 2 GPUs; this machine has 1"


@pytest.mark.parametrize("key, most", [("transfer", 32), ("pinned_alloc", 32), ("broadcast", 16)])
def test_default_matrix_on_8_gpus_stays_small(key, most):
    """The docstrings' minutes estimates assume these worker-run counts (old kernel: no weighted)."""
    no_weighted = caps(kernel_release="6.8.0-45-generic", weighted_interleave_kernel=False,
                       weighted_interleave_errno=22, weights_dir=False, weights_writable=False,
                       weights_auto_mode=False)
    runs = runnable_worker_runs(key, topo("dgx-2socket-8gpu"), no_weighted)
    assert 0 < len(runs) <= most, len(runs)


# -- metrics from a made-up result -------------------------------------------------------------

def fake_result(key, case, phases, infos):
    from numabench.cases import CaseResult

    per_rank = [{ph: list(v) for ph, v in phases.items()} for _ in infos]
    return CaseResult(case=case, phases=phases, per_rank=per_rank, setup_info=infos, placement=[],
                      launcher="none", commands=[])


def test_transfer_metrics_count_both_directions_and_aggregate():
    mod = family("transfer")
    case = Case("transfer", 2, 2 * 10**9 // 4, Policy.parse("default"), "fp32", (("memory", "pinned"),))
    res = fake_result("transfer", case, {"h2d": [0.02] * 3, "d2h": [0.02] * 3, "bidir": [0.025] * 3},
                      [plausible_reply("transfer", device_name="X")] * 2)
    h2d = mod.metrics(res, "h2d")
    assert h2d["bytes_per_rank"] == 10**9 and h2d["GBps"] == pytest.approx(50.0)
    assert h2d["aggregate_GBps"] == pytest.approx(100.0)
    bidir = mod.metrics(res, "bidir")
    assert bidir["bytes_per_rank"] == 2 * 10**9 and bidir["GBps"] == pytest.approx(80.0)


def test_pinned_alloc_metrics_report_waste_and_policy():
    mod = family("pinned_alloc")
    case = Case("pinned_alloc", 1, 67895296, Policy.parse("bind:0"), "fp32", (("allocator", "torch"),))
    entry = AllocatorReport(requested_bytes=271581184, reserved_bytes=2**29, resident_bytes=2**29,
                            torch_host_stats_bytes=2**29, placement=PlacementReport({1: 2**29}),
                            honours_policy=False, message="placement N1=100%", how="torch")
    res = fake_result("pinned_alloc", case, {"alloc": [0.2], "free": [0.1]},
                      [plausible_reply("pinned_alloc", allocators={"torch": entry})])
    m = mod.metrics(res, "alloc")
    assert m["reserved_over_requested"] == pytest.approx(2**29 / 271581184, abs=1e-4)
    assert m["honours_policy"] is False and m["honours_policy_per_rank"] == [False]
    entry2 = replace(entry, honours_policy=None)
    res2 = fake_result("pinned_alloc", case, {"alloc": [0.2], "free": [0.1]},
                       [plausible_reply("pinned_alloc", allocators={"torch": entry2})])
    assert mod.metrics(res2, "free")["honours_policy"] is None


def test_broadcast_metrics():
    mod = family("broadcast")
    case = Case("broadcast", 1, 250_000_000, Policy.parse("default"), "fp32", (("method", "relay"),))
    info = plausible_reply("broadcast", bytes=10**9, ngpus=8, chunk_bytes=2**24, peer_access=[True] * 7,
                           checksum=1, devices=["H100"] * 8)
    m = mod.metrics(fake_result("broadcast", case, {"broadcast": [0.1]}, [info]), "broadcast")
    assert m["GBps"] == pytest.approx(10.0) and m["delivered_GBps"] == pytest.approx(80.0)


# -- worker helpers that run without CUDA ----------------------------------------------------

def test_worker_constructors_reject_unknown_values():
    pytest.importorskip("torch")
    from numabench.families.broadcast import worker as broadcast
    from numabench.families.transfer import worker as transfer

    with pytest.raises(ValueError, match="unknown memory"):
        transfer.Worker({"rank": 0, "gpu": 0, "numel": 8, "dtype": "fp32", "variants": [{"memory": "x"}]})
    with pytest.raises(ValueError, match="unknown method"):
        broadcast.Worker({"rank": 0, "gpu": None, "numel": 8, "dtype": "fp32", "variants": [{"method": "x"}]})


def test_broadcast_checksums_and_chunks():
    torch = pytest.importorskip("torch")
    from numabench.families.broadcast.worker import block_checksums, chunk_bytes

    a = torch.randn(3 * 4096 + 5)
    b = a.clone()
    assert torch.equal(block_checksums(a), block_checksums(b))
    b[4096 + 3] += 1.0
    assert not torch.equal(block_checksums(a), block_checksums(b))
    c = a.clone()
    c[[0, 4096]] = c[[4096, 0]]  # swapped across blocks: the total is equal, the blocks are not
    assert not torch.equal(block_checksums(a), block_checksums(c))
    assert block_checksums(a.to(torch.bfloat16)).dtype == torch.int64
    assert chunk_bytes(2**30) == 16 * 2**20 and chunk_bytes(64 * 2**20) == 8 * 2**20
    assert chunk_bytes(2**20) == 2**20
    assert chunk_bytes(2**30, "65536") == 65536 and chunk_bytes(2**30, None) == 16 * 2**20


def test_pinned_alloc_helpers():
    import ctypes
    import mmap

    from numabench.families.pinned_alloc.worker import empty_host_cache_fn, mapping_of

    buf = mmap.mmap(-1, 1 << 20)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    start, length = mapping_of(addr + 100)
    assert start <= addr and start + length >= addr + (1 << 20)
    pytest.importorskip("torch")
    assert callable(empty_host_cache_fn())


def test_gpu_matrix_is_absent_without_gpus_and_renders():
    from numabench.tools.gpu_bandwidth import gpu_bandwidth_matrix, render_gpu_matrix

    assert gpu_bandwidth_matrix(topo("vm-1node"), caps()) is None
    text = render_gpu_matrix({"unit": "GB/s", "h2d": {"0": {"0": 52.1, "1": 51.9}, "1": {"0": 40.0, "1": 39.5}},
                              "d2h": {"0": {"0": 53.0, "1": 52.0}, "1": {"0": 41.0, "1": 40.5}}})
    assert "H2D copy bandwidth" in text and "D2H copy bandwidth" in text
    assert re.search(r"node1\s+40\.0\s+39\.5", text)


# -- the benchmarks on this CPU machine ------------------------------------------------------

def test_benchmarks_skip_every_case_with_one_reason_on_a_cpu_machine():
    from numabench.machine.gpus import visible_gpus

    if visible_gpus():
        pytest.skip("this machine has a GPU: the copy families run here")
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "-q", "-rs", "-p", "no:cacheprovider",
                           "-k", "transfer or pinned_alloc or broadcast"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    by_file: dict[str, set] = {}
    for ln in lines:
        m = re.match(r"SKIPPED \[\d+\] benchmarks/test_(\w+)\.py(?::\d+)?: (.*)$", ln)
        assert m, ln
        by_file.setdefault(m.group(1), set()).add(m.group(2))
    assert set(by_file) == set(COPY_FAMILIES)
    for key, reasons in by_file.items():
        assert reasons == {f"{key} needs a CUDA GPU; none is visible (no NVIDIA driver or CUDA_VISIBLE_DEVICES "
                           "empty)"}, reasons
    summary = proc.stdout.strip().splitlines()[-1]
    assert "skipped" in summary and "passed" not in summary and "failed" not in summary


def test_collected_ids_name_the_axes():
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "-q", "--collect-only",
                           "-p", "no:cacheprovider", "-k", "transfer or pinned_alloc or broadcast",
                           "--numa-policies=bind:0", "--param-sizes=16M"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ids = set(re.findall(r"::(test_\w+\[[^\]]+\])", proc.stdout))
    for want in ("test_transfer[h2d-np1-16M-bind:0-fp32-pinned]", "test_transfer[bidir-np1-16M-bind:0-fp32-pageable]",
                 "test_pinned_alloc[alloc-np1-16M-bind:0-fp32-torch]",
                 "test_pinned_alloc[free-np1-16M-bind:0-fp32-cudahostalloc]",
                 "test_broadcast[broadcast-np1-16M-bind:0-fp32-relay]"):
        assert want in ids, sorted(ids)[:10]
