"""What a train_step mode keeps per parameter on the GPU and on the host, what a case needs in all,
whether it fits the machine, and the largest model each mode can train there (its capacity).
Torch-free: the family's fits-in-memory check and the report read it. Figures are a model of each
mode's allocations (the entries' measured peaks are the truth they are checked against).

GPU bytes per parameter, one rank (bf16 / fp32):
- no-offload, ddp: fp32 weights 4 + fp32 gradients 4 + moments 8 + DDP's gradient buckets 4 (the
  worker wraps them in DDP at every rank count) + under bf16 autocast's bf16 copies of the weights 2
  (made in forward, held until backward): 22 / 20.
- no-offload-master: bf16 weights 2 + flat fp32 gradient 4 + fp32 master 4 + moments 8: 18; fp32
  weights 4 instead of 2: 20 (numabench.families.train_step.master).
- torchao-offload: fp32 weights 4 + fp32 gradients 4 (+ 2 autocast copies under bf16): 10 / 8.
- streamed: working weights and gradients in the training dtype: 4 / 8.
- deepspeed-zero2: bf16 weights 2 + bf16 gradients 2: 4 / 8 (its reduce and all-gather buckets are
  of a fixed size, 5e8 elements each, not per parameter).
- deepspeed-zero3: the same, partitioned over the ranks.
- fsdp: fp32 sharded weights 4 + gradients 4 + moments 8, over the ranks: 16.
- fsdp-offload: none per parameter (the unsharded bf16 copies of one block at a time).
- deepspeed-zenflow: ZeRO-2's 4 / 8, plus the top-k columns' gradient copy and two moments in the
  weights' dtype, 6 / 12 per parameter of the top-k share (topk_ratio: 0.05 by default, 4.3 / 8.6).
- The split modes, with ``offload_ratio`` r the share of the fp32 master and moments on the host:
  streamed-split keeps the streamed mode's 4 / 8 for the host share and no-offload-master's 18 / 20
  for the GPU share (the same MasterAdamW on the device), 4r + 18(1 - r); deepspeed-zero3 at ratio
  r keeps its 4 / 8 for every parameter and, for the sub-groups DeepSpeed steps on the GPU, the fp32
  master 4, its fp32 gradient 4 and the moments 8: 4 + 16(1 - r) / 8 + 16(1 - r).
Under DDP (more ranks) the streamed and no-offload-master modes keep the low-precision
gradients and DDP's buckets of them as well.

Host bytes per parameter (GPU ranks): streamed 12 (master, two moments), torchao 16 (fp32 copy,
gradient, two moments; its pinned copy and gradient rounded up to a power of two each), ZeRO-2 16,
ZeRO-3 18, FSDP2's CPU offload 12 (train_step.OFFLOAD_HOST_BYTES has the bounds that include
DeepSpeed's CPU accelerator); ZenFlow 24 (ZeRO-2's 16, a second fp32 gradient buffer for the step
its CPU process overlaps, and that process's stale fp32 copy of the master, 4); streamed-split 12r;
deepspeed-zero3 at ratio r 4 + 14r (its flat fp32 gradient buffer holds every parameter's gradient
on the host whatever the ratio); a model made on the host (every size but those with
``init_on_device``) adds its fp32 weights, 4, while it is built.

Activations per rank: batch x seq x d_model x layers x 34 bytes in bf16 (68 in fp32; Korthikanti
et al.'s per-layer figure without the attention matrix, which scaled_dot_product_attention does
not keep) plus the logits, batch x seq x vocab x 14 bytes (bf16 logits, their fp32 copy, the
saved log-softmax; 12 in fp32). With no-offload's state this gives 26.0 GiB for the small model at
batch 32 and 31.2 GiB for the 1b at batch 8, against peaks of 24.8 and 27.7 GiB measured on an
H100: an upper estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from numabench.families.base import USABLE_HOST_SHARE, MemoryFit
from numabench.families.train_step.configs import GPTConfig, model_config, param_count

# A need within this share of the GPU's memory is expected to fit (the CUDA context, the caching
# allocator's fragmentation and the estimate's slack take the rest).
USABLE_GPU_SHARE = 0.95
GPU_BYTES_PER_PARAM = {  # mode: (bf16, fp32), one rank; the split modes all on the host (offload_ratio 1)
    "no-offload": (22, 20), "ddp": (22, 20), "no-offload-master": (18, 20), "torchao-offload": (10, 8),
    "streamed": (4, 8), "deepspeed-zero2": (4, 8), "deepspeed-zero3": (4, 8), "fsdp": (16, 16),
    "fsdp-offload": (0, 0), "deepspeed-zenflow": (4, 8), "streamed-split": (4, 8)}
# the split modes: what the GPU share adds per parameter (bf16, fp32) and the host bytes (fixed, per
# offloaded share) at offload_ratio r: GPU base + add x (1 - r), host fixed + share x r
SPLIT_GPU_ADD = {"streamed-split": (14, 12), "deepspeed-zero3": (16, 16)}
SPLIT_HOST = {"streamed-split": (0, 12), "deepspeed-zero3": (4, 14)}
SPLIT_MODES = tuple(SPLIT_GPU_ADD)
ZENFLOW_TOPK_GPU = (6, 12)  # (bf16, fp32) per parameter of the top-k share: its gradient copy, two moments
ZENFLOW_TOPK_DEFAULT = 0.05  # configs.ZENFLOW_DEFAULTS' topk_ratio (memory stays import-light)
SHARDED_ON_GPU = ("deepspeed-zero3", "fsdp")  # split over the ranks
DDP_EXTRA_ON_GPU = ("streamed", "no-offload-master", "streamed-split")  # wrapped in DDP only with more ranks
HOST_BYTES_PER_PARAM = {"streamed": 12, "torchao-offload": 16, "deepspeed-zero2": 16, "deepspeed-zero3": 18,
                        "fsdp-offload": 12, "deepspeed-zenflow": 24, "streamed-split": 12}
HOST_REPLICATED = ("streamed", "torchao-offload", "streamed-split")  # a whole copy per rank; the others split it
TOKEN_POOL = 4  # train_step.POOL: the batches each rank cycles through


def _check(mode: str, dtype: str, offload_ratio: float = 1.0) -> None:
    if mode not in GPU_BYTES_PER_PARAM:
        raise ValueError(f"unknown mode {mode!r}: allowed {', '.join(GPU_BYTES_PER_PARAM)}")
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype {dtype!r}: allowed fp32 or bf16 (train_step's dtypes)")
    if not 0 <= offload_ratio <= 1:
        raise ValueError(f"offload_ratio {offload_ratio}: allowed 0 to 1 (the share of the optimizer state on the host)")
    if offload_ratio != 1 and mode not in SPLIT_MODES:
        raise ValueError(f"offload_ratio {offload_ratio} with mode {mode}: allowed with {', '.join(SPLIT_MODES)} only")


def gpu_bytes_per_param(mode: str, dtype: str, nprocess: int = 1, offload_ratio: float = 1.0,
                        topk_ratio: float | None = None) -> float:
    """GPU bytes one rank keeps per parameter of the model under ``mode``; ``offload_ratio``: the
    split modes' share of the optimizer state on the host; ``topk_ratio``: ZenFlow's (None: its
    default)."""
    _check(mode, dtype, offload_ratio)
    col = 0 if dtype == "bf16" else 1
    per = GPU_BYTES_PER_PARAM[mode][col]
    if mode in SPLIT_MODES:
        per += SPLIT_GPU_ADD[mode][col] * (1 - offload_ratio)
    if mode == "deepspeed-zenflow":
        per += ZENFLOW_TOPK_GPU[col] * (ZENFLOW_TOPK_DEFAULT if topk_ratio is None else topk_ratio)
    if nprocess > 1:
        if mode in SHARDED_ON_GPU:
            return per / nprocess
        if mode in ("deepspeed-zero2", "deepspeed-zenflow"):  # whole weights, partitioned gradients
            return per / 2 + per / 2 / nprocess
        if mode in DDP_EXTRA_ON_GPU:  # the low-precision gradients and DDP's buckets of them
            return per + 2 * (2 if dtype == "bf16" else 4)
    return float(per)


def host_bytes_per_param(mode: str, dtype: str, nprocess: int = 1, offload_ratio: float = 1.0) -> float:
    """Host bytes one rank keeps per parameter of the model under ``mode`` (GPU ranks);
    ``offload_ratio``: the split modes' share of the optimizer state on the host."""
    _check(mode, dtype, offload_ratio)
    per = HOST_BYTES_PER_PARAM.get(mode, 0)
    if mode in SPLIT_MODES:
        fixed, share = SPLIT_HOST[mode]
        per = fixed + share * offload_ratio
    return float(per if mode in HOST_REPLICATED or nprocess == 1 else per / nprocess)


