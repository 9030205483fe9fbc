"""The floor of the A/B interval's spread (gate.pairs.spread_sd): pairs that agree by chance
cannot make an interval narrower than each pair's own rounds know its ratio to. Deterministic:
constructed and seeded rounds, no timing."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from numabench.ab.formats import from_json, render_text, to_json
from numabench.ab.run import ABResult, Side, judge_measured
from numabench.ab.session import interleaved_medians
from numabench.gate.pairs import (MIN_ROUNDS_FOR_FLOOR, SAME, SLOWER, UNRESOLVED, judge_ratios, pair_error,
                                  pairs_to_resolve, quad_ratio, spread_sd)
from test_ab_round_ratios import A, session

# a pair's rounds as fixed multiples of 1 ms: 30 rounds whose head/base quads spread by ~3%, their
# median exactly 1.006 (the H200 x1 VM's cpu_adam rounds spread 6-9% a round)
WOBBLE = [1.0, 1.045, 0.965, 1.025, 0.98, 1.055, 0.95, 1.01, 0.995, 1.035, 0.97, 1.02, 0.985, 1.04, 0.96]


def noisy_pair(ratio: float) -> tuple[list[float], list[float]]:
    """Base rounds flat at 1 ms, head rounds at ``ratio`` times a wobble that leaves the median
    quad at ``ratio``: each quad's ratio is ``ratio`` x one WOBBLE value."""
    base = [1e-3] * (2 * len(WOBBLE))
    head = [1e-3 * ratio * w for w in WOBBLE for _ in range(2)]
    return base, head


def test_two_pairs_that_agree_exactly_are_not_same_when_their_rounds_spread():
    """As on the H200 x1 VM: two pairs of the same change whose ratios agree while each pair's
    rounds know it to ~1.5%: without the floor their interval is a point and `same`; with it, wide
    and unresolved."""
    (b1, h1), (b2, h2) = noisy_pair(1.006), noisy_pair(1.006)
    ratios = [quad_ratio(b1, h1), quad_ratio(b2, h2)]
    assert ratios == pytest.approx([1.006, 1.006])
    errors = [pair_error(b1, h1), pair_error(b2, h2)]
    assert 0.01 < errors[0] < 0.02  # the pair's own standard error, from its quads' spread
    assert judge_ratios(ratios, 1.0, 0.95).verdict == SAME  # the sample spread alone: zero
    floored = judge_ratios(ratios, 1.0, 0.95, errors=errors)
    assert floored.verdict == UNRESOLVED and floored.resolution_pct > 10
    # numabench ab's own path: a kept session's rounds judged as numabench ab judges them
    rows, _ = judge_measured(interleaved_medians(session([b1, b2], [h1, h2]), 2), 1.0, 0.95, pairs=2)
    assert rows[0].verdict == UNRESOLVED and rows[0].pair_errors == pytest.approx(errors)
    assert rows[0].resolution_pct == pytest.approx(floored.resolution_pct)


def test_the_floor_only_widens_and_is_the_pairs_root_mean_square_error():
    logs = [0.0, 0.02, 0.04]
    assert spread_sd(logs) == pytest.approx(0.02)
    assert spread_sd(logs, [0.001, 0.001, 0.001]) == pytest.approx(0.02)  # the sample spread is wider
    assert spread_sd(logs, [0.03, 0.04, math.inf]) == pytest.approx(math.sqrt((0.03 ** 2 + 0.04 ** 2) / 2))
    assert spread_sd(logs, [math.inf] * 3) == pytest.approx(0.02)  # nothing known: no floor
    with pytest.raises(ValueError, match="2 pair errors for 3 ratios"):
        judge_ratios([1.0, 1.01, 1.02], 1.0, 0.95, errors=[0.01, 0.01])


def test_a_few_rounds_set_no_floor():
    """Under MIN_ROUNDS_FOR_FLOOR rounds the quartiles of a few quads take one odd quad for a spread."""
    base, head = noisy_pair(1.03)
    assert math.isinf(pair_error(base[:MIN_ROUNDS_FOR_FLOOR - 2], head[:MIN_ROUNDS_FOR_FLOOR - 2]))
    assert math.isfinite(pair_error(base[:MIN_ROUNDS_FOR_FLOOR], head[:MIN_ROUNDS_FOR_FLOOR]))


def test_seeded_pairs_of_noisy_rounds_never_claim_same_for_a_2pct_change_and_false_alarms_stay_rare():
    """2 and 3 pairs of 30 rounds, 6% round noise: with the floor, a 2% change is never called
    `same` and an A/A is called slower at most at the interval's error; without it, chance
    agreement between pairs calls both (2000 seeded runs each: same 0.4% at 1.02 and slower 1.0%
    at 1.0 for 2 pairs, 0% and 0% with the floor)."""
    rng = random.Random(11)

    def verdicts(true: float, pairs: int) -> tuple[str, str]:
        ratios, errors = [], []
        for _ in range(pairs):
            base = [1e-3 * math.exp(rng.gauss(0, 0.06)) for _ in range(30)]
            head = [1e-3 * true * math.exp(rng.gauss(0, 0.06)) for _ in range(30)]
            ratios.append(quad_ratio(base, head))
            errors.append(pair_error(base, head))
        return judge_ratios(ratios, 1.0, 0.95).verdict, judge_ratios(ratios, 1.0, 0.95, errors=errors).verdict

    for pairs in (2, 3):
        changed = [verdicts(1.02, pairs) for _ in range(600)]
        unchanged = [verdicts(1.0, pairs) for _ in range(600)]
        assert sum(floored == SAME for _, floored in changed) == 0
        assert sum(floored == SLOWER for _, floored in unchanged) <= 0.025 * 600
        # the sample spread alone: some chance agreement
        assert sum(plain in (SAME, SLOWER) for plain, _ in changed + unchanged) > 0


def test_the_errors_are_kept_in_the_json_and_read_back():
    (b1, h1), (b2, h2), (b3, h3) = noisy_pair(1.02), noisy_pair(1.03), noisy_pair(1.01)
    rows, _ = judge_measured(interleaved_medians(session([b1, b2, b3], [h1, h2, h3]), 3), 1.0, 0.95, pairs=3)
    res = ABResult(Side("main", "a" * 40, Path("/base"), {}), Side("HEAD", "b" * 40, Path("/head"), {}), 3, 1.0,
                   0.95, rows=rows, interleave="rounds")
    res.rows[0].pair_errors[1] = math.inf  # a pair whose rounds were too few: unknown, null in JSON
    data = json.loads(json.dumps(to_json(res)))
    assert data["entries"][0]["pair_errors"][1] is None
    assert "its spread at least what each pair's own rounds leave unknown" in render_text(res)
    back = from_json(data, "kept.json")
    assert math.isinf(back.rows[0].pair_errors[1])
    assert back.rows[0].pair_errors[0] == pytest.approx(rows[0].pair_errors[0])


def test_the_pairs_that_would_resolve_a_leaning_entry_count_the_floor():
    ratios = [1.02, 1.021, 1.019]
    assert pairs_to_resolve(ratios, 1.0, 0.95) < pairs_to_resolve(ratios, 1.0, 0.95, errors=[0.01, 0.01, 0.01])
