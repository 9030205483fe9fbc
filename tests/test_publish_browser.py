"""numabench publish as a person sees it: the site of the committed baselines opened in a real
headless Chromium. Every page loads without a script error, its charts are drawn with data,
no tick label runs into another, off its chart or repeats another on one axis (site.js measures
the drawn labels and says so on <body>; the drawn SVG is read here too), hovering a point shows
its values, the wheel zooms, a "what changed" link and a row click bring the chart panel and the
row into view (site.js's #selftest drives them in the page), and a screenshot is not blank.

What the pages claim, read from what the browser drew: the index leads with "what changed" on
its first screen (1366x900) and every link there reaches its row; every history point stands on
invocations that run measured (checked against the run files themselves); every change point's
colour is its sign's (slower red, faster green); a band is a bar at its point, never an area.

Chromium comes from Debian (`apt-get install chromium`); .ci/browser-setup installs it in CI.
With CI=true or NUMABENCH_BROWSER=1 a missing browser fails these tests; elsewhere they skip,
saying how to get one."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import publish_seed_site

from numabench.gate.invocations import invocation_medians
from numabench.publish.build import build_site
from numabench.publish.source import dedupe, runs_from_git, runs_from_paths

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ROOT / "baselines"
REQUIRED = os.environ.get("CI") == "true" or os.environ.get("NUMABENCH_BROWSER") == "1"
WINDOW = "1366,900"  # a laptop screen
SCREEN_HEIGHT = 900
SLOWER, FASTER = "#d62728", "#2ca02c"  # site.js's colours of a change point


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
def site_runs() -> list:
    runs = runs_from_paths([BASELINES])
    if (ROOT / ".git").exists():  # every committed run: histories of several points, bands, change points
        runs = dedupe(runs + runs_from_git(BASELINES))
    return runs


@pytest.fixture(scope="module")
def site(tmp_path_factory, site_runs) -> Path:
    out = tmp_path_factory.mktemp("browser-site") / "site"
    build_site(site_runs, out, source="baselines")
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


def check_page(browser: str, page: Path, tmp: Path, min_charts: int) -> tuple[dict[str, str], str]:
    """The page's <body> attributes and its rendered DOM, after the checks every page passes."""
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
        assert body.get("data-selftest") == expected_selftest(page.read_text()), \
            f"{page.name}: {body.get('data-selftest')}"
    assert body["data-label-issues"] == "0", f"{page.name}: {body.get('data-label-issue-list')}"
    for svg in drawn(res.stdout):
        for cls in ("xt", "yt"):  # read here too: site.js's own count is not the only witness
            labels = svg["texts"][cls]
            assert len(set(labels)) == len(labels), f"{page.name}: two {cls} labels read the same: {labels}"
    return body, res.stdout


def expected_selftest(text: str) -> str:
    """What #selftest reports on a page: hover, zoom and reset on any chart; on a family page also
    the filter, a "what changed" link followed to its row, and the last row clicked: each time the
    chart panel and the row in view, the panel showing that row's history."""
    if 'id="filter"' not in text:
        return "hover=ok zoom=ok reset=ok"
    block = re.search(r'<section id="what-changed".*?</section>', text, re.S)
    link = " link=ok" if block and re.search(r'<a href="[^"]*#', block.group(0)) else ""
    return "hover=ok zoom=ok reset=ok filter=ok" + link + " inview=ok"


class DrawnCharts(HTMLParser):
    """Each <svg> of a rendered page: the chart it draws (its host's data-chart, or "detail"), its
    tick labels by class, change-point lines, points, band bars and any polygon."""

    def __init__(self) -> None:
        super().__init__()
        self.host: str | None = None
        self.svgs: list[dict] = []
        self.svg: dict | None = None
        self.text: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "div" and "data-chart" in a:
            self.host = a["data-chart"]
        elif tag == "div" and a.get("id") == "detail":
            self.host = "detail"
        elif tag == "svg":
            self.svg = {"host": self.host, "texts": defaultdict(list), "changes": [], "points": [], "bars": [],
                        "polygons": 0}
            self.svgs.append(self.svg)
        if self.svg is None:
            return
        cls = a.get("class", "").split()
        if tag == "text":
            self.text = (cls[0] if cls else "", [])
        elif tag == "line" and "change" in cls:
            self.svg["changes"].append(a)
        elif tag == "circle":
            self.svg["points"].append(a.get("data-x"))
        elif tag == "rect" and "bandbar" in cls:
            self.svg["bars"].append(a.get("data-x"))
        elif tag == "polygon":
            self.svg["polygons"] += 1

    def handle_data(self, data):
        if self.text is not None:
            self.text[1].append(data)

    def handle_endtag(self, tag):
        if tag == "text" and self.text is not None and self.svg is not None:
            self.svg["texts"][self.text[0]].append("".join(self.text[1]))
            self.text = None
        elif tag == "svg":
            self.svg, self.host = None, None


