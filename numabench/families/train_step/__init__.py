"""train_step: one training step of a small decoder-only transformer under DDP, FSDP and
FSDP with CPU offload (the ZeRO-Offload analogue: its host-resident parameters
and optimizer state are what the NUMA policy places), one rank per GPU in one
process group (seeds 001, 002 task 4, 004).

The size axis is the global batch in sequences (split over the ranks). Axes
``mode`` (ddp, fsdp, fsdp-offload; deepspeed-zero2 and deepspeed-zero3: DeepSpeed's
ZeRO-Offload, optimizer state and step on the host, pinned; torchao-offload: torchao's
CPUOffloadOptimizer, one rank; streamed: the fp32 master weights and AdamW moments on the host,
placed by the policy, pinned, streamed through the GPU in chunks each step and updated there by our
fused kernel, overlapped with the copies and with backward (numabench.families.train_step.streamed);
no-offload: the reference of the fp32 + autocast recipe, torch's fused AdamW with all state on the GPU;
no-offload-master: the reference of the bf16 + fp32 master recipe the streamed and DeepSpeed modes
train, bf16 weights with an fp32 master, gradient and moments on the GPU,
numabench.families.train_step.master; deepspeed-zenflow: ZeRO-2 + CPU offload + DeepSpeed's ZenFlow,
the top-k gradient columns stepped on the GPU every step and the rest by the CPU every
update_interval steps, overlapped: stale updates, not the same optimizer (knobs zenflow_topk,
zenflow_update_interval); streamed-split: the streamed mode with the leading parameters' master and
moments kept on the GPU (no-offload-master's update) and only the rest streamed; knob
``offload_ratio``, the share on the host, for it and for deepspeed-zero3, DeepSpeed's
offload_optimizer.ratio: numabench.families.train_step.split) and ``model`` (tiny, small; 1b, 5b and 10b on request:
numabench.families.train_step.configs). Each mode's precision recipe and the no-offload mode of
the same recipe: numabench.families.train_step.recipes.
The DeepSpeed and torchao modes need their optional packages.
On a CPU-only machine only the tiny model in fp32 runs, DDP and FSDP over gloo
(FSDP when torch's fully_shard runs on CPU) and DeepSpeed's ZeRO-2/3 on its CPU
accelerator (gloo; the optimizer state and CPU Adam on the host as on a GPU, no
copies); fsdp-offload, torchao-offload, bf16 and the small model skip saying they
need a CUDA GPU.

DeepSpeed modes also record, per round, ``optimizer`` (our clock of
``engine.step()``) beside DeepSpeed's own timers of that step (``ds_step``,
``ds_optimizer_step``: its CPU Adam, under ZeRO-3 with the parameters' copy back to the GPU;
wall_clock_breakdown) in extra_info.

Every mode records, per round, ``forward``, ``backward`` and ``optimizer`` (what is left of the
step after backward returns) on our clock; extra_info has their medians and shares of the step,
the bytes over PCIe per step per parameter (a model of the mode's copies) and, for DeepSpeed,
its own timers (fwd, bwd, step, optimizer_step) and, under ZeRO-2, that optimizer_step's share of
the step (GPU idle while it runs).

extra_info: tokens/s and model TFLOPS (6 x params x tokens / time) as median,
mean and std over the rounds (the seed 004 tables), time per step mean/std, peak
GPU memory per rank (allocated and reserved), host memory per node per rank (anonymous, the
process's total as numastat -p counts it, its pinned share), the recipe and its reference mode,
the mode's bytes per parameter on the GPU and the host and its traffic per step per parameter
(PCIe each way, host memory of a CPU-side optimizer).

Fits in memory (numabench.families.train_step.memory): a case that needs more host memory than
the host has skips, saying what it needs and what there is; one that needs more GPU memory than
the GPU has runs anyway, and its out-of-memory is recorded as its result (``numabench_memory`` in
the run's JSON: numabench.results.memory_outcomes).
"""
from __future__ import annotations

import functools
import importlib.util
import statistics

