"""The pull-request gate: the workflow's `ab` job runs .ci/gate-job's ab step on pull requests
(the baseline gate on main, nightly and by hand), and the step works end to end on this
machine: an A/A of the touch family (base = head = HEAD, 2 pairs) whose exit code is what its
own verdict table says (no verdict on real timings is asserted), with its summary, annotations,
JSON and log; bad input ends at once with exit 2 and no stale verdict left."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELECTION = ("-k", "test_touch", "--numa-policies=default", "--param-sizes=4M")


def test_the_workflow_runs_ab_on_pull_requests_and_the_gate_elsewhere():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (the check of the workflow needs it)")
    flow = yaml.safe_load((ROOT / ".ci" / "github-gpu.yml").read_text())
    on = flow.get("on", flow.get(True))
    assert "pull_request" in on and on["push"]["branches"] == ["main"] and on["schedule"][0]["cron"]
    ab, gate = flow["jobs"]["ab"], flow["jobs"]["gate"]
    assert ab["if"] == "github.event_name == 'pull_request'" and gate["if"] == "github.event_name != 'pull_request'"
    assert "self-hosted" in ab["runs-on"] and "gpu" in ab["runs-on"]
    runs = [s["run"].strip() for s in ab["steps"] if "run" in s]
    assert runs == ["bash .ci/gate-job setup", "bash .ci/gate-job plan-ab", "bash .ci/gate-job ab"]
    checkout = next(s for s in ab["steps"] if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0  # git merge-base origin/main HEAD needs main's history
    assert "'smoke'" in ab["env"]["NUMABENCH_TIER"]
    assert "vars.NUMABENCH_AB_ARGS" in ab["env"]["NUMABENCH_AB_ARGS"]  # a repository variable may set it
    upload = next(s for s in ab["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"].rstrip("/") == ab["env"]["NUMABENCH_RESULTS"]
    assert "pull_request" not in gate["env"]["NUMABENCH_TIER"]
    script = (ROOT / ".ci" / "gate-job").read_text()
    assert re.search(r"^    ab\)", script, re.M)


def gate_job(tmp_path: Path, *args: str, step: str = "ab", **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMABENCH_TIER": "smoke", "NUMABENCH_RESULTS": str(tmp_path / "results"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), **extra_env}
    return subprocess.run(["bash", str(ROOT / ".ci" / "gate-job"), step, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_plan_ab_step_estimates_the_ab_run_with_its_pairs(tmp_path):
    out = gate_job(tmp_path, *SELECTION, step="plan-ab", NUMABENCH_AB_ARGS="--threshold 2% --pairs 2")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-2].startswith("numabench plan: 1 entries") and "(smoke tier)" in lines[-2]
    assert lines[-1].startswith("numabench plan (A/B, 2 pairs, rounds interleaved): ~") and "2 pairs x" in lines[-1]
    plain = gate_job(tmp_path, *SELECTION, step="plan")
    assert plain.returncode == 0 and "A/B" not in plain.stdout, plain.stdout + plain.stderr


def worktrees() -> set[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True, text=True)
    return {ln for ln in out.stdout.splitlines() if ln.startswith("worktree ")}


def test_bad_input_ends_at_once_and_leaves_no_stale_verdict(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "verdicts.json").write_text("{}")
    out = gate_job(tmp_path, *SELECTION, NUMABENCH_AB_BASE="HEAD", NUMABENCH_AB_ARGS="--pairs 1")
    assert out.returncode == 2 and "--pairs 1: allowed a whole number from 2 to 1000 pairs" in out.stdout, out.stdout + out.stderr
    assert not (results / "verdicts.json").exists() and not (tmp_path / "summary").exists()
    out = gate_job(tmp_path, *SELECTION, NUMABENCH_AB_BASE="no-such-revision-38")
    assert out.returncode == 2 and "no-such-revision-38" in out.stdout, out.stdout + out.stderr


# serial: alone, so that no other test's git worktrees come and go beside its own (and two cores
# are not shared with it); it asserts no verdict on these timings
@pytest.mark.serial
@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
def test_the_ab_step_end_to_end_exit_code_as_its_verdicts(tmp_path):
    before = worktrees()
    out = gate_job(tmp_path, *SELECTION, "--numa-rounds=5", NUMABENCH_AB_BASE="HEAD", NUMABENCH_AB_ARGS="--pairs 2")
    text = out.stdout + out.stderr
    assert out.returncode in (0, 1), text[-4000:]
    results = tmp_path / "results"
    data = json.loads((results / "verdicts.json").read_text())
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert data["base"]["commit"] == data["head"]["commit"] == head and data["pairs"] == 2
    # the tier, the selection and the reduced rounds reached every invocation
    assert data["selection"][:2] == ["benchmarks", "--numa-tier=smoke"]
    assert {"--numa-rounds=5", "--param-sizes=4M", "test_touch"} <= set(data["selection"])
    [entry] = data["entries"]
    # an A/A whose 2 pairs happen to judge the entry changed takes as many confirming pairs (the
    # default --confirm-pairs is --pairs): 2 or 4 pairs, as the run itself records
    confirming = entry["confirmation_pairs"]
    assert confirming in (0, 2) and data["confirm_pairs"] == 2, entry
    taken = 2 + confirming
    assert len(entry["base_medians_s"]) == len(entry["head_medians_s"]) == taken
    # where each side's worker ran, pair by pair, in the verdicts and in the kept session
    assert [len(entry["base_cpus"]), len(entry["head_cpus"])] == [taken, taken], entry
    session = json.loads((results / "session.json").read_text())
    [kept] = session["benchmarks"]
    assert kept["extra_info"]["invocation_cpus"] == entry["head_cpus"]
    # and how the run ran, which numabench ab --rejudge names it by
    ran = session["numabench_ab"]
    assert ran["base"]["commit"] == ran["head"]["commit"] == head and ran["passes"] is True
    assert ran["selection"] == data["selection"] and "entries" not in ran
    # by default both sides of a pair ran on the same CPU (touch steps on one thread)
    assert data["same_cpus"] is True and entry["base_cpus"] == entry["head_cpus"], entry
    # the exit code is what the verdict table says, whatever this machine's timings were
    slower = sum(e["verdict"] == "slower" for e in data["entries"])
    assert data["exit_code"] == out.returncode == (1 if slower else 0)
    summary = (results / "summary.md").read_text()
    assert summary.startswith("### numabench A/B: ") and summary == (tmp_path / "summary").read_text()
    assert entry["name"] in summary
    assert "::notice title=numabench A/B::numabench A/B: " in out.stdout
    # the session's line per worker run reached the job's log as it ran (one worker run here)
    assert re.search(r"^\[ab\] run 1/1 \S+: [\d.]+ s; elapsed \d+:\d\d, every run done$",
                     (results / "ab.log").read_text(), re.M), (results / "ab.log").read_text()
    assert ("::error title=numabench A/B slower" in out.stdout) == bool(slower)
    log = (results / "ab.log").read_text()
    assert "numabench A/B: " in log and "[ab] 2 pairs, rounds alternating between base and head" in log
    assert data["interleave"] == "rounds"  # the default: both sides' workers in one session a pass
    assert data["passes"] is True and "[ab] pass 2/2: one pair of every worker run" in log
    assert ("confirming pair of the worker runs of 1 entries judged changed" in log) == bool(confirming), log
    page = (results / "site" / "ab-verdicts.html").read_text()  # the A/B run's page, for the job's artifact
    assert entry["name"] in page and 'id="what-changed"' in page
    assert worktrees() == before  # both checkouts removed
