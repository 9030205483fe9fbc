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
from helpers import publish_seed_site

from numabench.cli import main
from numabench.publish.build import build_site
from numabench.publish.model import hardware_key, slug
from numabench.publish.source import runs_from_paths
from numabench.gate.invocations import invocation_medians

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ROOT / "baselines"
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
    out = publish_seed_site(tmp_path)
    numa = next(out.glob("*--numa.html"))
    data = site_data(numa)
    model = [c for c in data["charts"] if c["series"][0]["name"] == "model t(f)"]
    assert model and any(c["series"][3]["points"] for c in model)  # measured weighted beside the model
    # what each grid prediction stands on (advise's basis) is in its tooltip
    assert any("extrapolated" in p[4] or "model only" in p[4] for c in model for p in c["series"][4]["points"])
    assert "Advisor" in numa.read_text() and "max share on slow node" in numa.read_text()


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
    assert main(["publish", str(BASELINES), "--out", str(full), "--force"]) == 2  # not a site: never deleted
    assert "no site published before" in capsys.readouterr().err and (full / "keep.txt").exists()
    site = tmp_path / "site"
    assert main(["publish", str(BASELINES), "--out", str(site)]) == 0
    (site / "stale.html").write_text("from an older site")
    assert main(["publish", str(BASELINES), "--out", str(site)]) == 2
    assert main(["publish", str(BASELINES), "--out", str(site), "--force"]) == 0
    assert not (site / "stale.html").exists() and (site / "index.html").exists()


def test_the_committed_baselines_publish_in_under_a_minute(tmp_path):
    t0 = time.monotonic()
    history = ["--git"] if (ROOT / ".git").exists() else []  # every committed run, where git is there
    res = subprocess.run([sys.executable, "-m", "numabench", "publish", str(BASELINES), *history, "--out",
                          str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 60


def _entry(seconds: float, invocations: list[float], gate: dict | None = None) -> dict:
    x = {"family": "touch", "phase": "touch", "nprocess": 1, "numel": 1 << 20, "dtype": "fp32", "policy": "bind:0",
         "invocation_medians_s": invocations, "invocation_machines": ["m1"] * len(invocations)}
    if gate:
        x["gate"] = gate
    return {"name": "test_touch[x]", "fullname": "benchmarks/test_touch.py::test_touch[x]", "extra_info": x,
            "stats": {"median": seconds, "mean": seconds, "stddev": 0.0}}


def _run(when: str, bench: dict, machine: str) -> dict:
    return {"machine_info": {"node": "n", "numabench": {"hardware_key": "K1", "machine_instance": machine}},
            "commit_info": {"id": when.replace(":", "")}, "datetime": when, "benchmarks": [bench]}


def test_change_points_and_the_newest_verdict_are_on_the_page(tmp_path):
    gate = {"verdict": "slower", "confirmation": "slower", "beyond_band_pct": 85.0, "why": None}
    runs = [("0001_a.json", _run("2026-01-01T00:00:00", _entry(1.0, [1.0, 1.01, 0.99]), "boxA")),
            ("0002_b.json", _run("2026-01-02T00:00:00", _entry(2.0, [2.0, 2.01, 1.99]), "boxB")),
            ("0003_c.json", _run("2026-01-03T00:00:00", _entry(2.0, [2.0, 2.02, 1.98], gate), "boxC"))]
    site = build_site(runs, tmp_path / "site")
    page = (tmp_path / "site" / "K1--touch.html").read_text()
    spec = site_data(tmp_path / "site" / "K1--touch.html")["charts"][0]
    assert [v[0] for v in spec["vlines"]] == [1]  # the doubling at run 1, confirmed by run 2
    assert 'class="v-slower"' in page and "+85.0%" in page
    index = (tmp_path / "site" / "index.html").read_text()
    assert "1 slower" in index and all(m in index for m in ("boxA", "boxB", "boxC"))
    assert site.keys == 1 and site.runs == 3


@pytest.mark.parametrize("args, text", [
    (["{bad}", "--out", "{d}/o"], "is not valid JSON"),
    (["{base}", "--out", "{d}/o", "--threshold", "abc"], "abc"),
    (["{base}", "--out", "{d}/afile"], "is not a folder"),
], ids=["not-json", "threshold", "out-a-file"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, text):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "afile").write_text("x")
    fill = {"{bad}": str(tmp_path / "bad.json"), "{base}": str(BASELINES / "H200x1_Intel-Xeon_1node_cuda13"),
            "{d}": str(tmp_path)}
    argv = [a for a in args]
    for k, v in fill.items():
        argv = [a.replace(k, v) for a in argv]
    res = subprocess.run([sys.executable, "-m", "numabench", "publish", *argv], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and text in lines[0], res.stdout + res.stderr


def test_browser_setup_without_a_browser_names_the_command(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "mktemp", "id", "grep", "timeout", "rm", "head"):
        (bin_dir / tool).symlink_to(subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True,
                                                   text=True, check=True).stdout.strip())
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    for extra in ({}, {"CI": "true", "NUMABENCH_BROWSER_APT": "0"}):
        res = subprocess.run([str(bin_dir / "bash"), str(ROOT / ".ci" / "browser-setup")], env={**env, **extra},
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stderr.strip().splitlines() == [
            "browser-setup: ERROR: no Chromium on PATH; install it with `apt-get install -y --no-install-recommends "
            "chromium` (as root), or let this script do it: NUMABENCH_BROWSER_APT=1 bash .ci/browser-setup"]
