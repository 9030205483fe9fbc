"""The time plan counts the kernel builds a run will wait for: a kernel the selected cases need
that is not built for these sources and this torch adds as long as its last build here took,
else a stated default, and the plan line says which and why."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.cases import Case
from numabench.families import family
from numabench.kernels import built, prebuild
from numabench.kernels.build import LOADED_STAMP
from numabench.numa.policy import Policy
from numabench.plan import KERNEL_BUILD_S, KERNEL_CACHED_S, KERNEL_LOADED_S, plan_runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def build_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "build"
    monkeypatch.setenv("NUMABENCH_BUILD_DIR", str(folder))
    return folder


def _runs(*keys: str) -> list[tuple]:
    out = []
    for key in keys:
        fam = family(key)
        case = Case(key, 1, 1 << 20, Policy.parse("default"), "fp32",
                    tuple((a, v[0]) for a, v in fam.extra_axes.items()))
        out.append((key, fam, case, 1, 1, 10, 3))
    return out


def test_a_kernel_not_built_adds_a_default_build_and_says_so(build_dir):
    without = plan_runs(_runs("touch"), None, None, 0)
    plan = plan_runs(_runs("cpu_adam", "touch"), None, None, 0)
    [b] = plan.builds
    assert (b.kernel, b.seconds, b.source) == ("cpu_adam", KERNEL_BUILD_S["cpu_adam"], "default estimate")
    assert plan.runs[0].build_s == KERNEL_BUILD_S["cpu_adam"]
    assert plan.seconds == pytest.approx(sum(r.seconds for r in plan.runs))  # the total includes it
    assert plan.by_family()["cpu_adam"] == pytest.approx(plan.runs[0].seconds - KERNEL_BUILD_S["cpu_adam"])
    assert plan.by_family()["touch"] == without.by_family()["touch"]
    line = plan.summary("ci")
    assert "+ kernel build ~45 s (not built yet: cpu_adam ~45 s, default estimate)" in line, line


def test_a_recorded_build_time_is_the_estimate(build_dir):
    built.record_build_seconds("cpu_adam", 38.24)
    built.record_build_seconds("stream", 21.0)
    assert built.recorded_build_seconds("cpu_adam") == 38.2
    plan = plan_runs(_runs("cpu_adam", "host_membw"), None, None, 0)
    assert [(b.kernel, b.seconds) for b in plan.builds] == [("cpu_adam", 38.2), ("stream", 21.0)]
    assert ("+ kernel build ~59 s (not built yet: cpu_adam ~38 s, as its last build here; stream ~21 s, as its "
            "last build here)") in plan.summary()


def test_a_built_kernel_costs_only_its_check(build_dir):
    folder = built.kernel_dir("cpu_adam")
    assert folder is not None and folder.parent == build_dir and folder.name.startswith("numabench_cpu_adam-torch")
    folder.mkdir(parents=True)
    (folder / "numabench_cpu_adam.so").write_bytes(b"")
    assert built.is_built("cpu_adam")
    plan = plan_runs(_runs("cpu_adam"), None, None, 0)
    model = plan_runs(_runs("touch"), None, None, 0)  # no kernel
    assert plan.builds == [] and "kernel build" not in plan.summary()
    assert plan.runs[0].build_s == 0 and plan.runs[0].seconds > KERNEL_CACHED_S and model.runs[0].seconds > 0
    # loaded from its folder before (the stamp of that very file): found at once, no builder to start
    so = folder / "numabench_cpu_adam.so"
    st = so.stat()
    (folder / LOADED_STAMP).write_text(json.dumps({"file": so.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    assert built.loaded_before("cpu_adam")
    again = plan_runs(_runs("cpu_adam"), None, None, 0)
    assert again.runs[0].seconds == pytest.approx(plan.runs[0].seconds - KERNEL_CACHED_S + KERNEL_LOADED_S)


def test_only_the_kernels_the_selected_cases_need(build_dir):
    # torch's impls only: cpu_adam's kernel is not needed, not built, not counted
    assert plan_runs(_runs("cpu_adam"), None, None, 0, kernels=set()).builds == []
    assert [b.kernel for b in plan_runs(_runs("cpu_adam"), None, None, 0, kernels={"cpu_adam"}).builds] == ["cpu_adam"]


def test_an_unreadable_record_falls_back_to_the_default(build_dir):
    build_dir.mkdir()
    (build_dir / built.TIMES_FILE).write_text("{not json")
    assert built.recorded_build_seconds("cpu_adam") is None
    [b] = plan_runs(_runs("cpu_adam"), None, None, 0).builds
    assert b.source == "default estimate"


@pytest.mark.parametrize("already_built", [False, True])
def test_a_build_records_its_time_only_when_it_compiled(build_dir, monkeypatch, already_built):
    monkeypatch.setitem(prebuild._BUILDERS, "cpu_adam", "import time; time.sleep(0.3)")  # a stand-in builder
    monkeypatch.setattr(built, "is_built", lambda kernel: already_built)
    [(name, status)] = list(prebuild.build_all(["cpu_adam"]))
    assert status.startswith("ready (")
    assert (built.recorded_build_seconds("cpu_adam") is None) == already_built


def _plan(build: Path, *args: str) -> str:
    env = {**os.environ, "NUMABENCH_BUILD_DIR": str(build)}
    out = subprocess.run([sys.executable, "-m", "numabench", "plan", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_numabench_plan_names_the_build(build_dir):
    line = _plan(build_dir, "benchmarks/test_cpu_adam.py", "--numa-policies=default")
    assert "+ kernel build ~45 s (not built yet: cpu_adam ~45 s, default estimate)" in line, line
    # torch's impls need no kernel of ours
    line = _plan(build_dir, "benchmarks/test_cpu_adam.py", "--numa-policies=default", "-k", "torch")
    assert line.startswith("numabench plan: 3 entries") and "kernel build" not in line, line


def test_the_torch_version_is_the_one_torch_reports_not_its_package_metadata(tmp_path):
    """A PyPI CUDA wheel's metadata says 2.11.0 where torch.__version__ (which keys the build
    folders) says 2.11.0+cu130: the plan must read the latter, or every built kernel looks unbuilt."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('the plan must not import torch')\n")
    (site / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n")
    meta = site / "torch-2.11.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n")
    code = "from numabench.kernels import built; print(built.torch_version())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    assert out.stdout.strip() == "2.11.0+cu130"
    assert built.torch_version() == __import__("torch").__version__  # this machine's torch, as it reports it