from numabench.cases import Case, CaseResult
from numabench.families.base import CPU_BINDS, GpuOrCpuFamily
from numabench.families.train_step.configs import model_config, param_count
from numabench.families.train_step import memory
from numabench.families.train_step.recipes import recipe
from numabench.families.train_step.reply import TrainStepReply
from numabench.families.train_step.traffic import DTYPES, host_optimizer_bytes, pcie_bytes_by_direction
from numabench.numa.budget import KindDemand

DEFAULT_ROUNDS = 10
DEFAULT_WARMUP = 2


MODES = ("ddp", "fsdp", "fsdp-offload", "deepspeed-zero2", "deepspeed-zero3", "torchao-offload", "streamed",
         "no-offload", "no-offload-master", "deepspeed-zenflow", "streamed-split")
MODELS = ("tiny", "small", "1b", "5b", "10b")
# modes that need an optional package (numabench[deepspeed], numabench[torchao])
MODE_PACKAGES = {"deepspeed-zero2": "deepspeed", "deepspeed-zero3": "deepspeed", "torchao-offload": "torchao",
                 "deepspeed-zenflow": "deepspeed"}
# the knobs a mode reads (a knob set for another mode would only rename the same case)
MODE_KNOBS = {"offload_ratio": memory.SPLIT_MODES, "zenflow_topk": ("deepspeed-zenflow",),
              "zenflow_update_interval": ("deepspeed-zenflow",)}
POOL = 4  # distinct batches per rank, cycled through in the timed steps

# Host bytes per parameter an offload mode keeps, as measured on its ranks (bounds: DeepSpeed on
# its CPU accelerator keeps more than on a GPU) and whether every rank holds a whole copy
# (replicated) or ZeRO/FSDP split it over the ranks: streamed 12 (master, two moments), ZeRO-2
# 16-20, ZeRO-3 18-24, torchao 16, FSDP2's CPU offload 12, ZenFlow 24-28; the split modes these at
# offload_ratio 1 (host_state_bytes scales them). The on-device modes keep none.
OFFLOAD_HOST_BYTES = {"streamed": (12, True), "deepspeed-zero2": (20, False), "deepspeed-zero3": (24, False),
                      "torchao-offload": (16, True), "fsdp-offload": (12, False), "deepspeed-zenflow": (28, False),
                      "streamed-split": (12, True)}


@functools.lru_cache(maxsize=1)
def _cuda_here() -> bool:
    """Whether this machine's ranks run on CUDA GPUs (asked of the driver once, torch-free)."""
    from numabench.machine.gpus import visible_gpus

    return bool(visible_gpus())


def variant_kernels(variant) -> tuple[str, ...]:
    """The streamed mode's ranks run our fused Adam kernel where they run on GPUs (torch's AdamW
    on CPU ranks): the parent builds it before they start, and plans count its build."""
    return ("cuda_adam",) if variant.get("mode") in ("streamed", "streamed-split") and _cuda_here() else ()


# The modes whose optimizer state stays on the GPU (no host state to offload).
ON_DEVICE_MODES = tuple(m for m in MODES if m not in OFFLOAD_HOST_BYTES)


def step_threads(case) -> int:
    """The threads a step of ``case`` runs on, for a same-runner A/B's same-CPUs binding (0: many).
    On a GPU rank a mode that keeps its state on the device steps on two: the main thread, which
    launches the kernels (the tiny model's step is bound by it), and autograd's device thread, which
    runs the backward's. Left to the OS, one side's workers of an A/A kept to one CPU for all six
    pairs and its steps took 4-21% less time in every pair (H200 x1): both sides of a pair must get
    the same CPUs. An offload mode's optimizer and a CPU rank's model run on many threads."""
    return 2 if case.param("mode", "ddp") in ON_DEVICE_MODES and _cuda_here() else 0


def host_state_bytes(case) -> int:
    """Host memory the case's offloaded optimizer state takes over all its ranks (0 for the
    modes that keep it on the device)."""
    mode = case.param("mode", "ddp")
    per_param, replicated = OFFLOAD_HOST_BYTES.get(mode, (0, False))
    if mode in memory.SPLIT_MODES:  # the host share; ZeRO-3's flat gradient buffer whatever the ratio
        fixed = memory.SPLIT_HOST[mode][0]
        per_param = fixed + (per_param - fixed) * planned_offload_ratio(case)
    n = param_count(model_config(case.param("model", "tiny")))
    return int(per_param * n * (case.nprocess if replicated else 1))


