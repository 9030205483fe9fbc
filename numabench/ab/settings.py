"""Every setting of a same-runner A/B, declared once: its name, default, help and how its text
is read. :class:`ABSettings` holds them; :func:`add_arguments` makes ``numabench ab``'s options
from them (and ``numabench plan``'s ``--ab-*`` ones, with a prefix); :func:`session_items`
hands the ones a head's session reads to that session whole, as one repeatable pytest option
(``--numa-ab KEY=VALUE``, read back by :func:`read_session`), so no setting has a second
spelling, default or help anywhere else.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from numabench.errors import UsageError
from numabench.gate.band import DEFAULT_COARSEST_PCT
from numabench import bounds
from numabench.bounds import MOST_PAIRS
from numabench.gate.rule import parse_pct
from numabench.numerals import decimal, integer

INTERLEAVE = ("rounds", "invocations")  # how base and head take turns (numabench.ab.run)
SCOPES = ("diff", "given")  # which families run which tier (numabench.ab.scope)
WORKERS = ("forked", "exec")  # rounds mode: workers forked from a server per side, or exec'd
SESSION_OPTION = "--numa-ab"  # the head's session's one A/B option: KEY=VALUE, repeatable




def _whole(option: str, least: int, allowed: str, zero: bool = False, most: int = MOST_PAIRS) -> Callable[[str], int]:
    """A whole number from ``least`` to ``most`` (or 0 where ``zero``: off) for ``option``."""
    def parse(text: str) -> int:
        try:
            value = integer(str(text))
        except ValueError:
            value = -1
        if not ((least <= value <= most) or (zero and value == 0)):
            raise UsageError(f"{option} {text}: allowed {allowed}")
        return value
    return parse


def _bounded(option: str, setting: str) -> Callable[[str], int]:
    """A whole number for ``option`` in the range numabench.bounds declares for ``setting``."""
    def parse(text: str) -> int:
        try:
            value = integer(str(text))
        except ValueError:
            value = -1
        return int(bounds.check(setting, value, f"{option} {text}"))
    return parse


def _bounded_pct(option: str, setting: str) -> Callable[[str], float]:
    """A percentage for ``option`` ('0.3%' or '0.3') in the range numabench.bounds declares for ``setting``."""
    def parse(text: str) -> float:
        try:
            value = parse_pct(str(text))
        except UsageError:
            value = -1.0
        return bounds.check(setting, value, f"{option} {text}")
    return parse


def _pct(option: str, example: str, positive: bool) -> Callable[[str], float]:
    """A resolution (``positive``: > 0) or a threshold for ``option``."""
    return _bounded_pct(option, "coarsest" if positive else "threshold")


def _fraction(option: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = decimal(str(text))
        except ValueError:
            value = -1.0
        return bounds.check("confidence", value, f"{option} {text}")
    return parse


def parse_duration_s(text: str, option: str) -> float:
    """'900', '900s', '15m' or '1h' -> seconds; UsageError naming ``option`` otherwise."""
    raw = str(text).strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(raw[-1:], None)
    try:
        value = float(raw[:-1] if scale else raw) * (scale or 1)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise UsageError(f"{option} {text}: allowed a time > 0 in seconds or with a unit: 900, 900s, 15m, 1h")
    return value


def _duration(option: str) -> Callable[[str], float]:
    return lambda text: parse_duration_s(text, option)


def _duration_or_off(option: str) -> Callable[[str], float]:
    """A duration as parse_duration_s reads it, or 0 (off)."""
    def parse(text: str) -> float:
        if re.fullmatch(r"0+(\.0*)?[smh]?", str(text).strip().lower()):
            return 0.0
        try:
            return parse_duration_s(text, option)
        except UsageError:
            raise UsageError(f"{option} {text}: allowed 0 (off) or a time > 0 in seconds or with a unit: 900, 900s, "
                             "15m, 1h") from None
    return parse


def _choice(option: str, allowed: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise UsageError(f"{option} {text}: allowed {', '.join(allowed)}")
        return text
    return parse


def _flag(option: str) -> Callable[[str], bool]:
    def parse(text: str) -> bool:
        value = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}.get(str(text).lower())
        if value is None:
            raise UsageError(f"{option} {text}: allowed 1 or 0")
        return value
    return parse


def _env_items(option: str) -> Callable[[Sequence[str]], tuple[tuple[str, str], ...]]:
    def parse(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
        env = {}
        for item in items or ():
            key, sep, value = str(item).partition("=")
            if not sep or not key:
                raise UsageError(f"{option} {item!r}: allowed NAME=VALUE")
            env[key] = value
        return tuple(env.items())
    return parse


@dataclass(frozen=True)
class Setting:
    """How one setting is given: its option's name (without ``--``), its help (the default is
    added from the field), how its text is read, and how its value is written back as text."""
    option: str
    help: str
    parse: Callable[[Any], Any]
    show: Callable[[Any], str] = str
    metavar: str | None = None
    choices: Sequence[str] | None = None
    flag: bool = False  # --NAME / --no-NAME
    repeat: bool = False  # NAME=VALUE, repeatable
    default_text: str | None = None  # the default in words, where it depends on other settings


def _setting(default: Any, option: str, help: str, parse: Callable[[Any], Any], **kw: Any) -> Any:
    return field(default=default, metadata={"setting": Setting(option, help, parse, **kw)})


def _show_pct(value: float) -> str:
    return f"{value:g}%"


@dataclass(frozen=True)
class ABSettings:
    """The settings of one A/B, each with its one default. ``None`` where the default depends on
    the others (:meth:`resolved` decides it)."""
    pairs: int = _setting(
        3, "pairs", "base/head pairs: fresh workers of both sides per pair; with --rejudge: judge each entry's "
        "first this many (default there: every pair it has)", _bounded("--pairs", "pairs"), metavar="N")
    max_pairs: int = _setting(
        0, "max-pairs", "rounds mode: a worker run whose first --pairs pairs are too spread for its entries to reach "
        "--target-resolution runs as many further pairs as that needs, up to M in all (Stein's two-stage rule; 0: "
        "none)", _whole("--max-pairs", 2, "0 (no further pairs) or a whole number >= --pairs and >= 2, at most 1000",
                        zero=True),
        metavar="M")
    target_resolution: float = _setting(
        3.0, "target-resolution", "with --max-pairs or --time-budget: the resolution a worker run's entries are to "
        "reach", _pct("--target-resolution", "3%", positive=True), show=_show_pct, metavar="PCT")
    time_budget: float | None = _setting(
        None, "time-budget", "in passes: after the first --pairs passes, further pairs (Stein's rule, up to "
        "--max-pairs where given) for the worker runs where they bring the most entries within --coarsest and "
        "--target-resolution per second, as long as the measuring fits DURATION (900, 900s, 15m, 1h); confirming "
        "pairs come after it", _duration("--time-budget"), show=lambda v: f"{v:g}", metavar="DURATION",
        default_text="none")
    focus_budget: float = _setting(
        540.0, "focus-budget", "in passes, with --scope diff and the smoke tier, where some families' own code "
        "changed (not code every family runs): those families' worker runs only take as many pairs again (a first "
        "stage of twice --pairs), then further pairs (Stein's rule) where they bring the most of their entries to "
        "a resolution of --threshold per second, as long as the "
        "measuring, the first passes included, fits DURATION; confirming pairs come after it; 0: none; "
        "--time-budget, where given, decides instead. Why: the host-side families' pairs spread 1-25%, so 3 pairs "
        "leave a 3% change unresolved (docs/GATE.md)", _duration_or_off("--focus-budget"), show=lambda v: f"{v:g}",
        metavar="DURATION")
    confirm_pairs: int | None = _setting(
        None, "confirm-pairs", "rounds mode: a worker run whose pairs judge an entry slower or faster runs N further "
        "pairs of fresh workers, and its entries are judged on all of them (0: none)",
        _whole("--confirm-pairs", 2, "0 (no confirming pairs) or a whole number from 2 to 1000", zero=True), metavar="N",
        default_text="as many as --pairs in the rounds mode, else 0")
    workers: str = _setting(
        "forked", "workers", "rounds mode: each side's workers forked from a server that imported the side's code "
        "once (forked), or each started as a fresh interpreter (exec)", _choice("--workers", WORKERS),
        choices=WORKERS)
    same_cpus: bool | None = _setting(
        None, "same-cpus", "rounds mode: each rank of a family whose step runs on few threads (pinned_alloc, "
        "transfer, touch) runs on that many CPUs, the same ones for both sides of a pair and others for the next; "
        "--no-same-cpus: wherever the OS puts each fresh worker", _flag("--same-cpus"), flag=True,
        show=lambda v: str(int(v)), default_text="on in the rounds mode without --head-axis")
    passes: bool | None = _setting(
        None, "passes", "rounds mode: pair p of every worker run in a pytest session of its own, pass p (further "
        "and confirming pairs passes too), so that an entry's pairs lie a pass apart and their spread counts what "
        "moves from minute to minute; --no-passes: all pairs of a worker run back to back in one session (one "
        "session's start instead of one per pass)", _flag("--passes"), flag=True, show=lambda v: str(int(v)),
        default_text="on in the rounds mode without --head-axis")
    rewarm: bool = _setting(
        True, "rewarm", "rounds mode: each timed round right after an untimed step of the same variant on the same "
        "workers, which starts it from the state its own side left (its arrays in the cache) at twice the steps; "
        "--no-rewarm: each round straight after the other side's", _flag("--rewarm"), flag=True,
        show=lambda v: str(int(v)))
    interleave: str = _setting(
        "rounds", "interleave", "rounds: sessions of the head (one a pass, --passes), every case timed by both "
        "sides' workers, rounds alternating; invocations: whole pytest invocations of each side in ABBA order "
        "(each side's own harness too: for changes to the worker contract)", _choice("--interleave", INTERLEAVE),
        choices=INTERLEAVE)
    scope: str = _setting(
        "diff", "scope", "diff: with the smoke tier selected, the families whose own code differs between BASE and "
        "HEAD (their folder, benchmark module, the csrc/ sources of their kernels) run their ci slice, and every "
        "family does where code they all run changed; the selection and why are printed first and kept in the "
        "summary; given: the tier the pytest arguments select, for every family", _choice("--scope", SCOPES),
        choices=SCOPES)
    threshold: float = _setting(
        1.0, "threshold", "smallest ratio that counts: an entry is slower or faster only when its whole interval "
        "lies beyond it", _pct("--threshold", "1%", positive=False), show=_show_pct, metavar="PCT")
    confidence: float = _setting(
        0.95, "confidence", "of the t-interval on log ratios", _fraction("--confidence"), show=lambda v: f"{v:g}",
        metavar="C")
    confirm_confidence: float | None = _setting(
        None, "confirm-confidence", "of the interval of an entry whose worker run took confirming pairs, judged on "
        "all its pairs, its first ones chosen because they looked changed among them",
        _fraction("--confirm-confidence"), show=lambda v: f"{v:g}", metavar="C",
        default_text="half the error of --confidence, 0.975 at 0.95")
    coarsest: float = _setting(
        DEFAULT_COARSEST_PCT, "coarsest", "with --time-budget: a resolution (the interval's relative half-width) that "
        "further pairs bring entries within as well as --target-resolution, the entries farthest from any verdict "
        "first (the verdict itself is the threshold's: same only within it)", _pct("--coarsest", "10%", positive=True),
        show=_show_pct,
        metavar="PCT")
    round_target: float = _setting(
        0.0, "round-target", "rounds mode: each pair takes rounds beyond its family's until every entry's pair ratio "
        "is known to PCT (the standard error of the median of its ABBA quads' ratios, read from their spread), "
        "at most --round-cap times the family's rounds: where an entry's pairs spread by round-to-round noise "
        "(numabench.tools.ab_noise), rounds go where the rounds differ (0: the family's rounds only)",
        _bounded_pct("--round-target", "round_target"), show=_show_pct, metavar="PCT")
    round_cap: int = _setting(
        4, "round-cap", "with --round-target: a pair's rounds at most N times its family's",
        _bounded("--round-cap", "round_cap"), metavar="N")
    base_env: tuple[tuple[str, str], ...] = _setting(
        (), "base-env", "a variable for the base's workers only (repeatable)", _env_items("--base-env"),
        metavar="NAME=VALUE", repeat=True, default_text="none")
    head_env: tuple[tuple[str, str], ...] = _setting(
        (), "head-env", "a variable for the head's workers only (repeatable)", _env_items("--head-env"),
        metavar="NAME=VALUE", repeat=True, default_text="none")

    def resolved(self, head_axis: bool = False) -> ABSettings:
        """The defaults that depend on the others decided: confirming pairs as many as --pairs,
        the same CPUs and passes on, all in the rounds mode without --head-axis (else none, off)."""
        rounds = self.interleave == "rounds" and not head_axis
        return dataclasses.replace(
            self, confirm_pairs=(self.pairs if rounds else 0) if self.confirm_pairs is None else self.confirm_pairs,
            same_cpus=rounds if self.same_cpus is None else self.same_cpus,
            passes=rounds if self.passes is None else self.passes)


DEFAULTS = ABSettings()
SETTINGS: dict[str, Setting] = {f.name: f.metadata["setting"] for f in dataclasses.fields(ABSettings)}


def _help(name: str) -> str:
    s = SETTINGS[name]
    default = s.default_text or s.show(getattr(DEFAULTS, name))
    if s.flag and s.default_text is None:
        default = "on" if getattr(DEFAULTS, name) else "off"
    return f"{s.help} (default {default})".replace("%", "%%")


def add_arguments(parser: argparse.ArgumentParser | Any, names: Sequence[str] | None = None,
                  prefix: str = "") -> None:
    """``--PREFIXNAME`` options for the settings ``names`` (default: all), each with its help and
    its default from ABSettings; every value is left as given (None: not given) for
    :func:`from_namespace` to read."""
    for name in names or SETTINGS:
        s = SETTINGS[name]
        option = f"--{prefix}{s.option}"
        dest = f"{prefix}{name}".replace("-", "_")
        if s.flag:
            parser.add_argument(option, dest=dest, action=argparse.BooleanOptionalAction, default=None,
                                help=_help(name))
        elif s.repeat:
            parser.add_argument(option, dest=dest, action="append", default=None, metavar=s.metavar, help=_help(name))
        else:
            parser.add_argument(option, dest=dest, default=None, metavar=s.metavar, choices=s.choices,
                                help=_help(name))


def from_namespace(ns: argparse.Namespace, names: Sequence[str] | None = None, prefix: str = "") -> ABSettings:
    """The settings as given on a command line (add_arguments' options), the rest at their defaults;
    UsageError naming the option of a bad value."""
    given: dict[str, Any] = {}
    for name in names or SETTINGS:
        value = getattr(ns, f"{prefix}{name}".replace("-", "_"), None)
        if value is None:
            continue
        s = SETTINGS[name]
        given[name] = value if s.flag else s.parse(value)
    return dataclasses.replace(DEFAULTS, **given)


def confirm_pairs(ns: argparse.Namespace) -> int:
    """numabench ab's confirming pairs as its command line decides them (ABSettings.resolved)."""
    return from_namespace(ns).resolved(bool(getattr(ns, "head_axis", None))).confirm_pairs


def same_cpus(ns: argparse.Namespace) -> bool:
    """numabench ab's --same-cpus as its command line decides it. Without it a side's fresh workers
    land on CPUs of their own (near their fork server), and a family that steps on one or two
    threads reads the CPUs' difference as the sides' (an A/A on H200 x1 judged pinned_alloc
    faster at 0.80 that way)."""
    return from_namespace(ns).resolved(bool(getattr(ns, "head_axis", None))).same_cpus


def passes(ns: argparse.Namespace) -> bool:
    """numabench ab's --passes as its command line decides it. Pairs of one worker run taken back
    to back share the minute they ran in: on the lent GPU VMs an entry whose step allocates moved
    by a few percent from minute to minute, fresh workers and fork servers alike, and an A/A on
    H200 x1 judged cpu_adam's torch-foreach slower at 1.042 on 6 such pairs (docs/GATE.md)."""
    settings = from_namespace(ns)
    if settings.passes and (settings.interleave != "rounds" or getattr(ns, "head_axis", None)):
        raise UsageError("--passes runs the rounds mode's session once per pair: allowed with "
                         "--interleave=rounds and without --head-axis")
    return settings.resolved(bool(getattr(ns, "head_axis", None))).passes


# what a head's session reads of the settings (the rest is numabench ab's own)
SESSION_SETTINGS = ("max_pairs", "target_resolution", "confidence", "confirm_pairs", "threshold", "same_cpus",
                    "rewarm", "round_target", "round_cap", "base_env", "head_env")


@dataclass(frozen=True)
class ABSession:
    """What one session of the head reads (fixtures/ab_sides.py): the base's checkout, which of the
    A/B's pairs its first one is, the worker runs it is to time (None: every selected one), and
    the settings it acts on (SESSION_SETTINGS; confirming pairs none unless given)."""
    base: Path
    settings: ABSettings = DEFAULTS
    first_pair: int = 0
    runs_of: Path | None = None


def session_items(settings: ABSettings, names: Sequence[str] = SESSION_SETTINGS, *, base: Path | None = None,
                  first_pair: int | None = None, runs_of: Path | None = None) -> list[str]:
    """A head's session's ``--numa-ab`` arguments for the settings ``names`` (and, where given, the
    base's checkout, the session's first pair, the list of worker runs to time)."""
    items = [] if base is None else [f"base={base}"]
    for name in names:
        value = getattr(settings, name)
        if value is None:
            continue
        s = SETTINGS[name]
        if s.repeat:
            items += [f"{name}={k}={v}" for k, v in value]
        else:
            items.append(f"{name}={s.show(value)}")
    if first_pair is not None:
        items.append(f"pair={first_pair}")
    if runs_of is not None:
        items.append(f"runs_of={runs_of}")
    return [f"{SESSION_OPTION}={item}" for item in items]


def _item(key: str, value: Any, parse: Callable[[Any], Any]) -> Any:
    """``parse(value)``, its UsageError naming the session's item instead of numabench ab's option."""
    try:
        return parse(value)
    except UsageError as e:
        allowed = str(e).partition(": allowed ")[2]
        shown = ", ".join(f"{key}={v}" for v in value) if isinstance(value, list) else f"{key}={value}"
        raise UsageError(f"{SESSION_OPTION} {shown}: allowed {allowed}") from None


def read_session(items: Sequence[str]) -> ABSession | None:
    """``--numa-ab`` items (KEY=VALUE) as the session they describe; None where none was given.
    UsageError naming the item: an unknown key, a bad value, or no base."""
    if not items:
        return None
    given: dict[str, Any] = {}
    repeated: dict[str, list[str]] = {}
    base = runs_of = None
    first_pair = 0
    keys = ("base", "pair", "runs_of", *SESSION_SETTINGS)
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or key not in keys:
            raise UsageError(f"{SESSION_OPTION} {item!r}: allowed KEY=VALUE with KEY one of {', '.join(keys)}")
        if key == "base":
            base = Path(value)
        elif key == "runs_of":
            runs_of = Path(value)
        elif key == "pair":
            first_pair = _item(key, value, _whole("pair", 0, "a whole number >= 0"))
        elif SETTINGS[key].repeat:
            repeated.setdefault(key, []).append(value)
        else:
            given[key] = _item(key, value, SETTINGS[key].parse)
    for key, values in repeated.items():
        given[key] = _item(key, values, SETTINGS[key].parse)
    if base is None:
        raise UsageError(f"{SESSION_OPTION}: allowed with base=CHECKOUT (the numabench checkout whose workers are "
                         "the base)")
    settings = dataclasses.replace(DEFAULTS, **{"confirm_pairs": 0, **given})
    return ABSession(base, settings, first_pair, runs_of)
