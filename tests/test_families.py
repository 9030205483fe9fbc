"""The families' one registry (numabench/families/<key>/) and everything that must agree
with it: each family's worker is found by the same key, each has its benchmark module,
the README's family table lists exactly them, as their descriptions render it
(numabench.families.listing, `numabench plan --list`), and .ci/gpu benchmarks every family (the smoke
tier). A folder is all a new family needs to be found; this says what else
to touch."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.families import FAMILIES, family, listing
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


def test_the_readme_table_is_the_one_the_families_render():
    """The README's family table is rendered from each Family's description and needs (what
    `numabench plan --list` prints): edit those, then regenerate it."""
    readme = (ROOT / "README.md").read_text()
    assert listing.readme_table(readme) == listing.render_markdown(), (
        "README.md's family table differs from the families' description/needs: regenerate it with "
        "`numabench plan --list --readme README.md`")


def test_a_description_edited_without_regenerating_fails_the_readme_check(monkeypatch):
    readme = (ROOT / "README.md").read_text()
    monkeypatch.setattr(family("touch"), "description", "memset, reworded | with a pipe")
    rendered = listing.render_markdown()
    assert listing.readme_table(readme) != rendered
    assert "| `touch` | memset, reworded \\| with a pipe | nothing |" in rendered  # a pipe kept in its cell
    regenerated = listing.replace_readme_table(readme)
    assert listing.readme_table(regenerated) == rendered
    assert regenerated.replace(rendered, "") == readme.replace(listing.readme_table(readme), "")  # nothing else


def test_what_a_family_needs_agrees_with_its_requirements():
    for key in FAMILIES:
        fam = family(key)
        assert fam.needs, key
        if fam.needs_gpu:
            assert "GPU" in fam.needs, f"{key} needs a GPU (needs_gpu): its needs must say so"
        else:
            assert fam.needs.startswith("nothing"), f"{key} runs without a GPU: its needs start with 'nothing'"
        if fam.min_gpus_per_case(None) > 1:
            assert f"{fam.min_gpus_per_case(None)}+ GPUs" in fam.needs, key


def test_plan_list_prints_every_family_with_what_it_needs(capsys):
    from numabench.cli import main

    assert main(["plan", "--list"]) == 0
    out = capsys.readouterr().out
    assert [ln for ln in out.splitlines() if ln and not ln.startswith(" ")] == list(FAMILIES)
    assert out.count("    needs: ") == len(FAMILIES)
    assert "needs: 2+ GPUs" in out and "needs: nothing" in out
    assert main(["plan", "--list", "--markdown"]) == 0
    assert capsys.readouterr().out == listing.render_markdown()


def test_plan_list_readme_rewrites_the_table_and_nothing_else(tmp_path, capsys):
    from numabench.cli import main

    readme = (ROOT / "README.md").read_text()
    stale = readme.replace(listing.readme_table(readme), listing.TABLE_HEADER[0] + "\n|---|---|---|\n| `x` | y | z |\n")
    path = tmp_path / "README.md"
    path.write_text(stale)
    assert main(["plan", "--list", "--readme", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: family table rewritten ({len(FAMILIES)} families)\n"
    assert path.read_text() == readme
    assert main(["plan", "--list", f"--readme={path}"]) == 0
    assert "family table up to date" in capsys.readouterr().out
    (tmp_path / "other.md").write_text("# no table here\n")
    assert main(["plan", "--list", "--readme", str(tmp_path / "other.md")]) == 2
    assert "no family table" in capsys.readouterr().err
    assert main(["plan", "--markdown"]) == 2
    assert "go with --list" in capsys.readouterr().err


def test_the_gpu_script_benchmarks_every_family():
    """.ci/gpu's benchmark subset is the CI job in the smoke tier, which takes every family
    (tests/test_tiers.py): no family list of its own to keep in step with the registry."""
    script = (ROOT / ".ci" / "gpu").read_text()
    assert re.search(r"NUMABENCH_TIER=\$\{NUMABENCH_GPU_GATE_TIER:-smoke\}.*\n.*bash \.ci/gate-job all", script)
    assert re.search(r"NUMABENCH_GPU_FAMILIES:-\}", script)  # the per-family runs only where asked for