def planned_offload_ratio(case) -> float:
    """The offload_ratio a plan counts the host state at: the case's, or at ``auto`` on a GPU (where
    the rank picks it from the GPU's free memory) the most the host may get, 1."""
    if case.param("mode", "ddp") == "streamed-split" and (case.param("offload_ratio") or "auto") == "auto" \
            and _cuda_here():
        return 1.0
    return memory.case_offload_ratio(case, None)


def host_bytes_per_sequence(case) -> float:
    """Host bytes per sequence of the global batch (the size axis) for the fits-in-memory check:
    its int64 tokens in the batch pool (x POOL), on CPU ranks the tiny model's activations
    (~2 MiB), and the offloaded optimizer state spread over the batch."""
    tokens = (model_config(case.param("model", "tiny")).seq_len + 1) * 8 * POOL + 2**21
    return tokens + host_state_bytes(case) / max(1, case.numel)


def gpu_only(case) -> str | None:
    mode = case.param("mode")
    if mode == "fsdp-offload":
        return "mode fsdp-offload (torch's CPU offload of params and optimizer) needs CUDA"
    if mode == "torchao-offload":
        return "mode torchao-offload (torchao's CPUOffloadOptimizer) offloads a CUDA GPU's optimizer to the host"
    if case.param("model") != "tiny":
        return f"model {case.param('model')} is a GPU size (on the CPU only model tiny runs)"
    if case.dtype != "fp32":
        return f"dtype {case.dtype} (mixed precision) is a GPU setting (on the CPU only fp32 runs)"
    return None


def skip_reason(case) -> str | None:
    if case.dtype == "fp16":
        return "train_step runs fp32 or bf16 (mixed precision); fp16 would need a loss scaler"
    mode = case.param("mode")
    package = MODE_PACKAGES.get(mode)
    if package and importlib.util.find_spec(package) is None:
        return (f"mode {mode} needs the optional package {package} (pip install 'numabench[{package}]'; "
                "docs/RESULTS.md pins the versions): not importable")
    for knob, modes in MODE_KNOBS.items():
        if case.param(knob) and mode not in modes:
            return f"{knob}={case.param(knob)} sets mode {' and '.join(modes)}; mode {mode} has no such setting"
    if case.param("place") and mode not in PLACED_TOUCHES:
        return (f"place={case.param('place')} places the host state of modes {', '.join(PLACED_TOUCHES)}; mode "
                f"{mode} keeps {'its state on the device' if mode not in OFFLOAD_HOST_BYTES else 'its host state in its library'}")
    if mode == "torchao-offload" and case.nprocess > 1:
        return ("mode torchao-offload runs one rank: torchao's CPUOffloadOptimizer copies each gradient to the "
                "host as backward makes it, before DDP would average it across ranks")
    return None


# The modes whose host state the ``place`` axis places, and how many times a step touches each byte of
# a kind. streamed: the master weights and both moments are copied in and back (gradients stay on the
# GPU). DeepSpeed's ZeRO-Offload: the fp32 gradient partition is written by the copy out and read by
# CPU Adam, which reads and writes the master partition and the moments, and the master partition is
# read once more for the updated weights' copy back.
# ZeRO-2 also keeps the compute weights on the host, written by the cast after CPU Adam and read by
# their copy to the GPU.
PLACED_TOUCHES = {"streamed": {"master": 2, "moments": 2}, "streamed-split": {"master": 2, "moments": 2},
                  "deepspeed-zero2": {"master": 3, "moments": 2, "grads": 2, "weights": 2},
                  "deepspeed-zero3": {"master": 3, "moments": 2, "grads": 2}}
KIND_BYTES_PER_PARAM = {"master": 4, "moments": 8, "grads": 4}  # fp32; weights: the training dtype


