"""Which weighted-interleave ratio: a model from single-node measurements, and its check
against the weighted cases a run measured.

A phase that streams host memory spread over two nodes A and B: each node serves its share
of the pages at its own rate, at the same time, so the slower share decides; a phase that
crosses the host link (host-to-GPU copies, the offloaded step, the data loader) is also
never faster than with all its memory on the faster node (the link is the limit there):

    t(f) = max(f * t_A, (1 - f) * t_B, floor)

f is the share of pages on A (weights wA:wB give f = wA / (wA + wB)); t_A and t_B are the
phase's times bound to A alone and to B alone (``bind:A``, ``bind:B`` entries of the same
case); floor is min(t_A, t_B) for link phases and 0 for host-only ones (CPU Adam, host
bandwidth: there the two nodes' bandwidth adds up). Phases that touch no host memory (the
GPU's Adam kernel) are left out.

From the model: the time at every ratio of the grid, the fastest ratio, and how much of the
state can live on the slower node before the phase slows by more than ``SLOWDOWN_BUDGET``:
share_B <= (1 + budget) * t_fast / t_B where the link bounds the phase.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from numabench.numa.policy import Policy
from numabench.results.tables import entries

GRID = ((4, 1), (3, 1), (2, 1), (1, 1), (1, 2), (1, 3), (1, 4))  # A:B, the faster node first
SLOWDOWN_BUDGET = 0.02
HOST_FREE = {("adam_offload", "compute")}
HOST_ONLY_FAMILIES = {"cpu_adam", "host_membw", "touch"}


def predict(share_a: float, t_a: float, t_b: float, floor: float) -> float:
    return max(share_a * t_a, (1 - share_a) * t_b, floor)


@dataclass
class Prediction:
    weights: str  # "A=wA,B=wB" as a policy writes it
    share_fast: float  # share of pages on the faster node
    predicted_s: float
    measured_s: float | None = None

    @property
    def error_pct(self) -> float | None:
        return None if self.measured_s is None else (self.predicted_s / self.measured_s - 1) * 100


@dataclass
class Advice:
    family: str
    phase: str
    case: dict  # the other axes: nprocess, numel, dtype, ...
    fast: int  # the faster node
    slow: int
    t_fast: float
    t_slow: float
    link_bound: bool
    predictions: list[Prediction] = field(default_factory=list)

    @property
    def floor(self) -> float:
        return self.t_fast if self.link_bound else 0.0

    @property
    def best(self) -> Prediction:
        """The grid's fastest ratio; among ratios within 0.5% of it, the one with most pages on
        the slower node (the same speed for more room on the fast node)."""
        fastest = min(p.predicted_s for p in self.predictions)
        near = [p for p in self.predictions if p.predicted_s <= fastest * 1.005]
        return min(near, key=lambda p: p.share_fast)

    @property
    def max_slow_share(self) -> float:
        """The largest share of pages on the slower node that keeps the phase within the budget
        of its time on the faster node alone."""
        budget = (1 + SLOWDOWN_BUDGET) * self.t_fast
        return min(1.0, budget / self.t_slow) if self.t_slow > 0 else 1.0


def _weights_of(policy: Policy, fast: int, slow: int) -> float | None:
    if policy.kind != "weighted" or set(policy.nodes) != {fast, slow}:
        return None
    w = dict(zip(policy.nodes, policy.weights))
    return w[fast] / (w[fast] + w[slow])


def advise(run: dict, family: str | None = None, where: dict | None = None) -> list[Advice]:
    """Advice for every case of ``run`` measured bound to two single nodes."""
    groups: dict[tuple, dict[str, float]] = {}
    meta: dict[tuple, tuple[str, str, dict]] = {}
    for e in entries(run, where):
        if (family and e.family != family) or (e.family, e.phase) in HOST_FREE:
            continue
        case = {k: v for k, v in e.axes.items() if k != "policy"}
        key = (e.family, e.phase, tuple(sorted((k, str(v)) for k, v in case.items())))
        groups.setdefault(key, {})[str(e.get("policy"))] = e.median_s
        meta[key] = (e.family, e.phase, case)
    out = []
    for key, by_policy in groups.items():
        fam, phase, case = meta[key]
        policies = {p: Policy.parse(p) for p in by_policy}
        binds = {pol.nodes[0]: by_policy[text] for text, pol in policies.items()
                 if pol.kind == "bind" and len(pol.nodes) == 1}
        nodes = sorted(binds)
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                fast, slow = (a, b) if binds[a] <= binds[b] else (b, a)
                adv = Advice(fam, phase, case, fast, slow, binds[fast], binds[slow], fam not in HOST_ONLY_FAMILIES)
                measured = {}
                for text, pol in policies.items():
                    share = _weights_of(pol, fast, slow)
                    if share is not None:
                        measured[round(share, 6)] = by_policy[text]
                for wf, ws in GRID:
                    share = wf / (wf + ws)
                    adv.predictions.append(Prediction(f"{fast}={wf},{slow}={ws}", share,
                                                      predict(share, adv.t_fast, adv.t_slow, adv.floor),
                                                      measured.get(round(share, 6))))
                out.append(adv)
    return sorted(out, key=lambda a: (a.family, a.phase, sorted(a.case.items(), key=str)))


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.4g}"


def render(advices: Sequence[Advice]) -> str:
    """The model, then per case: bound times, the prediction per ratio with the measured value
    and error where the run has it, the fastest ratio, the room on the slower node."""
    if not advices:
        return ("No case of this run was measured bound to two single nodes (bind:A and bind:B): nothing to "
                "model. Run the same cases with --numa-policies='bind:A;bind:B' (and weighted ones to check).\n")
    lines = ["model: t(f) = max(f*t_fast, (1-f)*t_slow, floor); f = share of pages on the faster node; floor = "
             "t_fast where the phase crosses the host link, else 0 (the nodes' bandwidth adds up)", ""]
    errors = []
    for a in advices:
        case = " ".join(f"{k}={v}" for k, v in sorted(a.case.items(), key=lambda kv: str(kv[0])))
        lines.append(f"{a.family}:{a.phase} {case}: bind:{a.fast} {_ms(a.t_fast)} ms, bind:{a.slow} {_ms(a.t_slow)} ms"
                     f"{' (link-bound)' if a.link_bound else ''}")
        row = []
        for p in a.predictions:
            cell = f"{p.weights.split(',')[0].split('=')[1]}:{p.weights.split(',')[1].split('=')[1]} {_ms(p.predicted_s)}"
            if p.measured_s is not None:
                cell += f" (measured {_ms(p.measured_s)}, {p.error_pct:+.1f}%)"
                errors.append(abs(p.error_pct))
            row.append(cell)
        lines.append("  predicted ms by weights fast:slow: " + "; ".join(row))
        best = a.best
        lines.append(f"  fastest: weighted:{best.weights} ({_ms(best.predicted_s)} ms, {best.share_fast:.0%} on node "
                     f"{a.fast}); up to {a.max_slow_share:.0%} of the pages can live on node {a.slow} within "
                     f"{SLOWDOWN_BUDGET:.0%} of bind:{a.fast}")
    if errors:
        lines += ["", f"model error against the measured weighted cases: median {sorted(errors)[len(errors) // 2]:.1f}%, "
                      f"largest {max(errors):.1f}% over {len(errors)} cases"]
    return "\n".join(lines) + "\n"
