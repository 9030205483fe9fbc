"""Same-machine A/B of two git revisions: ``numabench ab BASE [HEAD]``.

A GPU CI runner without a stable fleet baseline can still answer "did this
change make it slower?" by measuring both revisions itself, now. Each side is
checked out in a temporary git worktree (HEAD omitted: the current working
tree, uncommitted changes included) and its kernels built. Then, by default
(``interleave="rounds"``), one pytest session of the head times every case
with both sides' workers alive at once, their rounds alternating (head, base,
base, head, ...: fixtures.ab_sides), one pair per ``--numa-repeats``
invocation (fresh workers and buffers on both sides each time), so that the
machine's drift over seconds, which moves host-side entries by 10-30% between
invocations on shared VMs, hits both sides alike. ``interleave="invocations"``
runs whole pytest invocations instead, base and head taking turns in ABBA
order (base, head, head, base, ...): each side entirely its own code, harness
included, for changes to the worker contract, which the rounds mode cannot
time (the base's workers answer the head's harness).

Per entry, each pair gives a ratio head/base of its medians; the estimate is the geometric mean of the pair ratios, its
confidence interval Student's t on the log ratios (pairs, not rounds, are the
independent samples) and its resolution the interval's relative half-width
(numabench.gate.pairs). An entry is ``slower`` only when the whole
interval lies above 1 + threshold (``faster``: below 1 / (1 + threshold)),
``same`` only when it lies wholly within those bounds, else ``unresolved``
(leaning slower or faster where the interval excludes 1); exit 1 on any
``slower``.

Library code does not print: :func:`run_ab` returns an :class:`ABResult`
(``progress`` receives one line per invocation); numabench.ab.formats
renders it (text, Markdown, GitHub annotations, JSON). The judging takes medians from
anywhere (:func:`judge_pairs` one entry's pairs, :func:`judge_measured` every entry of both
sides), and :func:`run_ab` takes the function that runs one invocation, so the whole flow
runs on given timings too.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import psutil

from numabench import bounds
from numabench.errors import UsageError
from numabench.interrupts import stops_held
from numabench.kernels.builder_tree import live_descendants
from numabench.results import storage
from numabench.gate.rule import SLOWER
from numabench.gate.band import DEFAULT_COARSEST_PCT
from numabench.gate.invocations import invocation_medians
from numabench.gate import pairs as pair_rule
from numabench.ab.passes import invoke_in_passes
from numabench.ab.session import StoppedWithMeasurements, session_measured
from numabench.ab.scope import Scope, changed_paths, family_kernels, given_tier, scope_of
from numabench.ab.settings import DEFAULTS, INTERLEAVE, SCOPES, SESSION_OPTION, WORKERS, ABSettings, session_items
from numabench.tiers import DEFAULT_TIER

WORKTREE = "worktree"  # HEAD omitted: the checkout as it is
# where an A/B run's time went, in seconds: each side's build, the measuring, all of it
TIMINGS = ("build_base", "build_head", "measuring", "total")
STATUS_PREFIX = "numabench: "  # how a run's progress lines start (fixtures/progress.py): the ones relayed
BOOTSTRAP_RESAMPLES = 4000
RUN_TIMEOUT_S = 3600
CHILD_STOP_GRACE_S = 30.0  # a stopped build or session's time to end its own workers and compilers


@dataclass
class Side:
    label: str  # the revision as given, or "worktree"
    commit: str | None
    path: Path
    env: dict[str, str]
    args: list[str] = field(default_factory=list)  # pytest arguments of this side's alone (--head-axis)


@dataclass
class ABRow:
    name: str
    base_s: list[float]
    head_s: list[float]
    ratio: float
    low: float
    high: float
    verdict: str
    resolution_pct: float | None = None  # the interval's relative half-width (gate.pairs)
    fullname: str = ""
    confirmation_pairs: int = 0  # of its pairs, the last ones its worker run took to confirm a change (0: none)
    # per pair, the CPU each rank's worker of that side ran its steps on (rounds mode; None: not recorded)
    base_cpus: list[list[int | None]] | None = None
    head_cpus: list[list[int | None]] | None = None
    # the pair ratios head/base it was judged on, where they are not head_s / base_s: each pair's
    # ratio from its rounds (rounds mode; pair_rule.quad_ratio). None: those of the medians
    round_ratios: list[float] | None = None
    # an unresolved entry whose interval excludes 1: which way (gate.pairs: SLOWER or FASTER); None: neither
    leans: str | None = None
    # how round_ratios came from the rounds (gate.pairs.PAIR_RATIOS: quads, or rounds in runs judged before)
    ratios_from: str = pair_rule.PAIR_RATIO
    # each pair's own standard error of its round_ratios in log terms (gate.pairs.pair_error: the
    # interval's floor; inf where its rounds were too few); None: not known (pairs of medians, runs before)
    pair_errors: list[float] | None = None

    @property
    def pair_ratios(self) -> list[float]:
        """Head/base of each pair, as judged: round by round where recorded, else of the medians."""
        if self.round_ratios is not None:
            return list(self.round_ratios)
        return [h / b for b, h in zip(self.base_s, self.head_s)]


@dataclass
class ABResult:
    base: Side
    head: Side
    pairs: int
    threshold_pct: float
    confidence: float
    rows: list[ABRow] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # entries one side did not measure in every invocation
    coarsest_pct: float = DEFAULT_COARSEST_PCT
    # judged by the equivalence rule (gate.pairs: same only within the threshold band); False: a run saved
    # before it, whose same meant a resolution within coarsest_pct and an interval not beyond the threshold
    same_within_band: bool = True
    selection: list[str] = field(default_factory=list)  # the pytest arguments of every invocation
    hardware_key: str | None = None
    interleave: str = "invocations"  # INTERLEAVE
    when: str = ""  # when the measuring began, UTC ISO 8601 ('' where not recorded)
    timings_s: dict[str, float] = field(default_factory=dict)  # TIMINGS: where the run's time went
    max_pairs: int = 0  # further pairs allowed where an entry was wider than target_pct (0: none)
    target_pct: float | None = None
    confirm_pairs: int = 0  # fresh pairs for a worker run whose first pairs judged an entry changed (0: none)
    workers: str = "exec"  # WORKERS: how each pair's workers started (forked from a server per side, or exec'd)
    same_cpus: bool = False  # each pair's two sides on the same CPUs (families with Family.step_threads)
    passes: bool = False  # rounds mode: pair p of every worker run in session p (ab/passes.py), not back to back
    # in passes: the seconds of measuring that the first and further passes were to fit (ab/budget.py); None: no budget
    time_budget_s: float | None = None
    # rounds mode: a pair's rounds went on until every entry's pair ratio was known to this standard
    # error, in % (gate.pairs.RoundTarget), up to round_cap x its family's rounds; 0: the family's rounds
    round_target_pct: float = 0.0
    round_cap: int = 0
    # the signal that stopped the session before its end (rounds mode): rows are its finished worker runs'
    stopped_by: int | None = None
    passes_done: int | None = None  # in passes, the passes that ran to their end (of a stopped run: before the stop)
    scope: list[str] = field(default_factory=list)  # which families ran which tier, and why (numabench.ab.scope)
    # the families whose own code changed and whose worker runs alone took the time budget's further
    # pairs, toward a resolution of the threshold (--focus-budget); empty: none, or every run as the budget chose
    focus: list[str] = field(default_factory=list)
    # MemTotal (GiB) when the measuring began and when it ended: a VM whose memory grows as used
    # shows it here (None: not read)
    mem_total_gib: tuple[float, float] | None = None
    # a kept session judged again (numabench ab --rejudge): where it was read from; None: measured now
    rejudged_from: str | None = None
    # the confidence of the entries judged with confirming pairs (pair_rule.confirmed_confidence);
    # None: ``confidence`` (runs saved before it existed)
    confirm_confidence: float | None = None

    @property
    def confirmed_confidence(self) -> float:
        return self.confidence if self.confirm_confidence is None else self.confirm_confidence

    def row_confidence(self, row: ABRow) -> float:
        """The confidence of ``row``'s interval: the stricter one where its worker run confirmed."""
        return self.confirmed_confidence if row.confirmation_pairs else self.confidence

    @property
    def pair_ratio(self) -> str:
        """What its entries' pair ratios are (pair_rule.PAIR_RATIOS): how every entry's came from its
        rounds ("quads", or "rounds" in runs judged before), "medians" where none did, "mixed" between."""
        kinds = {r.ratios_from if r.round_ratios is not None else "medians" for r in self.rows}
        return kinds.pop() if len(kinds) == 1 else "medians" if not kinds else "mixed"

    @property
    def regressions(self) -> list[ABRow]:
        return [r for r in self.rows if r.verdict == SLOWER]

    @property
    def exit_code(self) -> int:
        """1 on a slower entry (a stopped run's too: what its finished pairs judged slower is slower),
        else 0; a stopped run without one the shell's code for its signal (128 + its number): what it
        did not measure was not judged."""
        if self.regressions:
            return 1
        return 128 + self.stopped_by if self.stopped_by else 0


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def bootstrap_interval(ratios: Sequence[float], confidence: float, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = 1) -> tuple[float, float]:
    """Percentile bootstrap interval of the geometric mean of ``ratios`` (resampling the pairs).
    Not the verdict's interval: with few pairs it is too narrow (gate.pairs's t-interval is
    used; tests/test_ab_gate.py compares the two)."""
    if not ratios:
        raise ValueError("no ratios")
    rng = random.Random(seed)
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    means = sorted(sum(rng.choice(logs) for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    lo = means[int(math.floor(tail * (resamples - 1)))]
    hi = means[int(math.ceil((1 - tail) * (resamples - 1)))]
    return math.exp(lo), math.exp(hi)


def confirm_confidence_of(confidence: float, given: float | None) -> float:
    """``--confirm-confidence`` checked against ``--confidence``; None: half the error of ``confidence``
    (pair_rule.confirmed_confidence). UsageError naming the bad value."""
    if given is None:
        return pair_rule.confirmed_confidence(confidence)
    if not confidence <= given < 1:
        raise UsageError(f"--confirm-confidence {given}: allowed a number from --confidence ({confidence:g}) up "
                         f"to 1, e.g. {pair_rule.confirmed_confidence(confidence):g}")
    return given


def judge_pairs(name: str, base_s: Sequence[float], head_s: Sequence[float], threshold_pct: float,
                confidence: float, fullname: str = "",
                first_stage: int | None = None, confirmation_pairs: int = 0,
                round_ratios: Sequence[float] | None = None, confirm_confidence: float | None = None,
                ratios_from: str = pair_rule.PAIR_RATIO, pair_errors: Sequence[float] | None = None) -> ABRow:
    """One entry's row from each side's per-pair medians. With ``confirmation_pairs`` (its worker
    run's first pairs judged an entry changed and it ran that many more): judged on all its pairs,
    their own spread, at ``confirm_confidence`` (default pair_rule.confirmed_confidence of
    ``confidence``). ``round_ratios``: each pair's ratio from its rounds (rounds mode; how:
    ``ratios_from``), what it is judged on; else the ratios of the medians. ``pair_errors``: with
    ``round_ratios``, each one's own standard error (the floor of the interval's spread)."""
    stein = None if confirmation_pairs else first_stage
    if confirmation_pairs:
        confidence = pair_rule.confirmed_confidence(confidence) if confirm_confidence is None else confirm_confidence
    if round_ratios is not None:
        if len(round_ratios) != len(base_s) or len(head_s) != len(base_s):
            raise ValueError(f"{name}: {len(round_ratios)} round ratios for {len(base_s)} base and {len(head_s)} "
                             "head medians: allowed one of each per pair")
        if pair_errors is not None and len(pair_errors) != len(round_ratios):
            raise ValueError(f"{name}: {len(pair_errors)} pair errors for {len(round_ratios)} round ratios: "
                             "allowed one per pair")
        j = pair_rule.judge_ratios(round_ratios, threshold_pct, confidence, stein, pair_errors)
    else:
        pair_errors = None
        j = pair_rule.judge(base_s, head_s, threshold_pct, confidence, stein)
    return ABRow(name, list(base_s), list(head_s), j.ratio, j.low, j.high, j.verdict, j.resolution_pct,
                 fullname or name, confirmation_pairs,
                 round_ratios=None if round_ratios is None else [float(r) for r in round_ratios], leans=j.leans,
                 ratios_from=ratios_from,
                 pair_errors=None if pair_errors is None else [float(e) for e in pair_errors])


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def repo_root(start: Path) -> Path:
    return Path(_git(start, "rev-parse", "--show-toplevel"))


@contextlib.contextmanager
def checkouts(repo: Path, base: str, head: str | None, tmp: Path) -> Iterator[tuple[Path, str, Path, str | None]]:
    """Worktrees for the revisions (HEAD None: the working tree itself); always removed."""
    made: list[Path] = []
    try:
        paths = []
        for label, rev in (("base", base), ("head", head)):
            if rev is None:
                paths.append((repo, None))
                continue
            commit = _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
            path = tmp / label
            made.append(path)  # before the add: an add cut short by an interrupt leaves a worktree to remove
            _git(repo, "worktree", "add", "--detach", str(path), commit)
            paths.append((path, commit))
        yield paths[0][0], paths[0][1], paths[1][0], paths[1][1]
    finally:
        for path in made:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)],
                           capture_output=True)
            shutil.rmtree(path, ignore_errors=True)  # what a half-made worktree's remove did not take
        if made:
            subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def _env(side: Side) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(side.path), env.get("PYTHONPATH")]))
    env.update(side.env)
    return env


