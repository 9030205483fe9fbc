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
Under DDP (more ranks) the streamed and no-offload-master modes keep the low-precision
gradients and DDP's buckets of them as well.

Host bytes per parameter (GPU ranks): streamed 12 (master, two moments), torchao 16 (fp32 copy,
gradient, two moments; its pinned copy and gradient rounded up to a power of two each), ZeRO-2 16,
ZeRO-3 18, FSDP2's CPU offload 12 (train_step.OFFLOAD_HOST_BYTES has the bounds that include
DeepSpeed's CPU accelerator); a model made on the host (every size but those with
``init_on_device``) adds its fp32 weights, 4, while it is built.

Activations per rank: batch x seq x d_model x layers x 34 bytes in bf16 (68 in fp32; Korthikanti
et al.'s per-layer figure without the attention matrix, which scaled_dot_product_attention does
not keep) plus the logits, batch x seq x vocab x 14 bytes (bf16 logits, their fp32 copy, the
saved log-softmax; 12 in fp32). With no-offload's state this gives 26.0 GiB for the small model at
batch 32 and 31.2 GiB for the 1b at batch 8, against peaks of 24.8 and 27.7 GiB measured on an
H100: an upper estimate.
"""
from __future__ import annotations

from dataclasses import dataclass

from numabench.families.base import USABLE_HOST_SHARE, MemoryFit
from numabench.families.train_step.configs import GPTConfig, model_config, param_count

# A need within this share of the GPU's memory is expected to fit (the CUDA context, the caching
# allocator's fragmentation and the estimate's slack take the rest).
USABLE_GPU_SHARE = 0.95
GPU_BYTES_PER_PARAM = {  # mode: (bf16, fp32), one rank
    "no-offload": (22, 20), "ddp": (22, 20), "no-offload-master": (18, 20), "torchao-offload": (10, 8),
    "streamed": (4, 8), "deepspeed-zero2": (4, 8), "deepspeed-zero3": (4, 8), "fsdp": (16, 16),
    "fsdp-offload": (0, 0)}
SHARDED_ON_GPU = ("deepspeed-zero3", "fsdp")  # split over the ranks
DDP_EXTRA_ON_GPU = ("streamed", "no-offload-master")  # wrapped in DDP only with more ranks
HOST_BYTES_PER_PARAM = {"streamed": 12, "torchao-offload": 16, "deepspeed-zero2": 16, "deepspeed-zero3": 18,
                        "fsdp-offload": 12}
HOST_REPLICATED = ("streamed", "torchao-offload")  # a whole copy per rank; the others split it
TOKEN_POOL = 4  # train_step.POOL: the batches each rank cycles through


def _check(mode: str, dtype: str) -> None:
    if mode not in GPU_BYTES_PER_PARAM:
        raise ValueError(f"unknown mode {mode!r}: allowed {', '.join(GPU_BYTES_PER_PARAM)}")
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype {dtype!r}: allowed fp32 or bf16 (train_step's dtypes)")


def gpu_bytes_per_param(mode: str, dtype: str, nprocess: int = 1) -> float:
    """GPU bytes one rank keeps per parameter of the model under ``mode``."""
    _check(mode, dtype)
    per = GPU_BYTES_PER_PARAM[mode][0 if dtype == "bf16" else 1]
    if nprocess > 1:
        if mode in SHARDED_ON_GPU:
            return per / nprocess
        if mode == "deepspeed-zero2":  # whole weights, partitioned gradients
            return per / 2 + per / 2 / nprocess
        if mode in DDP_EXTRA_ON_GPU:  # the low-precision gradients and DDP's buckets of them
            return per + 2 * (2 if dtype == "bf16" else 4)
    return float(per)


def host_bytes_per_param(mode: str, dtype: str, nprocess: int = 1) -> float:
    """Host bytes one rank keeps per parameter of the model under ``mode`` (GPU ranks)."""
    _check(mode, dtype)
    per = HOST_BYTES_PER_PARAM.get(mode, 0)
    return float(per if mode in HOST_REPLICATED or nprocess == 1 else per / nprocess)


def activation_bytes(cfg: GPTConfig, batch: int, dtype: str) -> int:
    """Estimated activation bytes of one rank's step at ``batch`` sequences (an upper estimate)."""
    per_layer = 34 if dtype == "bf16" else 68
    logits = 14 if dtype == "bf16" else 12
    tokens = batch * cfg.seq_len
    return tokens * (cfg.d_model * cfg.n_layers * per_layer + cfg.vocab * logits)


@dataclass(frozen=True)
class Need:
    gpu_bytes: float  # per rank
    host_bytes: float  # over the ranks
    gpu_state_bytes: float
    activation_bytes: float
    n_params: int


def need(case, on_gpu: bool = True) -> Need:
    """What ``case`` (a train_step case) needs: per GPU, and on the host over its ranks."""
    mode, dtype, np_ = case.param("mode", "ddp"), case.dtype, case.nprocess
    cfg = model_config(case.param("model", "tiny"))
    n = param_count(cfg)
    state = gpu_bytes_per_param(mode, dtype, np_) * n
    act = activation_bytes(cfg, max(1, case.numel // np_), dtype)
    host_state = host_bytes_per_param(mode, dtype, np_) * n * np_
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
    nd = need(case, on_gpu)
    mode, model = case.param("mode", "ddp"), case.param("model", "tiny")
    what = f"mode {mode}, model {model} ({nd.n_params / 1e9:.2f}B parameters)"
    usable = USABLE_HOST_SHARE * host_bytes
    if nd.host_bytes > usable:
        per = host_bytes_per_param(mode, case.dtype, case.nprocess)
        return MemoryFit(skip=(f"{what} needs {_gib(nd.host_bytes)} of host memory ({per:g} B per parameter of "
                               f"state per rank, the fp32 model while it is built on the host, the batches); "
                               f"the host has {_gib(host_bytes)}, {USABLE_HOST_SHARE:.0%} usable: "
                               f"{_gib(usable)}"))
    if gpu_bytes and nd.gpu_bytes > USABLE_GPU_SHARE * gpu_bytes:  # 0: the GPU's memory is not known
        per = gpu_bytes_per_param(mode, case.dtype, case.nprocess)
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


def capacity(mode: str, dtype: str, gpu_bytes: float, host_bytes: float, activations: float = 0.0) -> Capacity:
    """The largest model ``mode`` can train on one GPU of ``gpu_bytes`` with ``host_bytes`` of host
    memory, from its bytes per parameter: ``activations`` (bytes, e.g. measured at the batch in
    question) come off the GPU's share first; the host's usable share as the fits check counts it."""
    g, h = gpu_bytes_per_param(mode, dtype), host_bytes_per_param(mode, dtype)
    gpu_params = max(0.0, USABLE_GPU_SHARE * gpu_bytes - activations) / g if g else None
    host_params = USABLE_HOST_SHARE * host_bytes / h if h else None
    options = [(p, name) for p, name in ((gpu_params, "GPU"), (host_params, "host")) if p is not None]
    if not options:
        raise ValueError(f"mode {mode!r} keeps nothing per parameter on the GPU or the host: no capacity to give")
    params, limit = min(options)
    return Capacity(params, limit, gpu_params, host_params)
