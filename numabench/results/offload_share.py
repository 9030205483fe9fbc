"""What part of a real ZeRO-Offload optimizer step the core benchmark explains.

Each DeepSpeed ``train_step`` entry (modes ``deepspeed-zero2/3``) records ``engine.step()``
on our clock (the reduced gradients' copy to the host, DeepSpeedCPUAdam over the rank's
fp32 partition, the parameters' copy back) and DeepSpeed's own timers of it. Beside it
goes the ``adam_offload`` step (H2D, fused Adam, D2H of the same state) of the same
parameters per rank, ranks, policy and dtype from the same run (or runs combined): their
ratio is the share of the real step the micro-benchmark explains.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from numabench.cases import format_size
from numabench.results import storage
from numabench.results.tables import entries

# ZenFlow's engine.step() only starts the CPU's update (overlapped, every few steps) and a ZeRO-3 ratio
# below 1 steps part of the state on the GPU: neither is the whole-state step adam_offload stands for
WHOLE_OFFLOAD_MODES = ("deepspeed-zero2", "deepspeed-zero3")
SIZE_TOLERANCE = 0.10  # an adam_offload size within 10% of the partition counts as the same


@dataclass
class ShareRow:
    name: str  # the train_step entry
    mode: str
    nprocess: int
    policy: str
    dtype: str
    params_per_rank: int
    engine_step_ms: float  # our clock of engine.step()
    deepspeed_step_ms: float | None  # DeepSpeed's timer of the same call
    deepspeed_cpu_adam_ms: float | None  # DeepSpeed's optimizer_step timer (its CPU Adam; ZeRO-3's with the H2D copy)
    adam_offload_ms: float | None = None
    adam_offload_name: str | None = None

    @property
    def explained(self) -> float | None:
        """adam_offload's step over DeepSpeed's optimizer step."""
        return None if self.adam_offload_ms is None else self.adam_offload_ms / self.engine_step_ms

    def hint(self) -> str:
        return (f"pytest benchmarks/test_adam_offload.py --nprocess={self.nprocess} "
                f"--param-sizes={self.params_per_rank * self.nprocess} --numa-policies={self.policy} "
                f"--dtypes={self.dtype}")


def share_rows(run: str | Path | dict) -> list[ShareRow]:
    """A row per DeepSpeed train_step entry of ``run``, with the matching adam_offload step."""
    data = run if isinstance(run, dict) else storage.load_run(run)
    extra = {b.get("name", ""): b.get("extra_info") or {} for b in data["benchmarks"]}
    es = entries(data)
    steps = [e for e in es if e.family == "adam_offload" and e.phase == "step"]
    rows = []
    for e in es:
        x = extra.get(e.name, {})
        if e.family != "train_step" or x.get("mode") not in WHOLE_OFFLOAD_MODES or "optimizer_ms" not in x:
            continue
        used = x.get("offload_ratio_used")
        if isinstance(used, (int, float)) and used < 1.0:
            continue  # part of the state stepped on the GPU: not the step adam_offload copies
        n = int(e.axes["nprocess"])
        row = ShareRow(e.name, x["mode"], n, str(e.axes["policy"]), str(e.axes["dtype"]), int(x["n_params"]) // n,
                       float(x["optimizer_ms"]), x.get("deepspeed_timer_step_ms"),
                       x.get("deepspeed_timer_optimizer_step_ms"))
        same = [s for s in steps if int(s.axes["nprocess"]) == n and str(s.axes["policy"]) == row.policy
                and str(s.axes["dtype"]) == row.dtype
                and abs(int(extra.get(s.name, {}).get("numel_per_rank", 0)) - row.params_per_rank)
                <= SIZE_TOLERANCE * row.params_per_rank]
        if same:
            best = min(same, key=lambda s: s.median_s)
            row.adam_offload_ms, row.adam_offload_name = best.median_s * 1e3, best.name
        rows.append(row)
    return rows


def share_table(rows: list[ShareRow]) -> str:
    """Markdown: one line per DeepSpeed entry."""
    out = [("| train_step entry | params/rank | engine.step ms (ours) | DeepSpeed timer ms | its optimizer_step ms "
            "| adam_offload step ms | explained |"),
           "|---|---:|---:|---:|---:|---:|---:|"]

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for r in rows:
        if r.adam_offload_ms is None:
            tail = f"none at this size: `{r.hint()}` | -"
        else:
            tail = f"{r.adam_offload_ms:.3f} ({r.adam_offload_name}) | {r.explained:.0%}"
        out.append(f"| {r.name} | {format_size(r.params_per_rank)} | {r.engine_step_ms:.3f} | "
                   f"{ms(r.deepspeed_step_ms)} | {ms(r.deepspeed_cpu_adam_ms)} | {tail} |")
    return "\n".join(out)