def run_child(cmd: Sequence[str], cwd: Path, env: dict[str, str], what: str,
              on_line: Callable[[str], None] | None = None) -> subprocess.CompletedProcess:
    """``cmd`` to its end, output captured. With ``on_line``, stderr joins stdout and each line
    goes to ``on_line`` as it comes (a session of many minutes shows where it is; the
    CompletedProcess's stderr is then empty). Interrupted (Ctrl-C, or SIGTERM/SIGHUP as Stopped) or
    past RUN_TIMEOUT_S, the child gets SIGTERM and CHILD_STOP_GRACE_S to end what it started (a
    build its compilers, a session its workers) before SIGKILL, and is waited for: numabench ab
    never returns with a child of its still running (subprocess.run would SIGKILL the child at
    once and, on Ctrl-C, not even wait for it)."""
    proc: subprocess.Popen | None = None
    reader: threading.Thread | None = None
    lines: list[str] = []
    try:
        with stops_held():  # an interrupt while the child starts is raised here, once proc names it
            proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT if on_line else subprocess.PIPE, text=True)
        if on_line is None:
            out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        else:
            reader = threading.Thread(target=_relay, args=(proc.stdout, lines, on_line), daemon=True)
            reader.start()
            proc.wait(timeout=RUN_TIMEOUT_S)
            reader.join()
            out, err = "".join(lines), ""
    except subprocess.TimeoutExpired:
        _stop_child(proc, drain=reader is None)
        raise UsageError(f"{what} did not end within {RUN_TIMEOUT_S} s: stopped") from None
    except BaseException:
        if proc is not None:
            _stop_child(proc, drain=reader is None)
        raise
    finally:
        if reader is not None:
            reader.join(timeout=5)  # the pipe's end: the child and every process holding it are gone
        for pipe in (proc.stdout, proc.stderr) if proc is not None else ():
            if pipe is not None:
                pipe.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _relay(pipe: Any, lines: list[str], on_line: Callable[[str], None]) -> None:
    """Every line of ``pipe`` into ``lines``, and to ``on_line``, until the pipe ends."""
    with contextlib.suppress(ValueError, OSError):  # closed under us: the child was stopped
        for line in pipe:
            lines.append(line)
            on_line(line.rstrip("\n"))


