"""``numabench compare``: two run files judged by the gate's rule (numabench.gate.rule),
read through numabench.results.storage. The rule, its verdicts and their tables live in
numabench.gate."""
from __future__ import annotations

from pathlib import Path

from numabench.gate.rule import CompareResult, judge_runs
from numabench.results import storage


def compare_runs(baseline: str | Path | dict, new: str | Path | dict, *, threshold: str | float | None = None,
                 coarsest: str | float | None = None, allow_foreign: bool = False) -> CompareResult:
    """Judge every entry of run ``new`` against the bands of run ``baseline`` (paths or loaded runs).
    ``threshold``/``coarsest`` None: those a gated ``new`` run was judged with, else the defaults,
    so the offline verdict is the session's."""
    a = baseline if isinstance(baseline, dict) else storage.load_run(baseline)
    b = new if isinstance(new, dict) else storage.load_run(new)
    return judge_runs(a, b, str(baseline) if not isinstance(baseline, dict) else "<baseline>",
                      str(new) if not isinstance(new, dict) else "<new>", threshold=threshold,
                      coarsest=coarsest, allow_foreign=allow_foreign)