def drawn(dom: str) -> list[dict]:
    parser = DrawnCharts()
    parser.feed(dom)
    return parser.svgs


def page_data(page: Path) -> dict:
    m = re.search(r'<script type="application/json" id="site-data">(.*?)</script>', page.read_text(), re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def rendered(site, tmp_path_factory) -> dict[str, tuple[dict[str, str], str]]:
    """Each page of pages_to_check opened once: its <body> attributes and DOM."""
    browser = chromium()
    tmp = tmp_path_factory.mktemp("browser-profiles")
    out = {}
    for page in pages_to_check(site):
        numa_without_choice = page.name.endswith("--numa.html") and "data-chart=" not in page.read_text()
        out[page.name] = check_page(browser, page, tmp, 0 if page.name == "index.html" or numa_without_choice else 1)
    return out


def test_every_kind_of_page_loads_and_draws(rendered):
    assert any(p.endswith("--numa.html") for p in rendered) and len(rendered) >= 3
    assert any("--" in p and not p.endswith("--numa.html") for p in rendered)


def test_the_index_shows_what_changed_on_the_first_screen(site, rendered, tmp_path):
    """The newest verdicts need no scrolling at 1366x900, and every link there reaches its row."""
    body, dom = rendered["index.html"]
    top, bottom = (int(v) for v in body["data-changed-box"].split(","))
    assert 0 <= top < bottom <= SCREEN_HEIGHT, f"the what-changed block lies at {top}..{bottom} px"
    block = re.search(r'<section id="what-changed".*?</section>', dom, re.S).group(0)
    assert block.count('class="chg-key"') == len(list(site.glob("*--numa.html")))  # one part per key
    links = re.findall(r'<a href="([^"]+)"', block)
    assert any("#" in h and not h.startswith("#") for h in links), "no entry linked"
    for href in links:
        file, _, anchor = href.partition("#")
        target = (site / file).read_text() if file else dom
        assert not anchor or f'id="{anchor}"' in target, href
    shot = tmp_path / "index.png"
    res = open_page(chromium(), (site / "index.html").as_uri(), tmp_path, f"--screenshot={shot}")
    assert res.returncode == 0 and shot.is_file(), res.stderr[-500:]


def _family_pages(rendered) -> list[str]:
    return [p for p in rendered if "--" in p and not p.endswith("--numa.html")]


def test_every_history_point_stands_on_a_measurement_of_that_run(site, site_runs, rendered):
    """Read from the drawn points: a point at run k of an entry only where run k's entry holds an
    invocation median no earlier run of the key held (a merge copies the medians it carries)."""
    by_label = dict(site_runs)
    checked = 0
    for name in _family_pages(rendered):
        data = page_data(site / name)
        runs = [by_label[source] for _, source in data["runs"]]
        held = [{b["fullname"]: invocation_medians(b) for b in r["benchmarks"] if "fullname" in b} for r in runs]
        for svg in drawn(rendered[name][1]):
            if svg["host"] in (None, "detail"):
                continue
            entry = data["charts"][int(svg["host"])]["entry"]
            for x in map(int, svg["points"]):
                earlier = {m for k in range(x) for m in held[k].get(entry, [])}
                assert set(held[x].get(entry, [])) - earlier, f"{name}: {entry}: a point at {data['runs'][x][0]}"
                checked += 1
            # a bar only at a point: the band of that run's invocations, nothing between runs
            assert svg["polygons"] == 0 and set(svg["bars"]) <= set(svg["points"]), f"{name}: {entry}"
    assert checked > 100


def test_a_change_points_colour_is_its_signs(site, rendered):
    """Each drawn change line against the percentage the chart states for it: + red, - green."""
    colours = defaultdict(int)
    for name in _family_pages(rendered):
        data = page_data(site / name)
        for svg in drawn(rendered[name][1]):
            if svg["host"] in (None, "detail"):
                continue
            stated = [v[3] for v in data["charts"][int(svg["host"])]["vlines"]]
            strokes = [line["stroke"] for line in svg["changes"]]
            assert len(strokes) == len(stated), name
            for text, stroke in zip(stated, strokes):
                assert stroke == (SLOWER if text.startswith("+") else FASTER), f"{name}: {text} drawn {stroke}"
                colours[stroke] += 1
    assert colours[SLOWER] and colours[FASTER], dict(colours)  # the baselines hold both directions


def test_the_weighted_interleave_model_beside_the_measurements(tmp_path):
    browser = chromium()
    out = publish_seed_site(tmp_path)
    body, dom = check_page(browser, next(out.glob("*--numa.html")), tmp_path, 10)
    assert int(body["data-points"]) > 100
    # an axis spans at least 10% of its values: a model within 1% of a measurement looks close
    # (the seed's 1.84M copies lie within 0.5% of each other)
    for svg in drawn(dom):
        ticks = [float(t) for t in svg["texts"]["yt"]]
        assert ticks and (max(ticks) - min(ticks)) / max(ticks) > 0.05, ticks


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
        v = (1.0 + (0.5 if k >= 20 else 0.0)) * (1 + k / 1e4)  # each run its own measurement
        x = {"family": "touch", "phase": "touch", "nprocess": 1, "numel": 1 << 20, "dtype": "fp32",
             "policy": "bind:0", "invocation_medians_s": [v, v * 1.01, v * 0.99]}
        bench = {"name": "test_touch[x]", "fullname": "benchmarks/test_touch.py::test_touch[x]", "extra_info": x,
                 "stats": {"median": v, "mean": v}}
        runs.append((f"{k + 1:04d}_a-rather-long-run-name.json",
                     {"machine_info": {"numabench": {"hardware_key": "K40", "machine_instance": f"box{k % 3}"}},
                      "commit_info": {"id": f"{k:040x}"}, "datetime": f"2026-01-{k // 24 + 1:02d}T{k % 24:02d}:00:00",
                      "benchmarks": [bench]}))
    build_site(runs, tmp_path / "site")
    body, _ = check_page(browser, tmp_path / "site" / "K40--touch.html", tmp_path, 2)
    assert int(body["data-points"]) == 80  # the sparkline's 40 and the large chart's 40


def test_an_ab_page_draws_its_ratios_and_the_index_leads_with_what_needs_a_look(site_runs, tmp_path):
    """An A/B run measured on an H100 (tests/data/ab) published beside the baselines: its page loads
    and draws every entry's ratio with its interval, its what-changed block starts on the first
    screen, and the index's first screen names it as needing a look."""
    from numabench.publish.source import ab_from_paths

    _, ab = ab_from_paths([ROOT / "tests" / "data" / "ab" / "h100-smoke-inject5.json"])
    out = tmp_path / "site"
    build_site(site_runs, out, source="baselines", ab=ab)
    browser = chromium()
    body, dom = check_page(browser, out / "ab-h100-smoke-inject5.html", tmp_path, 1)
    assert int(body["data-points"]) >= 10  # every entry drawn
    top, _ = (int(v) for v in body["data-changed-box"].split(","))
    assert 0 <= top < SCREEN_HEIGHT / 2, f"the A/B page's what-changed block starts at {top} px"
    body, dom = check_page(browser, out / "index.html", tmp_path, 0)
    look = dom.index("Needs a look")
    assert "h100-smoke-inject5.json" in dom[look:look + 2000]
    top, bottom = (int(v) for v in body["data-changed-box"].split(","))
    assert 0 <= top < SCREEN_HEIGHT, f"the what-changed block lies at {top}..{bottom} px"