def _stop_child(proc: subprocess.Popen, drain: bool = True) -> None:
    """SIGTERM the child, then wait for it and for every process under it (a build's kernel
    builders end their compilers after their parent is gone): all within CHILD_STOP_GRACE_S,
    the survivors killed then. ``drain``: read its pipes meanwhile (False where a relay thread
    reads them already)."""
    deadline = time.monotonic() + CHILD_STOP_GRACE_S
    tree = {p.pid: p for p in live_descendants(proc.pid)}
    if proc.poll() is None:
        proc.terminate()
    while proc.poll() is None and time.monotonic() < deadline:
        tree.update((p.pid, p) for p in live_descendants(proc.pid))
        with contextlib.suppress(subprocess.TimeoutExpired):  # reading on, so a full pipe cannot hold it
            proc.communicate(timeout=0.1) if drain else proc.wait(timeout=0.1)
    if proc.poll() is None:
        tree.update((p.pid, p) for p in live_descendants(proc.pid))
        proc.kill()
    proc.wait()
    _, alive = psutil.wait_procs(list(tree.values()), timeout=max(0.0, deadline - time.monotonic()))
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def build(side: Side) -> str:
    """``numabench build`` in the side's checkout; returns its output, raises on failure."""
    proc = run_child([sys.executable, "-m", "numabench.cli", "build"], side.path, _env(side),
                     f"numabench build in {side.label}")
    if proc.returncode != 0:
        raise UsageError(f"numabench build failed in {side.label} ({side.path}): "
                         + " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-6:]))
    return proc.stdout


def invoke(side: Side, pytest_args: Sequence[str], json_path: Path) -> dict[str, float]:
    """One pytest invocation on ``side``: entry fullname -> median seconds."""
    cmd = [sys.executable, "-m", "pytest", *pytest_args, "-p", "no:cacheprovider", "-q",
           f"--benchmark-json={json_path}"]
    proc = run_child(cmd, side.path, _env(side), f"pytest on {side.label}")
    if proc.returncode not in (0, 1) or not json_path.is_file():
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise UsageError(f"pytest on {side.label} exited {proc.returncode}: {tail}")
    run = storage.load_run(json_path)
    out = {}
    for b in run["benchmarks"]:
        meds = invocation_medians(b)
        if meds:
            out[b["fullname"]] = meds[0]
    if not out:
        raise UsageError(f"pytest on {side.label} measured nothing: check the selection ({' '.join(pytest_args)})")
    return out


def invoke_interleaved(base: Side, head: Side, pytest_args: Sequence[str], pairs: int,
                       json_path: Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One pytest session of the head timing both sides round by round (fixtures.ab_sides), one
    pair per invocation: side label -> one {entry: median s} per pair, "failed" -> the tests that
    failed, "confirming" -> confirming_pairs. Each side's environment goes to its own workers only.
    ``progress`` gets the session's line per finished worker run as it comes (``run 4/19 KEY: 41.2
    s; elapsed 2:10, ETA 9:40``; pytest's -v): a session of the whole tier runs for many minutes."""
    sides = ABSettings(base_env=tuple(base.env.items()), head_env=tuple(head.env.items()))
    cmd = [sys.executable, "-m", "pytest", *pytest_args, "-p", "no:cacheprovider", "-v",
           f"--numa-repeats={pairs}", *session_items(sides, ("base_env", "head_env"), base=base.path),
           f"--benchmark-json={json_path}"]
    neutral = Side(head.label, head.commit, head.path, {})  # the session's own environment: neither side's
    def relay(line: str) -> None:
        if progress is not None and line.startswith(STATUS_PREFIX):
            progress(line[len(STATUS_PREFIX):])
    try:
        proc = run_child(cmd, head.path, _env(neutral), f"pytest on {head.label} (with {base.label}'s workers)",
                         relay)
    except KeyboardInterrupt as stop:  # the session was stopped too, and wrote what its finished runs measured
        measured = measured_before_stop(json_path, pairs)
        if measured is None:
            raise
        raise StoppedWithMeasurements(stop, measured) from None
    if proc.returncode not in (0, 1) or not json_path.is_file():
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        if "unrecognized arguments: --numa-repeats" in tail or f"unrecognized arguments: {SESSION_OPTION}" in tail:
            raise UsageError(f"the head ({head.label}) predates {SESSION_OPTION}, which the rounds mode runs its "
                             "session with: allowed --interleave=invocations for it")
        unknown = next((ln for ln in tail.split(" | ") if "unrecognized arguments:" in ln), "")
        if "--numa-forkserver" in unknown:
            raise UsageError(f"the head ({head.label}) predates --numa-forkserver, which numabench ab runs its "
                             "session with: allowed --workers exec for it")
        raise UsageError(f"pytest on {head.label} (with {base.label}'s workers) exited {proc.returncode}: {tail}")
    # failed: measured by neither side, listed, never left out silently
    return session_measured(json_path, pairs, " ".join(pytest_args), failed_tests(proc.stdout))



def measured_before_stop(json_path: Path, pairs: int) -> dict[str, Any] | None:
    """What a stopped rounds-mode session's finished worker runs measured, or None where it wrote
    nothing readable. Its pytest turns the stop into an interrupt (fixtures.safety), and
    pytest-benchmark still writes the entries it finished: the worker run cut short has none."""
    try:
        return session_measured(json_path, pairs)
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        return None


def failed_tests(pytest_output: str) -> list[str]:
    """pytest's short summary lines of the tests that failed or errored (``FAILED id - why``)."""
    return [ln.strip() for ln in pytest_output.splitlines() if ln.startswith(("FAILED ", "ERROR "))]





def attach_cpus(rows: Sequence[ABRow], cpus: Mapping[str, Mapping[str, list]]) -> None:
    """Each row's sides' CPUs per pair (pair_cpus), where there is one per pair it was judged on."""
    for row in rows:
        found = cpus.get(row.fullname or row.name) or {}
        base, head = found.get("base") or [], found.get("head") or []
        if len(base) >= len(row.base_s) and len(head) >= len(row.head_s):
            row.base_cpus, row.head_cpus = base[:len(row.base_s)], head[:len(row.head_s)]



InvokeInterleaved = Callable[[Side, Side, Sequence[str], int, Path], dict[str, Any]]


InvokeOne = Callable[[Side, Sequence[str], Path], dict[str, float]]  # one invocation: entry -> median s


def abba_order(pairs: int) -> list[tuple[int, str]]:
    """(pair, side) in the order they run: base, head, head, base, base, head, ... so that a
    drift of the machine (a linear one exactly) hits both sides alike."""
    return [(i, label) for i in range(pairs) for label in (("base", "head") if i % 2 == 0 else ("head", "base"))]


def measure(sides: dict[str, Side], pytest_args: Sequence[str], pairs: int, scratch: Path,
            invoke_one: InvokeOne = invoke,
            progress: Callable[[str], None] = lambda line: None) -> dict[str, list[dict[str, float]]]:
    """Each side's invocations in ABBA order (``invoke_one``: one invocation of a side, its JSON
    written under ``scratch``): side label -> one {entry: median s} per pair."""
    measured: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    for i, label in abba_order(pairs):
        side = sides[label]
        medians = invoke_one(side, [*pytest_args, *side.args], scratch / f"{label}-{i}.json")
        measured[label].append(medians)
        progress(f"pair {i + 1}/{pairs}: {label} ({side.label}) {len(medians)} entries")
    return measured


def judge_measured(measured: dict[str, list[dict[str, float]]], threshold_pct: float,
                   confidence: float, pairs: int | None = None, confirming: Mapping[str, int] | None = None,
                   confirm_confidence: float | None = None, ratios_from: str = pair_rule.PAIR_RATIO
                   ) -> tuple[list[ABRow], list[str]]:
    """The rows of the entries both sides measured in each of the first ``pairs`` invocations
    (pair i: base's i-th and head's i-th; default: every invocation), each judged on every pair
    it has (Stein's width from its first ``pairs``, or from as many as ``measured["first_stage"]``
    names for it), and the full names of those they did not (not judged). ``confirming``: full name ->
    the confirming pairs among its pairs (confirming_pairs), judged at ``confirm_confidence``
    (judge_pairs). ``ratios_from``: how ``measured["ratios"]`` came from the rounds."""
    rows: list[ABRow] = []
    missing: list[str] = []
    need = len(measured["base"]) if pairs is None else pairs
    ratios = measured.get("ratios") or [{} for _ in measured["base"]]
    errors = measured.get("errors") or [{} for _ in measured["base"]]
    for name in sorted(set().union(*measured["base"], *measured["head"])):
        both = [(b[name], h[name], r.get(name), e.get(name))
                for b, h, r, e in zip(measured["base"], measured["head"], ratios, errors) if name in b and name in h]
        if any(name not in m for m in (*measured["base"][:need], *measured["head"][:need])):
            missing.append(name)
            continue
        by_rounds = [r for _, _, r, _ in both]
        errs = [e for _, _, _, e in both]
        rows.append(judge_pairs(name.split("::")[-1], [b for b, _, _, _ in both], [h for _, h, _, _ in both],
                                threshold_pct, confidence, name,
                                first_stage=(measured.get("first_stage") or {}).get(name, need),
                                confirmation_pairs=(confirming or {}).get(name, 0),
                                round_ratios=by_rounds if None not in by_rounds else None,
                                confirm_confidence=confirm_confidence, ratios_from=ratios_from,
                                pair_errors=errs if None not in by_rounds and None not in errs else None))
    return rows, missing


def head_axis_args(head_axis: str | None, pytest_args: Sequence[str]) -> tuple[list[str], str]:
    """An A/B of one knob's value against its default at one revision (``--head-axis NAME=VALUE``):
    the head's own pytest arguments, and the text its entries' names have that the base's lack
    (``-NAME=VALUE``, which the matching removes)."""
    from numabench.cases import KNOB_DEFAULT, KNOBS, parse_knob

    if head_axis is None:
        return [], ""
    name, eq, value = head_axis.partition("=")
    if not eq or name not in KNOBS:
        raise UsageError(f"--head-axis {head_axis!r}: allowed NAME=VALUE with NAME a knob ({', '.join(KNOBS)})")
    value = parse_knob(name, value)
    if value == KNOB_DEFAULT:
        raise UsageError(f"--head-axis {head_axis!r}: the base runs {name} at auto already; give another value")
    if any(a.startswith(f"{name}=") or a.startswith(f"--numa-axis={name}=") for a in pytest_args):
        raise UsageError(f"--head-axis {name}: the pytest arguments select {name} too; leave it to --head-axis")
    return ["--numa-axis", f"{name}={value}"], f"-{name}={value}"


def in_session_names(pairs: int, max_pairs: int, confirm_pairs: int, passes: bool, same_cpus: bool,
                     rewarm: bool, round_target_pct: float) -> list[str]:
    """The settings a head's session is handed: further and confirming pairs where it takes them
    back to back (not in passes: those are passes of their own), with the confidence they read;
    the same CPUs, no rewarm and a pair's rounds to a target where asked for."""
    names = ["max_pairs", "target_resolution"] if max_pairs > pairs and not passes else []
    if confirm_pairs and not passes:
        names += ["confirm_pairs", "threshold"]
    if names:
        names.append("confidence")
    if same_cpus:
        names.append("same_cpus")
    if not rewarm:
        names.append("rewarm")
    if round_target_pct:
        names += ["round_target", "round_cap"]
    return names


def mem_total_gib() -> float | None:
    """This machine's MemTotal in GiB (None where /proc/meminfo has none)."""
    from numabench.machine.first_touch import GIB, read_meminfo

    try:
        total = read_meminfo().get("MemTotal")
    except OSError:
        return None
    return round(total / GIB, 2) if total else None


def run_ab(base: str, head: str | None, pytest_args: Sequence[str], *, pairs: int = DEFAULTS.pairs,
           threshold_pct: float = DEFAULTS.threshold, confidence: float = DEFAULTS.confidence,
           coarsest_pct: float = DEFAULTS.coarsest, base_env: dict[str, str] | None = None,
           head_env: dict[str, str] | None = None, cwd: Path | None = None,
           progress: Callable[[str], None] = lambda line: None, invoke_one: InvokeOne = invoke,
           build_side: Callable[[Side], str] = build, interleave: str = DEFAULTS.interleave,
           invoke_both: InvokeInterleaved | None = None, head_axis: str | None = None,
           session_json: Path | None = None, max_pairs: int = DEFAULTS.max_pairs,
           target_pct: float = DEFAULTS.target_resolution, confirm_pairs: int = 0, workers: str = DEFAULTS.workers,
           same_cpus: bool = False, passes: bool = False, time_budget_s: float | None = DEFAULTS.time_budget,
           confirm_confidence: float | None = DEFAULTS.confirm_confidence,
           rewarm: bool = DEFAULTS.rewarm, scope: str = DEFAULTS.scope,
           round_target_pct: float = DEFAULTS.round_target, round_cap: int = DEFAULTS.round_cap,
           focus_budget_s: float = DEFAULTS.focus_budget) -> ABResult:
    """A/B of revisions ``base`` and ``head`` (None: the working tree) of the git checkout at
    ``cwd``: each side built (``build_side``) in its own worktree, measured (``interleave``
    "rounds": one session of the head timing both, ``invoke_both``; "invocations": ABBA order of
    whole invocations, ``invoke_one`` runs one), judged per entry; the worktrees are removed
    whatever happens. ``head_axis`` (``NAME=VALUE``, a knob): the head runs with that value, the
    base at the knob's default, each head entry judged against the base entry of the same case
    without it (an A/B of a setting, e.g. BASE = HEAD's revision); its cases differ between the
    sides, so it runs whole invocations. ``max_pairs`` (rounds mode; 0: none): a worker run whose
    first ``pairs`` pairs are too spread for its entries to reach a resolution of ``target_pct``
    runs as many further pairs as that needs, up to ``max_pairs`` in all (Stein's two-stage rule,
    numabench.gate.pairs). ``confirm_pairs`` (rounds mode; 0: none): a worker run whose
    pairs judge an entry slower or faster runs that many fresh pairs more, and its entries are
    judged on all of them at ``confirm_confidence`` (default: half the error of ``confidence``,
    pair_rule.confirmed_confidence). ``workers`` (rounds mode): "forked" from one server per side
    (``--numa-forkserver``), or "exec" (each a fresh interpreter). ``same_cpus`` (rounds mode): each
    rank of a family that steps on few threads runs on as many CPUs, the same for both sides of a
    pair (``--numa-ab same_cpus=1``). ``passes`` (rounds mode): pair p of every worker run in a session
    of its own, pass p (numabench.ab.passes; further and confirming pairs passes too), instead
    of all of a worker run's pairs back to back in one session. ``time_budget_s`` (in passes): the
    further pairs are those that fit that many seconds of measuring, where they bring the most
    entries to ``target_pct`` per second (numabench.ab.budget; confirming pairs beyond it).
    ``rewarm`` (rounds mode): each timed round after an untimed step of its own side.
    ``round_target_pct`` (rounds mode; 0: off): each pair takes rounds until every entry's pair
    ratio is known to that standard error, at most ``round_cap`` x its family's rounds. ``scope``
    "diff": with the smoke tier selected, the families whose code differs between the sides run
    their ci slice (numabench.ab.scope); "given": the selection as it is. ``focus_budget_s`` (in
    passes, scope "diff", no ``time_budget_s``; 0: off): where some families' own code changed (not
    all families'), those families' worker runs take further pairs toward a resolution of
    ``threshold_pct`` within that many seconds of measuring (the time budget's rule, for them
    only). The settings'
    defaults are numabench.ab.settings.ABSettings'; those that numabench ab's command line decides
    from the others (confirming pairs, same CPUs, passes) are off here unless given.
    ``session_json``: where to keep
    the rounds mode's session (its pytest-benchmark JSON: both sides' medians and each run's costs,
    for time plans)."""
    bounds.check("pairs", pairs, f"--pairs {pairs}")
    bounds.check("confidence", confidence, f"--confidence {confidence}")
    confirm_confidence = confirm_confidence_of(confidence, confirm_confidence)
    if interleave not in INTERLEAVE:
        raise UsageError(f"--interleave {interleave}: allowed {', '.join(INTERLEAVE)}")
    if workers not in WORKERS:
        raise UsageError(f"--workers {workers}: allowed {', '.join(WORKERS)}")
    if scope not in SCOPES:
        raise UsageError(f"--scope {scope}: allowed {', '.join(SCOPES)}")
    if confirm_pairs and (confirm_pairs < 2 or interleave != "rounds" or head_axis):
        raise UsageError(f"--confirm-pairs {confirm_pairs}: allowed 0 (none) or a number >= 2, with "
                         "--interleave=rounds and without --head-axis (confirming pairs are per worker run of one "
                         "session)")
    if passes and (interleave != "rounds" or head_axis):
        raise UsageError("--passes runs the rounds mode's session once per pair: allowed with --interleave=rounds "
                         "and without --head-axis")
    if same_cpus and (interleave != "rounds" or head_axis):
        raise UsageError("--same-cpus binds both sides of a pair of the rounds mode's session: allowed with "
                         "--interleave=rounds and without --head-axis")
    if time_budget_s is not None and (not passes or not time_budget_s > 0):
        raise UsageError(f"--time-budget {time_budget_s:g} s: allowed a time > 0 with --passes (its further pairs "
                         "are passes that fit it)")
    if round_target_pct and (interleave != "rounds" or head_axis):
        raise UsageError(f"--round-target {round_target_pct:g}%: allowed with --interleave=rounds and without "
                         "--head-axis (a pair's rounds alternate between the sides there only)")
    if max_pairs and (max_pairs < pairs or interleave != "rounds" or head_axis):
        raise UsageError(f"--max-pairs {max_pairs}: allowed a number >= --pairs ({pairs}), with --interleave=rounds "
                         "and without --head-axis (further pairs are per worker run of one session)")
    taken = [a for a in pytest_args if a.split("=")[0] in ("--numa-repeats", SESSION_OPTION, "--benchmark-compare",
                                                           "--numa-forkserver")]
    if taken:
        raise UsageError(f"pytest argument {taken[0]}: numabench ab sets it (pairs: --pairs, --max-pairs, "
                         "--confirm-pairs; environments: --base-env, --head-env; workers: --workers); allowed the "
                         "selection and its options")
    head_args, head_suffix = head_axis_args(head_axis, pytest_args)
    if head_axis:
        interleave = "invocations"  # the sides run different cases: no round of one matches the other's
    if invoke_both is None:
        invoke_both = functools.partial(invoke_interleaved, progress=progress)
    repo = repo_root(cwd or Path.cwd())
    tmp = Path(tempfile.mkdtemp(prefix="numabench-ab-"))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    stopped_by: int | None = None
    try:
        with checkouts(repo, base, head, tmp) as (base_path, base_commit, head_path, head_commit):
            head_label = (head or WORKTREE) + (f" {' '.join(head_args)}" if head_args else "")
            sides = {"base": Side(base, base_commit, base_path, base_env or {}),
                     "head": Side(head_label, head_commit, head_path, head_env or {}, head_args)}
            tier = given_tier(pytest_args, DEFAULT_TIER)
            scoped: Scope | None = None
            if scope == "diff" and tier == "smoke":
                scoped = scope_of(changed_paths(repo, base_commit, head_commit), family_kernels())
                pytest_args = [*pytest_args, *scoped.pytest_args(tier)]
            scope_lines = scoped.lines(tier) if scoped is not None else [f"scope: the {tier} tier as given"]
            # the families whose own code changed take the further pairs that resolve their entries to the threshold
            focus = (sorted(scoped.families) if passes and interleave == "rounds" and time_budget_s is None
                     and focus_budget_s > 0 and scoped is not None and not scoped.whole else [])
            budget_s, budget_target, budget_coarsest = time_budget_s, target_pct, coarsest_pct
            if focus:
                budget_s, budget_target, budget_coarsest = focus_budget_s, threshold_pct, None
                scope_lines.append(f"focus: further pairs for {', '.join(focus)} toward a resolution of "
                                   f"{threshold_pct:g}%, within {focus_budget_s:.0f} s of measuring")
            for line in scope_lines:
                progress(line)
            timings: dict[str, float] = {}
            for label, side in sides.items():
                progress(f"building {label} ({side.label}) in {side.path}")
                started = time.monotonic()
                build_side(side)
                timings[f"build_{label}"] = time.monotonic() - started
            started = time.monotonic()
            mem_total_before = mem_total_gib()
            if interleave == "rounds":
                # what the head's session reads of the settings, the ones that differ from a session's own
                # (the base's checkout: invoke_interleaved; the pass's pair: invoke_in_passes)
                session_args = session_items(ABSettings(
                    max_pairs=max_pairs, target_resolution=target_pct, confidence=confidence,
                    confirm_pairs=confirm_pairs, threshold=threshold_pct, same_cpus=same_cpus, rewarm=rewarm,
                    round_target=round_target_pct, round_cap=round_cap),
                    in_session_names(pairs, max_pairs, confirm_pairs, passes, same_cpus, rewarm, round_target_pct))
                session_args += ["--numa-forkserver"] if workers == "forked" else []
                try:
                    if passes:
                        progress(f"{pairs} pairs, rounds alternating between base and head, in {pairs} passes: pass "
                                 "p a session of its own that times pair p of every worker run")
                        measured = invoke_in_passes(invoke_both, sides["base"], sides["head"],
                                                    [*pytest_args, *session_args], pairs, tmp, max_pairs=max_pairs,
                                                    target_pct=budget_target, confirm_pairs=confirm_pairs,
                                                    threshold_pct=threshold_pct, confidence=confidence,
                                                    time_budget_s=budget_s, coarsest_pct=budget_coarsest,
                                                    focus=focus, progress=progress)
                    else:
                        progress(f"{pairs} pairs, rounds alternating between base and head in one session")
                        measured = invoke_both(sides["base"], sides["head"], [*pytest_args, *session_args], pairs,
                                               tmp / "ab.json")
                except StoppedWithMeasurements as stop:  # judged below on what its finished runs measured
                    measured, stopped_by = stop.measured, stop.signum
                    progress(f"stopped ({signal.Signals(stopped_by).name}): judging the entries of the worker "
                             "runs that finished; the rest were not measured")
                if session_json is not None and (tmp / "ab.json").is_file():
                    shutil.copyfile(tmp / "ab.json", session_json)
            else:
                measured = measure(sides, pytest_args, pairs, tmp, invoke_one, progress)
            timings["measuring"] = time.monotonic() - started
            mem_total = (mem_total_before, mem_total_gib())
            timings["total"] = timings["build_base"] + timings["build_head"] + timings["measuring"]
            if head_suffix:  # the head's entries under the base's names (the knob removed)
                measured["head"] = [{n.replace(head_suffix, ""): v for n, v in m.items()} for m in measured["head"]]
        res = ABResult(sides["base"], sides["head"], pairs, threshold_pct, confidence,
                       coarsest_pct=coarsest_pct, selection=list(pytest_args), interleave=interleave, when=when,
                       timings_s={k: round(v, 1) for k, v in timings.items()})
        res.rows, res.missing = judge_measured(measured, threshold_pct, confidence, pairs,
                                               measured.get("confirming"), confirm_confidence)
        attach_cpus(res.rows, measured.get("cpus") or {})
        if max_pairs > pairs or budget_s is not None:
            res.max_pairs, res.target_pct = max_pairs, budget_target
        res.time_budget_s = budget_s
        res.focus = focus
        if interleave == "rounds":
            res.confirm_pairs, res.workers, res.same_cpus, res.passes = confirm_pairs, workers, same_cpus, passes
            res.confirm_confidence = confirm_confidence if confirm_pairs else None
            res.round_target_pct, res.round_cap = round_target_pct, round_cap if round_target_pct else 0
        res.stopped_by = stopped_by
        res.scope = scope_lines
        res.passes_done = measured.get("passes_done") if passes and interleave == "rounds" else None
        res.mem_total_gib = mem_total if None not in mem_total else None
        res.missing += measured.get("failed", [])
        for line in measured.get("failed", []):
            progress(f"not measured: {line}")
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
