"""The time an A/B run (``numabench ab``) will take, from the time plan of one invocation of
its selection (numabench.plan, from this hardware key's baseline where it holds the runs).
Rounds interleaved (the default): each pair starts and sets up both sides' workers together and
steps each side's rounds in turn, each timed step after an untimed one (numabench ab ``--no-rewarm``:
without); pair p of every worker run in a session of its own, pass p (numabench ab's default,
numabench.ab.passes; ``--no-passes``: one session):

    head's build + base's build + sessions x (pytest's start and collection + 2 x a fork server's start)
        + pairs x (the plan less its kernel builds, imports and steps + 2 x its steps
                   + 2 x its untimed steps)

where sessions is the pairs in passes, else 1.

where a run's untimed steps are its steps where a step takes under REWARM_BELOW_S
(numabench.workers.sides), else one round of them (longer steps are rewarmed in the first round only).

Workers forked from a server per side (numabench ab's default, ``--numa-forkserver``): the
plan's runs hold no worker imports, each side's server imports once (``server_s``), and both
sides' set-ups, which run at once, count once: on a fresh H100 x1 VM (16 CPUs) a forked pair's
fixed cost was about a plain run's less its imports (adam_offload 67.9M 3.5 s against 2.5,
transfer 268M 8.6 against 9.8, train_step 8.2 against 9.5), and the ``ci`` tier's A/As on fresh
H200 x1 VMs came within 8% of this sum (docs/GATE.md). Exec'd workers (``--workers exec``) count
each run's fixed cost twice: each side's interpreter imports torch at the same time as the
other's, and pairs measured 1.2-3.4x a plain run's fixed cost (train_step DDP 19.0 s against
9.5 s; adam_offload 17.5-19.9 against 5.1-5.8 with its check); the A/Bs came within 18%.

Confirming pairs (``--confirm-pairs``) run only for a worker run whose pairs judge an entry
changed: none in an A/A, so the estimate leaves them out; each such run adds that many pairs.

Whole invocations (``--interleave=invocations``):

    head's build + base's build + pairs x 2 x (the plan less its kernel builds + pytest's start and collection)

Each side runs ``numabench build`` once in its own checkout, which builds every kernel this
machine can build, in parallel (one compiler each): the longest compile, plus the build
command's own start (BUILD_START_S). Kernels are built per sources and torch in one build
folder, so the head's build compiles the kernels not built here yet (as long as their last
build here took, else the plan's default) and loads the others (BUILD_LOADED_S where every one
was loaded from its folder before: no builder, no torch); the base's build compiles only the
kernels whose sources differ from the head's: none where they are the same (A/A, or a change
outside ``csrc/``: the estimate, BUILD_LOADED_S), every one where they differ (the upper
figure). Every invocation then finds its kernels loaded before, and pays pytest's start and
collection, which ``numabench plan`` times as it runs them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from numabench.plan import KERNEL_BUILD_DEFAULT_S, KERNEL_BUILD_S, KERNEL_LOADED_S, duration
from numabench.ab.settings import DEFAULTS

# `numabench build` with every kernel built already, one of them not loaded from its folder yet:
# python, torch's import, a builder per kernel that loads it through torch's build (11-12 s on
# the H100 x1 VMs, in each of five A/B runs)
BUILD_START_S = 11.0
# `numabench build` with every kernel built and loaded before (numabench.kernels.build.loaded_before):
# python and the command's checks, no torch, no builder (0.11-0.12 s on the 2-core CPU runner,
# against 2.2 s through torch's load; a GPU machine's driver query adds a little)
BUILD_LOADED_S = 1.0


# how a pair's set-ups count, by whether its workers are forked (ABEstimate.pair_s)
SETUPS = {True: "once: workers forked, both sides' set-ups at once",
          False: "twice: workers exec'd, both sides' imports and set-ups sharing the CPUs"}


def compile_seconds(kernel: str) -> float:
    """How long compiling ``kernel`` takes here: its last build's time, else the plan's default."""
    from numabench.kernels import built

    recorded = built.recorded_build_seconds(kernel)
    return recorded if recorded is not None else KERNEL_BUILD_S.get(kernel, KERNEL_BUILD_DEFAULT_S)


def build_kernels() -> dict[str, tuple[bool, float, bool]]:
    """Each kernel ``numabench build`` builds here: (built already, its compile seconds, loaded
    from its folder before)."""
    from numabench.kernels import built, prebuild

    return {k: (built.is_built(k), compile_seconds(k), built.loaded_before(k)) for k in prebuild.default_kernels()}


@dataclass(frozen=True)
class ABEstimate:
    pairs: int
    plan_s: float  # one invocation's plan, its kernel builds included
    plan_builds_s: float  # of which kernel builds (kernels not built yet)
    plan_unbuilt: int  # how many kernels those builds are
    session_s: float  # pytest's start and collection, per invocation
    head_build_s: float  # numabench build in the head's checkout
    base_build_s: float  # numabench build in the base's: its kernels of the head's sources, checked only
    base_compile_s: float  # the same where the base's kernel sources differ: every kernel compiled
    plan_steps_s: float = 0.0  # of plan_s, the step requests
    plan_untimed_s: float = 0.0  # what rewarm adds per side and pair: numabench.plan.RunPlan.untimed_steps_s
    interleave: str = DEFAULTS.interleave  # numabench.ab.settings.INTERLEAVE
    rewarm: bool = DEFAULTS.rewarm  # every timed step after an untimed one (--no-rewarm: not)
    max_pairs: int = DEFAULTS.max_pairs  # further pairs up to this where a run's first ones are too spread (0: none)
    server_s: float = 0.0  # of plan_s, a fork server's import (--numa-forkserver): once per side, not per pair
    forked: bool = False  # workers forked from a server per side: both sides' set-ups, run at once, count once
    passes: bool = False  # rounds mode: a session per pair (numabench ab's default), else one for all

    @property
    def invocation_s(self) -> float:
        """One invocation: its kernels built and loaded by the builds (found at once), plus pytest's
        start and collection."""
        return self.plan_s - self.plan_builds_s + self.plan_unbuilt * KERNEL_LOADED_S + self.session_s

    @property
    def pair_s(self) -> float:
        """One pair of the rounds mode: each run's fixed cost once where the workers are forked
        (both sides' set-ups run at once), twice where they are exec'd (both sides' imports share
        the CPUs); its steps twice (warm-ups counted too), and with rewarm both sides' untimed steps."""
        fixed = self.invocation_s - self.session_s - self.plan_steps_s - self.server_s
        return (1 if self.forked else 2) * fixed + 2 * self.plan_steps_s + (2 * self.plan_untimed_s
                                                                             if self.rewarm else 0.0)

    @property
    def sessions(self) -> int:
        """The rounds mode's pytest sessions: one per pair in passes, else one."""
        return self.pairs if self.passes else 1

    @property
    def measuring_s(self) -> float:
        if self.interleave == "rounds":
            return self.sessions * (self.session_s + 2 * self.server_s) + self.pairs * self.pair_s
        return 2 * self.pairs * self.invocation_s

    @property
    def seconds(self) -> float:
        return self.head_build_s + self.base_build_s + self.measuring_s

    @property
    def seconds_at_most(self) -> float:
        """Every worker run taking ``max_pairs`` pairs (rounds mode): the upper figure."""
        further = max(0, self.max_pairs - self.pairs)
        return self.seconds + further * (self.pair_s + (self.session_s + 2 * self.server_s if self.passes else 0.0))

    @property
    def seconds_if_base_compiles(self) -> float:
        return self.seconds - self.base_build_s + self.base_compile_s

    def summary(self) -> str:
        builds = (f"builds ~{duration(self.head_build_s)} (head) + ~{duration(self.base_build_s)} (base, kernels "
                  f"of the head's sources)")
        if self.interleave == "rounds":
            sessions = (f"{self.sessions} sessions (one a pass; {self.session_s:.1f} s pytest start and collection "
                        "each, as timed here)") if self.passes else \
                f"one session ({self.session_s:.1f} s pytest start and collection as timed here)"
            then = (f"then {sessions} of {self.pairs} pairs x ~{duration(self.pair_s)} (the plan above less its "
                    "kernel builds "
                    f"{SETUPS[self.forked]}; its {duration(self.plan_steps_s)} of steps twice: both sides' rounds"
                    f"{', each short one after an untimed one' if self.rewarm else ''})")
        else:
            then = (f"then {2 * self.pairs} invocations x ~{duration(self.invocation_s)} (the plan above less its "
                    f"kernel builds, + {self.session_s:.1f} s pytest start and collection as timed here)")
        most = (f"; up to ~{duration(self.seconds_at_most)} if every worker run took {self.max_pairs} pairs"
                if self.max_pairs > self.pairs and self.interleave == "rounds" else "")
        return (f"numabench plan (A/B, {self.pairs} pairs, {self.interleave} interleaved): "
                f"~{duration(self.seconds)}: {builds}, {then}; ~{duration(self.seconds_if_base_compiles)} where the "
                f"base's kernel sources differ (its build ~{duration(self.base_compile_s)}){most}")


def ab_estimate(plan: Mapping, pairs: int, session_s: float, kernels: Mapping[str, tuple[bool, float, bool]],
                interleave: str = DEFAULTS.interleave, rewarm: bool = DEFAULTS.rewarm,
                max_pairs: int = DEFAULTS.max_pairs,
                passes: bool = False) -> ABEstimate:
    """``plan``: numabench.plan.Plan.to_dict() of one invocation; ``kernels``: build_kernels().
    The head's build compiles the kernels not built here and loads every one not loaded from its
    folder before; the base's, of the head's sources, then finds all of them loaded."""
    if pairs < 2:
        raise ValueError(f"pairs {pairs}: allowed 2 or more")
    if interleave not in ("rounds", "invocations"):
        raise ValueError(f"interleave {interleave!r}: allowed rounds, invocations")
    builds = plan.get("builds") or []
    all_loaded = all(loaded for _, _, loaded in kernels.values())
    return ABEstimate(
        pairs=pairs, plan_s=float(plan["seconds"]), plan_builds_s=sum(float(b["seconds"]) for b in builds),
        plan_unbuilt=len(builds), session_s=session_s,
        head_build_s=BUILD_LOADED_S if all_loaded else
        BUILD_START_S + max((s for done, s, _ in kernels.values() if not done), default=0.0),
        base_build_s=BUILD_LOADED_S,
        base_compile_s=BUILD_START_S + max((s for _, s, _ in kernels.values()), default=0.0),
        plan_steps_s=float(plan.get("steps_seconds") or 0.0),
        plan_untimed_s=float(plan.get("untimed_steps_seconds", plan.get("steps_seconds")) or 0.0),
        interleave=interleave, rewarm=rewarm,
        max_pairs=max_pairs, server_s=float(plan.get("server_seconds") or 0.0),
        forked=bool(plan.get("forked")), passes=passes and interleave == "rounds")
