"""numabench plan --ab-pairs N: the time of an A/B run is the arithmetic of its parts (two
builds, then one session of N pairs, each the plan less its kernel builds with its steps
twice; or, by whole invocations, 2N invocations of the selection, each the plan less its
kernel builds plus pytest's start and collection), and the CLI prints it after the plan line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.cases import Case
from numabench.families import family
from numabench.numa.policy import Policy
from numabench.plan import KERNEL_BUILD_S, KERNEL_LOADED_S, plan_runs
from numabench.ab.plan import BUILD_LOADED_S, BUILD_START_S, ab_estimate

ROOT = Path(__file__).resolve().parents[1]


def test_the_estimate_is_the_arithmetic_of_its_parts():
    plan = {"seconds": 100.0, "builds": [{"kernel": "cpu_adam", "seconds": 45.0, "source": "default estimate"}],
            "kernels": ["cpu_adam", "stream"], "steps_seconds": 20.0}
    kernels = {"stream": (True, 30.0, False), "cpu_adam": (False, 45.0, False), "cuda_adam": (False, 120.0, False)}
    est = ab_estimate(plan, 3, session_s=4.0, kernels=kernels, interleave="invocations")
    invocation = 100.0 - 45.0 + KERNEL_LOADED_S + 4.0  # kernels built and loaded by then: found at once
    head = BUILD_START_S + 120.0  # stream built already; the other two compiled at once: the longer
    base = BUILD_LOADED_S  # the head's sources: built and loaded by the head's build
    assert est.invocation_s == pytest.approx(invocation)
    assert (est.head_build_s, est.base_build_s) == pytest.approx((head, base))
    assert est.seconds == pytest.approx(head + base + 6 * invocation)
    assert est.seconds_if_base_compiles == pytest.approx(head + BUILD_START_S + 120.0 + 6 * invocation)
    assert "(A/B, 3 pairs, invocations interleaved)" in est.summary() and "6 invocations" in est.summary()
    rounds = ab_estimate(plan, 3, session_s=4.0, kernels=kernels, rewarm=False)  # one session, both sides' rounds
    fixed = 100.0 - 45.0 + KERNEL_LOADED_S - 20.0  # the plan less its builds and steps
    pair = 2 * fixed + 2 * 20.0  # both sides' set-ups (they share the CPUs) and both sides' steps
    assert rounds.pair_s == pytest.approx(pair)
    assert rounds.seconds == pytest.approx(head + base + 4.0 + 3 * pair)
    assert "(A/B, 3 pairs, rounds interleaved)" in rounds.summary() and "3 pairs x" in rounds.summary()
    rewarmed = ab_estimate(plan, 3, session_s=4.0, kernels=kernels)  # the default: each step after an untimed one
    assert rewarmed.pair_s == pytest.approx(pair + 2 * 20.0)  # a plan without the split: every step short
    assert "each short one after an untimed one" in rewarmed.summary()
    split = ab_estimate({**plan, "untimed_steps_seconds": 6.0}, 3, session_s=4.0, kernels=kernels)
    assert split.pair_s == pytest.approx(pair + 2 * 6.0)  # long steps rewarmed in their first round only
    most = ab_estimate(plan, 3, session_s=4.0, kernels=kernels, max_pairs=8)  # further pairs: the upper figure
    assert most.seconds_at_most == pytest.approx(rewarmed.seconds + 5 * rewarmed.pair_s)
    assert "if every worker run took 8 pairs" in most.summary() and "took" not in rewarmed.summary()
    with pytest.raises(ValueError, match="pairs 1"):
        ab_estimate(plan, 1, 4.0, kernels)
    # every kernel built and loaded before: the head's build too starts no builder
    loaded = {k: (True, s, True) for k, (_, s, _) in kernels.items()}
    again = ab_estimate({**plan, "builds": []}, 3, session_s=4.0, kernels=loaded)
    assert (again.head_build_s, again.base_build_s) == pytest.approx((BUILD_LOADED_S, BUILD_LOADED_S))
    assert again.seconds_if_base_compiles == pytest.approx(again.seconds - BUILD_LOADED_S + BUILD_START_S + 120.0)


def test_a_run_plan_counts_untimed_steps_before_every_short_step_and_in_the_first_round_of_long_ones():
    from numabench.plan import Plan, RunPlan
    from numabench.workers.sides import REWARM_BELOW_S

    short = RunPlan("a", "touch", 1, 10.0, "baseline", steps_s=4.4, step_s=0.02, variants=2)
    long = RunPlan("b", "transfer", 6, 30.0, "baseline", steps_s=22.0, step_s=REWARM_BELOW_S, variants=2)
    assert (short.untimed_steps_s, long.untimed_steps_s) == pytest.approx((4.4, 2 * REWARM_BELOW_S))
    every = RunPlan("c", "cpu_adam", 5, 40.0, "baseline", steps_s=22.0, step_s=0.2, variants=5,
                    rewarm_every_round=True)
    assert every.untimed_steps_s == pytest.approx(22.0)
    figures = Plan(runs=[short, long]).to_dict()
    assert figures["steps_seconds"] == pytest.approx(26.4)
    assert figures["untimed_steps_seconds"] == pytest.approx(4.4 + 0.2)


def test_a_forked_estimate_counts_each_sides_server_once_and_the_set_ups_once_a_pair():
    plan = {"seconds": 103.0, "builds": [], "kernels": [], "steps_seconds": 20.0, "server_seconds": 3.0,
            "forked": True}
    est = ab_estimate(plan, 4, session_s=4.0, kernels={}, rewarm=False)
    assert est.pair_s == pytest.approx((103.0 - 3.0 - 20.0) + 2 * 20.0)  # both sides set up at once
    assert est.measuring_s == pytest.approx(4.0 + 2 * 3.0 + 4 * est.pair_s)
    assert "once: workers forked" in est.summary()
    exec_d = ab_estimate({**plan, "forked": False, "server_seconds": 0.0}, 4, session_s=4.0, kernels={},
                         rewarm=False)
    assert exec_d.pair_s == pytest.approx(2 * (103.0 - 20.0) + 2 * 20.0) and "twice: workers exec'd" in exec_d.summary()


def test_the_plan_records_the_kernels_the_selection_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMABENCH_BUILD_DIR", str(tmp_path))
    fam = family("cpu_adam")
    case = Case("cpu_adam", 1, 1 << 20, Policy.parse("default"), "fp32",
                tuple((a, v[0]) for a, v in fam.extra_axes.items()))
    plan = plan_runs([("k", fam, case, 1, 1, 10, 3)], None, None, 0)
    data = plan.to_dict()
    assert data["kernels"] == ["cpu_adam"] and data["seconds"] == pytest.approx(plan.seconds)
    assert data["builds"] == [{"kernel": "cpu_adam", "seconds": KERNEL_BUILD_S["cpu_adam"],
                               "source": "default estimate"}]


def _seconds(text: str) -> float:
    value, unit = re.fullmatch(r"~?([\d.]+) (s|min)", text.strip()).groups()
    return float(value) * (60 if unit == "min" else 1)


def test_numabench_plan_prints_the_ab_estimate(tmp_path):
    env = {**os.environ, "NUMABENCH_BUILD_DIR": str(tmp_path)}  # nothing built: default build times
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", "--ab-pairs", "2", "benchmarks/test_touch.py",
                          "--numa-policies=default", "--param-sizes=4M", "--no-ab-passes"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    plan_line, ab_line = out.stdout.strip().splitlines()
    assert plan_line.startswith("numabench plan: 1 entries in 1 worker runs")
    m = re.match(r"numabench plan \(A/B, 2 pairs, rounds interleaved\): (~[\d.]+ (?:s|min)): builds "
                 r"(~[\d.]+ (?:s|min)) \(head\) \+ (~[\d.]+ (?:s|min)) \(base.*then one session \(([\d.]+) s pytest "
                 r"start and collection as timed here\) of 2 pairs x (~[\d.]+ (?:s|min)) ", ab_line)
    assert m, ab_line
    total, head, base = (_seconds(m.group(i)) for i in range(1, 4))
    session, pair = float(m.group(4)), _seconds(m.group(5))
    # numabench build compiles both at once: the longer, and its own start
    assert head >= max(KERNEL_BUILD_S["stream"], KERNEL_BUILD_S["cpu_adam"]) + BUILD_START_S
    assert total == pytest.approx(head + base + session + 2 * pair, abs=3)  # each figure rounded to a second
    assert session > 0
    # numabench ab's default: a session per pair (pass), each with its start and its fork servers
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", "--ab-pairs", "2", "benchmarks/test_touch.py",
                          "--numa-policies=default", "--param-sizes=4M"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    ab_line = out.stdout.strip().splitlines()[1]
    m = re.match(r"numabench plan \(A/B, 2 pairs, rounds interleaved\): (~[\d.]+ (?:s|min)): .*then 2 sessions \(one "
                 r"a pass; ([\d.]+) s pytest start and collection each, as timed here\) of 2 pairs x ", ab_line)
    assert m, ab_line
    assert _seconds(m.group(1)) - total >= float(m.group(2)) - 2  # one session more (each figure rounded)
    assert "both sides' rounds, each short one after an untimed one)" in ab_line  # the default
    assert "less its kernel builds once: workers forked" in ab_line  # numabench ab's default
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", "--ab-pairs", "2", "--ab-workers", "exec",
                          "benchmarks/test_touch.py", "--numa-policies=default", "--param-sizes=4M"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "less its kernel builds twice: workers exec'd" in out.stdout, out.stdout + out.stderr
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", "--ab-workers", "exec", "benchmarks/test_touch.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "--ab-workers exec goes with --ab-pairs N" in out.stderr, out.stdout + out.stderr


def test_numabench_plan_takes_the_ab_session_s_options(tmp_path):
    """--no-ab-rewarm and --ab-max-pairs are numabench ab's --no-rewarm and --max-pairs for the plan:
    the plan counts the steps without the untimed ones, gives the upper figure of the further
    pairs, and collects without them."""
    env = {**os.environ, "NUMABENCH_BUILD_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", "--ab-pairs", "2", "benchmarks/test_touch.py",
                          "--numa-policies=default", "--param-sizes=4M", "--no-ab-rewarm"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1].split("; ~")[0].endswith("twice: both sides' rounds)")
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", "--ab-pairs", "2", "benchmarks/test_touch.py",
                          "--numa-policies=default", "--param-sizes=4M", "--ab-max-pairs", "6"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "if every worker run took 6 pairs" in out.stdout, out.stdout + out.stderr
