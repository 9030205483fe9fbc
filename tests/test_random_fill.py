"""Seeded random fills on threads: the values depend on the seed alone (not on the thread
count), follow the asked-for distribution, and bad arguments name what is allowed."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from numabench.toolkit.random_fill import CHUNK, fill_random_  # noqa: E402

N = 2 * CHUNK + 12345  # two whole chunks and a ragged one


@pytest.mark.parametrize("distribution, a, b", [("normal", 0.0, 1e-2), ("uniform", 1e-6, 1e-4)])
def test_the_same_values_whatever_the_threads(distribution, a, b):
    one = fill_random_(torch.empty(N), distribution, a, b, seed=7, threads=1)
    three = fill_random_(torch.empty(N), distribution, a, b, seed=7, threads=3)
    assert torch.equal(one, three)
    other = fill_random_(torch.empty(N), distribution, a, b, seed=8, threads=3)
    assert not torch.equal(one[:CHUNK], other[:CHUNK])
    assert not torch.equal(one[:1000], one[CHUNK:CHUNK + 1000])  # each chunk its own stream
    if distribution == "normal":
        assert abs(one.mean().item()) < 1e-4 and one.std().item() == pytest.approx(b, rel=0.01)
    else:
        assert bool(one.min() >= torch.tensor(a)) and bool(one.max() < torch.tensor(b))  # in float32
        assert one.mean().item() == pytest.approx((a + b) / 2, rel=0.01)


def test_a_bf16_tensor_and_a_view_of_one():
    t = torch.zeros(3, CHUNK // 2, dtype=torch.bfloat16)
    fill_random_(t, "normal", 0.0, 1.0, seed=1, threads=2)
    assert bool((t != 0).float().mean() > 0.99)
    with pytest.raises(ValueError, match="contiguous"):
        fill_random_(t.t(), "normal", 0.0, 1.0, seed=1, threads=2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(distribution="gamma"), "unknown distribution 'gamma': allowed normal, uniform"),
    (dict(seed=-1), "seed -1: allowed 0 to 2"),
    (dict(seed=1 << 32), "seed 4294967296: allowed"),
])
def test_bad_arguments_name_what_is_allowed(kwargs, match):
    args = dict(distribution="normal", a=0.0, b=1.0, seed=1, threads=1) | kwargs
    with pytest.raises(ValueError, match=match):
        fill_random_(torch.empty(10), **args)
