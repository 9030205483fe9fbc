"""The A/B gate's judging on synthetic pairs (deterministic: no timing): each entry's ratio,
t-interval and resolution, `unresolved` where the interval is too wide to say anything,
the exit code, the formats (text, Markdown, GitHub annotations, JSON and back), and why the
interval is Student's t on the log ratios rather than a percentile bootstrap."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.gate.rule import FASTER, SAME, SLOWER
from numabench.ab.run import ABResult, Side, bootstrap_interval, judge_pairs
from numabench.ab.formats import SCHEMA, from_json, render_as, render_github, render_markdown, render_text, \
    by_concern, sorted_rows, to_json
from numabench.gate.pairs import UNRESOLVED, judge, pairs_to_resolve, t_interval, t_quantile

ROOT = Path(__file__).resolve().parents[1]


def pairs_of(ratios: list[float], base: float = 0.010) -> tuple[list[float], list[float]]:
    """Base medians around ``base`` seconds and head medians at ``ratios`` of them."""
    bases = [base * (1 + 0.01 * i) for i in range(len(ratios))]
    return bases, [b * r for b, r in zip(bases, ratios)]


def test_t_quantiles_are_students():
    # the two-sided 95% values every table prints
    for df, t in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (10, 2.2281), (30, 2.0423)):
        assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-4), df
    assert t_quantile(0.95, 3) == pytest.approx(2.3534, abs=1e-4)
    assert t_quantile(0.025, 3) == pytest.approx(-3.1824, abs=1e-4)


def test_the_interval_and_resolution_are_the_t_interval_on_log_ratios():
    ratios = [1.050, 1.060, 1.055]
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 2)
    half = 4.302653 * sd / math.sqrt(3)
    low, high, h = t_interval(ratios, 0.95)
    assert (low, high, h) == pytest.approx((math.exp(mean - half), math.exp(mean + half), half), rel=1e-5)
    j = judge(*pairs_of(ratios), threshold_pct=1.0, confidence=0.95)
    assert j.ratio == pytest.approx(math.exp(mean)) and j.pairs == 3
    assert j.resolution_pct == pytest.approx(math.expm1(half) * 100, rel=1e-5)
    assert j.verdict == SLOWER  # 1.043-1.067 lies wholly above 1.01


@pytest.mark.parametrize("ratios, verdict", [
    ([1.050, 1.060, 1.055], SLOWER),    # the whole interval above 1.01
    ([0.950, 0.940, 0.945], FASTER),    # the whole interval below 1/1.01
    ([1.002, 0.998, 1.001], SAME),      # 0.995-1.006: wholly within 1% of 1, no change of 1% is there
    ([1.000, 1.150, 0.900], UNRESOLVED),  # resolution ~36%: too wide to say anything
    ([1.050, 1.060], UNRESOLVED),       # 2 pairs of 1.05-1.06: t(1 df) = 12.7 makes it 0.993-1.120
    ([1.02, 1.035, 1.03], UNRESOLVED),  # 1.009-1.047: not within 1% of 1, not wholly beyond it
    ([1.3, 1.5, 1.4], SLOWER),          # wide (~29%) but wholly above the threshold: it says slower
])
def test_verdicts(ratios, verdict):
    j = judge(*pairs_of(ratios), threshold_pct=1.0, confidence=0.95)
    assert j.verdict == verdict, j


def test_fewer_than_two_pairs_is_unresolved_never_same():
    j = judge([0.01], [0.01], threshold_pct=1.0, confidence=0.95)
    assert j.verdict == UNRESOLVED and j.resolution_pct is None and j.pairs == 1
    # identical pairs resolve everything: a zero-width interval at 1 is `same`
    assert judge([0.01, 0.01], [0.01, 0.01], 1.0, 0.95).verdict == SAME


def test_same_only_where_the_whole_interval_lies_within_the_threshold_band():
    """An equivalence test: a 3% resolution around 1.00 does not rule out a 1% change, so it is
    unresolved (no lean: the interval holds 1); 1.028 [1.009-1.047] excludes 1 but not the band,
    so it is unresolved and leans slower, with the pairs that would resolve it; at a 5% threshold
    both lie wholly within the band: same."""
    wide = judge(*pairs_of([1.00, 1.03, 0.98, 1.01]), threshold_pct=1.0, confidence=0.95)
    assert 2.0 < wide.resolution_pct < 4.0 and wide.low < 1 < wide.high
    assert (wide.verdict, wide.leans) == (UNRESOLVED, None)
    leaning = judge(*pairs_of([1.02, 1.035, 1.03]), threshold_pct=1.0, confidence=0.95)
    assert (leaning.verdict, leaning.leans) == (UNRESOLVED, SLOWER) and 1 < leaning.low < 1.01 < leaning.high
    assert pairs_to_resolve([1.02, 1.035, 1.03], 1.0, 0.95) == 4
    faster = judge(*pairs_of([0.98, 0.965, 0.97]), threshold_pct=1.0, confidence=0.95)
    assert (faster.verdict, faster.leans) == (UNRESOLVED, FASTER)
    for ratios in ([1.00, 1.03, 0.98, 1.01], [1.02, 1.035, 1.03]):
        assert judge(*pairs_of(ratios), threshold_pct=5.0, confidence=0.95).verdict == SAME
    # a mean on the band's edge: no number of pairs resolves it
    assert pairs_to_resolve([1.0, 1.02], 1.0, 0.95) is None


def test_bad_medians_are_refused_naming_them():
    with pytest.raises(ValueError, match="median 0"):
        judge([0.01, 0], [0.01, 0.01], 1.0, 0.95)
    with pytest.raises(ValueError, match="2 base and 3 head"):
        judge([0.01, 0.01], [0.01, 0.01, 0.01], 1.0, 0.95)


def test_with_few_pairs_the_t_interval_covers_as_claimed_and_the_bootstrap_does_not():
    """A/A on synthetic pairs: the true ratio is 1, each pair's log ratio N(0, 1%). A 95%
    interval should miss 1 in ~5% of runs; with 3 pairs the percentile bootstrap of the mean
    misses it in about a quarter, the t-interval in ~5% (fixed seed: the same every run)."""
    rng = random.Random(38)
    trials, n = 600, 3
    miss_t = miss_boot = 0
    for i in range(trials):
        ratios = [math.exp(rng.gauss(0.0, 0.01)) for _ in range(n)]
        low, high, _ = t_interval(ratios, 0.95)
        miss_t += not low <= 1 <= high
        blow, bhigh = bootstrap_interval(ratios, 0.95, resamples=400, seed=i)
        miss_boot += not blow <= 1 <= bhigh
    assert 0.02 <= miss_t / trials <= 0.08, miss_t
    assert miss_boot / trials >= 0.15, miss_boot


def result(entries: dict[str, list[float]], pairs: int = 3, coarsest: float = 10.0) -> ABResult:
    res = ABResult(Side("main", "a" * 40, Path("/base"), {}), Side("HEAD", "b" * 40, Path("/head"),
                                                                    {"NUMABENCH_INJECT_SLOWDOWN": "1.05"}),
                   pairs, 1.0, 0.95, coarsest_pct=coarsest, selection=["benchmarks", "--numa-tier=smoke"],
                   hardware_key="H100x1_test")
    for name, ratios in entries.items():
        res.rows.append(judge_pairs(name, *pairs_of(ratios), 1.0, 0.95, f"benchmarks/x.py::{name}"))
    return res


ENTRIES = {
    "test_same[a]": [1.002, 0.998, 1.001],
    "test_slow[b]": [1.050, 1.060, 1.055],
    "test_wide[c]": [1.000, 1.150, 0.900],
    "test_fast[d]": [0.950, 0.940, 0.945],
    "test_slower_still[e]": [1.20, 1.21, 1.19],
    "test_leans[f]": [1.02, 1.035, 1.03],
}


def test_exit_code_is_1_only_on_a_slower_entry():
    assert result(ENTRIES).exit_code == 1
    calm = {k: v for k, v in ENTRIES.items() if k not in ("test_slow[b]", "test_slower_still[e]")}
    res = result(calm)  # an entry leaning slower fails nothing: it is not shown to be slower
    assert {r.verdict for r in res.rows} == {SAME, UNRESOLVED, FASTER} and res.exit_code == 0


def test_entries_are_sorted_slowest_first_and_read_slower_then_leaning_first():
    res = result(ENTRIES)
    assert [r.name for r in sorted_rows(res)] == ["test_slower_still[e]", "test_slow[b]", "test_leans[f]",
                                                  "test_wide[c]", "test_same[a]", "test_fast[d]"]
    # the tables: the slower entries, then those leaning slower, faster ones, the rest unresolved, the same
    assert [r.name for r in by_concern(res)] == ["test_slower_still[e]", "test_slow[b]", "test_leans[f]",
                                                 "test_fast[d]", "test_wide[c]", "test_same[a]"]
    text = render_text(res)
    body = [ln.split()[0] for ln in text.splitlines() if ln.startswith("test_")]
    assert body == [r.name for r in by_concern(res)]


def test_text_leads_with_what_changed_and_names_unresolved():
    text = render_text(result(ENTRIES))
    first = text.splitlines()[0]
    assert first.startswith("numabench A/B: REGRESSION: 2 of 6 entries slower") and first.endswith("exit 1"), first
    assert "6 entries: 2 slower, 1 faster, 1 same, 2 unresolved, 1 of them leaning slower" in text
    assert "WARNING: 2 entries unresolved (their intervals neither within nor beyond 1%): NOT JUDGED" in text
    wide = next(ln for ln in text.splitlines() if ln.startswith("test_wide[c]"))
    assert UNRESOLVED in wide and "-" not in wide.split()[3]  # its resolution is printed
    leans = next(ln for ln in text.splitlines() if ln.startswith("test_leans[f]"))
    assert "unresolved, leans slower" in leans
    last = text.splitlines()[-1]  # right after the REGRESSION line
    assert last == ("LEANS SLOWER: test_leans[f] 1.0283 [1.0095-1.0475] on 3 pairs: about 4 pairs would resolve it "
                    "(numabench ab --pairs 4)"), last
    assert text.splitlines()[-2].startswith("REGRESSION: 2 entries slower")


def test_markdown_is_a_job_summary():
    md = render_markdown(result(ENTRIES))
    lines = md.splitlines()
    assert lines[0] == "### numabench A/B: **2 slower** (6 entries)"
    assert "> [!WARNING]" in md and "`test_wide[c]`" in md
    tables = [i for i, ln in enumerate(lines) if ln.startswith("| benchmark |")]
    assert len(tables) == 2  # what changed, then every entry (collapsed)
    changed = [ln.split(" | ")[0][2:] for ln in lines[tables[0] + 2:] if ln.startswith("| test_")][:5]
    assert changed == ["test_slower_still[e]", "test_slow[b]", "test_leans[f]", "test_fast[d]", "test_wide[c]"]
    assert "<details><summary>all 6 entries, slowest first</summary>" in md
    assert "- LEANS SLOWER: test_leans[f] 1.0283 [1.0095-1.0475]" in md
    calm = render_markdown(result({"test_same[a]": [1.002, 0.998, 1.001]}))
    assert "**no regression**" in calm and "Every entry is the same within its interval." in calm


def test_github_annotations():
    out = render_github(result(ENTRIES)).splitlines()
    errors = [ln for ln in out if ln.startswith("::error ")]
    assert [ln.split("::")[1] for ln in errors] == ["error title=numabench A/B slower test_slower_still[e]",
                                                    "error title=numabench A/B slower test_slow[b]"]
    assert "%25" in out[-1] or "%" not in out[-1].split("::", 2)[2]  # data escaped
    lean, warn = [ln for ln in out if ln.startswith("::warning ")]
    assert lean.startswith("::warning title=numabench A/B leans slower test_leans[f]::LEANS SLOWER")
    assert "test_wide[c]" in warn and "unresolved" in warn
    assert out[-1].startswith("::notice title=numabench A/B::numabench A/B: REGRESSION")


def test_json_round_trips_and_holds_the_run():
    res = result(ENTRIES)
    data = json.loads(render_as(res, "json"))
    assert data["schema"] == SCHEMA and data["exit_code"] == 1 and data["pairs"] == 3
    assert data["base"] == {"label": "main", "commit": "a" * 40, "env": {}}
    assert data["head"]["env"] == {"NUMABENCH_INJECT_SLOWDOWN": "1.05"}
    assert data["selection"] == ["benchmarks", "--numa-tier=smoke"] and data["hardware_key"] == "H100x1_test"
    assert (data["threshold_pct"], data["confidence"], data["coarsest_pct"]) == (1.0, 0.95, 10.0)
    assert data["counts"] == {SLOWER: 2, FASTER: 1, SAME: 1, UNRESOLVED: 2}
    leans = next(e for e in data["entries"] if e["name"] == "test_leans[f]")
    assert (leans["verdict"], leans["leans"], leans["pairs_to_resolve"]) == (UNRESOLVED, SLOWER, 4)
    first = data["entries"][0]
    assert first["name"] == "test_slower_still[e]" and first["fullname"] == "benchmarks/x.py::test_slower_still[e]"
    assert first["pair_ratios"] == pytest.approx([1.20, 1.21, 1.19]) and len(first["base_medians_s"]) == 3
    assert first["interval"][0] < first["ratio"] < first["interval"][1] and first["resolution_pct"] > 0
    back = from_json(data)
    assert to_json(back) == data
    assert render_text(back) == render_text(res)
    assert data["timings_s"] == {} and "took" not in render_text(res)  # a run without them (saved before)
    res.timings_s = {"build_base": 4.2, "build_head": 190.0, "measuring": 300.4, "total": 494.6}
    timed = json.loads(render_as(res, "json"))
    assert from_json(timed).timings_s == res.timings_s
    assert "took 495 s: builds 4 s (base) + 190 s (head), measuring 300 s" in render_text(from_json(timed))
    with pytest.raises(ValueError, match="timings_s"):
        from_json({**timed, "timings_s": {"total": 1.0}})
    with pytest.raises(ValueError, match="schema"):
        from_json({"schema": "other"})
    with pytest.raises(ValueError, match=r"^the A/B JSON: entries\[0\] \(x\) verdict is missing: required \(and 5 more"):
        from_json({**data, "entries": [{"name": "x"}]})


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "numabench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_ab_show_renders_a_saved_run_with_its_exit_code(tmp_path):
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(to_json(result(ENTRIES))))
    out = _cli("ab", "--show", str(path), "--format", "markdown")
    assert out.returncode == 1 and out.stdout == render_markdown(result(ENTRIES)), out.stderr
    calm = tmp_path / "calm.json"
    calm.write_text(json.dumps(to_json(result({"test_same[a]": [1.002, 0.998, 1.001]}))))
    out = _cli("ab", "--show", str(calm))
    assert out.returncode == 0 and out.stdout.startswith("numabench A/B: no regression in 1 entries")


@pytest.mark.parametrize("args, message", [
    (["--interleave=invocations"], "--session-json keeps the rounds mode's session JSON"),
    (["--head-axis", "place=master:bind:0"], "--session-json keeps the rounds mode's session JSON"),
], ids=["invocations", "head-axis"])
def test_session_json_is_the_rounds_modes_only(tmp_path, args, message):
    out = _cli("ab", "HEAD", "--session-json", str(tmp_path / "s.json"), *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    out = _cli("ab", "HEAD", "--session-json", str(tmp_path / "nowhere" / "s.json"))
    assert out.returncode == 2 and "is not a folder" in out.stderr, out.stderr


def test_ab_selects_the_benchmarks_where_its_pytest_arguments_name_no_test_path():
    """`numabench ab HEAD -- -k touch` collected tests/ too, in both checkouts, and failed."""
    from numabench.cli import with_test_path
    assert with_test_path([]) == ["benchmarks"]
    assert with_test_path(["-k", "touch", "--numa-tier=smoke"]) == ["benchmarks", "-k", "touch", "--numa-tier=smoke"]
    assert with_test_path(["benchmarks/test_touch.py", "-k", "x"]) == ["benchmarks/test_touch.py", "-k", "x"]
    assert with_test_path(["benchmarks/test_touch.py::test_touch"]) == ["benchmarks/test_touch.py::test_touch"]
