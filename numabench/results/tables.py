"""Tables from a pytest-benchmark run JSON (saved run or --benchmark-json).

:func:`entries` is the one reading of a run that tables, plots and the report
share: each benchmark's family, phase, axes (nprocess, numel, dtype, policy,
and the family's extra axes: impl, schedule, kernel), median, spread, GB/s.

:func:`grouped_tables` makes, per family and phase, rows by size (and the other
axes that vary), columns by policy (or, where the run has one policy, by the
extra axes: impl/schedule, kernel), cells "median ± std" in ms with GB/s.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from numabench.cases import KNOB_DEFAULT, format_size
from numabench.errors import UsageError
from numabench.results import storage
from numabench.gate.invocations import invocation_medians
from numabench.families import BASE_AXES, family_extra_axes, family_knobs

AXIS_TITLES = {"nprocess": "np", "numel": "size"}  # others are titled by their own name
PHASE_ORDER = ("h2d", "compute", "d2h", "step", "time", "write")


@dataclass
class Entry:
    family: str
    phase: str
    axes: dict  # nprocess, numel, dtype, policy and the extra axes present
    median_s: float
    stddev_s: float | None  # None when only a mean is known (imported seed CSV)
    mean_s: float
    gbps: float | None
    name: str
    fullname: str
    data: list[float] | None = field(default=None, repr=False)
    mean_only: bool = False
    invocation_medians: list[float] = field(default_factory=list, repr=False)
    ceiling_gbps: float | None = None  # what the machine can do in this phase (measured, else nominal)
    ceiling_known: bool = True  # False: nominal for an unknown GPU model (the fastest known GPU's figure)

    @property
    def impossible(self) -> bool:
        """Faster than the machine can move the bytes: not a real bandwidth (e.g. the seed
        script's compute column, a kernel launch timed without synchronisation)."""
        return self.gbps is not None and self.ceiling_gbps is not None and self.gbps > self.ceiling_gbps

    @property
    def unchecked(self) -> bool:
        """Below the fastest known GPU's ceiling, but the GPU model is unknown: whether this
        machine could move the bytes this fast is not known (marked '?', never passed silently)."""
        return self.gbps is not None and not self.ceiling_known and not self.impossible

    @property
    def flag(self) -> str:
        """The mark its table cell and its plot carry: '!' impossible, '?' ceiling unknown, '' neither."""
        return "!" if self.impossible else "?" if self.unchecked else ""

    def spread(self) -> tuple[float, float] | None:
        """The range it was seen in: its invocations' medians (three or more), else its rounds;
        None for an imported mean."""
        if self.mean_only:
            return None
        if len(self.invocation_medians) >= 3:
            return min(self.invocation_medians), max(self.invocation_medians)
        if self.data:
            return min(self.data), max(self.data)
        return None

    def get(self, axis: str):
        return self.axes.get(axis)


def known_axes() -> tuple[str, ...]:
    from numabench.families import FAMILIES

    extra = {a: None for fam in FAMILIES for a in family_extra_axes(fam)}
    return BASE_AXES + tuple(a for a in extra if a not in BASE_AXES)


def extra_axes_of(es: list["Entry"]) -> tuple[str, ...]:
    """The extra axes these entries carry, in first-seen order."""
    seen: dict[str, None] = {}
    for e in es:
        for a in e.axes:
            if a not in BASE_AXES:
                seen.setdefault(a)
    return tuple(seen)


def _as_run(run: str | Path | dict) -> dict:
    return run if isinstance(run, dict) else storage.load_run(run)


def parse_where(items: list[str] | None) -> dict[str, str]:
    """['impl=ours', 'dtype=fp32'] -> {'impl': 'ours', 'dtype': 'fp32'}."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or key.strip() not in known_axes():
            raise UsageError(f"bad --where {item!r}: write AXIS=VALUE with AXIS one of {', '.join(known_axes())}")
        out[key.strip()] = value.strip()
    return out


def entries(run: str | Path | dict, where: dict | None = None) -> list[Entry]:
    """The run's numabench benchmarks (those with extra_info.family), in file order; ``where``
    keeps those whose axes have the given values (compared as text; numel also as 12.8M)."""
    out = []
    data = _as_run(run)
    gpu_models = list(((data.get("machine_info") or {}).get("numabench") or {}).get("gpu_models") or [])
    for b in data["benchmarks"]:
        x = b.get("extra_info") or {}
        if "family" not in x or "phase" not in x:
            continue
        st = b["stats"]
        mean_only = x.get("stats_from") == "mean only"
        axes = {k: x[k] for k in (*BASE_AXES, *family_extra_axes(x["family"])) if k in x}
        axes.update({k: KNOB_DEFAULT for k in family_knobs(x["family"]) if k not in axes})
        if where and not all(str(axes.get(k)) == v or (k == "numel" and k in axes and format_size(axes[k]) == v)
                             for k, v in where.items()):
            continue
        gbps = x.get("GBps")
        out.append(Entry(x["family"], x["phase"], axes, st["median"], None if mean_only else st.get("stddev"),
                         st.get("mean", st["median"]), float(gbps) if isinstance(gbps, (int, float)) else None,
                         b.get("name", ""), b.get("fullname", b.get("name", "")),
                         st.get("data") if isinstance(st.get("data"), list) else None, mean_only,
                         invocation_medians(b), ceiling_of(x, gpu_models), ceiling_known(x, gpu_models)))
    return out


def phase_key(phase: str) -> tuple:
    return (PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER), phase)


def _sort_value(axis: str, v) -> tuple:
    if v is None:
        return (0, "")
    if axis == "policy":
        order = ("default", "local", "bind", "preferred", "preferred-many", "interleave", "weighted")
        kind = str(v).split(":")[0]
        return (order.index(kind) if kind in order else len(order), str(v))
    return (1, v) if isinstance(v, (int, float)) else (2, str(v))


def varying(es: list[Entry], axis: str) -> list:
    """Distinct values of an axis among entries, sorted."""
    return sorted({e.get(axis) for e in es}, key=lambda v: _sort_value(axis, v))


def column_axes(es: list[Entry]) -> tuple[str, ...]:
    """Columns by policy where the entries have several; else by the extra axes that vary."""
    if len(varying(es, "policy")) > 1:
        return ("policy",)
    return tuple(a for a in extra_axes_of(es) if len(varying(es, a)) > 1)


def series_label(e: Entry, axes: tuple[str, ...]) -> str:
    return "/".join(str(e.get(a)) for a in axes) if axes else (str(e.get("policy")) or "median")


def format_ms(median_s: float, std_s: float | None) -> str:
    """Median with 4 significant digits, std to the same decimals: '0.01219 ± 0.00046'."""
    ms = median_s * 1e3
    decimals = max(0, 3 - int(math.floor(math.log10(abs(ms))))) if ms > 0 else 3
    text = f"{ms:.{decimals}f}"
    if std_s is None:
        return text + "*"
    return f"{text} ± {std_s * 1e3:.{decimals}f}"


def format_gbps(g: float) -> str:
    return f"{g:.2f}" if g < 10 else f"{g:.1f}" if g < 100 else f"{g:.0f}"


def format_cell(e: Entry) -> str:
    text = format_ms(e.median_s, e.stddev_s)
    if e.gbps is not None:
        text += f" ({format_gbps(e.gbps)} GB/s{' ' + e.flag if e.flag else ''})"
    return text


# Nominal ceilings where a run measured none (imported seed CSVs): device memory per GPU
# model (GB/s, vendor figures, the fastest variant), and PCIe Gen5 x16 per direction per GPU.
NOMINAL_HBM_GBPS = {"H100": 3350.0, "H200": 4800.0, "A100": 2039.0, "B200": 8000.0, "GH200": 4900.0,
                    "L40": 864.0, "A10": 600.0}
# an unknown model (a seed CSV's "seed GPU"): the fastest known GPU's figure bounds it, and values
# below it are marked as unchecked ('?'), not passed as real
NOMINAL_UNKNOWN_HBM_GBPS = max(NOMINAL_HBM_GBPS.values())
NOMINAL_PCIE_GBPS = 64.0
# phase -> extra_info list of per-rank measured ceilings (adam_offload, transfer)
MEASURED_CEILING = {"h2d": "limit_h2d_GBps_per_rank", "d2h": "limit_d2h_GBps_per_rank",
                    "compute": "limit_d2d_GBps_per_rank"}


CPULESS_MARK = "‡"


def cpuless_nodes(run: dict) -> set[int]:
    """The run's memory-only (CPU-less, CXL-like) nodes, from its machine_info."""
    nodes = ((run.get("machine_info") or {}).get("numabench") or {}).get("nodes") or []
    return {int(n["id"]) for n in nodes if isinstance(n, dict) and n.get("cpuless")}


def mark_cpuless(label: str, cpuless: set[int]) -> str:
    """A policy label with the CPU-less mark where it places memory on such a node."""
    if not cpuless:
        return label
    from numabench.numa.policy import Policy

    try:
        nodes = set(Policy.parse(label).nodes)
    except Exception:
        return label
    return f"{label} {CPULESS_MARK}" if nodes & cpuless else label


def _known_hbm(gpu_models: list[str]) -> list[float]:
    return [v for m in gpu_models for k, v in NOMINAL_HBM_GBPS.items() if k in m.replace("NVIDIA ", "")]


def ceiling_known(extra: dict, gpu_models: list[str]) -> bool:
    """False where ``ceiling_of`` had to stand in the fastest known GPU for an unknown model."""
    measured = extra.get(MEASURED_CEILING.get(extra.get("phase"), ""), None)
    if isinstance(measured, list) and measured:
        return True
    if extra.get("family") != "adam_offload" or extra.get("phase") != "compute":
        return True
    return bool(_known_hbm(gpu_models))


def ceiling_of(extra: dict, gpu_models: list[str]) -> float | None:
    """The GB/s this entry cannot exceed, over all its ranks; None where none is known. A
    measured ceiling is a best-of-8 copy: 10% of headroom keeps noise from being flagged."""
    phase, nproc = extra.get("phase"), int(extra.get("nprocess") or 1)
    measured = extra.get(MEASURED_CEILING.get(phase, ""), None)
    if isinstance(measured, list) and measured:
        return 1.1 * sum(measured)
    if extra.get("family") != "adam_offload" or phase not in ("h2d", "d2h", "compute"):
        return None
    if phase == "compute":
        hbm = _known_hbm(gpu_models)
        # read + write of each byte counted once in GBps (7 tensors' bytes): the nominal figure bounds it
        return nproc * (max(hbm) if hbm else NOMINAL_UNKNOWN_HBM_GBPS)
    return nproc * NOMINAL_PCIE_GBPS


@dataclass
class Table:
    family: str
    phase: str
    header: list[str]
    rows: list[list[str]]
    best: list[int | None]  # per row, the index of the fastest cell (columns > label columns)
    n_labels: int
    mean_only: bool
    impossible: bool = False
    cpuless: tuple[int, ...] = ()
    unchecked: bool = False

    UNCHECKED_NOTE = (f"? the GPU model is unknown: its memory bandwidth is not known; values above the fastest "
                      f"known GPU's ({NOMINAL_UNKNOWN_HBM_GBPS:.0f} GB/s per GPU) are marked !, those below it "
                      "are not checked")

    IMPOSSIBLE_NOTE = ("! faster than this machine can move the bytes (its measured copy or D2D ceiling, or the "
                       "GPU's nominal memory or PCIe Gen5 bandwidth): not a real bandwidth, e.g. a kernel launch "
                       "timed without synchronisation")

    @property
    def title(self) -> str:
        return f"{self.family} — {self.phase}"

    def markdown(self) -> str:
        out = [f"### {self.title} (median ± std, ms)", "",
               "| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        for cells, best in zip(self.rows, self.best):
            cells = [f"**{c}**" if i == best else c for i, c in enumerate(cells)]
            out.append("| " + " | ".join(cells) + " |")
        if any(b is not None for b in self.best):
            out += ["", "bold: faster than every other cell of its row beyond noise (its whole range below theirs)."]
        if self.mean_only:
            out += ["", "\\* mean only (imported from a seed CSV): no median or spread known."]
        if self.impossible:
            out += ["", self.IMPOSSIBLE_NOTE + "."]
        if self.unchecked:
            out += ["", self.UNCHECKED_NOTE + "."]
        if self.cpuless:
            out += ["", self.cpuless_note]
        return "\n".join(out)

    @property
    def cpuless_note(self) -> str:
        return (f"{CPULESS_MARK} places memory on a CPU-less (CXL-like) node: "
                + ", ".join(f"node {n}" for n in self.cpuless) + ".")

    def text(self) -> str:
        widths = [max(len(r[i]) for r in [self.header, *self.rows]) for i in range(len(self.header))]
        fmt = lambda cells: "  ".join(c.ljust(w) if i < self.n_labels else c.rjust(w)  # noqa: E731
                                      for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        out = [f"{self.title} (median ± std, ms)", fmt(self.header), "  ".join("-" * w for w in widths)]
        out += [fmt(r) for r in self.rows]
        if self.mean_only:
            out.append("* mean only (imported from a seed CSV): no median or spread known.")
        if self.impossible:
            out.append(self.IMPOSSIBLE_NOTE + ".")
        if self.unchecked:
            out.append(self.UNCHECKED_NOTE + ".")
        if self.cpuless:
            out.append(self.cpuless_note)
        return "\n".join(out)


def clearly_fastest(cells: list["Entry | None"]) -> int | None:
    """The index of the fastest cell where it is faster beyond noise: its whole range (its
    invocation medians, or rounds) below every other cell's; None otherwise (ties within
    noise, an imported mean, fewer than two cells)."""
    present = [(e.median_s, i) for i, e in enumerate(cells) if e]
    if len(present) < 2:
        return None
    i = min(present)[1]
    mine = cells[i].spread()
    if mine is None:
        return None
    for j, e in enumerate(cells):
        if e is None or j == i:
            continue
        theirs = e.spread()
        if theirs is None or mine[1] >= theirs[0]:
            return None
    return i


def grouped_tables(run: str | Path | dict, family: str | None = None, where: dict | None = None) -> list[Table]:
    """Per family and phase: rows by size (and other varying axes), columns by policy."""
    es = entries(run, where)
    cpuless = cpuless_nodes(_as_run(run))
    tables = []
    for fam in sorted({e.family for e in es}):
        if family and fam != family:
            continue
        fes = [e for e in es if e.family == fam]
        cols_axes = column_axes(fes)
        columns = sorted({series_label(e, cols_axes) for e in fes},
                         key=lambda s: [_sort_value(a, v) for a, v in zip(cols_axes, s.split("/"))])
        if "policy" in cols_axes:  # policy strings may contain '/'-free text only; keep their own order
            columns = [str(v) for v in varying(fes, "policy")]
        # rows labelled and sorted by these (size last: a table reads down by size)
        label_axes = ("nprocess", "dtype", *extra_axes_of(fes), "numel")
        labels = [a for a in label_axes if a not in cols_axes and (a == "numel" or len(varying(fes, a)) > 1)]
        for phase in sorted({e.phase for e in fes}, key=phase_key):
            pes = [e for e in fes if e.phase == phase]
            grid: dict[tuple, dict[str, Entry]] = defaultdict(dict)
            for e in pes:
                grid[tuple(e.get(a) for a in labels)][series_label(e, cols_axes)] = e
            shown = [mark_cpuless(c, cpuless) for c in columns] if cols_axes == ("policy",) else columns
            header = [AXIS_TITLES.get(a, a) for a in labels] + (shown if cols_axes else ["median ± std ms"])
            rows, best = [], []
            for key in sorted(grid, key=lambda k: [_sort_value(a, v) for a, v in zip(labels, k)]):
                cells = grid[key]
                lab = [format_size(v) if a == "numel" else str(v) for a, v in zip(labels, key)]
                vals = [cells.get(c) for c in columns] if cols_axes else list(cells.values())[:1]
                rows.append(lab + [format_cell(e) if e else "" for e in vals])
                fastest = clearly_fastest(vals)
                best.append(len(labels) + fastest if fastest is not None else None)
            marked = any(CPULESS_MARK in h for h in header)
            tables.append(Table(fam, phase, header, rows, best, len(labels), any(e.mean_only for e in pes),
                                any(e.impossible for e in pes), tuple(sorted(cpuless)) if marked else (),
                                any(e.unchecked for e in pes)))
    return tables


def _median_ms(b: dict) -> float:
    return b["stats"]["median"] * 1e3


def adam_offload_table(path: str | Path | dict, policy: str | None = None) -> str:
    """size x dtype x impl x schedule (x nprocess): per phase median ms and GB/s, % of
    the same run's ceilings, ratio to torch's kernel, step ratio to its lower bound."""
    data = _as_run(path)
    rows: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for b in data["benchmarks"]:
        x = b["extra_info"]
        if x.get("family") != "adam_offload" or (policy and x["policy"] != policy):
            continue
        if not isinstance(x.get("impl"), str) or not isinstance(x.get("schedule"), str) or "GBps" not in x:
            continue  # an imported seed row: not a row of this table (it has no impl, schedule or rate)
        key = (x["nprocess"], x["numel"], x["dtype"], x["policy"], x["impl"], x["schedule"])
        rows[key][x["phase"]] = {"ms": _median_ms(b), **x}
    out = ["| np | size | dtype | policy | impl | schedule | H2D ms (GB/s, % pinned) | compute ms (GB/s, % D2D) "
           "| D2H ms (GB/s, % pinned) | step ms | step / lower bound | compute vs torch | overlap speed-up |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(rows):
        np_, numel, dtype, pol, impl, sched = key
        ph = rows[key]
        if not {"h2d", "compute", "d2h", "step"} <= set(ph):
            continue
        torch_c = rows.get((np_, numel, dtype, pol, "torch", sched), {}).get("compute")
        vs_torch = f"{torch_c['ms'] / ph['compute']['ms']:.2f}x" if torch_c and impl == "ours" else ""
        serial = rows.get((np_, numel, dtype, pol, impl, "serial"), {}).get("step")
        speedup = f"{serial['ms'] / ph['step']['ms']:.2f}x" if serial and sched == "overlap" else ""
        out.append(
            f"| {np_} | {format_size(numel)} | {dtype} | {pol} | {impl} | {sched} "
            f"| {ph['h2d']['ms']:.3f} ({ph['h2d']['GBps']:.1f}, {ph['h2d'].get('pct_of_pinned_h2d', 0):.0f}%) "
            f"| {ph['compute']['ms']:.3f} ({ph['compute']['GBps']:.0f}, {ph['compute'].get('pct_of_d2d', 0):.0f}%) "
            f"| {ph['d2h']['ms']:.3f} ({ph['d2h']['GBps']:.1f}, {ph['d2h'].get('pct_of_pinned_d2h', 0):.0f}%) "
            f"| {ph['step']['ms']:.3f} | {ph['step'].get('ratio_to_lower_bound', 0):.2f} | {vs_torch} | {speedup} |")
    return "\n".join(out)