def activation_bytes(cfg: GPTConfig, batch: int, dtype: str) -> int:
    """Estimated activation bytes of one rank's step at ``batch`` sequences (an upper estimate)."""
    per_layer = 34 if dtype == "bf16" else 68
    logits = 14 if dtype == "bf16" else 12
    tokens = batch * cfg.seq_len
    return tokens * (cfg.d_model * cfg.n_layers * per_layer + cfg.vocab * logits)


CPU_AUTO_OFFLOAD_RATIO = 0.5  # offload_ratio=auto on CPU ranks (no GPU memory to fit): both halves run


def auto_offload_ratio(mode: str, dtype: str, n_params: int, gpu_bytes: float, activations: float) -> float:
    """The split mode's smallest offload_ratio (the largest share of its optimizer state kept on the
    GPU), in steps of 0.01, at which its state and ``activations`` fit the usable share of
    ``gpu_bytes`` (the GPU's free memory); 0 where all of it fits, 1 where not even all on the host
    does (the case then runs and its out-of-memory is recorded)."""
    if mode not in SPLIT_MODES:
        raise ValueError(f"offload_ratio=auto with mode {mode!r}: allowed with {', '.join(SPLIT_MODES)}")
    _check(mode, dtype)
    if n_params < 1:
        raise ValueError(f"n_params {n_params}: allowed >= 1")
    col = 0 if dtype == "bf16" else 1
    room = (USABLE_GPU_SHARE * gpu_bytes - activations) / n_params - GPU_BYTES_PER_PARAM[mode][col]
    keep = room / SPLIT_GPU_ADD[mode][col]  # the GPU share that fits
    offload = math.ceil(round((1 - keep) * 100, 9)) / 100  # rounded up: never more on the GPU than fits
    return min(1.0, max(0.0, offload))


