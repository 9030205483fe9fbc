"""With X bytes of DRAM per GPU, which kinds of the offloaded state go to the slower node, and
what does the step cost? A model from adam_offload's cases measured bound to each node.

The plan is the suite's own (numabench.numa.budget, as ``place=budget:X:FAST:SLOW`` places it):
the fast node filled with the most-touched kinds first (master 2, moments 2, grads 1 touches
per byte per step), the kind at the edge split. A phase's copies move one tensor after another
(adam_offload's serial and overlapped schedules, and ZeRO-Offload's, copy each tensor in turn),
so each byte costs its own node's time:

    t(phase) = bytes_fast * r_fast + bytes_slow * r_slow,   r_node = t(bind:node) / bytes(phase)

with r measured per phase (h2d, d2h) and size from the ``bind:FAST`` and ``bind:SLOW`` cases.
The step is h2d + compute + d2h (the serial step; compute touches no host memory). This is
not the weighted-interleave model (numabench.results.advise): there one copy reads pages of
both nodes at once and the slower share decides; here whole tensors sit on one node each.

What each answer stands on: the rates are measured at the row's size, interpolated between two
measured sizes (log-linear in size) or extrapolated beyond them (``--at-numel``); the mix of
nodes lies between the two measured single-node placements, and only a ``place=budget`` case
the run measured checks it (shown beside the prediction with its error).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from numabench.cases import DTYPES, KNOB_DEFAULT, format_size
from numabench.numa.budget import KindSplit
from numabench.numa.kind_layout import StateBuffer, budget_splits, buffer_segments
from numabench.numa.place import Budget, Place, format_bytes
from numabench.numa.policy import Policy
from numabench.results.tables import entries

FAMILY = "adam_offload"
LINK_PHASES = ("h2d", "d2h")
PAGE = 4096
GROUP_SKIP = ("policy", "numel", "place")  # the axes a group's cases may differ in


@dataclass
class BudgetAnswer:
    case: dict  # the axes the answer holds for (nprocess, dtype, impl, ...)
    numel: int
    budget: Budget
    splits: list[KindSplit]  # each kind's bytes per rank on the fast and slow node, in fill order
    fast_only: dict[str, float]  # phase -> seconds with the whole state on the fast node
    predicted: dict[str, float]  # phase -> seconds under the plan
    slow_share: dict[str, float]  # link phase -> share of its bytes on the slow node
    size_basis: str  # "measured" | "interpolated between A and B" | "extrapolated from A (xF)"
    measured: dict[str, float] = field(default_factory=dict)  # phase -> seconds of a measured budget case

    def error_pct(self, phase: str) -> float | None:
        m = self.measured.get(phase)
        return None if m is None else (self.predicted[phase] / m - 1) * 100


def _group_key(axes: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in axes.items() if k not in GROUP_SKIP))


def _single_node(policy: str) -> int | None:
    p = Policy.parse(policy)
    return p.nodes[0] if p.kind == "bind" and len(p.nodes) == 1 else None


def _state(case: dict, numel: int) -> tuple[list[StateBuffer], int]:
    """adam_offload's buffers per rank at ``numel`` elements, and the bytes of one tensor."""
    from numabench.families.adam_offload import STATE_BUFFERS

    nprocess = int(case.get("nprocess", 1))
    per_tensor = -(-numel // nprocess) * DTYPES[str(case.get("dtype", "fp32"))]
    return [StateBuffer(n, k, per_tensor) for n, k in STATE_BUFFERS.items()], per_tensor


def _moved(case: dict, numel: int, budget: Budget) -> tuple[list[KindSplit], dict[str, tuple[int, int]]]:
    """The plan's kinds, and per link phase the (fast, slow) bytes it copies."""
    from numabench.families.adam_offload import COPIED, TOUCHES

    buffers, _ = _state(case, numel)
    place = Place(budget=budget)
    segs = buffer_segments(place, buffers, TOUCHES, PAGE)
    fast_of = {n: sum(s.nbytes for s in ss if s.policy is not None and s.policy.nodes == (budget.fast,))
               for n, ss in segs.items()}
    size = {b.name: b.nbytes for b in buffers}
    moved = {ph: (sum(min(fast_of[n], size[n]) for n in names), sum(size[n] - min(fast_of[n], size[n]) for n in names))
             for ph, names in COPIED.items()}
    return budget_splits(place, buffers, TOUCHES, PAGE), moved


def _rate_at(points: dict[int, float], numel: int) -> tuple[float, str]:
    """Seconds per byte at ``numel`` from the measured sizes' (numel -> s/B): exact, log-linear
    between the two neighbours, or the nearest one's beyond them; with what it stands on."""
    sizes = sorted(points)
    if numel in points:
        return points[numel], "measured"
    i = bisect.bisect_left(sizes, numel)
    if 0 < i < len(sizes):
        lo, hi = sizes[i - 1], sizes[i]
        w = (math.log(numel) - math.log(lo)) / (math.log(hi) - math.log(lo))
        rate = math.exp((1 - w) * math.log(points[lo]) + w * math.log(points[hi]))
        return rate, f"interpolated between {format_size(lo)} and {format_size(hi)}"
    near = sizes[0] if i == 0 else sizes[-1]
    factor = numel / near if numel > near else near / numel
    return points[near], f"extrapolated from {format_size(near)} (x{factor:.3g})"


def budget_advice(run: dict, budgets: list[int], at_numel: int | None = None,
                  where: dict | None = None) -> list[BudgetAnswer]:
    """For each group of adam_offload cases measured bound to two nodes (the faster taken as the
    DRAM node) and each budget (bytes per rank): the plan and the predicted phases; at each
    measured size, or at ``at_numel`` only."""
    from numabench.families.adam_offload import COPIED

    groups: dict[tuple, dict] = {}
    for e in entries(run, where):
        if e.family != FAMILY:
            continue
        g = groups.setdefault(_group_key(e.axes), {"case": {k: v for k, v in e.axes.items() if k not in GROUP_SKIP},
                                                   "bind": {}, "budget": {}})
        numel, place = int(e.axes["numel"]), str(e.axes.get("place", "auto"))
        node = _single_node(str(e.axes["policy"])) if place == "auto" else None
        if node is not None:
            g["bind"].setdefault(node, {}).setdefault(e.phase, {})[numel] = e.median_s
        elif place.startswith("budget:"):
            g["budget"].setdefault((place, numel), {})[e.phase] = e.median_s
    out = []
    for g in groups.values():
        case, binds = g["case"], g["bind"]
        complete = {n: ph for n, ph in binds.items() if all(p in ph for p in LINK_PHASES)}
        if len(complete) < 2:
            continue
        common = sorted(set.intersection(*(set(ph["h2d"]) & set(ph["d2h"]) for ph in complete.values())))
        if not common:
            continue
        ref = common[-1]
        cost = {n: ph["h2d"][ref] + ph["d2h"][ref] for n, ph in complete.items()}
        fast = min(cost, key=cost.get)
        for slow in sorted(n for n in complete if n != fast):
            rates = {}
            for node in (fast, slow):
                for ph in LINK_PHASES:
                    per_byte = {}
                    for numel in common:
                        _, per_tensor = _state(case, numel)
                        per_byte[numel] = complete[node][ph][numel] / (len(COPIED[ph]) * per_tensor)
                    rates[(node, ph)] = per_byte
            compute = complete[fast].get("compute", {})
            sizes = [at_numel] if at_numel else common
            for numel in sizes:
                for nbytes in budgets:
                    budget = Budget(nbytes, fast, slow)
                    splits, moved = _moved(case, numel, budget)
                    fast_only, predicted, shares, basis = {}, {}, {}, "measured"
                    for ph in LINK_PHASES:
                        r_fast, basis = _rate_at(rates[(fast, ph)], numel)
                        r_slow, _ = _rate_at(rates[(slow, ph)], numel)
                        b_fast, b_slow = moved[ph]
                        fast_only[ph] = (b_fast + b_slow) * r_fast
                        predicted[ph] = b_fast * r_fast + b_slow * r_slow
                        shares[ph] = b_slow / (b_fast + b_slow) if b_fast + b_slow else 0.0
                    if compute:
                        per_elem = {n: t / n for n, t in compute.items()}
                        c = _rate_at(per_elem, numel)[0] * numel
                        fast_only["step"] = fast_only["h2d"] + c + fast_only["d2h"]
                        predicted["step"] = predicted["h2d"] + c + predicted["d2h"]
                    ans = BudgetAnswer(case, numel, budget, splits, fast_only, predicted, shares, basis)
                    ans.measured = dict(g["budget"].get((str(budget), numel), {}))
                    if "step" not in ans.measured and all(p in ans.measured for p in ("h2d", "compute", "d2h")):
                        ans.measured["step"] = sum(ans.measured[p] for p in ("h2d", "compute", "d2h"))
                    out.append(ans)
    return sorted(out, key=lambda a: (sorted(a.case.items(), key=str), a.numel, a.budget.nbytes, a.budget.slow))


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g}"


