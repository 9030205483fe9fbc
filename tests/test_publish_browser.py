"""numabench publish as a person sees it: the site of the committed baselines opened in a real
headless Chromium. Every page loads without a script error, its charts are drawn with data,
no tick label runs into another or off its chart (site.js measures the drawn labels and says so
on <body>), hovering a point shows its values and the wheel zooms (site.js's #selftest drives
them in the page), and a screenshot is not blank.

Chromium comes from Debian (`apt-get install chromium`); .ci/browser-setup installs it in CI.
With CI=true or NUMABENCH_BROWSER=1 a missing browser fails these tests; elsewhere they skip,
saying how to get one."""
from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import publish_seed_site

from numabench.publish.build import build_site
from numabench.publish.source import dedupe, runs_from_git, runs_from_paths

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ROOT / "baselines"
REQUIRED = os.environ.get("CI") == "true" or os.environ.get("NUMABENCH_BROWSER") == "1"
WINDOW = "1366,900"  # a laptop screen


def chromium() -> str:
    for name in (os.environ.get("NUMABENCH_CHROMIUM") or "", "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    why = ("no Chromium (chromium, chromium-browser or google-chrome on PATH, or NUMABENCH_CHROMIUM): install it "
           "with `bash .ci/browser-setup` (as root: apt-get install chromium)")
    if REQUIRED:
        pytest.fail(f"{why}; required here (CI=true or NUMABENCH_BROWSER=1)")
    pytest.skip(why)


def open_page(browser: str, url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"  # one each: runs side by side never share one
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={profile}", f"--window-size={WINDOW}", "--virtual-time-budget=5000",
           "--enable-logging=stderr", "--v=0", *extra, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def body_of(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    assert m, "no <body> in the rendered page"
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', m.group(1))}


def script_errors(stderr: str) -> list[str]:
    # Chromium logs the page's console to stderr: uncaught exceptions and console.error
    return [line for line in stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "rror" in line)]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser-site") / "site"
    runs = runs_from_paths([BASELINES])
    if (ROOT / ".git").exists():  # every committed run: histories of several points, bands, change points
        runs = dedupe(runs + runs_from_git(BASELINES))
    build_site(runs, out, source="baselines")
    return out


def pages_to_check(site: Path) -> list[Path]:
    """The index, every NUMA page and each key's largest family page (the most charts)."""
    pages = [site / "index.html", *sorted(site.glob("*--numa.html"))]
    by_key: dict[str, list[Path]] = {}
    for p in site.glob("*--*.html"):
        if not p.name.endswith("--numa.html"):
            by_key.setdefault(p.name.split("--")[0], []).append(p)
    pages += [max(ps, key=lambda p: p.stat().st_size) for _, ps in sorted(by_key.items())]
    return pages


def check_page(browser: str, page: Path, tmp: Path, min_charts: int) -> dict[str, str]:
    res = open_page(browser, page.as_uri() + "#selftest", tmp, "--dump-dom")
    assert res.returncode == 0, f"{page.name}: chromium exit {res.returncode}: {res.stderr[-500:]}"
    assert not script_errors(res.stderr), f"{page.name}: {script_errors(res.stderr)[:3]}"
    body = body_of(res.stdout)
    assert body.get("data-rendered") == "ok", f"{page.name}: site.js did not finish: {body}"
    assert "data-errors" not in body, f"{page.name}: {body['data-errors']}"
    charts, points = int(body["data-charts"]), int(body["data-points"])
    assert charts >= min_charts, f"{page.name}: {charts} charts drawn"
    if charts:
        assert points > 0, f"{page.name}: charts without data"
        assert res.stdout.count("<svg") >= charts, f"{page.name}: fewer SVGs than charts"
        expected = "hover=ok zoom=ok reset=ok" + (" filter=ok" if 'id="filter"' in page.read_text() else "")
        assert body.get("data-selftest") == expected, f"{page.name}: {body.get('data-selftest')}"
    assert body["data-label-issues"] == "0", f"{page.name}: {body.get('data-label-issue-list')}"
    return body


def test_every_kind_of_page_loads_and_draws(site, tmp_path):
    browser = chromium()
    checked = []
    for page in pages_to_check(site):
        numa_without_choice = page.name.endswith("--numa.html") and "data-chart=" not in page.read_text()
        check_page(browser, page, tmp_path, 0 if page.name == "index.html" or numa_without_choice else 1)
        checked.append(page.name)
    assert any(p.endswith("--numa.html") for p in checked) and len(checked) >= 3


def test_the_weighted_interleave_model_beside_the_measurements(tmp_path):
    browser = chromium()
    out = publish_seed_site(tmp_path)
    body = check_page(browser, next(out.glob("*--numa.html")), tmp_path, 10)
    assert int(body["data-points"]) > 100


def test_a_screenshot_is_not_blank(site, tmp_path):
    from PIL import Image

    browser = chromium()
    page = max(site.glob("*--numa.html"), key=lambda p: p.stat().st_size)
    shot = tmp_path / "numa.png"
    res = open_page(browser, page.as_uri(), tmp_path, f"--screenshot={shot}")
    assert res.returncode == 0 and shot.is_file(), res.stderr[-500:]
    img = Image.open(shot).convert("RGB")
    assert img.size == tuple(int(v) for v in WINDOW.split(","))
    colours = img.getcolors(maxcolors=1 << 20) or []
    background = max(colours)[0] if colours else 0
    assert len(colours) > 50, f"{len(colours)} colours: a blank page"
    assert background < 0.95 * img.size[0] * img.size[1], "the page is almost all one colour"
    # the charts' lines are drawn in colour, not only the grey of text and frames
    assert sum(n for n, (r, g, b) in colours if max(r, g, b) - min(r, g, b) > 60) > 500


def test_a_long_history_keeps_its_run_labels_apart(tmp_path):
    """40 runs of one key: the x axis of a history shows as many run labels as fit, none over another."""
    browser = chromium()
    runs = []
    for k in range(40):
        v = 1.0 + (0.5 if k >= 20 else 0.0)
        x = {"family": "touch", "phase": "touch", "nprocess": 1, "numel": 1 << 20, "dtype": "fp32",
             "policy": "bind:0", "invocation_medians_s": [v, v * 1.01, v * 0.99]}
        bench = {"name": "test_touch[x]", "fullname": "benchmarks/test_touch.py::test_touch[x]", "extra_info": x,
                 "stats": {"median": v, "mean": v}}
        runs.append((f"{k + 1:04d}_a-rather-long-run-name.json",
                     {"machine_info": {"numabench": {"hardware_key": "K40", "machine_instance": f"box{k % 3}"}},
                      "commit_info": {"id": f"{k:040x}"}, "datetime": f"2026-01-{k // 24 + 1:02d}T{k % 24:02d}:00:00",
                      "benchmarks": [bench]}))
    build_site(runs, tmp_path / "site")
    body = check_page(browser, tmp_path / "site" / "K40--touch.html", tmp_path, 2)
    assert int(body["data-points"]) == 80  # the sparkline's 40 and the large chart's 40
