"""Where the training step goes, per train_step mode: the report's offload-modes table.

One row per ``train_step`` entry (phase ``step``), and one per case that ran out of memory (the
run's ``numabench_memory`` records: numabench.results.memory_outcomes): the step, its forward /
backward / optimizer parts (our clock: CUDA events on the current stream; DeepSpeed's own
``optimizer_step`` timer where the entry has it: its CPU Adam, and under ZeRO-3 the parameters'
copy back to the GPU too), the GPU's idle share measured by torch's profiler over a few untimed
steps and, for ZeRO-2, that timer's share of the step (a lower bound on it); the mode's precision
recipe (numabench.families.train_step.recipes); the memory each rank used (peak GPU memory
allocated and reserved, host memory per node and its pinned share) and the GPU bytes per
parameter the mode keeps; the bytes over PCIe per step per parameter and the bounds they and a
CPU-side optimizer's host-memory pass give at the rates the same runs measured
(numabench.results.offload_limits); and the step over the step of the no-offload mode of the
same recipe (same model, dtype, ranks and policy; the same CPU binding where measured, else the
reference's ``node`` one: the reference keeps nothing on the host).

A split mode's row (``streamed-split``, ``deepspeed-zero3`` under 1) is named with the share of the
optimizer state it kept on the host (``r=``), a ZenFlow row with its top-k share and update interval,
and ZenFlow's step is its mean over whole update intervals (the CPU's update lands in one step of
each, which the median leaves out); its recipe is marked as trading stale updates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from numabench.families.train_step import MODES as TRAIN_STEP_MODES, memory as memory_model
from numabench.families.train_step.configs import MODELS, param_count
from numabench.families.train_step.recipes import recipe
from numabench.families.train_step.traffic import DTYPES as TRAIN_STEP_DTYPES, host_optimizer_bytes, pcie_bytes_by_direction
from numabench.results import memory_outcomes, storage
from numabench.results.offload_limits import host_bound_s, measured_rates, pcie_bound_s
from numabench.results.tables import entries

REFERENCE_MODES = ("no-offload", "no-offload-master")
# modes that keep all state on the GPU: references, not candidates for "which offload wins"
ON_DEVICE_MODES = ("no-offload", "no-offload-master", "ddp", "fsdp")
GIB = 2**30


@dataclass
class ModeRow:
    name: str
    mode: str
    model: str
    dtype: str
    nprocess: int
    policy: str
    cpu_bind: str
    step_ms: float | None  # None: the case ran out of memory
    tokens_per_s: float | None = None
    forward_ms: float | None = None
    backward_ms: float | None = None
    optimizer_ms: float | None = None
    cpu_adam_ms: float | None = None  # DeepSpeed's optimizer_step timer
    gpu_idle_min: float | None = None  # ZeRO-2's optimizer_step timer over the step (a lower bound)
    gpu_idle: float | None = None  # measured: torch.profiler, no kernel or copy running
    pcie_bytes_per_param: float | None = None
    n_params: int | None = None
    peak_allocated: int | None = None  # bytes, the largest over the ranks
    peak_reserved: int | None = None
    host_total_by_node: dict[str, int] = field(default_factory=dict)  # rank 0's, numastat -p's total
    host_pinned_by_node: dict[str, int] | None = None
    pcie_bound_ms: float | None = None
    host_bound_ms: float | None = None
    out_of_memory: str | None = None  # the error's out-of-memory line
    predicted: str | None = None  # what the fits check said the case needs, where it said so
    reference_ms: float | None = None
    over_reference: float | None = None
    reference_policy: str | None = None  # the reference's policy (another one only on a one-node machine)
    reference_out_of_memory: bool = False
    offload_ratio: float | None = None  # the split modes: the share of the optimizer state on the host
    topk_ratio: float | None = None  # deepspeed-zenflow's settings
    update_interval: int | None = None

    def key(self) -> tuple:
        return (self.model, self.dtype, self.nprocess, self.policy, self.cpu_bind)

    @property
    def ratio(self) -> float:
        return 1.0 if self.offload_ratio is None else self.offload_ratio

    @property
    def variant(self) -> str:
        """The mode and its split or ZenFlow settings: what competes in "which offload wins"."""
        if self.mode in memory_model.SPLIT_MODES and (self.mode == "streamed-split" or self.ratio < 1):
            return f"{self.mode} r={self.ratio:.2f}"
        if self.mode == "deepspeed-zenflow":
            return (f"{self.mode} top {self.topk_ratio if self.topk_ratio is not None else '-'}, every "
                    f"{self.update_interval if self.update_interval is not None else '-'}")
        return self.mode

    @property
    def recipe(self):
        return recipe(self.mode, self.dtype, self.ratio if self.mode in memory_model.SPLIT_MODES else None)

    @property
    def reference(self) -> str:
        return self.recipe.reference

    @property
    def gpu_bytes_per_param(self) -> float:
        return memory_model.gpu_bytes_per_param(self.mode, self.dtype, self.nprocess, self.ratio, self.topk_ratio)

    def traffic_settings(self) -> dict:
        return {"offload_ratio": self.ratio, "update_interval": self.update_interval}

    @property
    def bound_ms(self) -> float | None:
        """Forward, then the larger of the offload's PCIe and host bounds (neither can start before
        the forward pass is done); None where the mode has neither."""
        limits = [b for b in (self.pcie_bound_ms, self.host_bound_ms) if b is not None]
        if not limits or self.forward_ms is None:
            return None
        return self.forward_ms + max(limits)

    @property
    def limit(self) -> str | None:
        """Which bound is the larger: PCIe or host memory."""
        if self.pcie_bound_ms is None and self.host_bound_ms is None:
            return None
        return "PCIe" if (self.pcie_bound_ms or 0) >= (self.host_bound_ms or 0) else "host"


def _max_or_none(values) -> int | None:
    known = [v for v in values or [] if isinstance(v, (int, float))]
    return int(max(known)) if known else None


def _with_helpers(total: dict, helpers: dict | None) -> dict:
    """The rank's bytes per node with its helper processes' private ones added (ZenFlow's optimizer
    process holds its moments)."""
    out = dict(total)
    for node, b in (helpers or {}).items():
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            out[node] = out.get(node, 0) + b
    return out


def _first_dict(values) -> dict | None:
    return values[0] if isinstance(values, list) and values and isinstance(values[0], dict) else None


def _float_or_none(v) -> float | None:
    try:
        return None if v in (None, "", "auto") else float(v)
    except (TypeError, ValueError):
        return None


def _settings(x: dict) -> dict:
    """A row's split and ZenFlow settings from its extra_info: the ratio it split at (else its knob),
    ZenFlow's block (else its knobs, else the defaults)."""
    mode = str(x.get("mode", "ddp"))
    out: dict = {}
    if mode in memory_model.SPLIT_MODES:
        out["offload_ratio"] = _float_or_none(x.get("offload_ratio_used"))
        if out["offload_ratio"] is None:
            out["offload_ratio"] = _float_or_none(x.get("offload_ratio")) or (1.0 if mode == "deepspeed-zero3" else None)
    if mode == "deepspeed-zenflow":
        from numabench.families.train_step.configs import ZENFLOW_DEFAULTS

        zen = x.get("zenflow") if isinstance(x.get("zenflow"), dict) else {}
        topk = zen.get("topk_ratio", _float_or_none(x.get("zenflow_topk")) or ZENFLOW_DEFAULTS["topk_ratio"])
        interval = zen.get("update_interval", _float_or_none(x.get("zenflow_update_interval"))
                           or ZENFLOW_DEFAULTS["update_interval"])
        out["topk_ratio"], out["update_interval"] = float(topk), int(interval)
    return out


