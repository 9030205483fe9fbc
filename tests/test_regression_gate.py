"""The regression gate end to end on the CPU families (touch, host_membw, cpu_adam at a small
size), as `pytest benchmarks --benchmark-compare` runs it: a baseline pooled from 3 runs
(sessions) of 2 invocations each, A/A runs of unchanged code that pass, a real injected
slowdown of 50% that every gated entry catches, a band of one run reported as insufficient
data, `numabench ab` both ways, and the errors that replace a silent pass.

This CPU VM is noisy: sessions drift apart (touch 545 us in one session, 578 us in the
next), the first invocation of a session runs up to ~8% slower than the next ones, and
xdist neighbours would add more. So these tests run alone (marker ``serial``, a second
pytest run in .ci/test) and judge by the gate's own rule with its default threshold: each
entry's threshold comes from the spread of its band and the new value's own noise, and an
entry too noisy to detect 30% (``--numa-gate-coarsest=30%``; the default is 10%) is
informational (reported, never failing); the tests say which entries those were.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.serial
FAMILIES = ["benchmarks/test_touch.py", "benchmarks/test_host_membw.py", "benchmarks/test_cpu_adam.py"]
# This VM's entries are noisier than a GPU machine's (spreads of 1-4% between invocations of
# quiet sessions, 3 x that beyond the band): gate those that detect 30% (the default, 10%, would
# leave all of them informational in most sessions).
SELECT = ["--numa-policies=default", "--param-sizes=4M", "--numa-axis", "impl=ours", "--numa-gate-coarsest=30%"]
ENTRIES = 5  # touch 1 + host_membw 3 kernels + cpu_adam 1 impl
BASELINE_RUNS, BASELINE_INVOCATIONS = 3, 2


def run_suite(storage: Path, *args: str, slowdown: str | None = None,
              files: list[str] = FAMILIES) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("NUMABENCH_INJECT_SLOWDOWN", None)
    if slowdown:
        env["NUMABENCH_INJECT_SLOWDOWN"] = slowdown
    # Run from the storage's parent: pytest-benchmark prints storage paths relative to the cwd.
    cmd = [sys.executable, "-m", "pytest", *(str(ROOT / f) for f in files), f"--rootdir={ROOT}",
           "-c", str(ROOT / "pytest.ini"), "-p", "no:cacheprovider", "-q", *SELECT,
           f"--benchmark-storage=file://{storage}", *args]
    return subprocess.run(cmd, cwd=storage.parent, env=env, capture_output=True, text=True, timeout=900)


def gate_counts(text: str) -> str:
    lines = [ln for ln in text.splitlines() if " entries: " in ln and "slower" in ln]
    assert lines, text
    return lines[-1]


def gate_records(path: Path) -> dict[str, dict]:
    """name -> extra_info.gate of a gated run's --benchmark-json."""
    return {b["name"]: b["extra_info"]["gate"] for b in json.loads(path.read_text())["benchmarks"]}


