"""Markdown tables from a pytest-benchmark run JSON (saved run or --benchmark-json)."""
from __future__ import annotations

from collections import defaultdict

from .cases import format_size
from .seedcsv import load_run


def _median_ms(b: dict) -> float:
    return b["stats"]["median"] * 1e3


def adam_offload_table(path: str, policy: str | None = None) -> str:
    """size x dtype x impl x schedule (x nprocess): per phase median ms and GB/s, % of
    the same run's ceilings, ratio to torch's kernel, step ratio to its lower bound."""
    data = load_run(path)
    rows: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for b in data["benchmarks"]:
        x = b["extra_info"]
        if x.get("family") != "adam_offload" or (policy and x["policy"] != policy):
            continue
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


def family_table(path: str, family: str) -> str:
    """Generic: one row per entry with its id, median ms and GB/s."""
    data = load_run(path)
    out = ["| case | median ms | IQR ms | GB/s |", "|---|---|---|---|"]
    for b in sorted(data["benchmarks"], key=lambda b: b["name"]):
        x = b["extra_info"]
        if x.get("family") != family:
            continue
        out.append(f"| {b['param']} | {_median_ms(b):.3f} | {b['stats']['iqr'] * 1e3:.3f} | {x.get('GBps', '')} |")
    return "\n".join(out)
