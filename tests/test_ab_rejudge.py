"""numabench ab --rejudge SESSION: a kept session (numabench ab --session-json) judged again,
nothing measured: its first N pairs, another threshold, each pair by the ratio of its medians."""
from __future__ import annotations

import json

import pytest

from numabench.cli import main
from numabench.errors import UsageError
from numabench.gate.rule import SLOWER
from numabench.ab.formats import from_json, render_text
from numabench.ab.rejudge import rejudge
from numabench.gate.pairs import UNRESOLVED
from test_ab_round_ratios import A, session, spell_pairs


def kept(true_ratio: float = 1.03, pairs: int = 6, **extra) -> dict:
    """A kept session of one entry whose pairs a slow spell crosses (test_ab_round_ratios)."""
    base, head = spell_pairs(true_ratio, pairs)
    run = session(base, head)
    ab = run["benchmarks"][0]["extra_info"]["ab_base"]
    ab.update(checkout="/tmp/numabench-ab-x/base", env={}, head_env={"NUMABENCH_INJECT_SLOWDOWN": "1.03"}, **extra)
    run["benchmarks"][0]["extra_info"]["hardware_key"] = "H200x1_test"
    run.update(commit_info={"id": "b232012d014a98fb2eea6ca35399890a1454c829"}, datetime="2026-11-29T02:28:49+00:00")
    return run


def test_a_kept_session_is_judged_round_by_round_or_by_medians_on_the_same_pairs():
    res = rejudge(kept(), "s.json")
    (row,) = res.rows
    assert res.pairs == 6 and res.pair_ratio == "quads" and row.verdict == SLOWER
    assert row.ratio == pytest.approx(1.03) and res.hardware_key == "H200x1_test"
    assert res.head.commit.startswith("b232012") and res.head.env == {"NUMABENCH_INJECT_SLOWDOWN": "1.03"}
    by_rounds = rejudge(kept(), "s.json", pair_ratio="rounds")  # as runs were judged before quads
    assert by_rounds.pair_ratio == "rounds" and "round-by-round ratios" in render_text(by_rounds)
    by_medians = rejudge(kept(), "s.json", pair_ratio="medians")
    assert by_medians.pair_ratio == "medians" and by_medians.rows[0].verdict == UNRESOLVED
    text = render_text(res)
    assert text.startswith("numabench A/B (re-judged from s.json, nothing measured): REGRESSION")
    assert "base: /tmp/numabench-ab-x/base" in text


def test_its_first_pairs_alone_and_another_threshold():
    three = rejudge(kept(), "s.json", pairs=3)
    assert three.pairs == 3 and len(three.rows[0].base_s) == 3
    assert rejudge(kept(), "s.json", threshold_pct=5.0).rows[0].verdict != SLOWER  # 3% is within 5%
    with pytest.raises(UsageError, match="--pairs 7: s.json has 6 pairs at most: allowed 2 to 6"):
        rejudge(kept(), "s.json", pairs=7)
    with pytest.raises(UsageError, match="--pair-ratio quantile: allowed quads, rounds, medians"):
        rejudge(kept(), "s.json", pair_ratio="quantile")
    with pytest.raises(UsageError, match="no entry has extra_info.ab_base"):
        rejudge({"benchmarks": [{"fullname": A, "stats": {"median": 1e-3}, "extra_info": {}}]}, "run.json")


def test_confirming_pairs_count_as_they_ran_unless_the_first_pairs_are_asked_for():
    run = kept(confirmation_pairs=3)
    res = rejudge(run, "s.json")
    assert res.pairs == 3 and res.rows[0].confirmation_pairs == 3 and len(res.rows[0].base_s) == 6
    first = rejudge(run, "s.json", pairs=3)
    assert first.rows[0].confirmation_pairs == 0 and len(first.rows[0].base_s) == 3


def test_the_cli_rejudges_writes_json_that_show_renders_and_refuses_what_would_measure(tmp_path, capsys):
    path = tmp_path / "session.json"
    path.write_text(json.dumps(kept()))
    out = tmp_path / "verdicts.json"
    assert main(["ab", "--rejudge", str(path), "--json", str(out)]) == 1
    assert "re-judged from" in capsys.readouterr().out
    saved = from_json(json.loads(out.read_text()))
    assert saved.rejudged_from == str(path) and saved.rows[0].verdict == SLOWER
    assert main(["ab", "--show", str(out)]) == 1 and "re-judged from" in capsys.readouterr().out
    assert main(["ab", "--rejudge", str(path), "--pair-ratio", "medians"]) == 0
    capsys.readouterr()
    for argv, message in [(["ab", "main", "--rejudge", str(path)], "allowed without BASE"),
                          (["ab", "--rejudge", str(path), "--head-env", "X=1"], "allowed without --head-env"),
                          (["ab", "main", "--pair-ratio", "medians"], "--pair-ratio goes with --rejudge"),
                          (["ab", "--show", str(out), "--rejudge", str(path)], "allowed one of them"),
                          (["ab", "--rejudge", str(tmp_path / "none.json")], "allowed the JSON numabench ab")]:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