def _measured_row(e, x: dict) -> ModeRow:
    # from the entry's median (pooled over its invocations where several ran), like step ms; ZenFlow's
    # mean over whole update intervals
    step_ms = x.get("step_interval_mean_ms") or e.median_s * 1e3
    tokens_per_s = x["tokens_per_step"] / (step_ms / 1e3) if x.get("tokens_per_step") else x.get("tokens_per_s")
    row = ModeRow(
        e.name, str(x.get("mode", "ddp")), str(x.get("model", "")), str(e.axes["dtype"]), int(e.axes["nprocess"]),
        str(e.axes["policy"]), str(x.get("cpu_bind", "")), step_ms, tokens_per_s,
        x.get("forward_ms"), x.get("backward_ms"), x.get("optimizer_ms"), x.get("cpu_adam_ms"),
        x.get("gpu_idle_fraction_min"), x.get("gpu_idle_fraction"), None,
        x.get("n_params"), _max_or_none(x.get("mem_peak_per_rank_bytes")),
        _max_or_none(x.get("mem_peak_reserved_per_rank_bytes")),
        _with_helpers(_first_dict(x.get("host_total_bytes_by_node_per_rank")) or {},
                      _first_dict(x.get("host_helper_bytes_by_node_per_rank"))),
        _first_dict(x.get("host_pinned_bytes_by_node_per_rank")), **_settings(x))
    row.pcie_bytes_per_param = sum(pcie_bytes_by_direction(row.mode, row.dtype, **row.traffic_settings()))
    return row


