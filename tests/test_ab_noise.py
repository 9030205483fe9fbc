"""Where an A/B entry's spread comes from (numabench.ab.noise): its log round ratios split into
the round-to-round part inside a pair and the pair-to-pair part, on seeded synthetic sessions
whose two parts are known, and the resolution predicted for other pairs and rounds."""
from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.ab.noise import session_spreads, spread_of, table
from numabench.gate.pairs import judge_ratios, quad_ratio

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "tests" / "data" / "ab" / "cpu-aa-smoke-3pairs.session.json"


def synthetic(rng: random.Random, pairs: int, rounds: int, within: float, between: float):
    """Both sides' rounds of ``pairs`` pairs: each pair's head offset by its own N(0, between) in
    log terms, each round's by N(0, within); the base at 1 ms with a little noise of its own."""
    base, head = [], []
    for _ in range(pairs):
        offset = rng.gauss(0.0, between)
        b = [1e-3 * math.exp(rng.gauss(0.0, 0.001)) for _ in range(rounds)]
        base.append(b)
        head.append([v * math.exp(offset + rng.gauss(0.0, within)) for v in b])
    return base, head


@pytest.mark.parametrize("within, between", [(0.02, 0.0), (0.002, 0.02), (0.01, 0.01)],
                         ids=["rounds-only", "pairs-only", "both"])
def test_the_two_parts_are_found_where_they_are(within, between):
    rng = random.Random(72)
    spread = spread_of("x", *synthetic(rng, 40, 30, within, between))
    assert spread.within_sd == pytest.approx(within, rel=0.1, abs=0.001)
    assert spread.between_sd == pytest.approx(between, rel=0.3, abs=0.002)
    if between == 0.0:
        assert spread.between_share < 0.3  # more rounds are the cure
    elif within < between:
        assert spread.between_share > 0.9  # only more pairs (or placement varied inside a pair) help


def test_more_rounds_narrow_only_the_rounds_part():
    rng = random.Random(7)
    rounds_only = spread_of("r", *synthetic(rng, 12, 10, 0.03, 0.0))
    pairs_only = spread_of("p", *synthetic(rng, 12, 10, 0.001, 0.02))
    assert rounds_only.resolution_at(3, 40) < rounds_only.resolution_at(3, 10) / 1.5
    assert pairs_only.resolution_at(3, 40) == pytest.approx(pairs_only.resolution_at(3, 10), rel=0.05)
    assert pairs_only.resolution_at(12, 10) < pairs_only.resolution_at(3, 10) / 2


def test_at_its_own_pairs_and_rounds_it_gives_the_gate_s_resolution():
    run = json.loads(KEPT.read_text())
    spreads = {s.name: s for s in session_spreads(run)}
    assert len(spreads) == 3
    for bench in run["benchmarks"]:
        ab = bench["extra_info"]["ab_base"]
        ratios = [quad_ratio(b, h) for b, h in zip(ab["invocation_rounds_s"], ab["head_invocation_rounds_s"])]
        s = spreads[bench["fullname"]]
        assert s.pair_sd == pytest.approx(statistics.stdev(math.log(r) for r in ratios), rel=1e-6)
        assert s.resolution_at(s.pairs, s.rounds) == pytest.approx(judge_ratios(ratios, 1.0, 0.95).resolution_pct,
                                                                   rel=1e-6)
    lines = table(spreads.values())
    assert lines[0].startswith("entry") and len(lines) == 2 + 3


