"""train_step family: the model learns, DDP over gloo keeps two ranks identical, DeepSpeed's
ZeRO-2/3 run on its CPU accelerator (where deepspeed is installed), the torchrun entry point
runs, CPU-only skips say why; GPU modes (DDP, FSDP, FSDP + CPU offload, DeepSpeed, torchao)
where CUDA is."""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from numabench.cases import Case  # noqa: E402
from numabench.families import family  # noqa: E402
from numabench.families.base import WorkerSpec  # noqa: E402
from numabench.families.train_step.model import (
    build_model,
    count_params,
    lm_loss,  # noqa: E402
)
from numabench.families.train_step import MODE_PACKAGES, breakdown  # noqa: E402
from numabench.families.train_step.configs import deepspeed_config  # noqa: E402
from numabench.families.train_step.worker import (
    Trainer,
    rank_threads,  # noqa: E402
)
from numabench.machine.capabilities import probe  # noqa: E402
from numabench.machine.topology import discover  # noqa: E402
from numabench.numa.policy import Policy  # noqa: E402
from numabench.workers.run import run_case  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MACHINES = Path(__file__).resolve().parent / "data" / "machines"
TOPO = discover("/")
CAPS = probe(first_node=(TOPO.memory_node_ids or (0,))[0])
FAM_MOD = family("train_step")
FAM = FAM_MOD


@lru_cache(maxsize=None)
def topo(name: str):
    return discover(MACHINES / name)


def case(mode="ddp", model="tiny", nprocess=1, batch=4, dtype="fp32", policy="default"):
    return Case("train_step", nprocess, batch, Policy.parse(policy), dtype, (("mode", mode), ("model", model)))


def test_model_shapes_and_same_init():
    m1, m2 = build_model("tiny", seed=0), build_model("tiny", seed=0)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    x = torch.randint(0, 512, (2, 64))
    with torch.no_grad():
        logits = m1(x)
    assert logits.shape == (2, 64, 512)
    assert abs(float(lm_loss(logits, x)) - torch.log(torch.tensor(512.0)).item()) < 0.5  # ~uniform at init
    assert 100_000 < count_params(m1) < 300_000


def test_causal_attention_does_not_see_the_future():
    m = build_model("tiny", seed=1).eval()
    x = torch.randint(0, 512, (1, 16))
    y = x.clone()
    y[0, 10:] = (y[0, 10:] + 1) % 512
    with torch.no_grad():
        assert torch.allclose(m(x)[0, :10], m(y)[0, :10], atol=1e-5)


