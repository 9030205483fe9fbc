"""Where the training step goes, per train_step mode: the report's offload-modes table.

One row per ``train_step`` entry (phase ``step``): the step, its forward / backward /
optimizer parts (our clock: CUDA events on the current stream; DeepSpeed's own
``optimizer_step`` timer where the entry has it: its CPU Adam, and under ZeRO-3 the parameters'
copy back to the GPU too), the GPU's idle share measured by torch's profiler over a few untimed
steps and, for ZeRO-2, that timer's share of the step (a lower bound on it), the bytes over
PCIe per step per parameter (a model of each mode's copies) and
the step over the no-offload reference's step (same model, dtype, ranks, policy and CPU
binding in the same run or runs combined).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from numabench.results import storage
from numabench.results.tables import entries

REFERENCE_MODE = "no-offload"
# modes that keep all state on the GPU: references, not candidates for "which offload wins"
ON_DEVICE_MODES = ("no-offload", "ddp", "fsdp")


@dataclass
class ModeRow:
    name: str
    mode: str
    model: str
    dtype: str
    nprocess: int
    policy: str
    cpu_bind: str
    step_ms: float
    tokens_per_s: float | None
    forward_ms: float | None
    backward_ms: float | None
    optimizer_ms: float | None
    cpu_adam_ms: float | None  # DeepSpeed's optimizer_step timer
    gpu_idle_min: float | None  # ZeRO-2's optimizer_step timer over the step (a lower bound)
    gpu_idle: float | None  # measured: torch.profiler, no kernel or copy running
    pcie_bytes_per_param: float | None
    over_reference: float | None = None

    def key(self) -> tuple:
        return (self.model, self.dtype, self.nprocess, self.policy, self.cpu_bind)


def mode_rows(run: str | Path | dict) -> list[ModeRow]:
    """A row per train_step step entry of ``run``, with its ratio to the no-offload reference."""
    data = run if isinstance(run, dict) else storage.load_run(run)
    extra = {b.get("name", ""): b.get("extra_info") or {} for b in data["benchmarks"]}
    rows = []
    for e in entries(data):
        if e.family != "train_step" or e.phase != "step":
            continue
        x = extra.get(e.name, {})
        if "forward_ms" not in x:  # a run from before the step was broken down
            continue
        # from the entry's median (pooled over its invocations where several ran), like step ms
        tokens_per_s = x["tokens_per_step"] / e.median_s if x.get("tokens_per_step") else x.get("tokens_per_s")
        rows.append(ModeRow(
            e.name, str(x.get("mode", "ddp")), str(x.get("model", "")), str(e.axes["dtype"]), int(e.axes["nprocess"]),
            str(e.axes["policy"]), str(x.get("cpu_bind", "")), e.median_s * 1e3, tokens_per_s,
            x.get("forward_ms"), x.get("backward_ms"), x.get("optimizer_ms"), x.get("cpu_adam_ms"), x.get("gpu_idle_fraction_min"),
            x.get("gpu_idle_fraction"), x.get("pcie_bytes_per_param")))
    refs = {r.key(): r.step_ms for r in rows if r.mode == REFERENCE_MODE}
    for r in rows:
        ref = refs.get(r.key())
        r.over_reference = None if ref is None else r.step_ms / ref
    return sorted(rows, key=lambda r: (r.key(), r.step_ms))


def modes_table(rows: list[ModeRow]) -> str:
    """Markdown: one line per entry."""
    out = [("| mode | model | dtype | ranks | policy | cpu_bind | step ms | tokens/s | forward | backward "
            "| optimizer | DS optimizer_step | GPU idle | GPU idle >= (ZeRO-2) | PCIe B/param | x no-offload |"),
           "|---|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(v: float | None, fmt: str = "{:.2f}") -> str:
        return "-" if v is None else fmt.format(v)

    for r in rows:
        out.append(f"| {r.mode} | {r.model} | {r.dtype} | {r.nprocess} | {r.policy} | {r.cpu_bind or '-'} | "
                   f"{r.step_ms:.2f} | {f(r.tokens_per_s, '{:,.0f}')} | "
                   f"{f(r.forward_ms)} | {f(r.backward_ms)} | {f(r.optimizer_ms)} | {f(r.cpu_adam_ms)} | "
                   f"{f(r.gpu_idle, '{:.0%}')} | {f(r.gpu_idle_min, '{:.0%}')} | "
                   f"{f(r.pcie_bytes_per_param, '{:.0f}')} | "
                   f"{f(r.over_reference, '{:.2f}x')} |")
    return "\n".join(out)


def winner_sentences(rows: list[ModeRow]) -> list[str]:
    """One sentence per model, dtype, ranks and policy: which offload mode has the fastest step
    (each mode at its best CPU binding), by how much over the next offload mode, and what it
    costs against the no-offload step. Groups with fewer than two offload modes say nothing."""
    groups: dict[tuple, dict[str, ModeRow]] = {}
    for r in rows:
        best = groups.setdefault((r.model, r.dtype, r.nprocess, r.policy), {})
        if r.mode not in best or r.step_ms < best[r.mode].step_ms:
            best[r.mode] = r
    out = []
    for (model, dtype, nprocess, policy), best in sorted(groups.items()):
        offload = sorted((r for m, r in best.items() if m not in ON_DEVICE_MODES), key=lambda r: r.step_ms)
        if len(offload) < 2:
            continue
        win, nxt = offload[0], offload[1]
        text = (f"{model} {dtype}, {nprocess} rank{'s' if nprocess > 1 else ''}, policy {policy}: {win.mode} wins "
                f"({win.step_ms:.1f} ms a step, cpu_bind {win.cpu_bind or '-'}), {nxt.step_ms / win.step_ms:.2f}x "
                f"faster than the next, {nxt.mode} ({nxt.step_ms:.1f} ms)")
        ref = best.get(REFERENCE_MODE)
        if ref is not None:
            text += f"; {win.step_ms / ref.step_ms:.2f}x the no-offload step ({ref.step_ms:.1f} ms)"
        out.append(text + ".")
    return out
