"""The time plan of a run: how long its worker runs will take, before they start.

A worker run costs its set-up (workers started, memory placed and checked, ceilings
measured) plus ``warm-up + rounds`` rounds of each variant it times. Both come from the
baseline of this hardware key where it holds the run's entries (``extra_info.setup_s``
and the medians of the phases that make up a round), or the same run at another size (its
steps scaled by the elements: ``baseline, scaled from 16.8M``); otherwise from a model: the placed
host bytes per rank, moved about twice per round at ``MODEL_GBPS`` (GPU families: a PCIe
copy; CPU families: memory bandwidth of a few cores), and placed once at set-up at
``MODEL_PLACE_GBPS`` (first touch, pinning), plus a start-up cost: the family's as the
baseline recorded it in its other runs, else a fixed one. The model is a
floor for a machine never measured; the baseline is the estimate to trust.

A kernel the selected cases need that is not built yet for these sources and this torch
(``numabench.kernels.built``) is compiled before the first run that needs it: as long as
its last build here took, else a default per kernel; the plan line says so
(``+ kernel build ~45 s (not built yet: cpu_adam ~45 s, default estimate)``).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from numabench.cases import format_size

if TYPE_CHECKING:
    from numabench.cases import Case
    from numabench.families.base import Family

MODEL_GBPS = {"gpu": 20.0, "cpu": 8.0}  # bytes moved per round: PCIe H2D+D2H / host memory, conservative
MODEL_PLACE_GBPS = 2.0  # first touch + cudaHostRegister of the placed state
# interpreter, torch import, CUDA context, correctness checks, ceilings, teardown (H100 VM,
# smoke tier: 3.6-8.9 s for the GPU families, 0.4-9.6 s for the CPU ones)
MODEL_START_S = {"gpu": 8.0, "cpu": 4.0}
MODEL_ROUND_OVERHEAD_S = 0.002
# a kernel the selected cases need is checked once per session (built: a child loads it; built
# and loaded from its folder before: found at once, numabench.kernels.build.loaded_before) or
# built first: as long as its last build here took (numabench.kernels.built), else these
# defaults (2 cores: stream and cpu_adam, built together, ~35 s each)
KERNEL_CACHED_S = 1.5
KERNEL_LOADED_S = 0.0
KERNEL_BUILD_S = {"stream": 35.0, "cpu_adam": 45.0, "cuda_adam": 120.0}
KERNEL_BUILD_DEFAULT_S = 60.0


@dataclass
class KernelBuild:
    """A kernel the run must compile first."""

    kernel: str
    seconds: float
    source: str  # "as its last build here" or "default estimate"


def kernel_build(kernel: str) -> KernelBuild | None:
    """What compiling ``kernel`` will cost, or None where it is built already."""
    from numabench.kernels import built

    if built.is_built(kernel):
        return None
    recorded = built.recorded_build_seconds(kernel)
    if recorded is not None:
        return KernelBuild(kernel, recorded, "as its last build here")
    return KernelBuild(kernel, KERNEL_BUILD_S.get(kernel, KERNEL_BUILD_DEFAULT_S), "default estimate")


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@dataclass
class RunPlan:
    """One worker run: a case's placed memory, timing ``variants`` in turn."""

    key: str
    family: str
    entries: int
    seconds: float  # kernel builds it waits for included (build_s)
    source: str  # "baseline...", or "model..." (see plan_runs)
    build_s: float = 0.0
    steps_s: float = 0.0  # of ``seconds``, the step requests (the rest: start, set-up, checks, builds)
    import_left_out_s: float = 0.0  # its workers' recorded import, not in ``seconds`` where they are forked
    step_s: float = 0.0  # one step request (``steps_s`` over the run's requests)
    variants: int = 1
    rewarm_every_round: bool = False  # its family's (numabench.families.base.Family)

    @property
    def untimed_steps_s(self) -> float:
        """The untimed steps an A/B's rewarm adds to each side of a pair (numabench.workers.run):
        one before every timed step where a step is short (REWARM_BELOW_S) or its family rewarms every
        round, else in the first round only."""
        from numabench.workers.sides import REWARM_BELOW_S

        every_round = self.rewarm_every_round or self.step_s < REWARM_BELOW_S
        return self.steps_s if every_round else self.step_s * self.variants