def render_budget(answers: list[BudgetAnswer]) -> str:
    """The model, then per case and budget: the kinds on the slower node, the phases and the step."""
    if not answers:
        return ("No adam_offload case of these runs was measured bound to two single nodes (bind:A and bind:B, "
                "h2d and d2h): nothing to model. Run them with --numa-policies='bind:A;bind:B'.\n")
    lines = ["model: the DRAM budget per GPU filled latency-first (touches per byte per step: master 2, moments 2, "
             "grads 1; the edge kind split at a page), the rest on the slower node; a phase's copies move one "
             "tensor after another: t = bytes_fast * r_fast + bytes_slow * r_slow, r from bind:FAST and bind:SLOW "
             "of the same case; step = h2d + compute + d2h",
             "each answer says what its rates stand on (measured at this size, interpolated or extrapolated in size) "
             "and how much of each copy lies on the slower node, between the two measured single-node placements; "
             "a measured place=budget case, where the run has one, is shown with the model's error", ""]
    errors = []
    for a in answers:
        case = " ".join(f"{k}={v}" for k, v in sorted(a.case.items(), key=lambda kv: str(kv[0]))
                        if str(v) != KNOB_DEFAULT)
        state = sum(s.nbytes for s in a.splits)
        slow = [s for s in a.splits if s.slow_bytes]
        head = (f"{FAMILY} {case} numel={format_size(a.numel)}: DRAM {format_bytes(a.budget.nbytes)} per GPU on "
                f"node {a.budget.fast} for a state of {_gib(state)}")
        if not slow:
            lines.append(f"{head}: it fits, no kind on node {a.budget.slow}")
            continue
        kinds = "; ".join(f"{s.kind} {_gib(s.slow_bytes)}" + (f" of {_gib(s.nbytes)}" if s.fast_bytes else " (all)")
                          for s in slow)
        lines.append(f"{head}; on node {a.budget.slow}: {kinds}")
        cells = []
        for ph in ("h2d", "d2h", "step"):
            if ph not in a.predicted:
                continue
            cell = f"{ph} {_ms(a.fast_only[ph])} -> {_ms(a.predicted[ph])} ms ({(a.predicted[ph] / a.fast_only[ph] - 1) * 100:+.1f}%)"
            if a.error_pct(ph) is not None:
                cell += f" (measured {_ms(a.measured[ph])}, {a.error_pct(ph):+.1f}%)"
                errors.append(abs(a.error_pct(ph)))
            cells.append(cell)
        lines.append("  " + "; ".join(cells))
        mix = ", ".join(f"{a.slow_share[ph]:.0%} of the {ph} bytes" for ph in LINK_PHASES)
        lines.append(f"  [rates {a.size_basis}; {mix} on node {a.budget.slow}: between the measured bind:{a.budget.fast} "
                     f"and bind:{a.budget.slow}" + ("" if a.measured else ", no place=budget case measured") + "]")
    if errors:
        lines += ["", f"model error against the measured place=budget cases: median {sorted(errors)[len(errors) // 2]:.1f}%, "
                      f"largest {max(errors):.1f}% over {len(errors)} phases"]
    return "\n".join(lines) + "\n"