def test_loss_decreases_on_the_tiny_model():
    tr = Trainer("ddp", "tiny", "fp32", 4, "cpu")  # no process group: the plain model
    batch = tr.pool[0]
    losses = [float(tr.step(batch)) for _ in range(6)]
    assert losses[-1] < losses[0] - 0.05, losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_ranks_over_gloo(mode):
    """One process group of two CPU ranks: DDP ranks end with identical parameters
    (different data per rank, so the all-reduce is what makes them equal)."""
    if TOPO.gpus:
        pytest.skip("this machine has GPUs: ranks run NCCL there (the GPU tests)")
    c = case(mode=mode, nprocess=2, batch=8)
    # the family's own rendezvous (Family.spec_extra), as a benchmark run gets it: every rank the same port
    res = run_case(c, FAM, TOPO, CAPS, rounds=2, warmup=0, timeout_s=120)
    a, b = res.setup_info
    assert a.backend == "gloo" and a.tokens_per_step == 8 * 64
    # both ranks sit on this machine's one node: they share its CPUs, never oversubscribe them
    share = sum(1 for r in FAM.ranks(c, TOPO) if r.cpu_node == FAM.ranks(c, TOPO)[0].cpu_node)
    assert a.threads == b.threads == max(1, len(TOPO.node(FAM.ranks(c, TOPO)[0].cpu_node).cpus) // share)
    assert a.setup_losses != b.setup_losses  # each rank saw its own data
    if mode == "ddp":
        assert a.param_digest == b.param_digest
    else:
        assert a.impl.startswith("FSDP")
    assert all(p.verdict is None or p.verdict.ok for p in res.placement)
    m = FAM_MOD.metrics(res, "step")
    assert min(res.phases["step"]) > 0 and m["tokens_per_s"] > 0 and m["tflops"] > 0
    assert m["host_bytes_by_node_per_rank"][0] and m["mem_peak_per_rank_bytes"] == [None, None]
    assert m["threads_per_rank"] == [a.threads, b.threads]


@pytest.mark.parametrize("spec, knob, want", [
    ({"cpus": list(range(32)), "cpu_share": 2, "nprocess": 2}, {}, 16),
    ({"cpus": list(range(32)), "cpu_share": 1, "nprocess": 2}, {}, 32),  # one rank per socket
    ({"cpus": [0, 1], "cpu_share": 4, "nprocess": 4}, {}, 1),
    ({"cpus": None, "nprocess": 2}, {}, None),
    ({"cpus": list(range(32)), "cpu_share": 2}, {"rank_threads": "5"}, 5),
    ({"cpus": list(range(32)), "cpu_share": 2}, {"rank_threads": "0"}, None),
])
def test_rank_threads_split_a_nodes_cpus_among_its_ranks(spec, knob, want):
    variants = [{"mode": "ddp", **knob}]
    assert rank_threads(WorkerSpec.from_dict({"batch": 2, "variants": variants, **spec})) == want


def test_rank_threads_rejects_a_bad_override():
    with pytest.raises(ValueError, match="rank_threads='four': allowed a whole number"):
        rank_threads(WorkerSpec(batch=2, cpus=(0,), variants=({"rank_threads": "four"},)))


def test_cpu_only_skips_say_why():
    vm = topo("vm-1node")
    for c, words in ((case(mode="fsdp-offload"), "fsdp-offload"), (case(model="small"), "GPU size"),
                     (case(dtype="bf16"), "bf16")):
        reason = FAM.skip_reason(c, vm, CAPS)
        assert reason and words in reason and "needs a CUDA GPU" in reason
    assert FAM.skip_reason(case(), vm, CAPS) is None
    assert FAM.skip_reason(case(mode="fsdp-offload"), topo("dgx-2socket-8gpu"), CAPS) is None
    assert "needs 9 GPUs" in FAM.skip_reason(case(nprocess=9), topo("dgx-2socket-8gpu"), CAPS)


@pytest.mark.parametrize("mode, package", [("deepspeed-zero2", "deepspeed"), ("deepspeed-zero3", "deepspeed"),
                                           ("torchao-offload", "torchao")])
def test_offload_library_modes_say_what_they_need(mode, package, monkeypatch):
    vm = topo("vm-1node")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # every package present
    reason = FAM.skip_reason(case(mode=mode), vm, CAPS)
    if package == "torchao":  # a CUDA-only optimizer
        assert "mode torchao-offload (torchao's CPUOffloadOptimizer) offloads a CUDA GPU's optimizer" in reason
        assert "needs a CUDA GPU" in reason
        with pytest.raises(RuntimeError, match=f"{mode} needs a CUDA GPU"):
            Trainer(mode, "tiny", "fp32", 4, "cpu")
    else:  # DeepSpeed's CPU accelerator runs it on a CPU-only machine, fp32 and the tiny model
        assert reason is None
        assert "needs a CUDA GPU" in FAM.skip_reason(case(mode=mode, dtype="bf16"), vm, CAPS)
    gpus = topo("dgx-2socket-8gpu")
    two = FAM.skip_reason(case(mode=mode, nprocess=2, batch=8), gpus, CAPS)
    assert (two is None) == (package == "deepspeed"), two
    if package == "torchao":
        assert "runs one rank" in two
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real_find_spec(name, *a))
    missing = (f"mode {mode} needs the optional package {package} (pip install 'numabench[{package}]'; "
               "docs/RESULTS.md pins the versions): not importable")
    assert FAM.skip_reason(case(mode=mode), gpus, CAPS) == missing
    if package == "deepspeed":
        assert FAM.skip_reason(case(mode=mode), vm, CAPS) == missing


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_deepspeed_config_offloads_the_optimizer(stage, dtype):
    cfg = deepspeed_config(stage, 4, dtype, 1e-4)
    assert cfg["zero_optimization"] == {"stage": stage, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert cfg["bf16"] == {"enabled": dtype == "bf16"} and cfg["train_micro_batch_size_per_gpu"] == 4
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                            "weight_decay": 0.01}}
    assert cfg["wall_clock_breakdown"] is True and cfg["gradient_accumulation_steps"] == 1
    assert deepspeed_config(stage, 4, dtype, 1e-4, pin_memory=False)["zero_optimization"]["offload_optimizer"] == \
        {"device": "cpu", "pin_memory": False}
    with pytest.raises(ValueError, match="ZeRO stage 1: allowed 2 or 3"):
        deepspeed_config(1, 4, dtype, 1e-4)