def _oom_row(record: dict) -> ModeRow:
    x = record["extra_info"]
    model = str(x.get("model", ""))
    return ModeRow(record.get("name", ""), str(x.get("mode", "ddp")), model, str(x.get("dtype")),
                   int(x.get("nprocess") or 1), str(x.get("policy")), str(x.get("cpu_bind", "")), None,
                   n_params=param_count(MODELS[model]) if model in MODELS else None,
                   out_of_memory=record.get("message"), predicted=record.get("predicted"), **_settings(x))


def mode_rows(run: str | Path | dict) -> list[ModeRow]:
    """A row per train_step step entry of ``run`` and per train_step case that ran out of memory,
    with its bounds and its ratio to the no-offload reference of its recipe."""
    data = run if isinstance(run, dict) else storage.load_run(run)
    extra = {b.get("name", ""): b.get("extra_info") or {} for b in data["benchmarks"]}
    es = entries(data)
    rows = []
    for e in es:
        if e.family != "train_step" or e.phase != "step":
            continue
        x = extra.get(e.name, {})
        if "forward_ms" not in x:  # a run from before the step was broken down
            continue
        rows.append(_measured_row(e, x))
    rows += [_oom_row(r) for r in memory_outcomes.out_of_memory(data)
             if r["extra_info"].get("family") == "train_step" and r["extra_info"].get("phase") == "step"]
    # a row the family's models cannot describe (a mode or dtype train_step has not: an imported or
    # hand-edited record) is left out rather than guessed at
    rows = [r for r in rows if r.mode in TRAIN_STEP_MODES and r.dtype in TRAIN_STEP_DTYPES]
    for r in rows:
        _bound(r, es)
    nodes = ((data.get("machine_info") or {}).get("numabench") or {}).get("numa_nodes")
    _judge(rows, one_node=nodes == 1)
    return sorted(rows, key=lambda r: (r.key(), r.step_ms is None, r.step_ms or 0.0))


def _bound(row: ModeRow, es: list) -> None:
    if row.n_params is None or row.nprocess != 1:
        return
    rates = measured_rates(es, row.policy)
    h2d, d2h = pcie_bytes_by_direction(row.mode, row.dtype, **row.traffic_settings())
    pcie = pcie_bound_s(h2d * row.n_params, d2h * row.n_params, rates)
    host_per_param = host_optimizer_bytes(row.mode, row.dtype, **row.traffic_settings())
    host = host_bound_s(host_per_param * row.n_params if host_per_param else None, rates)
    row.pcie_bound_ms = None if pcie is None else pcie * 1e3
    row.host_bound_ms = None if host is None else host * 1e3


