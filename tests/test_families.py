"""The families' one registry (numabench/families/<key>/) and everything that must agree
with it: each family's worker is found by the same key, each has its benchmark module,
the README's family table lists exactly them, and .ci/gpu benchmarks every family (the smoke
tier). A folder is all a new family needs to be found; this says what else
to touch."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.families import FAMILIES, family
from numabench.families.base import Family

ROOT = Path(__file__).resolve().parents[1]
FAMILY_DIR = ROOT / "numabench" / "families"


def test_every_folder_is_a_registered_family_and_nothing_else_is():
    folders = sorted(p.name for p in FAMILY_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert list(FAMILIES) == folders
    for key in FAMILIES:
        fam = family(key)
        assert isinstance(fam, Family) and fam.key == key, key
        assert fam.phases and fam.description, key


@pytest.mark.parametrize("key", FAMILIES)
def test_each_family_has_a_worker_and_a_benchmark_module(key):
    worker = FAMILY_DIR / key / "worker.py"
    tree = ast.parse(worker.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "Worker" in classes, f"{worker} defines no Worker"
    assert [ast.unparse(b) for b in classes["Worker"].bases] == ["BaseWorker"], \
        f"{worker}: Worker must subclass numabench.families.base.Worker"
    module = ROOT / "benchmarks" / f"test_{key}.py"
    assert module.exists(), f"{module} is missing"
    assert re.search(rf'^FAMILY_KEY = "{key}"$', module.read_text(), re.M), module


def test_the_worker_lookup_finds_each_familys_worker():
    # In a child: worker modules may import torch, and the pytest process must not
    # (tests/test_torch_free.py).
    code = ("from numabench.families import FAMILIES, worker_class\n"
            "from numabench.families.base import Worker\n"
            "bad = [k for k in FAMILIES if not issubclass(worker_class(k), Worker)]\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    with pytest.raises(KeyError, match="unknown family 'nope': allowed adam_offload, broadcast"):
        family("nope")


def test_the_readme_table_lists_every_family():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## The families"):]
    rows = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(rows) == sorted(FAMILIES)


def test_the_gpu_script_benchmarks_every_family():
    """.ci/gpu's benchmark subset is the CI job in the smoke tier, which takes every family
    (tests/test_tiers.py): no family list of its own to keep in step with the registry."""
    script = (ROOT / ".ci" / "gpu").read_text()
    assert re.search(r"NUMABENCH_TIER=\$\{NUMABENCH_GPU_GATE_TIER:-smoke\}.*\n.*bash \.ci/gate-job all", script)
    assert re.search(r"NUMABENCH_GPU_FAMILIES:-\}", script)  # the per-family runs only where asked for