def test_bad_rounds_are_refused_naming_the_entry():
    with pytest.raises(ValueError, match="x: pair 0 has 2 base and 3 head rounds"):
        spread_of("x", [[1.0, 1.0], [1.0, 1.0]], [[1.0, 1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="x: 1 pairs with rounds of both sides: allowed 2 or more"):
        spread_of("x", [[1.0, 1.0]], [[1.0, 1.0]])


def test_the_tool_prints_the_split_of_a_kept_session_and_refuses_what_is_not_one(tmp_path):
    out = subprocess.run([sys.executable, "-m", "numabench.tools.ab_noise", str(KEPT)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "3 entries with both sides' rounds" in out.stdout, out.stderr
    assert "test_touch[write-np1-67.1M-default-fp32]" in out.stdout
    (tmp_path / "bad.json").write_text("{")
    bad = subprocess.run([sys.executable, "-m", "numabench.tools.ab_noise", str(tmp_path / "bad.json")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("ab_noise: ")


def test_pairs_of_unequal_rounds_split_by_each_pair_s_own_rounds():
    """--round-target gives pairs different rounds: the rounds' part of a pair mean's variance is
    within^2 / its own rounds. Pairs of 10 and 200 rounds, within 5%, between 1%: the between part
    is found (taken as within^2 / the fewest rounds, the rounds' part would swallow it: 0)."""
    rng = random.Random(11)
    base, head = [], []
    for rounds in [10, 200] * 100:
        b, h = synthetic(rng, 1, rounds, 0.05, 0.01)
        base += b
        head += h
    spread = spread_of("x", base, head)
    assert (spread.rounds, spread.most_rounds, spread.rounds_text) == (10, 200, "10-200")
    assert spread.within_sd == pytest.approx(0.05, rel=0.1)
    assert spread.between_sd == pytest.approx(0.01, rel=0.35)
    assert "200x10-200" in "\n".join(table([spread]))


def test_what_stepping_second_costs_is_told_apart():
    """The side that steps first alternates: a 10% cost of stepping second shows as x alternating
    +-10% (``position``), which the quads the gate judges by cancel (pair sd about 0)."""
    base, head = [], []
    for pair in range(4):
        base.append([1e-3 * (1.1 if (i + pair) % 2 == 0 else 1.0) for i in range(20)])
        head.append([1e-3 * (1.0 if (i + pair) % 2 == 0 else 1.1) for i in range(20)])
    spread = spread_of("x", base, head)
    assert spread.position == pytest.approx(math.log(1.1), rel=1e-6)
    assert spread.pair_sd == pytest.approx(0.0, abs=1e-12) and spread.within_sd > 0.09
    assert "2nd side %" in table([spread])[0]


def test_the_cheapest_way_to_a_resolution_follows_where_the_spread_is_and_what_a_pair_costs():
    """A rounds-only spread behind a dear set-up is bought with rounds; a pairs-only one with pairs;
    the time is pairs x (fixed + stepping scaled by the rounds)."""
    from numabench.ab.noise import RunCost

    rng = random.Random(11)
    rounds_only = spread_of("r", *synthetic(rng, 12, 10, 0.05, 0.0))
    pairs_only = spread_of("p", *synthetic(rng, 12, 10, 0.001, 0.02))
    dear_setup = RunCost("R[x]", (rounds_only,), 10, pair_s=20.0, stepping_s=1.0)
    pairs, rounds, seconds = dear_setup.cheapest(1.0)
    assert rounds > 10 and seconds == pytest.approx(pairs * (19.0 + rounds / 10))
    assert rounds_only.resolution_at(pairs, rounds) <= 1.0
    by_pairs = RunCost("P[x]", (pairs_only,), 10, pair_s=20.0, stepping_s=1.0).cheapest(1.0)
    assert by_pairs[1] == 10 and by_pairs[0] > 12  # rounds buy nothing there
    assert RunCost("P[x]", (pairs_only,), 10, 20.0, 1.0).cheapest(1.0, most_pairs=5) is None


def test_a_pair_s_stepping_is_its_step_requests():
    from numabench.ab.noise import step_requests_s

    def entry(name, rewarmed):
        return {"name": name, "extra_info": {"rounds": 30, "run_step_wall_s": 0.04,
                                             "ab_base": {"rewarmed_pairs": [rewarmed] * 3}}}
    # two variants (the phase dropped), 2 sides, 30 rounds, each timed round after an untimed one
    both = [entry("test_p[alloc-np1-4M-x]", True), entry("test_p[free-np1-4M-x]", True),
            entry("test_p[alloc-np1-4M-y]", True)]
    assert step_requests_s(both) == pytest.approx(30 * 2 * 2 * 2 * 0.04)
    assert step_requests_s([entry("test_p[alloc-np1-4M-x]", False)]) == pytest.approx(30 * 2 * 0.04)


def test_the_tool_prints_what_the_threshold_would_cost_each_worker_run():
    out = subprocess.run([sys.executable, "-m", "numabench.tools.ab_noise", str(KEPT)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "what a resolution of 1% would cost each worker run (an estimate" in out.stdout
    assert "cpu_adam[np1-134M-default-fp32]" in out.stdout and "all <= 1% at" in out.stdout


def _pairs_with_shares(ratios, head_shares, base_shares, rounds=8):
    """A kept session's entry whose pairs read ``ratios``, with each side's huge-page shares."""
    base = [[1e-3] * rounds for _ in ratios]
    head = [[1e-3 * r] * rounds for r in ratios]
    return {"benchmarks": [{"fullname": "x.py::t[a]", "extra_info": {
        "invocation_huge_shares": list(head_shares),
        "ab_base": {"invocation_rounds_s": base, "head_invocation_rounds_s": head,
                    "invocation_huge_shares": list(base_shares)}}}]}


def test_a_pair_s_huge_page_shares_are_set_beside_its_ratio():
    """Where the head's share minus the base's moves with the pair's ratio, r says so; where the
    shares never differ they explain nothing (r not given); sessions without shares give no rows."""
    from numabench.ab.suspects import huge_page_links, link_table

    moving = huge_page_links(_pairs_with_shares([1.00, 1.04, 0.98, 1.06], [0.5, 0.9, 0.3, 1.0], [0.5, 0.5, 0.5, 0.5]))
    assert len(moving) == 1 and moving[0].correlation > 0.95
    assert moving[0].ratios == pytest.approx((1.00, 1.04, 0.98, 1.06))
    flat = huge_page_links(_pairs_with_shares([1.00, 1.04, 0.98, 1.06], [0.0] * 4, [0.0] * 4))
    assert flat[0].correlation is None
    lines = link_table(moving + flat)
    assert lines[2].split()[-1] == f"{moving[0].correlation:+.2f}" and "-20.0-50.0" in lines[2]
    assert lines[3].split()[-1] == "-" and "0.0-0.0" in lines[3]
    none = _pairs_with_shares([1.0, 1.0, 1.0], [0.1] * 3, [0.1] * 3)
    del none["benchmarks"][0]["extra_info"]["invocation_huge_shares"]
    assert huge_page_links(none) == []
    unknown = _pairs_with_shares([1.0, 1.0, 1.0], [0.1, None, 0.1], [0.1] * 3)
    assert huge_page_links(unknown) == []
