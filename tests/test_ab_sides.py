"""--numa-ab base=CHECKOUT: one session times every case with this checkout's workers and another
checkout's, rounds alternating (fixtures.ab_sides, numabench.workers.run.run_sides).

End to end on the CPU with the touch family: the base checkout is a copy of this package whose
touch worker sleeps 0.1 s in its timed phase, so only workers that import the base's code can
be 0.1 s slower (a difference no load on the runner makes up: asserted per pair); the head's
environment reaches the head's workers only. And the options' bad values."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers import fake_caps
from numabench.cases import Case
from numabench.families import family
from numabench.machine.topology import discover
from numabench.numa.policy import parse_policies
from numabench.workers.run import round_order
from numabench.workers.sides import checkout_side

ROOT = Path(__file__).resolve().parents[1]
SLEEP_S = 0.1
SESSION = [sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "--numa-policies=default",
           "--param-sizes=1M", "--numa-rounds=3", "--numa-warmup=1", "-p", "no:cacheprovider", "-q"]


def collected_with(*args: str) -> subprocess.CompletedProcess:
    """The A/B session's collection with these options (a usage error: exit 4, one line on stderr)."""
    return subprocess.run([*SESSION, *args, "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=300)


def patched_base(tmp_path: Path, anchor: str, added: str) -> Path:
    """A copy of this package as a base checkout, its touch worker's line ``anchor`` followed by ``added``."""
    base = tmp_path / "base"
    shutil.copytree(ROOT / "numabench", base / "numabench", ignore=shutil.ignore_patterns("__pycache__"))
    worker = base / "numabench" / "families" / "touch" / "worker.py"
    text = worker.read_text()
    assert anchor in text, "the touch worker's step moved: update this test"
    worker.write_text(text.replace(anchor, anchor + added))
    return base


def slow_base(tmp_path: Path) -> Path:
    """A checkout whose touch worker sleeps SLEEP_S inside its timed phase."""
    return patched_base(tmp_path, "        ctypes.memset(self.addr, value, self.nbytes)\n",
                        f"        time.sleep({SLEEP_S})\n")


@pytest.mark.parametrize("forked", [False, True], ids=["exec", "forkserver"])
def test_the_base_side_runs_the_base_checkouts_workers_round_by_round(tmp_path, forked):
    """Also with --numa-forkserver: each side's workers fork from a server of the side's own code."""
    out = tmp_path / "ab.json"
    proc = subprocess.run([*SESSION, "--numa-repeats=2", f"--numa-ab=base={slow_base(tmp_path)}",
                           "--numa-ab=head_env=NUMABENCH_INJECT_SLOWDOWN=1.01", f"--benchmark-json={out}",
                           *(["--numa-forkserver"] if forked else [])],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = json.loads(out.read_text())["benchmarks"]
    extra = entry["extra_info"]
    assert extra["launcher"].endswith(" (forked)") == forked
    left = [p.pid for p in psutil.process_iter() if _cwd_under(p, tmp_path)]
    assert not left, f"processes of the base checkout left running: {left}"
    head, base = extra["invocation_medians_s"], extra["ab_base"]["invocation_medians_s"]
    assert len(head) == len(base) == 2  # one pair per invocation
    cpus = [extra["invocation_cpus"], extra["ab_base"]["invocation_cpus"]]  # each side's worker, each pair
    assert [len(c) for c in cpus] == [2, 2] and all(cpu in os.sched_getaffinity(0) for c in cpus
                                                    for inv in c for cpu in inv), cpus
    assert all(b - h > SLEEP_S / 2 for b, h in zip(base, head)), (head, base)
    assert all(h < SLEEP_S / 2 for h in head)
    assert extra["rounds"] == 6 and extra["injected_slowdown"] == 1.01  # the head's rounds are the entry
    assert extra["ab_base"]["injected_slowdown"] == 1.0  # the head's variable never reached the base


def _cwd_under(proc: psutil.Process, folder: Path) -> bool:
    try:
        return Path(proc.cwd()).is_relative_to(folder)
    except psutil.Error:
        return False


def counting_base(tmp_path: Path, count_file: Path) -> Path:
    """A checkout whose touch worker appends a line to ``count_file`` at every step request."""
    return patched_base(tmp_path, "        self.round += 1\n",
                        f"        open({str(count_file)!r}, 'a').write('step\\n')\n")


@pytest.mark.parametrize("rewarm", [False, True], ids=["no-rewarm", "default"])
def test_rewarm_runs_an_untimed_step_before_every_timed_one(tmp_path, rewarm):
    count = tmp_path / "steps"
    out = tmp_path / "ab.json"
    proc = subprocess.run([*SESSION, "--numa-repeats=2", f"--numa-ab=base={counting_base(tmp_path, count)}",
                           *([] if rewarm else ["--numa-ab=rewarm=0"]), f"--benchmark-json={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # per pair: 1 warm-up and 3 timed rounds, each timed one after an untimed one unless told not to
    assert count.read_text().count("step\n") == 2 * (1 + 3 * (2 if rewarm else 1))
    (entry,) = json.loads(out.read_text())["benchmarks"]
    assert entry["extra_info"]["rounds"] == 6 and entry["extra_info"]["ab_base"]["rewarm"] is rewarm
    assert entry["extra_info"]["ab_base"]["rewarmed_pairs"] == ([True, True] if rewarm else [])


def test_rewarm_stops_after_the_first_round_where_an_untimed_step_took_long(tmp_path):
    """A step of REWARM_BELOW_S or longer, on either side, is rewarmed in the first round only, and
    for both sides: here only the base's step is slow, and the head's too loses its untimed steps."""
    from numabench.workers.sides import REWARM_BELOW_S

    count = tmp_path / "steps"
    base = patched_base(tmp_path, "        self.round += 1\n",
                        f"        open({str(count)!r}, 'a').write('step\\n')\n"
                        f"        time.sleep({REWARM_BELOW_S + 0.02})\n")
    assert "\nimport time\n" in (base / "numabench" / "families" / "touch" / "worker.py").read_text()
    out = tmp_path / "ab.json"
    proc = subprocess.run([*SESSION, "--numa-repeats=2", f"--numa-ab=base={base}", f"--benchmark-json={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # per pair: 1 warm-up, the first round's untimed and timed steps, then 2 timed rounds alone
    assert count.read_text().count("step\n") == 2 * (1 + 2 + 2)
    (entry,) = json.loads(out.read_text())["benchmarks"]
    assert entry["extra_info"]["ab_base"]["rewarmed_pairs"] == [False, False]
    assert entry["extra_info"]["rounds"] == 6


@pytest.mark.parametrize("args, message", [
    (["--numa-ab=base=/nonexistent/checkout"], "--numa-ab base=/nonexistent/checkout: base checkout '/nonexistent/checkout': allowed a "
                                                "numabench checkout"),
    (["--numa-ab=base_env=X=1"], "--numa-ab: allowed with base=CHECKOUT"),
    (["--numa-ab=rewarm=0"], "--numa-ab: allowed with base=CHECKOUT"),
    ([f"--numa-ab=base={ROOT}", "--numa-ab=head_env=X"], "--numa-ab head_env=X: allowed NAME=VALUE"),
    ([f"--numa-ab=base={ROOT}", "--benchmark-compare"], "allowed one of them"),
    (["--numa-ab=same_cpus=1"], "--numa-ab: allowed with base=CHECKOUT"),
], ids=["not-a-checkout", "env-without-base", "rewarm-without-base", "env-without-value", "with-compare",
        "same-cpus-without-base"])
def test_bad_ab_options_are_usage_errors(args, message):
    proc = subprocess.run([*SESSION, *args, "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4 and message in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("forked", [False, True], ids=["exec", "forkserver"])
def test_with_same_cpus_both_sides_of_a_pair_run_on_the_pairs_cpus(tmp_path, forked):
    """touch steps on one thread (Family.step_threads): each pair's two workers are bound to one CPU,
    the one ab_pair_cpus gives that pair, and say they ran there (a forked worker too: its server
    gives it the CPUs its stand-in was started on)."""
    from numabench.families.base import ab_pair_cpus

    out = tmp_path / "ab.json"
    proc = subprocess.run([*SESSION, "--numa-repeats=2", f"--numa-ab=base={ROOT}", "--numa-ab=same_cpus=1",
                           f"--benchmark-json={out}", *(["--numa-forkserver"] if forked else [])],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = json.loads(out.read_text())["benchmarks"]
    extra = entry["extra_info"]
    topo = discover("/")
    fam = family("touch")
    ranks = fam.ranks(Case("touch", 1, 1 << 20, parse_policies("default")[0], "fp32"), topo)
    allowed = sorted(os.sched_getaffinity(0))
    want = [[ab_pair_cpus(ranks, topo, allowed, 1, pair)[0].cpus[0]] for pair in range(2)]
    assert extra["invocation_cpus"] == extra["ab_base"]["invocation_cpus"] == want


def test_rounds_alternate_which_side_steps_first():
    assert [round_order(["base", "head"], n) for n in range(4)] == [
        ["base", "head"], ["head", "base"], ["base", "head"], ["head", "base"]]


def test_a_side_imports_its_own_checkout_first(tmp_path):
    side = checkout_side("base", slow_base(tmp_path), {"X": "1"})
    env = side.environment()
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path / "base") and env["X"] == "1"
    assert side.cwd == str(tmp_path / "base")


def test_a_case_must_fit_twice_when_both_sides_are_alive():
    topo = discover(ROOT / "tests" / "data" / "machines" / "vm-1node")
    have = sum(n.mem_total_bytes for n in topo.nodes)
    fam = family("touch")
    numel = int(0.6 * have / fam.host_bytes_per_element(Case("touch", 1, 1, parse_policies("default")[0], "fp32")))
    case = Case("touch", 1, numel, parse_policies("default")[0], "fp32")  # 60% of the memory: fits once, not twice
    assert fam.skip_reason(case, topo, fake_caps()) is None
    reason = fam.skip_reason(case, topo, fake_caps(), copies=2)
    assert reason and "(2 copies alive at once: a same-runner A/B)" in reason


def test_every_family_but_the_multi_gpu_one_takes_an_injected_slowdown():
    """An A/B with NUMABENCH_INJECT_SLOWDOWN on the head judges every family: a family that
    refused it would fail its cases in the head's workers and drop out of the A/B's table."""
    from numabench.families import FAMILIES

    assert [k for k in FAMILIES if not family(k).injects_slowdown] == ["broadcast"]


@pytest.mark.parametrize("bench, args", [
    # small images, 2 batches a round: the head's padded phase waits 20x its work (a 224 px round
    # made this test 473 s of a loaded 2-core runner, 76 s so)
    ("test_dataloader.py", ["--param-sizes=32", "--dtypes=fp32", "--nprocess=1", "--numa-axis=image_px=64",
                            "--numa-axis=loader_batches=2"]),
    ("test_train_step.py", ["--numa-axis=mode=ddp", "--numa-axis=model=tiny", "--param-sizes=32", "--dtypes=fp32",
                            "--nprocess=1"]),
], ids=["dataloader", "train_step"])
def test_a_host_side_family_s_head_takes_the_injected_factor_longer(bench, args, tmp_path):
    """A same-runner A/B session on the CPU, 20x injected into the head: every entry measured by
    both sides, the head more than 4x the base in at least one pair (at least 20x by construction:
    the pad waits inside each timed phase until it has taken 20x its own work, however slow that
    work ran). A loaded 2-core runner has moved these steps by 10x from pair to pair and put one
    pair's base 7x over the head's own work (a head/base of 2.8 in that pair, 16.3 in the other):
    the base 5x slower than the head's own work in both pairs is what it would take to fail."""
    out = tmp_path / "ab.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", f"benchmarks/{bench}", "--numa-policies=default", *args,
                           "--numa-rounds=3", "--numa-warmup=1", "--numa-repeats=2", "-p", "no:cacheprovider", "-q",
                           f"--numa-ab=base={ROOT}", "--numa-ab=head_env=NUMABENCH_INJECT_SLOWDOWN=20",
                           f"--benchmark-json={out}"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    entries = json.loads(out.read_text())["benchmarks"]
    assert entries, proc.stdout[-2000:]
    for e in entries:
        head, base = e["extra_info"]["invocation_medians_s"], e["extra_info"]["ab_base"]["invocation_medians_s"]
        assert len(head) == len(base) == 2, e["name"]
        assert max(h / b for h, b in zip(head, base)) > 4.0, (e["name"], head, base)
