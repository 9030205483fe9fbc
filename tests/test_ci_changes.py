"""The real code changes the gate is tried with (.ci/changes/NAME.patch, which `.ci/gpu` applies as
the head of an A/B with NUMABENCH_GPU_AB_CHANGE=NAME, in a scratch repository of the tree: .ci/ab-repo): each
still applies to the tree as it is, changes one family's own kernel source only, and puts that
family at its ci sizes under the pull-request job's default scope (numabench ab --scope diff)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from numabench.ab.scope import family_kernels, scope_of

ROOT = Path(__file__).resolve().parents[1]
CHANGES = sorted((ROOT / ".ci" / "changes").glob("*.patch"))
# each change, the families whose ci slice the pull-request job runs for it
FAMILIES = {"cpu-adam-one-thread-fewer": {"cpu_adam"}, "cpu-adam-two-threads-fewer": {"cpu_adam"},
            "cpu-adam-dynamic-schedule": {"cpu_adam"}, "cuda-adam-half-grid": {"adam_offload", "train_step"}}


def test_every_change_is_listed_here():
    assert {p.stem for p in CHANGES} == set(FAMILIES)


@pytest.mark.parametrize("patch", CHANGES, ids=[p.stem for p in CHANGES])
def test_a_change_applies_to_the_tree_and_is_its_family_s_own_code(patch, tmp_path):
    paths = re.findall(r"^\+\+\+ b/(\S+)$", patch.read_text(), re.M)
    assert paths and all(p.startswith("csrc/") for p in paths), paths
    for p in paths:  # applied to a copy: the tree stays as it is
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / p, tmp_path / p)
    proc = subprocess.run(["git", "apply", "--unsafe-paths", "--directory=.", str(patch)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{patch.name} no longer applies to {', '.join(paths)}: {proc.stderr}"
    assert all((tmp_path / p).read_text() != (ROOT / p).read_text() for p in paths)
    scope = scope_of(paths, family_kernels())
    assert not scope.whole and set(scope.families) == FAMILIES[patch.stem], scope


def test_gpu_script_refuses_an_unknown_change_before_anything_runs(tmp_path):
    shutil.copytree(ROOT / ".ci", tmp_path / ".ci")  # no git history there, no .venv: it must stop first
    proc = subprocess.run(["bash", ".ci/gpu"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "NUMABENCH_GPU_AB_CHANGE": "nope"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("NUMABENCH_GPU_AB_CHANGE=nope: allowed one of: "
                                   + " ".join(sorted(FAMILIES)))
    assert not (tmp_path / ".venv").exists()