def test_deepspeed_reads_the_config_as_meant():
    """DeepSpeed's own parser (where deepspeed is installed: numabench[deepspeed])."""
    pytest.importorskip("deepspeed", reason="the optional package deepspeed is not installed")
    from deepspeed.runtime.config import DeepSpeedConfig

    for stage in (2, 3):
        parsed = DeepSpeedConfig(deepspeed_config(stage, 4, "bf16", 1e-4))
        assert parsed.zero_optimization_stage == stage
        assert parsed.zero_config.offload_optimizer.device == "cpu" and parsed.zero_config.offload_optimizer.pin_memory
        assert parsed.train_batch_size == 4 and parsed.wall_clock_breakdown and parsed.optimizer_name == "adamw"


@pytest.mark.parametrize("mode", ["deepspeed-zero2", "deepspeed-zero3"])
def test_deepspeed_on_the_cpu_over_gloo(mode):
    """DeepSpeed's ZeRO-Offload on its CPU accelerator, two ranks over gloo: the model learns
    (the set-up's check), DDP-equal parameters under ZeRO-2, the host state (DeepSpeedCPUAdam's
    fp32 partition and both moments) found and placed as the policy says, and our clock of
    engine.step() beside DeepSpeed's own timer of it."""
    pytest.importorskip("deepspeed", reason="the optional package deepspeed is not installed (numabench[deepspeed])")
    if TOPO.gpus:
        pytest.skip("this machine has GPUs: DeepSpeed runs on CUDA there (the GPU tests)")
    # bound to a node, so the pages of the host state have somewhere to be checked against
    c = case(mode=mode, nprocess=2, batch=8, policy=f"bind:{(TOPO.memory_node_ids or (0,))[0]}")
    res = run_case(c, FAM, TOPO, CAPS, rounds=4, warmup=1, timeout_s=600)
    a, b = res.setup_info
    assert a.backend == "gloo" and a.impl.startswith("DeepSpeed ") and "CPU accelerator" in a.impl
    assert a.setup_losses != b.setup_losses  # each rank saw its own data
    if mode == "deepspeed-zero2":  # ZeRO-2 all-gathers the updated partitions: every rank the same model
        assert a.param_digest == b.param_digest
    for info in (a, b):
        assert info.placed == "host state"
        # AdamW's two moments and the fp32 master weights of this rank's half, on the host
        assert info.host_state_bytes >= 3 * 4 * info.n_params // 2 * 0.9, (info.host_state_bytes, info.n_params)
    assert len(res.placement) == 2 and all(p.verdict is not None and p.verdict.ok for p in res.placement), \
        [p.to_dict() for p in res.placement]
    m = FAM_MOD.metrics(res, "step")
    assert m["tokens_per_s"] > 0 and len(res.phases["optimizer"]) == len(res.phases["step"]) == 4
    assert 0 < m["optimizer_ms"] < statistics.median(res.phases["step"]) * 1e3
    assert m["deepspeed_timer_step_ms"] > 0 and m["deepspeed_timer_optimizer_step_ms"] > 0
    # the same engine.step() call on two clocks; DeepSpeed's starts inside it
    assert 0.9 < m["optimizer_over_deepspeed_timer"] < 1.5, m


