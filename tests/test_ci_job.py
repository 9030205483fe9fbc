"""The GPU runner's CI job: the GitHub workflow runs .ci/gate-job's steps (and nothing
else), .ci/gpu runs the same job, and the job's steps work end to end on this machine
(the touch family: a baseline of 3 invocations, a gated run, the report in every format;
no baseline for the key: exit 4 at once)."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("setup", "build", "plan", "run", "report", "publish", "learn")


def test_the_workflow_runs_the_gate_job_steps():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (the check of the workflow needs it)")
    flow = yaml.safe_load((ROOT / ".ci" / "github-gpu.yml").read_text())
    job = flow["jobs"]["gate"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    runs = [s["run"].strip().splitlines()[0] for s in job["steps"] if "run" in s]
    assert runs == [f"bash .ci/gate-job {s}" for s in STEPS]
    always = [s for s in job["steps"] if s.get("if") == "always()"]
    assert {s.get("name") for s in always} >= {"Verdicts (job summary, annotations, JSON)", "Upload results"}
    # the rolling window: restored for every run, learnt and kept on main after a pass only
    assert job["env"]["NUMABENCH_WINDOW"] == ".numabench-window"
    uses = {s.get("uses", "").split("@")[0]: s for s in job["steps"]}
    assert uses["actions/cache/restore"]["with"]["path"] == uses["actions/cache/save"]["with"]["path"] == ".numabench-window"
    learn = next(s for s in job["steps"] if s.get("run") == "bash .ci/gate-job learn")
    assert "success()" in learn["if"] and "refs/heads/main" in learn["if"] and uses["actions/cache/save"]["if"] == learn["if"]
    script = (ROOT / ".ci" / "gate-job").read_text()
    for step in STEPS:
        assert re.search(rf"^    {step}\)", script, re.M), step
    assert "bash .ci/gate-job all" in (ROOT / ".ci" / "gpu").read_text()


def gate_job(step: str, tmp_path: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMABENCH_TIER": "smoke", "NUMABENCH_RESULTS": str(tmp_path / "results"),
           "NUMABENCH_BASELINES": str(tmp_path / "baselines"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
           **extra_env}
    return subprocess.run(["bash", str(ROOT / ".ci" / "gate-job"), step, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_gate_job_end_to_end_on_the_touch_family(tmp_path):
    (tmp_path / "baselines").mkdir()
    only_touch = ["-k", "test_touch", "--param-sizes=4M"]
    out = gate_job("run", tmp_path, *only_touch)
    assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]
    assert "no baseline for this machine's hardware key" in out.stdout + out.stderr
    key = subprocess.run([str(ROOT / ".venv/bin/numabench"), "topo", "--key"], capture_output=True, text=True,
                         check=True).stdout.strip()
    save = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "pytest", "benchmarks/test_touch.py", "-q",
                           "-p", "no:cacheprovider", "--numa-tier=smoke", "--param-sizes=4M", "--numa-repeats=3",
                           f"--benchmark-storage=file://{tmp_path}/baselines/{key}", "--benchmark-save=base",
                           "--benchmark-save-data"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert save.returncode == 0, save.stdout[-2000:]
    plan = gate_job("plan", tmp_path, *only_touch)
    assert plan.returncode == 0 and "1 of 1 runs timed from the baseline 0001_base.json" in plan.stdout, plan.stdout
    # a 100% threshold: this checks the plumbing, the gate's own A/A and power tests are elsewhere
    out = gate_job("run", tmp_path, *only_touch, "--numa-gate-threshold=100%")
    assert out.returncode == 0, out.stdout[-3000:]
    results = tmp_path / "results"
    assert {p.name for p in results.iterdir()} >= {"run.json", "junit.xml", "pytest.log"}
    rep = gate_job("report", tmp_path)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert rep.stdout.strip().splitlines()[-1].startswith("::notice title=numabench gate::1 entries: 0 slower")
    verdicts = json.loads((results / "verdicts.json").read_text())
    assert verdicts["exit_code"] == 0 and verdicts["entries"][0]["band_invocations"] == 3
    summary = (tmp_path / "summary").read_text()
    assert summary.startswith("### numabench gate: **no regression**") and summary == (results / "summary.md").read_text()
    # one run of 3 invocations is one session: not gated (insufficient data), the job passes
    assert verdicts["entries"][0]["verdict"] == "insufficient data" and verdicts["warnings"]
    # learn: the window starts from the committed baseline and takes this passing run; the next run
    # is judged against the window, whose band now spans two runs
    window = tmp_path / "window"
    assert gate_job("learn", tmp_path).returncode == 2  # no NUMABENCH_WINDOW
    learnt = gate_job("learn", tmp_path, NUMABENCH_WINDOW=str(window))
    assert learnt.returncode == 0, learnt.stdout + learnt.stderr
    assert "0001_0001_base.json" in learnt.stdout and "0002_run.json" in learnt.stdout
    again = gate_job("run", tmp_path, *only_touch, "--numa-gate-threshold=100%", "--numa-gate-coarsest=1000%",
                     NUMABENCH_WINDOW=str(window))
    assert again.returncode == 0 and f"judging against the rolling window {window}/baseline.json" in again.stdout
    assert "1 entries: 0 slower, 0 faster, 1 same" in again.stdout and "gated: 1 entries" in again.stdout, again.stdout
    pooled = json.loads((window / "baseline.json").read_text())["benchmarks"][0]["extra_info"]
    assert len(pooled["invocation_medians_s"]) == 4 and len(set(pooled["invocation_sources"])) == 2
    bad = gate_job("lint", tmp_path)
    assert bad.returncode == 2 and "allowed setup, build, plan, run, report, publish, learn, all" in bad.stderr
