"""The NUMA page's data of one hardware key, from each entry's newest value: the policies side by
side (time against size; a dot per policy where a case has one size), the weighted-interleave
model beside the measurements, and the advisor's table. A key whose machines have one NUMA node
has no placement choice: every policy puts the pages on that node, so its page says so first
and sums up how far apart the policies' times lie instead of drawing coinciding lines."""
from __future__ import annotations

import statistics
from collections import defaultdict

from numabench.cases import format_size
from numabench.publish.labels import SERIES_AXES, axes_text
from numabench.publish.runs import Run
from numabench.results.advise import Advice, advise, predict
from numabench.results.tables import entries

TIME = "s"  # the unit of every chart's y values; site.js shows them in us, ms or s


def newest_view(runs: list[Run]) -> dict:
    """One run of the key's newest value of every entry (a key measured in pieces, e.g. its plain
    and its weighted cases in two runs, is seen whole), with the newest run's machine_info."""
    by_name: dict[str, dict] = {}
    for _, run in runs:
        for b in run["benchmarks"]:
            by_name[b.get("fullname") or b.get("name", "")] = b
    return {"machine_info": runs[-1][1].get("machine_info") or {}, "benchmarks": list(by_name.values())}


def policy_groups(view: dict) -> dict[tuple, dict[str, list]]:
    """(family, phase, the other axes) -> policy -> [[numel, median, low, high], ...]."""
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for e in entries(view):
        if "policy" not in e.axes:
            continue
        rest = {k: v for k, v in e.axes.items() if k not in SERIES_AXES}
        lo, hi = e.spread() or (e.median_s, e.median_s)
        x = float(e.axes.get("numel") or 1)
        groups[(e.family, e.phase, axes_text(rest, list(rest)))][str(e.axes["policy"])].append([x, e.median_s, lo, hi])
    return groups


def policy_charts(groups: dict[tuple, dict[str, list]]) -> list[dict]:
    """Per group run under two policies or more: time against size, one series per policy (bars:
    the invocations' range); a group of one size is a dot plot, the policies along x."""
    charts = []
    for (fam, phase, rest), by_policy in sorted(groups.items()):
        if len(by_policy) < 2:
            continue
        pols = sorted(by_policy)
        xs = {p[0] for pts in by_policy.values() for p in pts}
        title = f"{fam} {phase} {rest}".strip()
        base = {"title": title, "family": fam, "ylabel": "median time", "yunit": TIME}
        if len(xs) == 1:
            size = format_size(int(next(iter(xs))))
            series = [{"name": pol, "points": [[i, *by_policy[pol][0][1:], f"{pol}, {size} elements"]],
                       "line": False} for i, pol in enumerate(pols)]
            charts.append({**base, "kind": "dots", "xlabel": f"policy ({size} elements)", "xlog": False, "ylog": False,
                           "xticks": [[i, pol] for i, pol in enumerate(pols)], "series": series})
        else:
            series = [{"name": pol, "points": sorted(by_policy[pol])} for pol in pols]
            charts.append({**base, "kind": "xy", "xlabel": "elements (numel)", "xlog": True, "ylog": True,
                           "series": series})
    return charts


def policy_agreement(groups: dict[tuple, dict[str, list]]) -> list[dict]:
    """Per family: the cases run under two policies or more and how far apart the policies' times
    lie (slowest / fastest - 1, per case): on one node they differ by noise alone."""
    per_family: dict[str, list[tuple[float, str]]] = defaultdict(list)
    policies: dict[str, set] = defaultdict(set)
    for (fam, phase, rest), by_policy in groups.items():
        if len(by_policy) < 2:
            continue
        policies[fam] |= set(by_policy)
        by_size: dict[float, list[float]] = defaultdict(list)
        for pts in by_policy.values():
            for x, med, *_ in pts:
                by_size[x].append(med)
        for x, meds in by_size.items():
            if len(meds) > 1 and min(meds) > 0:
                case = f"{phase} {rest} numel={format_size(int(x))}".strip()
                per_family[fam].append(((max(meds) / min(meds) - 1) * 100, case))
    out = []
    for fam in sorted(per_family):
        spreads = sorted(per_family[fam])
        out.append({"family": fam, "cases": len(spreads), "policies": sorted(policies[fam]),
                    "median_pct": statistics.median(s for s, _ in spreads), "max_pct": spreads[-1][0],
                    "max_case": spreads[-1][1]})
    return out


def _advice_chart(a: Advice) -> dict:
    case = axes_text(a.case, sorted(a.case, key=str))
    model = [[f, predict(f, a.t_fast, a.t_slow, a.floor)] for f in (i / 50 for i in range(51))]
    measured = sorted([[p.share_fast, p.measured_s] for p in a.predictions if p.measured_s is not None]
                      + [[f, t] for f, t in a.extra_measured.items()])
    # the grid's predictions split by what they stand on (advise.Advice.basis): a reader sees at
    # once which ratios a measurement backs and which the model reaches beyond the measured ones
    backed, beyond = [], []
    for p in a.predictions:
        kind, _ = a.basis(p.share_fast)
        point = [p.share_fast, p.predicted_s, None, None, f"weighted:{p.weights}: {a.basis_text(p.share_fast)}"]
        (backed if kind in ("measured", "interpolated") else beyond).append(point)
    bound = [[1.0, a.t_fast, None, None, f"bind:{a.fast}"], [0.0, a.t_slow, None, None, f"bind:{a.slow}"]]
    return {"title": f"{a.family} {a.phase} {case}", "family": a.family, "kind": "xy", "yunit": TIME,
            "xlabel": f"share of pages on node {a.fast} (the faster)", "ylabel": "time", "xlog": False,
            "ylog": False,
            "series": [{"name": "model t(f)", "points": model, "line": True, "marker": "none"},
                       {"name": "model at the grid: measured or interpolated", "points": backed, "line": False,
                        "marker": "hollow"},
                       {"name": f"measured bind:{a.fast} / bind:{a.slow}", "points": bound, "line": False},
                       {"name": "measured weighted", "points": measured, "line": False},
                       {"name": "model at the grid: extrapolated or model only", "points": beyond, "line": False,
                        "marker": "hollow", "color": "#9a9a9a"}]}


def _advice_row(a: Advice) -> dict:
    errs = [abs(p.error_pct) for p in a.predictions if p.error_pct is not None]
    choice, seconds, choice_basis = a.fastest
    room, room_basis = a.room
    return {"case": f"{a.family} {a.phase} " + axes_text(a.case, sorted(a.case, key=str)),
            "fast": a.fast, "slow": a.slow, "t_fast_s": a.t_fast, "t_slow_s": a.t_slow,
            "link_bound": a.link_bound, "best": choice, "best_s": seconds, "best_basis": choice_basis,
            "max_slow_share": room, "room_basis": room_basis, "measured": len(errs),
            "max_error_pct": max(errs) if errs else None}


def numa_page(key: str, runs: list[Run]) -> dict:
    view = newest_view(runs)
    advices = advise(view)
    nb = (view["machine_info"].get("numabench") or {})
    nodes = nb.get("nodes") or []
    one_node = nb.get("numa_nodes") == 1 or (nb.get("numa_nodes") is None and len(nodes) == 1)
    groups = policy_groups(view)
    return {"key": key, "nodes": nodes, "numa_nodes": nb.get("numa_nodes"), "one_node": one_node,
            "policy_charts": [] if one_node else policy_charts(groups),
            "policy_agreement": policy_agreement(groups),
            "advice_charts": [_advice_chart(a) for a in advices], "advice": [_advice_row(a) for a in advices]}
