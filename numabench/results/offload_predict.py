"""What every train_step mode is predicted to do with one model on one machine, before any run: the
family's own fits-in-memory check (numabench.families.train_step.memory.memory_fit: it runs, it is
predicted out of GPU memory, or the host cannot hold it and it is skipped) for each mode, the split
modes at each offload_ratio asked and at ``auto``; and which models only a split holds there.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from numabench.cases import Case
from numabench.families.train_step import MODES
from numabench.families.train_step import memory as memory_model
from numabench.families.train_step.configs import MODELS, param_count
from numabench.numa.policy import Policy

# the modes that keep everything on the GPU, and the ones that offload all of it (the split modes at 1)
WHOLE_ON_GPU = ("no-offload", "no-offload-master")
SWEEP = (0.25, 0.5, 0.75, 1.0)  # the offload_ratio values the prediction lists (and ``auto``)


@dataclass(frozen=True)
class Prediction:
    mode: str
    offload_ratio: float | None  # the split modes' share on the host (auto resolved); None for the others
    asked: str | None  # the knob's value: a share, or auto
    gpu_state: float  # bytes
    activations: float
    host: float  # bytes over the ranks (state, a model built on the host, the batches)
    verdict: str  # "fits", "out of GPU memory" or "host too small"

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    @property
    def label(self) -> str:
        if self.offload_ratio is None:
            return self.mode
        return f"{self.mode} r={self.asked}" + (f" ({self.offload_ratio:g})" if self.asked == "auto" else "")


def _case(mode: str, model: str, batch: int, dtype: str, ratio: str | None) -> Case:
    extra = (("mode", mode), ("model", model)) + ((("offload_ratio", ratio),) if ratio and ratio != "auto" else ())
    return Case("train_step", 1, batch, Policy.parse("default"), dtype, extra)


def predict(model: str, batch: int, dtype: str, gpu_bytes: float, host_bytes: float,
            modes: Sequence[str] = MODES, ratios: Sequence[float] = SWEEP) -> list[Prediction]:
    """Each mode's predicted outcome for ``model`` at ``batch`` sequences on one GPU of ``gpu_bytes``
    with ``host_bytes`` of host memory, one rank; the split modes once per ratio and at auto."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: allowed {', '.join(MODELS)}")
    if batch < 1 or gpu_bytes <= 0 or host_bytes <= 0:
        raise ValueError(f"batch {batch}, GPU {gpu_bytes} B, host {host_bytes} B: allowed a batch >= 1 and memory > 0")
    out = []
    for mode in modes:
        asks: list[str | None] = [None]
        if mode in memory_model.SPLIT_MODES:
            asks = [f"{r:g}" for r in ratios] + (["auto"] if mode == "streamed-split" else [])
        for ask in asks:
            case = _case(mode, model, batch, dtype, ask)
            fit = memory_model.memory_fit(case, int(gpu_bytes), int(host_bytes))
            need = memory_model.need(case, True, gpu_bytes)
            verdict = "host too small" if fit.skip else "out of GPU memory" if fit.out_of_memory else "fits"
            ratio = memory_model.case_offload_ratio(case, gpu_bytes) if mode in memory_model.SPLIT_MODES else None
            out.append(Prediction(mode, ratio, ask, need.gpu_state_bytes, need.activation_bytes, need.host_bytes,
                                  verdict))
    return out


def split_only(predictions: Sequence[Prediction]) -> bool:
    """Whether only a split holds the model: every whole-on-GPU mode and every whole offload (the
    split modes at 1 among them) fails, and a split mode under 1 fits."""
    whole = [p for p in predictions if p.offload_ratio is None or p.offload_ratio == 1]
    split = [p for p in predictions if p.offload_ratio is not None and p.offload_ratio < 1]
    return bool(whole) and not any(p.fits for p in whole) and any(p.fits for p in split)


def split_only_models(batch: int, dtype: str, gpu_bytes: float, host_bytes: float) -> list[str]:
    """The family's models that only a split holds on such a machine (smallest first)."""
    names = sorted(MODELS, key=lambda m: param_count(MODELS[m]))
    return [m for m in names if split_only(predict(m, batch, dtype, gpu_bytes, host_bytes))]


def prediction_table(predictions: Sequence[Prediction]) -> str:
    """Markdown: one line per mode (and split ratio)."""
    out = ["| mode | GPU need GiB (state + activations) | host need GiB | predicted |", "|---|---:|---:|---|"]
    verdicts = {"fits": "fits", "out of GPU memory": "out of GPU memory: runs, recorded",
                "host too small": "host too small: skipped"}
    for p in predictions:
        out.append(f"| {p.label} | {p.gpu_state / 2**30:.1f} + {p.activations / 2**30:.1f} = "
                   f"{(p.gpu_state + p.activations) / 2**30:.1f} | {p.host / 2**30:.1f} | {verdicts[p.verdict]} |")
    return "\n".join(out)