def test_no_port_is_picked_and_released():
    """A port found by binding port 0, closing the socket and handing the number on can be
    taken by any other process meanwhile (EADDRINUSE in torch.distributed): the family hands
    no port to its ranks, rank 0's store binds one and keeps it."""
    assert FAM.spec_extra is None
    src = (ROOT / "numabench" / "families" / "train_step" / "worker.py").read_text()
    assert "rendezvous.init_process_group(" in src and "init_method=" not in src


_RANK = """
import json, os, sys
import torch.distributed as dist
from numabench.toolkit import rendezvous
rank, world = int(sys.argv[1]), int(sys.argv[2])
addr, port = rendezvous.init_process_group("gloo", rank, world, timeout_s=60)
ports = [None] * world
dist.all_gather_object(ports, port)
dist.destroy_process_group()
print(json.dumps({"addr": addr, "ports": ports}))
"""


def test_ranks_meet_on_the_port_rank0_holds(tmp_path):
    """Three ranks rendezvous through the group's scratch folder: rank 0's store port, read back
    from the bound socket, reaches the others; a second group beside it gets its own."""
    groups = []
    for g in range(2):
        scratch = tmp_path / f"group{g}"
        scratch.mkdir()
        env = {**os.environ, "NUMABENCH_SCRATCH_DIR": str(scratch)}
        groups.append([subprocess.Popen([sys.executable, "-c", _RANK, str(r), "3"], cwd=ROOT, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                       for r in (2, 1, 0)])  # rank 0 last: the others wait for its port file
    ports = []
    for procs in groups:
        outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1][-1500:] for o in outs]
        replies = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
        assert len({tuple(r["ports"]) for r in replies}) == 1 and len(set(replies[0]["ports"])) == 1
        ports.append(replies[0]["ports"][0])
    assert ports[0] != ports[1] and all(0 < p < 65536 for p in ports)


def test_rendezvous_without_a_scratch_folder_says_so(monkeypatch):
    from numabench.toolkit import rendezvous

    monkeypatch.delenv("NUMABENCH_SCRATCH_DIR", raising=False)
    with pytest.raises(RuntimeError, match="NUMABENCH_SCRATCH_DIR is None"):
        rendezvous.init_process_group("gloo", 0, 2)
    with pytest.raises(ValueError, match="rank 2 of 2"):
        rendezvous.init_process_group("gloo", 2, 2, directory="/tmp")


def torchrun(tmp_path, args: list[str], timeout: int) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run ARGS``, its temporary files and logs under ``tmp_path``: torch's
    elastic agent makes a torchelastic_* folder in TMPDIR for its logs and leaves it there."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--log-dir", str(tmp_path / "logs"), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TMPDIR": str(tmpdir)})


