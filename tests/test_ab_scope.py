"""The families a change touches, at their ci sizes (numabench ab --scope diff, the pull-request
job's default): from the diff of base..head, a family's own code (its folder, its benchmark
module, the csrc/ sources of its kernels) puts that family at the ci tier, code every family runs
puts the whole ci tier, anything else leaves the smoke tier; the selection and why come first."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.ab.formats import from_json, render_text, to_json
from numabench.ab.run import run_ab
from numabench.ab.scope import Scope, changed_paths, family_kernels, given_tier, scope_of
from numabench.ab.session import interleaved_medians
from numabench.machine.gpus import visible_gpus
from test_ab import _session_run, git, repo  # noqa: F401  (the scratch repository fixture)

ROOT = Path(__file__).resolve().parents[1]
KERNELS = family_kernels()


@pytest.mark.parametrize("paths, families, whole, kernels", [
    (["numabench/families/cpu_adam/worker.py"], {"cpu_adam"}, False, {}),
    (["benchmarks/test_touch.py", "docs/GATE.md"], {"touch"}, False, {}),
    (["csrc/cpu_adam.cpp"], {"cpu_adam"}, False, {"cpu_adam": ("cpu_adam",)}),
    (["csrc/fused_adam.cu"], {"adam_offload", "train_step"}, False,
     {"adam_offload": ("cuda_adam",), "train_step": ("cuda_adam",)}),
    (["csrc/stream.cpp", "numabench/families/pinned_alloc/__init__.py"], {"host_membw", "pinned_alloc"}, False,
     {"host_membw": ("stream",)}),
    (["csrc/cpu_adam.cpp", "numabench/families/cpu_adam/worker.py"], {"cpu_adam"}, False, {}),
    (["csrc/common.h"], {"adam_offload", "cpu_adam", "host_membw", "train_step"}, False,
     {key: KERNELS[key] for key in ("adam_offload", "cpu_adam", "host_membw", "train_step")}),
    (["numabench/workers/run.py", "numabench/families/touch/worker.py"], {"touch"}, True, {}),
    (["fixtures/running.py"], set(), True, {}),
    (["numabench/families/base.py"], set(), True, {}),
    (["numabench/ab/run.py", "numabench/gate/pairs.py", "docs/GATE.md", "tests/test_ab.py", ".ci/gate-job"], set(),
     False, {}),
], ids=["family-folder", "benchmark-module", "csrc-cpu", "csrc-cuda", "csrc-stream", "csrc-and-its-worker",
        "csrc-header", "shared-workers", "shared-fixtures", "shared-family-base", "nothing-measured"])
def test_which_families_a_change_touches(paths, families, whole, kernels):
    scope = scope_of(paths, KERNELS)
    assert set(scope.families) == families and scope.whole == whole, scope
    # where a family's changed code is kernel sources alone, only its variants that load them run
    assert dict(scope.kernels) == kernels, scope


def test_the_selection_it_makes_of_the_smoke_tier_and_says_why():
    family = scope_of(["numabench/families/cpu_adam/worker.py", "csrc/cpu_adam.cpp", "README.md"], KERNELS)
    assert family.pytest_args("smoke") == ["--numa-family-tier=cpu_adam=ci"]
    assert family.lines("smoke") == [
        "scope: the ci tier of cpu_adam, whose own code changed; the smoke tier of the others",
        "scope: cpu_adam: csrc/cpu_adam.cpp, numabench/families/cpu_adam/worker.py"]
    shared = scope_of(["numabench/numa/place.py"], KERNELS)
    assert shared.pytest_args("smoke") == ["--numa-tier=ci"]
    assert shared.lines("smoke") == ["scope: the whole ci tier: code every family runs changed (numabench/numa/place.py)"]
    none = scope_of(["docs/GATE.md"], KERNELS)
    assert none.pytest_args("smoke") == [] and "no family's own code changed (1 changed paths" in none.lines("smoke")[0]
    assert family.pytest_args("ci") == shared.pytest_args("full") == []  # a larger tier already takes them
    kernel = scope_of(["csrc/cpu_adam.cpp"], KERNELS)
    assert kernel.pytest_args("smoke") == ["--numa-family-tier=cpu_adam=ci", "--numa-family-kernels=cpu_adam=cpu_adam"]
    assert kernel.lines("smoke")[1] == ("scope: cpu_adam: csrc/cpu_adam.cpp (kernel sources alone: only its variants "
                                        "that load cpu_adam)")
    assert kernel.to_json()["kernels"] == {"cpu_adam": ["cpu_adam"]}
    assert given_tier(["benchmarks", "--numa-tier=smoke", "-k", "x"], "ci") == "smoke"
    assert given_tier(["benchmarks", "--numa-tier", "full"], "ci") == "full" and given_tier([], "ci") == "ci"


def _commit(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)


@pytest.mark.parametrize("files, expected", [
    ({"numabench/families/touch/worker.py": "# changed\n"}, ["--numa-family-tier=touch=ci"]),
    ({"csrc/cpu_adam.cpp": "// changed\n"}, ["--numa-family-tier=cpu_adam=ci", "--numa-family-kernels=cpu_adam=cpu_adam"]),
    ({"numabench/toolkit/hostmem.py": "# changed\n", "csrc/cpu_adam.cpp": "// x\n"}, ["--numa-tier=ci"]),
], ids=["family-only", "csrc-only", "shared-code"])
def test_a_scratch_repository_s_diff_decides_what_the_sessions_select(repo, files, expected):  # noqa: F811
    _commit(repo, files, "the change")
    assert sorted(changed_paths(repo, "HEAD~1", "HEAD")) == sorted(files)
    seen = []

    def invoke_both(base, head, pytest_args, pairs, json_path: Path):
        seen.append(list(pytest_args))
        return interleaved_medians(_session_run({"x.py::t[a]": [1e-3] * 3}, {"x.py::t[a]": [1e-3] * 3}), pairs)

    lines = []
    res = run_ab("HEAD~1", "HEAD", ["benchmarks", "--numa-tier=smoke"], pairs=3, cwd=repo, build_side=lambda s: "",
                 invoke_both=invoke_both, progress=lines.append)
    assert seen[-1][:2 + len(expected)] == ["benchmarks", "--numa-tier=smoke", *expected]
    assert lines[0].startswith("scope: ") and res.scope == [ln for ln in lines if ln.startswith("scope: ")]
    assert res.selection[:2 + len(expected)] == seen[-1][:2 + len(expected)]
    text = render_text(res)
    assert all(line in text for line in res.scope)
    assert from_json(json.loads(json.dumps(to_json(res)))).scope == res.scope
    given = run_ab("HEAD~1", "HEAD", ["benchmarks", "--numa-tier=smoke"], pairs=3, cwd=repo,
                   build_side=lambda s: "", invoke_both=invoke_both, scope="given")
    assert seen[-1][:2] == ["benchmarks", "--numa-tier=smoke"] and not any("ci" in a for a in seen[-1][2:3])
    assert given.scope == ["scope: the smoke tier as given"]


def test_uncommitted_and_untracked_files_count_for_the_working_tree(repo):  # noqa: F811
    (repo / "f.txt").write_text("changed\n")
    (repo / "csrc").mkdir()
    (repo / "csrc" / "stream.cpp").write_text("new\n")
    assert sorted(changed_paths(repo, "HEAD", None)) == ["csrc/stream.cpp", "f.txt"]
    assert set(scope_of(changed_paths(repo, "HEAD", None), KERNELS).families) == {"host_membw"}


def _collected(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--collect-only", "-q", "-p",
                           "no:cacheprovider", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_family_at_another_tier_is_collected_at_it_and_the_others_are_not():
    smoke = _collected("--numa-tier=smoke")
    mixed = _collected("--numa-tier=smoke", "--numa-family-tier=touch=ci")
    assert smoke.returncode == mixed.returncode == 0, smoke.stdout[-2000:] + mixed.stdout[-2000:]

    def ids(out: str, family: str) -> set[str]:
        return {ln for ln in out.splitlines() if ln.startswith(f"benchmarks/test_{family}.py::")}
    assert ids(smoke.stdout, "touch") < ids(mixed.stdout, "touch")  # more of touch: its ci slice
    assert ids(smoke.stdout, "host_membw") == ids(mixed.stdout, "host_membw")
    bad = _collected("--numa-family-tier=nosuch=ci")
    assert bad.returncode == 4 and "--numa-family-tier=nosuch=ci: allowed FAMILY=TIER" in bad.stderr, bad.stderr


def test_a_kernel_only_change_collects_the_variants_that_load_the_kernel():
    smoke = _collected("--numa-tier=smoke")
    ci = _collected("--numa-tier=smoke", "--numa-family-tier=cpu_adam=ci")
    ours = _collected("--numa-tier=smoke", "--numa-family-tier=cpu_adam=ci", "--numa-family-kernels=cpu_adam=cpu_adam")
    assert smoke.returncode == ci.returncode == ours.returncode == 0, ours.stdout[-2000:] + ours.stderr[-2000:]

    def ids(out: str, family: str) -> set[str]:
        return {ln for ln in out.splitlines() if ln.startswith(f"benchmarks/test_{family}.py::")}
    loading = {i for i in ids(ci.stdout, "cpu_adam") if i.endswith(("-ours]", "-ours+copy]"))}
    assert loading and ids(ours.stdout, "cpu_adam") == loading < ids(ci.stdout, "cpu_adam")  # no torch, no DeepSpeed
    assert ids(ours.stdout, "touch") == ids(smoke.stdout, "touch")
    # a family none of whose variants loads the kernel here (train_step's CUDA Adam on a CPU machine) runs its smoke
    # slice, as one the change does not touch
    if visible_gpus():
        return
    gpu_only = _collected("--numa-tier=smoke", "--numa-family-tier=train_step=ci",
                          "--numa-family-kernels=train_step=cuda_adam")
    assert gpu_only.returncode == 0 and ids(gpu_only.stdout, "train_step") == ids(smoke.stdout, "train_step")
    assert ids(smoke.stdout, "train_step")
    bad = _collected("--numa-family-kernels=touch=cpu_adam")
    assert bad.returncode == 4 and ("--numa-family-kernels=touch=cpu_adam: allowed FAMILY=KERNEL[,KERNEL]" in bad.stderr
                                    and "(touch loads none)" in bad.stderr), bad.stderr


def test_no_change_at_all_says_so():
    assert Scope().lines("smoke") == ["scope: the smoke tier: no path differs between base and head"]
    assert Scope().pytest_args("smoke") == []


# serial: alone, as the other end-to-end A/Bs (their git worktrees, the two cores)
@pytest.mark.serial
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_a_change_to_one_family_s_own_code_takes_a_first_stage_and_the_focus_end_to_end(tmp_path):
    """A clone whose head changes touch's benchmark module, numabench ab at the smoke tier (touch at
    4M): touch's run takes a first stage of 6 pairs, passes 4-6 over it alone, before the focus
    budget's rule toward 1%; the verdict file names the focus, the kept session each entry's first
    stage, and no worktree is left. No verdict on real timings is asserted."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    module = clone / "benchmarks" / "test_touch.py"
    module.write_text(module.read_text() + "# a change to touch's own code\n")
    git(clone, "commit", "-qam", "touch changed")
    verdicts, session = tmp_path / "v.json", tmp_path / "s.json"
    out = subprocess.run([sys.executable, "-m", "numabench", "ab", "HEAD~1", "HEAD", "--focus-budget", "120",
                          "--json", str(verdicts), "--session-json", str(session), "--", "benchmarks",
                          "--numa-tier=smoke", "-k", "test_touch", "--numa-policies=default", "--param-sizes=4M"],
                         cwd=clone, capture_output=True, text=True, timeout=900)
    data = json.loads(verdicts.read_text())
    assert out.returncode == data["exit_code"] in (0, 1), out.stderr[-3000:]
    for p in (4, 5, 6):
        assert f"[ab] pass {p}: a first-stage pair of the worker runs of touch, whose own code changed" in out.stderr
    assert data["focus"] == ["touch"] and data["target_resolution_pct"] == 1.0 and data["time_budget_s"] == 120.0
    [entry] = data["entries"]
    assert entry["pairs"] >= 6
    kept = json.loads(session.read_text())
    assert [b["extra_info"]["ab_base"]["first_stage_pairs"] for b in kept["benchmarks"]] == [6]
    assert "focus: further pairs for touch toward a resolution of 1%, within 120 s of measuring" in out.stdout
    assert len([ln for ln in git(clone, "worktree", "list", "--porcelain").splitlines()
                if ln.startswith("worktree ")]) == 1
