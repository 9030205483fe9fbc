"""Every A/B setting is declared once (numabench/ab/settings.py): numabench ab's options and the
head's session's one option are made from it, no function of the A/B restates a default as a
literal, no help text is written twice, the CI scripts pass numabench ab's options through one
variable, and the twelve --numa-ab-* options it replaced are gone from the product."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.ab import settings
from numabench.ab.settings import DEFAULTS, SETTINGS, read_session, session_items
from numabench.cli import build_parser
from numabench.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = [*sorted((ROOT / "numabench").rglob("*.py")), *sorted((ROOT / "fixtures").glob("*.py")),
           ROOT / "conftest.py"]
CI = sorted(p for p in (ROOT / ".ci").rglob("*") if p.is_file() and p.suffix in ("", ".sh", ".yml"))
# a setting's name in the library's signatures (run_ab, invoke_in_passes, the plan, rejudge, ...)
LIBRARY_NAMES = {"pairs": "pairs", "max_pairs": "max_pairs", "target_pct": "target_resolution",
                 "threshold_pct": "threshold", "confidence": "confidence", "coarsest_pct": "coarsest",
                 "workers": "workers", "interleave": "interleave", "rewarm": "rewarm",
                 "time_budget_s": "time_budget", "confirm_confidence": "confirm_confidence",
                 "focus_budget_s": "focus_budget"}
AB_CODE = [p for p in PRODUCT if "ab" in p.relative_to(ROOT).parts or p.name in ("cli.py", "ab_sides.py",
                                                                                  "running.py", "pairs.py")]


def _literal_defaults(path: Path) -> list[str]:
    """Parameters named after a setting whose default is a literal (not the declared one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        named = [*zip(args.args[len(args.args) - len(args.defaults):], args.defaults),
                 *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)]
        for arg, default in named:
            if arg.arg in LIBRARY_NAMES and isinstance(default, ast.Constant) and default.value is not None:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({arg.arg}={default.value!r})")
    return found


def test_no_function_of_the_ab_restates_a_setting_s_default():
    restated = [hit for path in AB_CODE for hit in _literal_defaults(path)]
    assert restated == [], "defaults written again instead of numabench.ab.settings.DEFAULTS: " + "; ".join(restated)


def test_the_check_finds_a_restated_default(tmp_path):
    sample = tmp_path / "ab" / "x.py"
    sample.parent.mkdir()
    sample.write_text("def run(a, *, pairs=5, confidence=DEFAULTS.confidence):\n    pass\n")
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert _literal_defaults(sample) == ["ab/x.py:1 run(pairs=5)"]
    finally:
        ROOT = root


def test_numabench_ab_s_options_are_the_settings_with_their_declared_defaults():
    ab = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "ab")[1]
    options = {o: a for a in ab._actions for o in a.option_strings}
    for name, s in SETTINGS.items():
        action = options[f"--{s.option}"]
        assert action.default is None and s.help.replace("%", "%%") in action.help, name
        shown = s.default_text or (("on" if getattr(DEFAULTS, name) else "off") if s.flag
                                   else s.show(getattr(DEFAULTS, name)))
        assert f"(default {shown})".replace("%", "%%") in action.help, name


def test_each_help_text_is_written_once():
    """The first words of each setting's help stand nowhere else in the product."""
    texts = {p: p.read_text() for p in PRODUCT if p.name != "settings.py"}
    for name, s in SETTINGS.items():
        words = s.help[:50]
        again = [str(p.relative_to(ROOT)) for p, text in texts.items() if words in text.replace("\n", " ")]
        assert again == [], f"{name}'s help again in {again}"


def test_the_session_option_replaced_the_mirror():
    mirror = re.compile(r"--numa-ab-[a-z]")
    named = [str(p.relative_to(ROOT)) for p in [*PRODUCT, *CI] if mirror.search(p.read_text())]
    assert named == []


def test_ci_passes_numabench_ab_s_options_through_one_variable():
    names = set()
    for path in CI:
        code = "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))
        names |= set(re.findall(r"NUMABENCH_AB_[A-Z_]+", code))
    assert names == {"NUMABENCH_AB_BASE", "NUMABENCH_AB_ARGS", "NUMABENCH_AB_TIER"}, names
    job = (ROOT / ".ci" / "gate-job").read_text()
    ab_step = job[job.index("    ab)\n"):]
    code = "\n".join(ln for ln in ab_step.splitlines() if not ln.lstrip().startswith("#"))
    assert not re.search(r"--(pairs|threshold|interleave|workers|max-pairs|time-budget|confirm-pairs)\b", code)


def test_the_session_items_read_back_as_the_settings_they_came_from():
    given = settings.ABSettings(max_pairs=8, target_resolution=2.0, confidence=0.9, confirm_pairs=3, threshold=1.5,
                                same_cpus=True, rewarm=False, base_env=(("A", "1=2"),), head_env=(("B", ""),))
    items = session_items(given, base=Path("/x/base"), first_pair=4, runs_of=Path("/x/runs.txt"))
    session = read_session([i.split("=", 1)[1] for i in items])
    assert session.base == Path("/x/base") and session.first_pair == 4 and session.runs_of == Path("/x/runs.txt")
    for name in settings.SESSION_SETTINGS:
        assert getattr(session.settings, name) == getattr(given, name), name


@pytest.mark.parametrize("items, message", [
    (["max_pairs=3"], "--numa-ab: allowed with base=CHECKOUT"),
    (["base=/x", "pairs=3"], "--numa-ab 'pairs=3': allowed KEY=VALUE with KEY one of base, pair, runs_of"),
    (["base=/x", "confirm_pairs=1"], "--numa-ab confirm_pairs=1: allowed 0 (no confirming pairs) or a whole"),
    (["base=/x", "threshold=abc"], "--numa-ab threshold=abc: allowed a number from 0% to 100%"),
    (["base=/x", "rewarm=maybe"], "--numa-ab rewarm=maybe: allowed 1 or 0"),
    (["base=/x", "base_env=X"], "--numa-ab base_env=X: allowed NAME=VALUE"),
])
def test_a_bad_session_item_names_itself(items, message):
    with pytest.raises(UsageError) as e:
        read_session(items)
    assert str(e.value).startswith(message), str(e.value)


def test_the_cli_and_the_plan_take_the_declared_defaults():
    ns = build_parser().parse_args(["ab", "HEAD"])
    resolved = settings.from_namespace(ns).resolved()
    assert (resolved.pairs, resolved.confirm_pairs, resolved.passes, resolved.same_cpus) == (DEFAULTS.pairs,
                                                                                             DEFAULTS.pairs, True, True)
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert "--ab-max-pairs" in out.stdout and "--no-ab-rewarm" in out.stdout, out.stdout + out.stderr