def reference_of(row: ModeRow, rows: list[ModeRow], one_node: bool = False) -> ModeRow | None:
    """The no-offload row of ``row``'s recipe: same model, dtype, ranks and policy, the same CPU
    binding where there is one, else its ``node`` one, else any (measured or out of memory). On a
    machine of one NUMA node (``one_node``), where every policy places on node 0, a reference under
    another policy stands in where the row's own has none."""
    same = [r for r in rows if r.mode == row.reference and r.key()[:3] == row.key()[:3]]
    policies = [row.policy] + (sorted({r.policy for r in same} - {row.policy}) if one_node else [])
    for policy in policies:
        of_policy = [r for r in same if r.policy == policy]
        for pick in ([r for r in of_policy if r.cpu_bind == row.cpu_bind],
                     [r for r in of_policy if r.cpu_bind == "node"], of_policy):
            if pick:
                measured = [r for r in pick if r.step_ms is not None]
                return min(measured, key=lambda r: r.step_ms) if measured else pick[0]
    return None


def _judge(rows: list[ModeRow], one_node: bool) -> None:
    for r in rows:
        ref = reference_of(r, rows, one_node)
        if ref is not None:
            r.reference_policy = ref.policy
        if r.step_ms is not None and ref is not None and ref.step_ms is not None:
            r.reference_ms, r.over_reference = ref.step_ms, r.step_ms / ref.step_ms
        r.reference_out_of_memory = ref is not None and ref.step_ms is None


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / GIB:.1f}"


def _per_node(total: dict[str, int], pinned: dict[str, int] | None) -> str:
    """``N0 12.3 / 11.9`` per node: the process's host memory and its pinned share, GiB."""
    if not total:
        return "-"
    return ", ".join(f"N{n} {_gib(b)} / {_gib((pinned or {}).get(n, 0)) if pinned is not None else '-'}"
                     for n, b in sorted(total.items(), key=lambda kv: int(kv[0])))