def state_kinds(case: Case) -> tuple[KindDemand, ...]:
    """The host state kinds of a placed mode per rank: streamed keeps a whole copy on every rank,
    ZeRO splits it over the ranks (the workers place the real partitions, padding included)."""
    touches = PLACED_TOUCHES.get(case.param("mode", "ddp"))
    if not touches:
        return ()
    n = param_count(model_config(case.param("model", "tiny")))
    share = 1 if case.param("mode") in ("streamed", "streamed-split") else case.nprocess
    per_param = {**KIND_BYTES_PER_PARAM, "weights": case.itemsize}
    # a split mode's host share: its master and moments (ZeRO-3's gradients stay whole on the host)
    ratio = planned_offload_ratio(case) if case.param("mode") in memory.SPLIT_MODES else 1.0
    scale = {"master": ratio, "moments": ratio}
    return tuple(KindDemand(k, -(-int(per_param[k] * n * scale.get(k, 1.0)) // share), t) for k, t in touches.items())


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


DS_TIMERS = ("ds_step", "ds_optimizer_step", "ds_optimizer_gradients", "ds_optimizer_allgather", "ds_forward",
             "ds_backward", "ds_backward_allreduce")


def deepspeed_parts(result: CaseResult) -> dict:
    """Medians (ms, max over ranks per round) of our clock of engine.step() and of DeepSpeed's
    own timers of the same steps, and their ratios; empty for the other modes.
    ``optimizer_over_deepspeed_timer``: the whole call on our clock over DeepSpeed's ``step``
    timer; ``optimizer_in_timer_over_deepspeed_timer``: our clock up to where DeepSpeed's
    post-step timer bookkeeping starts (the span its timer covers) over the same timer."""
    ph = result.phases
    if not ph.get("ds_step"):
        return {}
    out = {"optimizer_ms": round(statistics.median(ph["optimizer"]) * 1e3, 4)}
    for key in DS_TIMERS:
        if ph.get(key):
            out[f"deepspeed_timer_{key[3:]}_ms"] = round(statistics.median(ph[key]) * 1e3, 4)
    if out.get("deepspeed_timer_step_ms"):
        out["optimizer_over_deepspeed_timer"] = round(out["optimizer_ms"] / out["deepspeed_timer_step_ms"], 4)
        if ph.get("ds_in_timer"):
            in_timer = statistics.median(ph["ds_in_timer"]) * 1e3
            out["optimizer_in_timer_ms"] = round(in_timer, 4)
            out["optimizer_in_timer_over_deepspeed_timer"] = round(in_timer / out["deepspeed_timer_step_ms"], 4)
            # engine.step() after DeepSpeed's timer stops: its timer bookkeeping, on our clock
            out["deepspeed_bookkeeping_ms"] = round(out["optimizer_ms"] - in_timer, 4)
    return out


def pcie_bytes_per_param(mode: str, dtype: str, offload_ratio: float = 1.0, update_interval: int | None = None) -> float:
    """Bytes over PCIe per step per parameter under ``mode``, both directions (one rank's share, per
    its parameter; numabench.families.train_step.traffic has the model and each direction)."""
    return sum(pcie_bytes_by_direction(mode, dtype, offload_ratio, update_interval))


def settings(result: CaseResult) -> dict:
    """The split and ZenFlow settings a case ran with, as its rank 0 recorded them: ``offload_ratio``
    (the share on the host it became; 1 for the other modes) and ``update_interval`` (ZenFlow's;
    None for the other modes)."""
    info = result.setup_info[0]
    zen = getattr(info, "zenflow", None) or {}
    ratio = getattr(info, "offload_ratio", None)
    return {"offload_ratio": 1.0 if ratio is None else float(ratio),
            "update_interval": int(zen["update_interval"]) if isinstance(zen.get("update_interval"), int) else None}


def zenflow_parts(result: CaseResult) -> dict:
    """deepspeed-zenflow: the block it ran with and its step's mean over whole update intervals (the
    CPU's update lands in one step of each interval, so the median step leaves it out)."""
    zen = getattr(result.setup_info[0], "zenflow", None)
    if not zen:
        return {}
    # the block as one value: its keys differ from the knobs zenflow_topk and zenflow_update_interval
    out = {"zenflow": dict(zen), "zenflow_trade": recipe("deepspeed-zenflow", result.case.dtype).trade}
    steps, u = result.phases.get("step") or [], zen.get("update_interval")
    if isinstance(u, int) and u >= 1 and len(steps) >= u:
        whole = steps[len(steps) % u:]  # the last whole intervals
        out["step_interval_mean_ms"] = round(statistics.mean(whole) * 1e3, 4)
        out["step_interval_mean_rounds"] = len(whole)
    return out


def breakdown(result: CaseResult) -> dict:
    """Where the step goes: medians (ms, max over ranks per round) of forward, backward and the
    optimizer (what is left after backward returns), their shares of the step, which clock each
    comes from, and the bytes over PCIe per step per parameter."""
    ph = result.phases
    out: dict = {}
    step = statistics.median(ph["step"]) if ph.get("step") else None
    for part in ("forward", "backward", "optimizer"):
        if ph.get(part):
            ms = statistics.median(ph[part]) * 1e3
            out[f"{part}_ms"] = round(ms, 4)
            if step:
                out[f"{part}_share"] = round(ms / (step * 1e3), 4)
    mode = result.case.param("mode", "ddp")
    on_gpu = result.setup_info[0].device_name != "cpu"
    if mode.startswith("deepspeed-") and ph.get("ds_optimizer_step") and step:
        out["cpu_adam_ms"] = round(statistics.median(ph["ds_optimizer_step"]) * 1e3, 4)
    if on_gpu and mode == "deepspeed-zero2" and ph.get("ds_optimizer_step") and step:
        # ZeRO-2's optimizer_step timer spans its CPU Adam and the cast into a host bf16 buffer and
        # only enqueues the parameters' copy: the GPU has nothing queued, so the timer's share of
        # the step is a lower bound on GPU idle. ZeRO-3's spans the parameters' synchronous copy
        # to the GPU as well (its 1b step measured 57-58% idle against a 67-69% timer share): no bound.
        out["gpu_idle_fraction_min"] = round(statistics.median(ph["ds_optimizer_step"]) / step, 4)
    theirs = "; DeepSpeed's wall_clock_breakdown timers as deepspeed_timer_*" if mode.startswith("deepspeed-") else ""
    out["breakdown_clock"] = ("CUDA events on the current stream" if on_gpu else "wall clock") + " (ours)" + theirs
    idle = [i.gpu_idle for i in result.setup_info]
    measured = [x for x in idle if x is not None and x.gpu_idle_fraction is not None]
    if idle and len(measured) == len(idle):
        # measured (torch.profiler, a few untimed steps in the set-up): the busiest rank's
        out["gpu_idle_fraction"] = min(x.gpu_idle_fraction for x in measured)
        out["sm_idle_fraction"] = min(x.sm_idle_fraction for x in measured)
        out["gpu_idle_per_rank"] = [x.gpu_idle_fraction for x in measured]
        out["gpu_idle_source"] = measured[0].source
    elif any(x is not None and x.error is not None for x in idle):
        out["gpu_idle_error"] = next(x.error for x in idle if x is not None and x.error is not None)
    out["pcie_bytes_per_param"] = pcie_bytes_per_param(mode, result.case.dtype, **settings(result))
    out["pcie_bytes_source"] = "model of the mode's copies (numabench.families.train_step.pcie_bytes_per_param)"
    return out


def memory_metrics(result: CaseResult) -> dict:
    """The recipe the mode trains with and the no-offload mode of the same recipe; what each rank
    used (peak GPU memory allocated and reserved over the set-up steps, the GPU's size, host memory
    per node as numastat -p totals it and its pinned share); the model's bytes per parameter on
    the GPU and the host and its traffic per step (numabench.families.train_step.memory, .traffic)."""
    case, infos = result.case, result.setup_info
    mode = case.param("mode", "ddp")
    s = settings(result)
    ratio = s["offload_ratio"]
    h2d, d2h = pcie_bytes_by_direction(mode, case.dtype, **s)
    r = recipe(mode, case.dtype, ratio if mode in memory.SPLIT_MODES else None)
    topk = (getattr(infos[0], "zenflow", None) or {}).get("topk_ratio")

    def by_node(rep) -> dict | None:
        return None if rep is None else rep.to_dict()["bytes_by_node"]

    return {
        "recipe": r.to_dict(), "reference_mode": r.reference,
        "mem_peak_reserved_per_rank_bytes": [i.peak_gpu_reserved_bytes for i in infos],
        "gpu_memory_bytes_per_rank": [i.gpu_memory_bytes for i in infos],
        "host_total_bytes_by_node_per_rank": [by_node(i.numa_maps) for i in infos],
        "host_pinned_bytes_by_node_per_rank": [by_node(i.host_pinned_by_node) for i in infos],
        "host_helper_bytes_by_node_per_rank": [by_node(i.helper_host_by_node) for i in infos],
        "pinned_allocator_bytes_per_rank": [i.pinned_allocator_bytes for i in infos],
        "gpu_bytes_per_param": memory.gpu_bytes_per_param(mode, case.dtype, case.nprocess, ratio, topk),
        "host_bytes_per_param": memory.host_bytes_per_param(mode, case.dtype, case.nprocess, ratio),
        **({"offload_ratio_used": ratio} if mode in memory.SPLIT_MODES else {}),
        "memory_bytes_source": "model of the mode's allocations (numabench.families.train_step.memory)",
        "pcie_h2d_bytes_per_param": h2d, "pcie_d2h_bytes_per_param": d2h,
        "host_optimizer_bytes_per_param": host_optimizer_bytes(mode, case.dtype, **s),
    }


def metrics(result: CaseResult, phase: str) -> dict:
    infos = result.setup_info
    info = infos[0]
    times = result.phases[phase]
    tokens = info.tokens_per_step
    flop = 6 * info.n_params * tokens
    med = result.median(phase)
    tps_mean, tps_std = _mean_std([tokens / t for t in times])
    tf_mean, tf_std = _mean_std([flop / t / 1e12 for t in times])
    t_mean, t_std = _mean_std(times)
    return {
        "tokens_per_s": round(tokens / med, 1), "tokens_per_s_mean": round(tps_mean, 1),
        "tokens_per_s_std": round(tps_std, 2),
        "tflops": round(flop / med / 1e12, 4), "tflops_mean": round(tf_mean, 4), "tflops_std": round(tf_std, 5),
        "tflops_per_gpu": round(flop / med / 1e12 / result.case.nprocess, 4),
        "time_per_step_mean": t_mean, "time_per_step_std": t_std,
        "tokens_per_step": tokens, "n_params": info.n_params, "seq_len": info.seq_len,
        "batch_per_rank": info.batch_per_rank, "impl": info.impl, "backend": info.backend,
        "mem_peak_per_rank_bytes": [i.peak_gpu_bytes for i in infos],
        "host_bytes_by_node_per_rank": [i.host_bytes_by_node.to_dict()["bytes_by_node"] for i in infos],
        "host_state_bytes_per_rank": [i.host_state_bytes for i in infos],
        "threads_per_rank": [i.threads for i in infos],
        "cpus_per_rank": result.affinity,
        "placed": info.placed, "setup_losses_rank0": info.setup_losses, "device": info.device_name,
        **deepspeed_parts(result), **breakdown(result), **memory_metrics(result), **zenflow_parts(result),
    }


FAMILY = GpuOrCpuFamily(
    key="train_step",
    description=("one training step of a small GPT (`model` tiny, small; 1b, 5b and 10b on request) in a process group "
                 "of one rank per GPU (gloo on a CPU-only machine), with DDP, FSDP, or FSDP with CPU offload (torch's "
                 "`CPUOffloadPolicy`), DeepSpeed's ZeRO-Offload (`deepspeed-zero2`, `deepspeed-zero3`: "
                 "optimizer state and step on the host, pinned) or torchao's `CPUOffloadOptimizer` "
                 "(`torchao-offload`, one rank), `streamed` (fp32 master weights and Adam moments in "
                 "placed, pinned host memory, streamed through the GPU in chunks and updated by our fused "
                 "kernel, overlapped with backward on one rank), `deepspeed-zenflow` (ZeRO-2 + CPU offload + "
                 "ZenFlow: the top-k gradient columns stepped on the GPU every step, the rest on the CPU every few "
                 "steps, overlapped; stale updates, not the same optimizer), `streamed-split` (a share of the "
                 "master and moments kept on the GPU, the rest streamed; knob `offload_ratio`, also DeepSpeed "
                 "ZeRO-3's `offload_optimizer.ratio`), `no-offload` (fused AdamW, fp32 weights "
                 "under bf16 autocast, all state on the GPU) or `no-offload-master` (bf16 weights, fp32 master, "
                 "gradient and moments on the GPU): the references of the two precision recipes, each mode "
                 "judged against its own; each step split into forward, backward and optimizer; tokens/s, "
                 "TFLOPS, peak GPU and host memory (pinned, per node); a case that needs more GPU memory than "
                 "there is is recorded as out of memory; axis `cpu_bind`: `node` (each rank bound to "
                 "its node's CPUs, torch threads = those CPUs divided by the ranks on the node), "
                 "`rank-cores` (a disjoint share of the node's physical cores per rank, as DeepSpeed's "
                 "`--bind_cores_to_rank`; workers check they run there), `none` (unbound); "
                 "`--numa-axis rank_threads=N` overrides the threads (`0`: torch's default); also `torchrun "
                 "-m numabench.tools.train_step_cli`"),
    needs=("nothing for the tiny model in fp32 (DDP, FSDP, streamed, no-offload, no-offload-master on gloo); "
           "CUDA for fsdp-offload, bf16 and the small, 1b and 5b models; `numabench[deepspeed]` for the DeepSpeed modes"
           " (on a CPU-only machine they run on DeepSpeed's CPU accelerator over gloo), "
           "`numabench[torchao]` and CUDA for torchao's"),
    injects_slowdown=True,
    phases=("step",),
    setup_reply=TrainStepReply,
    # each step's parts (Trainer.step_parts): ours, and DeepSpeed's timers of engine.step()
    step_parts=("forward", "backward", "optimizer", *DS_TIMERS, "ds_in_timer"),
    size_is_batch=True,
    rank_kind="gpu",
    default_sizes=(32,),
    default_dtypes=DTYPES,
    # cpu_bind: node (the node's CPUs shared by its ranks), rank-cores (disjoint physical cores
    # per rank, as DeepSpeed's --bind_cores_to_rank), none (unbound)
    extra_axes={"mode": MODES, "model": MODELS, "cpu_bind": CPU_BINDS},
    default_axis_values={"model": ("tiny", "small")},  # 1b, 5b and 10b on request (--numa-axis model=1b)
    cpu_bind=lambda case: case.param("cpu_bind", "node"),
    step_threads=step_threads,
    worker_axes=(),
    # rank_threads auto: worker.rank_threads (the rank's CPUs over the ranks sharing them); offload_ratio,
    # zenflow_*: memory.case_offload_ratio, configs.ZENFLOW_DEFAULTS
    knobs=("rank_threads", "place", "offload_ratio", "zenflow_topk", "zenflow_update_interval"),
    state_kinds=state_kinds,
    host_bytes_per_element=host_bytes_per_sequence,  # for the time plan (placing the host state)
    memory_fit=memory.memory_fit,  # host memory it cannot have skips; GPU memory it cannot have is recorded
    kernels=("cuda_adam",),
    variant_kernels=variant_kernels,
    case_skip_reason=skip_reason,
    gpu_only=gpu_only,
    # ci: the host-offloaded step (the one NUMA placement moves) and its GPU-resident reference;
    # FSDP without offload and the small model in the full tier
    ci_axis_values={"model": ("tiny",), "mode": ("ddp", "fsdp-offload"), "cpu_bind": ("node",)},
    ci_gpu_dtypes=("bf16",),  # how GPUs train (mixed precision); CPU ranks train fp32 (bf16 needs CUDA)
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    ab_rounds=40,  # a round is ~10-50 ms beside ~9 s of set-up (H200 x1: 12.7% a pair at 5 rounds, 5.8% at 10)
    default_warmup=DEFAULT_WARMUP,
)
