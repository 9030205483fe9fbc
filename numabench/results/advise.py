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

Every prediction says what it stands on: a ratio the run measured, one between two measured
weighted ratios (interpolated), or one beyond them (extrapolated, by how many percentage points
of the share on the faster node from the nearest measured ratio). The bound ends (bind:A,
bind:B) anchor the model but are not weighted ratios: a 4:1 prediction from 1:1..1:4
measurements is an extrapolation. The fastest choice is the fast node alone unless the model puts
a ratio of the grid faster than it by more than 0.5% (a ratio predicted at bind:fast's own time
is not recommended at that time); the room on the slower node is checked against
every measured ratio it crosses (a measured ratio beyond the budget caps it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from numabench.numa.policy import Policy
from numabench.results.tables import entries

GRID = ((4, 1), (3, 1), (2, 1), (1, 1), (1, 2), (1, 3), (1, 4))  # A:B, the faster node first
SLOWDOWN_BUDGET = 0.02
HOST_FREE = {("adam_offload", "compute")}


def host_only(family_key: str) -> bool:
    """Whether a family's time is host memory's alone (no GPU, ranks on CPU nodes: no PCIe link
    bounds it), as its Family says; a family this version does not know is taken as not."""
    from numabench.families import FAMILIES, family

    if family_key not in FAMILIES:
        return False
    fam = family(family_key)
    return not fam.needs_gpu and fam.rank_kind == "cpu-node"


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
    def measured_shares(self) -> list[float]:
        """Shares of pages on the faster node of the weighted ratios the run measured."""
        return sorted({p.share_fast for p in self.predictions if p.measured_s is not None}
                      | set(self.extra_measured))

    extra_measured: dict = field(default_factory=dict)  # share_fast -> measured s, ratios outside the grid

    def basis(self, share_fast: float) -> tuple[str, float]:
        """('measured' | 'interpolated' | 'extrapolated' | 'model only', percentage points from the
        nearest measured weighted ratio) for a prediction at ``share_fast``."""
        ms = self.measured_shares
        if not ms:
            return "model only", float("nan")
        if any(abs(share_fast - m) < 1e-6 for m in ms):
            return "measured", 0.0
        if ms[0] < share_fast < ms[-1]:
            return "interpolated", min(abs(share_fast - m) for m in ms) * 100
        return "extrapolated", min(abs(share_fast - m) for m in ms) * 100

    def basis_text(self, share_fast: float) -> str:
        kind, pts = self.basis(share_fast)
        if kind == "measured":
            return "measured"
        if kind == "model only":
            return "model only: no weighted ratio measured"
        return f"{kind}, {pts:.0f} pts from the nearest measured ratio"

    @property
    def fastest(self) -> tuple[str, float, str]:
        """(choice, seconds, what it stands on): the grid's best ratio where the model puts it
        faster than the fast node alone by more than 0.5%, else the fast node alone, as measured.
        A ratio the model only predicts as fast as bind:fast (a link-bound phase's floor is
        bind:fast's own time) is never the choice: nothing but the model, often an extrapolation,
        would stand behind it."""
        best = self.best
        if best.predicted_s < self.t_fast / 1.005:
            return f"weighted:{best.weights}", best.predicted_s, self.basis_text(best.share_fast)
        return f"bind:{self.fast}", self.t_fast, "measured"

    @property
    def room(self) -> tuple[float, str]:
        """The share of pages the slower node can hold within the budget: the model's
        (``max_slow_share``), capped below the first measured ratio it crosses that is slower
        than the budget; with what it stands on."""
        model = self.max_slow_share
        budget = (1 + SLOWDOWN_BUDGET) * self.t_fast
        measured = {p.share_fast: p.measured_s for p in self.predictions if p.measured_s is not None}
        measured.update(self.extra_measured)
        crossed = sorted((1 - f, t) for f, t in measured.items() if 1 - f <= model + 1e-9)
        ok = [s for s, t in crossed if t <= budget]
        bad = [(s, t) for s, t in crossed if t > budget]
        if bad:
            s_bad, t_bad = bad[0]
            below = [s for s in ok if s < s_bad]
            room = max(below) if below else 0.0
            return room, (f"the model says {model:.0%}, but the measured {s_bad:.0%} is "
                          f"{(t_bad / self.t_fast - 1) * 100:+.1f}% over bind:{self.fast}: "
                          + (f"{room:.0%} is the largest measured share within the budget" if below
                             else f"less than {s_bad:.0%}, no measured share within the budget"))
        if model >= 1.0 - 1e-9 and self.t_slow <= budget:
            return model, f"measured: bind:{self.slow} itself is within the budget"
        if not measured:
            return model, "model only: no weighted ratio measured"
        slow_shares = sorted(1 - f for f in measured)
        if crossed and abs(crossed[-1][0] - model) < 1e-9:
            return model, "measured"
        if slow_shares[0] <= model <= slow_shares[-1]:
            return model, (f"interpolated, checked against the {len(crossed)} measured ratio(s) it crosses"
                           if crossed else "interpolated")
        pts = min(abs(model - s) for s in slow_shares) * 100
        return model, (f"extrapolated, {pts:.0f} pts beyond the nearest measured ratio"
                       + (f"; the {len(crossed)} measured ratio(s) it crosses are within the budget" if crossed
                          else ""))

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
                adv = Advice(fam, phase, case, fast, slow, binds[fast], binds[slow], not host_only(fam))
                measured = {}
                for text, pol in policies.items():
                    share = _weights_of(pol, fast, slow)
                    if share is not None:
                        measured[round(share, 6)] = by_policy[text]
                for wf, ws in GRID:
                    share = wf / (wf + ws)
                    adv.predictions.append(Prediction(f"{fast}={wf},{slow}={ws}", share,
                                                      predict(share, adv.t_fast, adv.t_slow, adv.floor),
                                                      measured.pop(round(share, 6), None)))
                adv.extra_measured = measured  # measured ratios the grid lacks
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
             "t_fast where the phase crosses the host link, else 0 (the nodes' bandwidth adds up)",
             "each prediction says what it stands on: measured, interpolated between measured weighted ratios, or "
             "extrapolated beyond them (pts: percentage points of f from the nearest measured ratio)", ""]
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
            else:
                kind, pts = a.basis(p.share_fast)
                cell += (" [model only]" if kind == "model only" else f" [{kind[:6]}. {pts:.0f} pts]")
            row.append(cell)
        lines.append("  predicted ms by weights fast:slow: " + "; ".join(row))
        choice, secs, basis = a.fastest
        share = "" if choice.startswith("bind:") else f", {a.best.share_fast:.0%} on node {a.fast}"
        room, room_basis = a.room
        lines.append(f"  fastest: {choice} ({_ms(secs)} ms{share}; {basis}); up to {room:.0%} of the pages can "
                     f"live on node {a.slow} within {SLOWDOWN_BUDGET:.0%} of bind:{a.fast} ({room_basis})")
    if errors:
        lines += ["", f"model error against the measured weighted cases: median {sorted(errors)[len(errors) // 2]:.1f}%, "
                      f"largest {max(errors):.1f}% over {len(errors)} cases"]
    return "\n".join(lines) + "\n"