def offload_ratio_of(mode: str, knob: str | None, model: str, batch_per_rank: int, dtype: str,
                     gpu_bytes: float | None) -> float:
    """The offload_ratio a split mode runs at: the ``offload_ratio`` knob's value; at ``auto`` (or
    None) deepspeed-zero3's 1 (DeepSpeed's default) and streamed-split's auto_offload_ratio on a GPU
    of ``gpu_bytes`` free (None: CPU ranks, CPU_AUTO_OFFLOAD_RATIO; 0: not known, 1); 1 for every
    other mode."""
    if mode not in SPLIT_MODES:
        return 1.0
    if knob not in (None, "", "auto"):
        return float(knob)
    if mode == "deepspeed-zero3":
        return 1.0
    if gpu_bytes is None:
        return CPU_AUTO_OFFLOAD_RATIO
    if not gpu_bytes:
        return 1.0
    cfg = model_config(model)
    act = activation_bytes(cfg, max(1, batch_per_rank), dtype)
    return auto_offload_ratio(mode, dtype, param_count(cfg), gpu_bytes, act)


def case_offload_ratio(case, gpu_bytes: float | None) -> float:
    """offload_ratio_of a train_step case (its knob, model, batch per rank and dtype)."""
    return offload_ratio_of(case.param("mode", "ddp"), case.param("offload_ratio"), case.param("model", "tiny"),
                            case.numel // case.nprocess, case.dtype, gpu_bytes)


def case_topk(case) -> float | None:
    """ZenFlow's topk_ratio of a case (None: the default)."""
    text = case.param("zenflow_topk", "auto") or "auto"
    return None if text == "auto" else float(text)


@dataclass(frozen=True)
class Need:
    gpu_bytes: float  # per rank
    host_bytes: float  # over the ranks
    gpu_state_bytes: float
    activation_bytes: float
    n_params: int


def need(case, on_gpu: bool = True, gpu_bytes: float | None = None) -> Need:
    """What ``case`` (a train_step case) needs: per GPU, and on the host over its ranks (a split
    mode at its offload_ratio, ``auto`` resolved for a GPU of ``gpu_bytes``)."""
    mode, dtype, np_ = case.param("mode", "ddp"), case.dtype, case.nprocess
    cfg = model_config(case.param("model", "tiny"))
    n = param_count(cfg)
    ratio = case_offload_ratio(case, (gpu_bytes or 0) if on_gpu else None)
    state = gpu_bytes_per_param(mode, dtype, np_, ratio, case_topk(case)) * n
    act = activation_bytes(cfg, max(1, case.numel // np_), dtype)
    host_state = host_bytes_per_param(mode, dtype, np_, ratio) * n * np_
    built_on_host = 0 if cfg.init_on_device else 4 * n * np_
    tokens = (cfg.seq_len + 1) * 8 * TOKEN_POOL * case.numel
    if not on_gpu:  # CPU ranks: what a GPU would hold is host memory too
        return Need(0.0, host_state + built_on_host + tokens + (state + act) * np_, state, act, n)
    return Need(state + act, host_state + built_on_host + tokens, state, act, n)


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def memory_fit(case, gpu_bytes: int | None, host_bytes: int) -> MemoryFit:
    """Whether ``case`` fits a machine with ``gpu_bytes`` per GPU (None: CPU ranks) and ``host_bytes``
    of host memory. Host memory it cannot have skips the case (running it would invite the
    kernel's OOM killer, which takes more than the case); GPU memory it cannot have is a
    prediction: the case runs and its out-of-memory is recorded as measured."""
    on_gpu = gpu_bytes is not None
    nd = need(case, on_gpu, gpu_bytes)
    ratio = case_offload_ratio(case, (gpu_bytes or 0) if on_gpu else None)
    mode, model = case.param("mode", "ddp"), case.param("model", "tiny")
    what = f"mode {mode}, model {model} ({nd.n_params / 1e9:.2f}B parameters)" + (
        f", offload_ratio {ratio:g}" if mode in SPLIT_MODES else "")
    usable = USABLE_HOST_SHARE * host_bytes
    if nd.host_bytes > usable:
        per = host_bytes_per_param(mode, case.dtype, case.nprocess, ratio)
        return MemoryFit(skip=(f"{what} needs {_gib(nd.host_bytes)} of host memory ({per:g} B per parameter of "
                               f"state per rank, the fp32 model while it is built on the host, the batches); "
                               f"the host has {_gib(host_bytes)}, {USABLE_HOST_SHARE:.0%} usable: "
                               f"{_gib(usable)}"))
    if gpu_bytes and nd.gpu_bytes > USABLE_GPU_SHARE * gpu_bytes:  # 0: the GPU's memory is not known
        per = gpu_bytes_per_param(mode, case.dtype, case.nprocess, ratio, case_topk(case))
        return MemoryFit(out_of_memory=(
            f"{what} needs ~{_gib(nd.gpu_bytes)} per GPU ({per:g} B per parameter: {_gib(nd.gpu_state_bytes)}, "
            f"plus ~{_gib(nd.activation_bytes)} of activations at {case.numel // case.nprocess} sequences); "
            f"the GPU has {_gib(gpu_bytes)}"))
    return MemoryFit()


@dataclass(frozen=True)
class Capacity:
    params: float  # the largest model the mode can train here, in parameters
    limit: str  # "GPU" or "host": which memory runs out first
    gpu_params: float | None  # what the GPU alone allows (None: the mode keeps nothing per parameter there)
    host_params: float | None  # what the host alone allows (None: nothing per parameter there)


def capacity(mode: str, dtype: str, gpu_bytes: float, host_bytes: float, activations: float = 0.0,
             offload_ratio: float = 1.0) -> Capacity:
    """The largest model ``mode`` can train on one GPU of ``gpu_bytes`` with ``host_bytes`` of host
    memory, from its bytes per parameter (a split mode's at ``offload_ratio``): ``activations``
    (bytes, e.g. measured at the batch in question) come off the GPU's share first; the host's
    usable share as the fits check counts it."""
    g = gpu_bytes_per_param(mode, dtype, offload_ratio=offload_ratio)
    h = host_bytes_per_param(mode, dtype, offload_ratio=offload_ratio)
    gpu_params = max(0.0, USABLE_GPU_SHARE * gpu_bytes - activations) / g if g else None
    host_params = USABLE_HOST_SHARE * host_bytes / h if h else None
    options = [(p, name) for p, name in ((gpu_params, "GPU"), (host_params, "host")) if p is not None]
    if not options:
        raise ValueError(f"mode {mode!r} keeps nothing per parameter on the GPU or the host: no capacity to give")
    params, limit = min(options)
    return Capacity(params, limit, gpu_params, host_params)


def split_capacity(mode: str, dtype: str, gpu_bytes: float, host_bytes: float,
                   activations: float = 0.0) -> tuple[Capacity, float]:
    """A split mode's largest model over every offload_ratio, and that ratio: where the GPU's and the
    host's limits meet (the GPU's falls and the host's rises with the ratio), else the end of 0..1
    nearer to it."""
    if mode not in SPLIT_MODES:
        raise ValueError(f"mode {mode!r} has no offload_ratio to choose: allowed {', '.join(SPLIT_MODES)}")
    _check(mode, dtype)
    col = 0 if dtype == "bf16" else 1
    gpu = max(0.0, USABLE_GPU_SHARE * gpu_bytes - activations)
    host = USABLE_HOST_SHARE * host_bytes
    base, add = GPU_BYTES_PER_PARAM[mode][col], SPLIT_GPU_ADD[mode][col]
    fixed, share = SPLIT_HOST[mode]
    # gpu / (base + add (1 - r)) = host / (fixed + share r)
    ratio = (host * (base + add) - gpu * fixed) / (gpu * share + host * add)
    ratio = min(1.0, max(0.0, ratio))
    return capacity(mode, dtype, gpu_bytes, host_bytes, activations, ratio), ratio