def gate_section(text: str) -> str:
    return text[text.find("numabench regression gate"):]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A baseline as the gate wants one: 3 runs of 2 invocations each, merged (numabench merge)."""
    from numabench.cli import main

    storage = tmp_path_factory.mktemp("baselines")
    for i in range(BASELINE_RUNS):
        out = run_suite(storage, f"--benchmark-save=run{i}", "--benchmark-save-data",
                        f"--numa-repeats={BASELINE_INVOCATIONS}")
        assert out.returncode == 0, out.stdout + out.stderr
    runs = sorted(storage.rglob("000[1-9]_run*.json"))
    assert len(runs) == BASELINE_RUNS
    assert main(["merge", str(runs[0].parent / "0004_base.json"), *map(str, runs)]) == 0
    [merged] = list(storage.rglob("0004_base.json"))
    data = json.loads(merged.read_text())
    assert data["machine_info"]["numabench"]["hardware_key"] and data["machine_info"]["numabench"]["machine_instance"]
    assert len(data["benchmarks"]) == ENTRIES
    for b in data["benchmarks"]:
        extra = b["extra_info"]
        meds = extra["invocation_medians_s"]
        assert len(meds) == BASELINE_RUNS * BASELINE_INVOCATIONS and all(m > 0 for m in meds)
        assert len(set(extra["invocation_sources"])) == BASELINE_RUNS
        assert len(set(extra["invocation_machines"])) == 1  # this machine, which the gated runs come from too
    return storage


def test_unchanged_code_passes_three_times(saved):
    """Exit 0 each time: no gated entry confirmed slower. Which entries were gated and which too
    noisy to gate is in the gate's table (printed with -s, or in a failure's message)."""
    for i in range(3):
        out = run_suite(saved, "--benchmark-compare", f"--benchmark-json={saved.parent / f'aa{i}.json'}")
        text = out.stdout + out.stderr
        assert out.returncode == 0, gate_section(text) or text
        assert "numabench regression gate" in text and "REGRESSION" not in text
        assert gate_counts(text).startswith(f"{ENTRIES} entries: "), text
        records = gate_records(saved.parent / f"aa{i}.json")
        assert set(records) and all(r["verdict"] != "insufficient data" for r in records.values()), records
        print(gate_section(text))


def test_real_slowdown_is_caught_by_every_gated_entry(saved):
    """50% injected, 3 invocations per case: every gated entry (each detects 30% or less) is judged
    slower and confirmed, the run fails; informational entries cannot fail it and are listed. On a
    machine where no entry is quiet enough to gate, the test skips saying so."""
    out = run_suite(saved, "--benchmark-compare", "--numa-repeats=3", f"--benchmark-json={saved.parent / 'slow.json'}",
                    slowdown="1.5")
    text = out.stdout + out.stderr
    records = gate_records(saved.parent / "slow.json")
    gated = {n: r for n, r in records.items() if r["verdict"] in ("slower", "same", "faster")}
    noisy = {n: r for n, r in records.items() if r["verdict"] == "informational"}
    assert len(gated) + len(noisy) == ENTRIES, gate_section(text)
    if not gated:
        pytest.skip("every entry is too noisy to gate on this machine: "
                    + "; ".join(f"{n} {r['why']}" for n, r in noisy.items()))
    assert all(r["detectable_pct"] <= 30 for r in gated.values()), gate_section(text)
    missed = {n: r for n, r in gated.items() if not (r["verdict"] == "slower" and r["confirmation"] == "slower")}
    assert not missed, gate_section(text)
    assert out.returncode == 1, gate_section(text)
    assert f"REGRESSION: {len(gated)} entries" in text, gate_section(text)
    for name in noisy:
        assert name in text  # listed as informational with its spread
    print(gate_section(text))


def test_upstream_compare_fail_keeps_working(saved):
    out = run_suite(saved, "--benchmark-compare", "--benchmark-compare-fail=median:5%", "--numa-confirm=0",
                    "--numa-gate-threshold=1000%", slowdown="2.0", files=FAMILIES[:1])
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Performance has regressed" in text, text
    assert "REGRESSION" not in text  # numabench's own gate was set far off: upstream failed the run


def test_no_baseline_is_an_error_before_anything_runs(tmp_path):
    empty = tmp_path / "nothing"
    t0 = time.monotonic()
    out = run_suite(empty, "--benchmark-compare")
    assert out.returncode == 4, out.stdout + out.stderr
    assert "--benchmark-compare: no baseline run in" in out.stderr
    assert time.monotonic() - t0 < 60 and "passed" not in out.stdout
    assert not empty.exists()  # the check creates no storage folder


def test_no_baseline_for_this_hardware_key_names_the_keys(tmp_path):
    """The default storage layout, baselines/<hardware key>/: the error names this key and those
    that have baselines."""
    from numabench.machine.hwkey import hardware_key
    from numabench.machine.topology import discover

    root = tmp_path / "baselines"
    other = root / "H200x2_other_1node_cuda13" / "Linux-CPython-3.12-64bit"
    other.mkdir(parents=True)
    (other / "0001_x.json").write_text(json.dumps({"benchmarks": []}))
    key = hardware_key(discover("/"))
    out = run_suite(root / key, "--benchmark-compare", files=FAMILIES[:1])
    assert out.returncode == 4
    assert f"no baseline for this machine's hardware key {key!r}" in out.stderr
    assert "keys with baselines: H200x2_other_1node_cuda13" in out.stderr


def test_baseline_from_another_python_version_is_found(saved, tmp_path):
    [src] = list(saved.rglob("0004_base.json"))
    folder = tmp_path / "store" / "Linux-CPython-3.99-64bit"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / src.name)
    # the lookup is under test, not the noise: a threshold no noise reaches
    out = run_suite(tmp_path / "store", "--benchmark-compare", "--numa-gate-threshold=100%",
                    "--numa-gate-coarsest=1000%", files=FAMILIES[:1])
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "Linux-CPython-3.99-64bit/0004_base" in text and "numabench regression gate" in text
    assert "Can't compare" not in text


def test_baseline_from_other_hardware_is_refused(saved, tmp_path):
    [src] = list(saved.rglob("0004_base.json"))
    data = json.loads(src.read_text())
    data["machine_info"]["numabench"]["hardware_key"] = "H200x2_other-cpu_2node_cuda13"
    foreign = tmp_path / src.parent.name
    foreign.mkdir()
    (foreign / "0001_foreign.json").write_text(json.dumps(data))
    out = run_suite(tmp_path, "--benchmark-compare=0001", files=FAMILIES[:1])
    assert out.returncode != 0
    assert "refusing to compare" in out.stdout + out.stderr


def test_a_band_of_one_run_is_insufficient_data_and_never_fails(saved, tmp_path):
    """One run merged with itself (the same run twice: its invocations counted twice, still one
    session): a 2x slowdown against it is reported as insufficient data, with the command that
    fills the band, and the run passes."""
    from numabench.cli import main

    [src] = list(saved.rglob("0001_run0.json"))
    folder = tmp_path / "store" / src.parent.name
    folder.mkdir(parents=True)
    shutil.copy(src, folder / src.name)
    assert main(["merge", str(folder / "0002_merged.json"), str(folder / src.name), str(src)]) == 0
    merged = json.loads((folder / "0002_merged.json").read_text())
    assert all(len(b["extra_info"]["invocation_medians_s"]) == 2 * BASELINE_INVOCATIONS for b in merged["benchmarks"])
    out = run_suite(tmp_path / "store", "--benchmark-compare", slowdown="2.0", files=FAMILIES[:1])
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "0002_merged" in text and "(4)" in text and "REGRESSION" not in text
    assert "1 insufficient data" in gate_counts(text) and "insufficient data (slower)" in text
    assert "WARNING: 1 entries have insufficient data" in text and "refresh-baseline" in text


def worktrees() -> set[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True, text=True)
    return {ln for ln in out.stdout.splitlines() if ln.startswith("worktree ")}


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
def test_ab_finds_an_injected_slowdown_and_passes_unchanged_code():
    args = ["--", "benchmarks/test_touch.py", "benchmarks/test_host_membw.py", "--numa-policies=default",
            "--param-sizes=4M"]
    cmd = [sys.executable, "-m", "numabench.cli", "ab", "HEAD", "HEAD", "--pairs", "4", "--threshold", "10%"]
    before = worktrees()  # another run's leftovers (a killed ab) are not this test's
    # 50%: on this VM a pair's ratio moves by up to ~15% (a 30% slowdown's interval reached down to
    # 1.05 on host_membw in a noisy moment), so the injected change stands well clear of it
    slow = subprocess.run(cmd + ["--head-env", "NUMABENCH_INJECT_SLOWDOWN=1.5", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    # touch's first touch can move ~15% between invocations here: 3 of the 4 entries at least
    counts = re.search(r"4 entries: (\d) slower, 0 faster, (\d) same", slow.stdout)
    assert counts and int(counts.group(1)) >= 3, slow.stdout
    same = subprocess.run(cmd + args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "0 slower" in same.stdout and "REGRESSION" not in same.stdout
    assert worktrees() == before  # both checkouts of each ab removed