def test_torchrun_entry_point(tmp_path):
    out = tmp_path / "r.json"
    args = ["--nproc-per-node", "2", "--standalone", "-m", "numabench.tools.train_step_cli",
            "--mode", "ddp", "--model", "tiny", "--batch", "2", "--steps", "2", "--warmup", "1",
            "--numa-policy", "local", "--json", str(out)]
    if TOPO.gpus:
        pytest.skip("this machine has GPUs: see test_torchrun_gpu")
    proc = torchrun(tmp_path, args, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["world_size"] == 2 and r["throughput_mean"] > 0 and r["time_per_step_std"] >= 0
    assert len(r["host_bytes_by_node_per_rank"]) == 2 and r["numa_policy"][0].startswith("bind:")


# -- GPU ---------------------------------------------------------------------------
gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("mode", ["ddp", "fsdp", "fsdp-offload"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_modes(mode, dtype):
    n = min(2, torch.cuda.device_count())
    c = case(mode=mode, nprocess=n, batch=4 * n, dtype=dtype, policy="local")
    res = run_case(c, FAM, TOPO, CAPS, rounds=3, warmup=1, timeout_s=600)
    infos = res.setup_info
    assert all(i.backend == "nccl" for i in infos)
    assert all(p.verdict is None or p.verdict.ok for p in res.placement), [p.to_dict() for p in res.placement]
    assert all(i.peak_gpu_bytes > 0 for i in infos)
    if mode == "ddp":
        assert len({i.param_digest for i in infos}) == 1
    if mode == "fsdp-offload":
        assert all(i.placed == "host state" and i.host_state_bytes > 0 for i in infos)
        # the offloaded state is on the host, the GPU holds far less than params + Adam state
        assert infos[0].host_state_bytes >= 3 * 4 * infos[0].n_params // n * 0.9
    # ranks on one node split its CPUs (fsdp-offload's optimizer runs there)
    ranks = FAM.ranks(c, TOPO)
    for r, info in zip(ranks, infos):
        if r.cpu_node is not None:
            share = sum(1 for o in ranks if o.cpu_node == r.cpu_node)
            assert info.threads == max(1, len(TOPO.node(r.cpu_node).cpus) // share)
    m = FAM_MOD.metrics(res, "step")
    assert m["tokens_per_s"] > 0 and m["tflops"] > 0


@pytest.mark.parametrize("mode, bound", [("deepspeed-zero2", True), ("deepspeed-zero3", False)])
def test_deepspeed_timer_bounds_gpu_idle_only_under_zero2(mode, bound):
    """ZeRO-2's optimizer_step timer holds no GPU work, ZeRO-3's holds the parameters' copy to the
    GPU: only the first's share of the step is reported as a lower bound on GPU idle."""
    step_s, timer_s = 1.0, 0.6
    phases = {"step": [step_s] * 3, "forward": [0.1] * 3, "backward": [0.2] * 3, "optimizer": [0.7] * 3,
              "ds_optimizer_step": [timer_s] * 3}
    fake = SimpleNamespace(phases=phases, case=case(mode=mode, dtype="bf16"),
                           setup_info=[SimpleNamespace(device_name="NVIDIA H100", gpu_idle=None)])
    out = breakdown(fake)
    assert out["cpu_adam_ms"] == pytest.approx(timer_s * 1e3)
    assert out.get("gpu_idle_fraction_min") == (pytest.approx(timer_s / step_s) if bound else None), out


@pytest.mark.parametrize("mode", ["deepspeed-zero2", "deepspeed-zero3", "torchao-offload"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_offload_libraries(mode):
    """DeepSpeed's ZeRO-Offload and torchao's CPUOffloadOptimizer: the model learns (the set-up's
    check), the optimizer state is on the host and placed as the policy says."""
    pytest.importorskip(MODE_PACKAGES[mode], reason=f"the optional package {MODE_PACKAGES[mode]} is not installed")
    n = 1 if mode == "torchao-offload" else min(2, torch.cuda.device_count())
    c = case(mode=mode, nprocess=n, batch=4 * n, dtype="bf16", policy="local")
    res = run_case(c, FAM, TOPO, CAPS, rounds=3, warmup=1, timeout_s=900)
    infos = res.setup_info
    assert all(i.placed == "host state" for i in infos)
    # AdamW's two moments and the fp32 master weights of this rank's share, on the host
    assert all(i.host_state_bytes >= 3 * 4 * i.n_params // n * 0.9 for i in infos), \
        [(i.host_state_bytes, i.n_params) for i in infos]
    assert all(p.verdict is None or p.verdict.ok for p in res.placement), [p.to_dict() for p in res.placement]
    m = FAM_MOD.metrics(res, "step")
    assert m["tokens_per_s"] > 0
    assert all(i.mempolicy["mode"] == "bind" for i in infos), [i.mempolicy for i in infos]
    assert m["forward_ms"] > 0 and m["backward_ms"] > 0 and m["optimizer_ms"] > 0
    # pinned host memory found per node: torchao pins each parameter's fp32 copy and gradient (8 B)
    pinned = [sum(int(v) for v in by_node.values()) for by_node in m["host_pinned_bytes_by_node_per_rank"]]
    assert all(p >= (8 * i.n_params * 0.9 if mode == "torchao-offload" else 1) for p, i in zip(pinned, infos)), pinned
    if mode.startswith("deepspeed-"):  # our CUDA events around engine.step() against DeepSpeed's timer of it
        # the span DeepSpeed's step timer covers (up to its post-step timer bookkeeping), on our clock
        assert 0.9 <= m["optimizer_in_timer_over_deepspeed_timer"] <= 1.1, m
        # The rest of the call is DeepSpeed's post-step bookkeeping (its throughput timer's
        # synchronize, the wall-clock timers' log), outside what its step timer measures: reported
        # apart, not bounded (the whole call was 1.01x the timer in a 5-round benchmark on H100,
        # 1.19x in this 3-round test).
        assert m["deepspeed_bookkeeping_ms"] >= 0 and m["optimizer_in_timer_ms"] <= m["optimizer_ms"], m
        assert m["deepspeed_timer_optimizer_step_ms"] > 0, m
        # a lower bound on GPU idle only where the timer's span holds no GPU work (ZeRO-2's)
        if mode == "deepspeed-zero2":
            assert 0 < m["gpu_idle_fraction_min"] <= m.get("gpu_idle_fraction", 1), m
        else:
            assert "gpu_idle_fraction_min" not in m, m


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_same_cpus_ab_steps_ddp_on_the_pairs_two_cpus(tmp_path):
    """A DDP step of the tiny model is its main thread's kernel launches: in a same-runner A/B
    (this checkout against itself) each pair's two workers run on the two CPUs ab_pair_cpus gives
    that pair, and say their steps ran there."""
    from numabench.families.base import ab_pair_cpus

    out = tmp_path / "ab.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_train_step.py", "--numa-policies=default",
                           "--numa-axis", "mode=ddp", "--numa-axis", "model=tiny", "--numa-axis", "cpu_bind=node",
                           "--dtypes=bf16", "--numa-rounds=4", "--numa-warmup=1", "--numa-repeats=2",
                           f"--numa-ab=base={ROOT}", "--numa-ab=same_cpus=1", "--numa-forkserver",
                           f"--benchmark-json={out}", "-p", "no:cacheprovider", "-q"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = [b for b in json.loads(out.read_text())["benchmarks"] if b["extra_info"]["phase"] == "step"]
    extra = entry["extra_info"]
    ranks = FAM.ranks(case(mode="ddp", dtype="bf16"), TOPO)
    allowed = sorted(os.sched_getaffinity(0))
    pairs = [set(ab_pair_cpus(ranks, TOPO, allowed, 2, pair)[0].cpus) for pair in range(2)]
    for side in (extra["invocation_cpus"], extra["ab_base"]["invocation_cpus"]):
        assert [cpus[0] in want for cpus, want in zip(side, pairs)] == [True, True], (side, pairs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_torchrun_gpu(tmp_path):
    n = min(2, torch.cuda.device_count())
    out = tmp_path / "r.json"
    args = ["--nproc-per-node", str(n), "--standalone", "-m", "numabench.tools.train_step_cli",
            "--mode", "fsdp-offload", "--model", "small", "--batch", "2", "--dtype", "bf16", "--steps", "3",
            "--warmup", "2", "--numa-policy", "local", "--json", str(out)]
    proc = torchrun(tmp_path, args, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["world_size"] == n and r["throughput_mean"] > 0 and all(b > 0 for b in r["mem_peak_per_rank_bytes"])


def test_deepspeed_host_tensors_find_zero3_master_partitions():
    """ZeRO-3 empties its inner optimizer's param_groups between steps: the fp32 master partitions
    (and their gradients, and the flat gradient buffer) are read from the ZeRO optimizer itself."""
    from types import SimpleNamespace

    from numabench.families.train_step.worker import deepspeed_host_tensors

    flat = [torch.zeros(1000), torch.zeros(24)]
    flat[0].grad = torch.zeros(1000)
    zero3 = SimpleNamespace(fp32_partitioned_groups_flat=flat, grad_partitions_flat_buffer=torch.zeros(1024),
                            optimizer=SimpleNamespace(param_groups=[{"params": []}], state={}))
    found = {t.data_ptr() for t in deepspeed_host_tensors(zero3)}
    assert found == {flat[0].data_ptr(), flat[0].grad.data_ptr(), flat[1].data_ptr(),
                     zero3.grad_partitions_flat_buffer.data_ptr()}
    zero2 = SimpleNamespace(single_partition_of_fp32_groups=[torch.zeros(10)])
    assert len(deepspeed_host_tensors(zero2)) == 1
    assert deepspeed_host_tensors(SimpleNamespace()) == []


def test_deepspeed_timers_reset_every_logged_timer_and_mark_the_bookkeeping():
    """Our stand-in for DeepSpeed's timer log resets every timer it is given (as DeepSpeed's own
    does), keeps the ones we report, and marks where the engine's post-step bookkeeping starts."""
    from numabench.families.train_step.worker import DeepSpeedTimers

    class Timer:
        def __init__(self, ms):
            self.ms, self.resets = ms, 0

        def elapsed(self, reset=True):
            self.resets += reset
            return self.ms

    group = SimpleNamespace(timers={"step": Timer(50.0), "fwd_microstep": Timer(3.0), "bwd": Timer(7.0)}, log=None)
    marks = []
    engine = SimpleNamespace(_update_wall_clock_timers=lambda: marks.append("inner"))
    t = DeepSpeedTimers(group, engine, mark=lambda: marks.append("mark") or len(marks))
    t.begin_step()
    engine._update_wall_clock_timers()
    engine._update_wall_clock_timers()
    assert marks == ["mark", "inner", "inner"] and t.bookkeeping_mark == 1
    group.log(["fwd_microstep", "step", "bwd", "absent"])
    assert all(tm.resets == 1 for tm in group.timers.values())
    assert t.take() == {"ds_step": 0.05, "ds_backward": 0.007}


def test_param_count_from_the_shape_matches_the_built_model():
    """The fits-in-memory check counts parameters without torch; the count must be the model's."""
    from numabench.families.train_step.configs import MODELS, param_count
    from numabench.families.train_step.model import build_model, count_params

    for name in MODELS:
        assert param_count(MODELS[name]) == count_params(build_model(name, device="meta")), name
    assert param_count(MODELS["small"]) == 134_994_432


def test_offload_state_counts_in_the_host_memory_check():
    """The ~1B model's streamed state is 11 GiB per rank: 4 ranks need 45 GiB of host memory, which
    a 32 GiB machine has not; its on-device reference needs only its batches."""
    from numabench.families.train_step import host_state_bytes

    t = topo("dgx-2socket-8gpu")  # a recorded GPU machine: the GPU-size model is no reason to skip
    streamed = case(mode="streamed", model="1b", nprocess=1, batch=8, dtype="bf16")
    assert host_state_bytes(streamed) == 12 * 938_905_600
    assert host_state_bytes(case(mode="no-offload", model="1b")) == 0
    # ZeRO splits the state over the ranks, the streamed mode and torchao keep a copy per rank
    assert host_state_bytes(case(mode="deepspeed-zero2", model="1b", nprocess=2)) == 20 * 938_905_600
    assert host_state_bytes(case(mode="streamed", model="1b", nprocess=2)) == 2 * 12 * 938_905_600
    need = streamed.numel * FAM.host_bytes_per_element(streamed)
    assert need >= host_state_bytes(streamed)
    reason = FAM.skip_reason(streamed, t, CAPS, host_memory_bytes=8 * 2**30)
    assert reason is not None and "host memory" in reason, reason
    assert FAM.skip_reason(streamed, t, CAPS, host_memory_bytes=64 * 2**30) is None
    reference = case(mode="no-offload", model="1b", nprocess=1, batch=8, dtype="bf16")
    assert FAM.skip_reason(reference, t, CAPS, host_memory_bytes=8 * 2**30) is None


def test_the_streamed_mode_declares_our_kernel_where_ranks_run_on_gpus(monkeypatch):
    """The parent builds the kernel before the streamed mode's GPU ranks start (they only load it);
    CPU ranks run torch's AdamW and need no build."""
    import numabench.families.train_step as ts

    monkeypatch.setattr(ts, "_cuda_here", lambda: True)
    assert FAM.kernels_for({"mode": "streamed", "model": "small"}) == ("cuda_adam",)
    assert FAM.kernels_for({"mode": "no-offload", "model": "small"}) == ()
    monkeypatch.setattr(ts, "_cuda_here", lambda: False)
    assert FAM.kernels_for({"mode": "streamed", "model": "tiny"}) == ()


def test_on_gpu_ranks_the_on_device_modes_step_on_two_threads(monkeypatch):
    """A same-runner A/B binds both sides of a pair of these to the same two CPUs (the main thread
    launching the kernels, autograd's device thread); offload modes and CPU ranks step on many."""
    import numabench.families.train_step as ts

    monkeypatch.setattr(ts, "_cuda_here", lambda: True)
    threads = {m: FAM.step_threads(case(mode=m)) for m in ts.MODES}
    assert threads == {m: 2 if m in ("ddp", "fsdp", "no-offload", "no-offload-master") else 0 for m in ts.MODES}
    monkeypatch.setattr(ts, "_cuda_here", lambda: False)
    assert {FAM.step_threads(case(mode=m)) for m in ts.MODES} == {0}


@pytest.mark.parametrize("mode, place", [
    ("deepspeed-zero2", "master:bind:{n}+grads:bind:{n}+moments:interleave:{n}+weights:bind:{n}"),
    ("deepspeed-zero3", "master:bind:{n}+grads:bind:{n}+moments:interleave:{n}"),
    ("streamed", "moments:bind:{n}"),
])
def test_place_puts_each_kind_of_host_state_under_its_policy_on_the_cpu(mode, place):
    """The place axis on CPU ranks: DeepSpeed's ZeRO state moved into placed buffers after its first
    step (the model still learns, every kind found where it was placed), the streamed mode's host
    state bound before its first touch; each kind's pages judged by the parent."""
    if mode.startswith("deepspeed"):
        pytest.importorskip("deepspeed", reason="the optional package deepspeed is not installed (numabench[deepspeed])")
    if TOPO.gpus:
        pytest.skip("this machine has GPUs: the modes run on CUDA there (the GPU tests)")
    node = (TOPO.memory_node_ids or (0,))[0]
    text = place.format(n=node)
    c = Case("train_step", 1, 4, Policy.parse(f"bind:{node}"), "fp32",
             (("mode", mode), ("model", "tiny"), ("place", text)))
    assert FAM.skip_reason(c, TOPO, CAPS) is None
    res = run_case(c, FAM, TOPO, CAPS, rounds=2, warmup=0, timeout_s=600)
    [p] = res.placement
    kinds = {k.placement.kind: k for k in p.kinds}
    declared = {k.kind for k in FAM.state_kinds(c)}
    assert set(kinds) == declared, (kinds, declared)
    assert p.verdict.ok and all(k.verdict.ok for k in p.kinds), p.to_dict()
    for kind, policy in (part.split(":", 1) for part in text.split("+")):
        assert kinds[kind].placement.policy == policy and kinds[kind].placement.planned_bytes > 0
    if mode == "streamed":
        assert kinds["master"].placement.policy is None  # not named: the process policy's
    info = res.setup_info[0]
    assert info.setup_losses[-1] < info.setup_losses[0]
    if len(TOPO.memory_node_ids) == 1:
        assert res.extra == {"place_note": f"one NUMA node with memory: every kind on node {node}"}