def modes_table(rows: list[ModeRow]) -> str:
    """Markdown: one line per entry, and per case that ran out of memory."""
    out = [("| mode | recipe | model | dtype | ranks | policy | cpu_bind | step ms | tokens/s | forward | backward "
            "| optimizer | DS optimizer_step | GPU idle | GPU idle >= (ZeRO-2) | GPU peak GiB (alloc / reserved) "
            "| GPU B/param | host GiB per node (total / pinned) | PCIe B/param | PCIe bound ms | host bound ms "
            "| x (forward + bound) | x same-recipe no-offload |"),
           "|---|---|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]

    def f(v: float | None, fmt: str = "{:.2f}") -> str:
        return "-" if v is None else fmt.format(v)

    for r in rows:
        head = (f"| {r.variant} | {r.recipe.short()} | {r.model} | {r.dtype} | {r.nprocess} | {r.policy} | "
                f"{r.cpu_bind or '-'} | ")
        if r.step_ms is None:
            out.append(head + f"out of memory{' (predicted)' if r.predicted else ''} | " + "- | " * 8
                       + f"{f(r.gpu_bytes_per_param, '{:g}')} | - | - | - | - | - | - |")
            continue
        bound = r.bound_ms
        other = f" ({r.reference_policy})" if r.reference_policy not in (None, r.policy) else ""
        ratio = (f"{r.over_reference:.2f}x {r.reference}{other}" if r.over_reference is not None
                 else f"- ({r.reference}{': out of memory' if r.reference_out_of_memory else ''})")
        out.append(head + (
            f"{r.step_ms:.2f} | {f(r.tokens_per_s, '{:,.0f}')} | "
            f"{f(r.forward_ms)} | {f(r.backward_ms)} | {f(r.optimizer_ms)} | {f(r.cpu_adam_ms)} | "
            f"{f(r.gpu_idle, '{:.0%}')} | {f(r.gpu_idle_min, '{:.0%}')} | "
            f"{_gib(r.peak_allocated)} / {_gib(r.peak_reserved)} | {r.gpu_bytes_per_param:g} | "
            f"{_per_node(r.host_total_by_node, r.host_pinned_by_node)} | "
            f"{f(r.pcie_bytes_per_param, '{:.0f}')} | {f(r.pcie_bound_ms, '{:.1f}')} | {f(r.host_bound_ms, '{:.1f}')} | "
            f"{'-' if bound is None else f'{r.step_ms / bound:.2f} ({r.limit})'} | {ratio} |"))
    return "\n".join(out)


def recipe_notes(rows: list[ModeRow]) -> list[str]:
    """One line per mode and dtype in ``rows``: its whole recipe (what it trades, where it trades
    anything) and its reference."""
    seen = {(r.variant, r.dtype): r for r in rows}
    return [f"{variant} ({dtype}): {r.recipe.label()}; judged against {r.reference}"
            for (variant, dtype), r in sorted(seen.items())]


def out_of_memory_notes(rows: list[ModeRow]) -> list[str]:
    """One line per case that ran out of memory: what it needed (as predicted) and what it met."""
    return [f"{r.variant}, {r.model} {r.dtype}, policy {r.policy}: " + (f"predicted: {r.predicted}; " if r.predicted
                                                                     else "not predicted; ")
            + f"met: {r.out_of_memory}" for r in rows if r.step_ms is None]


def winner_sentences(rows: list[ModeRow]) -> list[str]:
    """One sentence per model, dtype, ranks and policy: which offload mode has the fastest step
    (each mode at its best CPU binding and, for a split mode, its best share), by how much over the
    next offload mode (another mode: a second share of the winner is not the alternative a user
    weighs), and what it costs against the no-offload step of its own recipe (or that that step ran
    out of memory, or is missing). Groups with fewer than two measured offload modes say nothing."""
    groups: dict[tuple, dict[str, ModeRow]] = {}
    oom: dict[tuple, set[str]] = {}
    on_gpu: dict[tuple, list[ModeRow]] = {}
    for r in rows:
        group = (r.model, r.dtype, r.nprocess, r.policy)
        if r.step_ms is None:
            oom.setdefault(group, set()).add(r.mode)
            continue
        best = groups.setdefault(group, {})
        if r.mode in memory_model.SPLIT_MODES and r.ratio == 0:
            # a split at share 0 (auto where the model fits the GPU) keeps everything on the GPU: no offload
            on_gpu.setdefault(group, []).append(r)
            continue
        if r.mode not in best or r.step_ms < best[r.mode].step_ms:
            best[r.mode] = r
    out = []
    for group, best in sorted(groups.items()):
        model, dtype, nprocess, policy = group
        on_gpu_splits = sorted(on_gpu.get(group, []), key=lambda r: r.step_ms)
        offload = sorted((r for r in best.values() if r.mode not in ON_DEVICE_MODES), key=lambda r: r.step_ms)
        if len(offload) < 2:
            continue
        win, nxt = offload[0], offload[1]
        memory = (f", {_gib(win.peak_allocated)} GiB GPU peak" if win.peak_allocated else "") + (
            f", {_gib(sum(win.host_total_by_node.values()))} GiB host" if win.host_total_by_node else "")
        text = (f"{model} {dtype}, {nprocess} rank{'s' if nprocess > 1 else ''}, policy {policy}: {win.variant} wins "
                f"({win.step_ms:.1f} ms a step, cpu_bind {win.cpu_bind or '-'}; {win.recipe.name}{memory}), "
                f"{nxt.step_ms / win.step_ms:.2f}x faster than the next, {nxt.variant} ({nxt.step_ms:.1f} ms)")
        if win.recipe.trade:
            text += f"; {win.mode} is {win.recipe.trade}"
        if win.over_reference is not None:
            under = f", policy {win.reference_policy}" if win.reference_policy != win.policy else ""
            text += (f"; {win.over_reference:.2f}x the step of {win.reference} ({win.reference_ms:.1f} ms{under}), "
                     f"the no-offload reference of its recipe")
        elif win.reference_out_of_memory or win.reference in oom.get(group, set()):
            text += f"; {win.reference}, the no-offload reference of its recipe, ran out of GPU memory"
        else:
            text += f"; no {win.reference} step (the no-offload reference of its recipe) to judge it by"
        for r in on_gpu_splits:
            text += (f"; {r.variant} ({r.step_ms:.1f} ms) kept all its state on the GPU, nothing on the host: "
                     f"not an offload, not ranked")
        out.append(text + ".")
    return out