@dataclass
class Plan:
    runs: list[RunPlan] = field(default_factory=list)
    baseline: str | None = None
    builds: list[KernelBuild] = field(default_factory=list)  # kernels not built yet, compiled first
    kernels: list[str] = field(default_factory=list)  # every kernel the selected cases need
    # --numa-forkserver: the fork server's import, once (its workers' imports are left out of the runs)
    server_s: float = 0.0
    forked: bool = False  # --numa-forkserver: workers forked from a server per side

    def to_dict(self) -> dict:
        """The figures an A/B estimate (numabench.ab.plan) builds on."""
        return {"seconds": self.seconds, "steps_seconds": sum(r.steps_s for r in self.runs),
                "untimed_steps_seconds": sum(r.untimed_steps_s for r in self.runs),
                "server_seconds": self.server_s, "forked": self.forked,
                "entries": sum(r.entries for r in self.runs), "runs": len(self.runs),
                "builds": [{"kernel": b.kernel, "seconds": b.seconds, "source": b.source} for b in self.builds],
                "kernels": list(self.kernels), "baseline": self.baseline}

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs) + self.server_s

    def by_family(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in self.runs:  # kernel builds apart
            out[r.family] = out.get(r.family, 0.0) + r.seconds - r.build_s
        return out

    def builds_text(self) -> str:
        """What the kernel builds add, and where each figure comes from ('' where nothing is built)."""
        if not self.builds:
            return ""
        each = "; ".join(f"{b.kernel} ~{duration(b.seconds)}, {b.source}" for b in self.builds)
        return f" + kernel build ~{duration(sum(b.seconds for b in self.builds))} (not built yet: {each})"

    def summary(self, tier: str | None = None) -> str:
        """One line: cases, estimated minutes, per family, where the figures came from."""
        entries = sum(r.entries for r in self.runs)
        runs = self.runs
        fams = ", ".join(f"{f} {duration(s)}" for f, s in sorted(self.by_family().items(), key=lambda x: -x[1]))
        from_baseline = sum(r.source.startswith("baseline") for r in runs)
        source = (f"{from_baseline} of {len(runs)} runs timed from the baseline {self.baseline}"
                  if self.baseline else "no baseline for this machine: model estimates")
        if self.baseline and from_baseline < len(runs):
            source += f", {len(runs) - from_baseline} modelled"
        if self.server_s:
            left_out = sum(r.import_left_out_s for r in runs)
            source += (f"; workers forked from a server: {duration(left_out)} of recorded imports left out, "
                       f"the server's ~{duration(self.server_s)} counted once")
        return (f"numabench plan: {entries} entries in {len(runs)} worker runs"
                + (f" ({tier} tier)" if tier else "")
                + f", ~{duration(self.seconds)}" + (f" ({fams}{self.builds_text()})" if fams else "")
                + f"; {source}")


def _kind(family: "Family", case: "Case", gpus: int) -> str:
    return "gpu" if gpus and (family.needs_gpu or family.rank_kind == "gpu") else "cpu"


def placed_seconds(family: "Family", case: "Case") -> float:
    """The model's time to place a rank's state at set-up (first touch, pinning)."""
    return case.numel_per_rank * family.host_bytes_per_element(case) / (MODEL_PLACE_GBPS * 1e9)


def model_setup_seconds(family: "Family", case: "Case", gpus: int, start_s: float | None = None) -> float:
    """Start-up (``start_s``: the family's as measured on this machine, else the model's) plus
    placing the state."""
    start = MODEL_START_S[_kind(family, case, gpus)] if start_s is None else start_s
    return start + placed_seconds(family, case)


def model_seconds(family: "Family", case: "Case", variants: int, rounds: int, warmup: int, gpus: int,
                  start_s: float | None = None) -> float:
    placed = case.numel_per_rank * family.host_bytes_per_element(case)
    per_round = 2 * placed / (MODEL_GBPS[_kind(family, case, gpus)] * 1e9) + MODEL_ROUND_OVERHEAD_S
    return model_setup_seconds(family, case, gpus, start_s) + variants * (warmup + rounds) * per_round


def family_start_seconds(recorded: Iterable[tuple["Family", "Case", float]]) -> dict[str, float]:
    """Each family's start-up cost on the baseline's machine: the median over its recorded runs
    (family, a case of the run, the run's fixed cost) of the fixed cost less the modelled
    placing of the run's state."""
    starts: dict[str, list[float]] = {}
    for fam, case, fixed in recorded:
        starts.setdefault(fam.key, []).append(max(0.5, fixed - placed_seconds(fam, case)))
    return {f: statistics.median(v) for f, v in starts.items()}


def baseline_seconds(family: "Family", entries: Sequence[dict], steps: int, setup_fallback_s: float,
                     variants: int) -> tuple[float, float, str] | None:
    """From the baseline's entries of this run, or None: (seconds, of which step requests,
    source): its recorded fixed cost and wall time per step request where saved
    (``run_fixed_s``, ``run_step_wall_s``), else the medians of the phases that make up a round
    (every variant needed) and a modelled set-up."""
    recorded = [(b["extra_info"]["run_fixed_s"], b["extra_info"]["run_step_wall_s"]) for b in entries
                if (b.get("extra_info") or {}).get("run_step_wall_s")]
    if recorded:
        fixed = statistics.median(r[0] for r in recorded)
        step = statistics.median(r[1] for r in recorded)
        return fixed + steps * step, steps * step, "baseline"
    phases = family.round_phases or family.phases
    per_variant: dict[str, float] = {}
    for b in entries:
        extra = b.get("extra_info") or {}
        median = (b.get("stats") or {}).get("median")
        if extra.get("phase") in phases and median:
            variant = b["name"].split("-", 1)[1]  # the case id (its variant's axis values): the phase dropped
            per_variant[variant] = per_variant.get(variant, 0.0) + median
    if not per_variant or len(per_variant) < variants:
        return None
    round_s = sum(per_variant.values()) / len(per_variant)
    return setup_fallback_s + steps * round_s, steps * round_s, "baseline rounds, modelled set-up"


def scaled_baseline_seconds(family: "Family", case: "Case", sizes: Sequence[tuple["Case", str]],
                            by_run: Mapping[str, Sequence[dict]], steps: int,
                            variants: int) -> tuple[float, float, str] | None:
    """The run at another size of the baseline (same family, variants, policy, dtype and
    processes), or None: the nearest size by ratio, its step time scaled by the elements (a step
    moves every element: bandwidth-bound, so linear; from a much smaller size it counts the
    cache that size ran in) and its fixed cost with the placing of the state re-modelled."""
    if not sizes:
        return None
    near, key = min(sizes, key=lambda ck: abs(math.log(ck[0].numel / case.numel)))
    found = baseline_seconds(family, by_run.get(key, []), steps, 0.0, variants)
    if not found or found[2] != "baseline":
        return None
    seconds, steps_s, _ = found
    fixed = max(0.5, seconds - steps_s - placed_seconds(family, near)) + placed_seconds(family, case)
    scaled_steps = steps_s * case.numel / near.numel
    return fixed + scaled_steps, scaled_steps, f"baseline, scaled from {format_size(near.numel)}"


def recorded_import_seconds(entries: Sequence[dict]) -> float:
    """The median import part (``run_fixed_parts_s``) of a run's baseline entries whose workers
    were exec'd (0 where none recorded it)."""
    parts = [b["extra_info"]["run_fixed_parts_s"].get("import", 0.0) for b in entries
             if (b.get("extra_info") or {}).get("run_fixed_parts_s")
             and not str(b["extra_info"].get("launcher", "")).endswith("(forked)")]
    return statistics.median(parts) if parts else 0.0


def plan_runs(runs: Iterable[tuple[str, "Family", "Case", int, int, int, int]], baseline: dict | None,
              baseline_name: str | None, gpus: int, kernels: Iterable[str] | None = None,
              forked: bool = False) -> Plan:
    """``runs``: (run key, family, one of its cases, variants, entries, rounds, warm-up) per worker run.
    ``baseline``: the loaded baseline run of this hardware key (None: model only). ``kernels``:
    those the selected cases need (None: every kernel of the runs' families); one not built yet
    adds its build to the first run that needs it (Plan.builds says which and how long).
    ``forked`` (--numa-forkserver): a run timed from the baseline loses its workers' recorded
    import, and the server's (the largest of those) is counted once; modelled runs keep theirs."""
    from numabench.families.matrix import worker_run_key
    from numabench.families import FAMILIES, family
    from numabench.results.entry import case_of_entry

    by_run: dict[str, list[dict]] = {}
    recorded: dict[str, tuple["Family", "Case", float]] = {}  # run key -> its fixed cost (start-up model)
    for b in (baseline or {}).get("benchmarks", []):
        extra = b.get("extra_info") or {}
        if extra.get("family") not in FAMILIES:
            continue
        fam = family(extra["family"])
        case = case_of_entry(extra, fam)
        if case is not None:
            key = worker_run_key(case, fam)
            by_run.setdefault(key, []).append(b)
            if extra.get("run_fixed_s"):
                recorded.setdefault(key, (fam, case, extra["run_fixed_s"]))
    plan = Plan(baseline=baseline_name if baseline else None, forked=forked)
    starts = family_start_seconds(recorded.values())
    other_sizes: dict[str, list[tuple["Case", str]]] = {}  # run key at size 0 -> the baseline's runs of it
    for key, (fam, case, _) in recorded.items():
        other_sizes.setdefault(worker_run_key(dataclasses.replace(case, numel=0), fam), []).append((case, key))
    checked: set[str] = set()  # kernels: checked or built before a family's first run
    needed = set(kernels) if kernels is not None else None
    for key, fam, case, variants, entries, rounds, warmup in runs:
        start = starts.get(fam.key)
        setup_fallback = model_setup_seconds(fam, case, gpus, start)
        found = baseline_seconds(fam, by_run.get(key, []), variants * (warmup + rounds), setup_fallback, variants)
        if not found:
            found = scaled_baseline_seconds(fam, case, other_sizes.get(worker_run_key(
                dataclasses.replace(case, numel=0), fam), []), by_run, variants * (warmup + rounds), variants)
        left_out = 0.0
        if found:
            seconds, steps_s, source = found
            if forked:
                left_out = recorded_import_seconds(by_run.get(key, []))
                seconds -= left_out
                plan.server_s = max(plan.server_s, left_out)
        else:
            seconds = model_seconds(fam, case, variants, rounds, warmup, gpus, start)
            steps_s = seconds - model_setup_seconds(fam, case, gpus, start)
            source = "model" if start is None else "model, start-up from the baseline"
        build_s = 0.0
        for k in fam.kernels:
            if k in checked or (needed is not None and k not in needed):
                continue
            checked.add(k)
            build = kernel_build(k)
            if build is None:
                from numabench.kernels import built

                seconds += KERNEL_LOADED_S if built.loaded_before(k) else KERNEL_CACHED_S
            else:
                plan.builds.append(build)
                build_s += build.seconds
        plan.runs.append(RunPlan(key, fam.key, entries, seconds + build_s, source, build_s, steps_s, left_out,
                                 step_s=steps_s / max(1, variants * (warmup + rounds)), variants=variants,
                                 rewarm_every_round=fam.rewarm_every_round))
    plan.kernels = sorted(checked)
    return plan
