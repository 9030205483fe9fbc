"""numabench publish without a browser: the pages a site of the committed baselines has, the
data it embeds (the same numbers as the run files), nothing fetched from the network, the
command line's refusals, and its time budget (under a minute)."""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from numabench.cli import main
from numabench.publish.build import build_site
from numabench.publish.model import hardware_key, slug
from numabench.publish.source import runs_from_paths
from numabench.results.invocations import invocation_medians

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ROOT / "baselines"
SEED = ROOT / "tests" / "data" / "seed"
# The only URL the site may hold: the SVG namespace, a name that is never fetched.
ALLOWED_URLS = {"http://www.w3.org/2000/svg"}


def site_data(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="site-data">(.*?)</script>', text, re.S)
    assert m, f"{page.name}: no embedded data"
    return json.loads(m.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(runs_from_paths([BASELINES]), out, source="baselines")
    return out


def test_every_key_has_its_family_pages_and_a_numa_page(site):
    runs = runs_from_paths([BASELINES])
    assert (site / "index.html").is_file() and (site / "site.js").is_file() and (site / "site.css").is_file()
    index = (site / "index.html").read_text()
    for _, run in runs:
        key = hardware_key(run)
        assert key in index
        assert (site / f"{slug(key)}--numa.html").is_file()
        for fam in {b["extra_info"]["family"] for b in run["benchmarks"] if "family" in b.get("extra_info", {})}:
            page = site / f"{slug(key)}--{slug(fam)}.html"
            assert page.is_file(), page.name
            assert f'href="{page.name}"' in index
        machine = run["machine_info"]["numabench"].get("machine_instance")
        if machine:
            assert machine in index  # the machine each run came from


def test_embedded_data_is_the_run_files_numbers(site):
    runs = runs_from_paths([BASELINES])
    _, run = runs[0]
    key = hardware_key(run)
    bench = next(b for b in run["benchmarks"] if b["extra_info"].get("family") == "transfer")
    data = site_data(site / f"{slug(key)}--transfer.html")
    spec = next(c for c in data["charts"] if c["title"].endswith(
        "policy={} numel={}".format(bench["extra_info"]["policy"], _size(bench["extra_info"]["numel"]))))
    x, v, lo, hi, _ = spec["series"][0]["points"][-1]
    meds = invocation_medians(bench)
    assert v == pytest.approx(statistics.median(meds)) and lo == pytest.approx(min(meds))
    assert hi == pytest.approx(max(meds))


def _size(n: int) -> str:
    from numabench.cases import format_size

    return format_size(n)


def test_no_page_reaches_the_network(site):
    for f in site.iterdir():
        text = f.read_text(encoding="utf-8")
        urls = set(re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}[^\s\"'<>)]*", text))
        assert urls <= ALLOWED_URLS, f"{f.name}: {sorted(urls - ALLOWED_URLS)[:3]}"
        if f.suffix == ".html":
            for ref in re.findall(r'(?:src|href)="([^"]+)"', text):
                assert "://" not in ref and (f.parent / ref.split("#")[0]).exists(), f"{f.name}: {ref}"


def test_the_advisor_and_the_model_for_two_nodes(tmp_path):
    runs = []
    for kind in ("normal", "weighted"):
        path = tmp_path / f"{kind}.json"
        assert main(["import-csv", str(SEED / f"qwen2.5-7B_{kind}_interleave.csv"), "--out", str(path),
                     "--gpu", "seed GPU", "--cpu", "seed host"]) == 0
        runs.append(str(path))
    out = tmp_path / "site"
    assert main(["publish", *runs, "--out", str(out)]) == 0
    numa = next(out.glob("*--numa.html"))
    data = site_data(numa)
    model = [c for c in data["charts"] if c["series"][0]["name"] == "model t(f)"]
    assert model and any(c["series"][3]["points"] for c in model)  # measured weighted beside the model
    assert "Advisor" in numa.read_text() and "fastest weights" in numa.read_text()


def test_refusals_are_one_line_and_exit_2(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    assert main(["publish", str(BASELINES), "--out", str(full)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not empty" in err and "--force" in err and "\n" not in err
    assert (full / "keep.txt").exists()
    assert main(["publish", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["publish", "--out", str(tmp_path / "o")]) == 2
    assert main(["publish", str(BASELINES), "--out", str(full), "--force"]) == 0
    assert not (full / "keep.txt").exists() and (full / "index.html").exists()


def test_the_committed_baselines_publish_in_under_a_minute(tmp_path):
    t0 = time.monotonic()
    history = ["--git"] if (ROOT / ".git").exists() else []  # every committed run, where git is there
    res = subprocess.run([sys.executable, "-m", "numabench", "publish", str(BASELINES), *history, "--out",
                          str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 60
