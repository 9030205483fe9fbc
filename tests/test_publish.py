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
    with (site / ".numabench-site").open("a") as manifest:
        manifest.write("stale.html\n")  # as the publish that wrote it listed it
    (site / "notes.txt").write_text("the user's own")
    (site / "mine").mkdir()
    (site / "mine" / "a.txt").write_text("also the user's")
    assert main(["publish", str(BASELINES), "--out", str(site)]) == 2
    assert main(["publish", str(BASELINES), "--out", str(site), "--force"]) == 0
    assert not (site / "stale.html").exists() and (site / "index.html").exists()
    # --force removes only what a publish wrote: the user's other files stay (they were deleted)
    assert (site / "notes.txt").read_text() == "the user's own" and (site / "mine" / "a.txt").exists()
    # a site published before manifests: its pages and assets are the publish's, the rest the user's
    (site / ".numabench-site").unlink()
    (site / "old-page.html").write_text("an older publish's page")
    assert main(["publish", str(BASELINES), "--out", str(site), "--force"]) == 0
    assert not (site / "old-page.html").exists() and (site / "notes.txt").exists()


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


# --- what a reader sees first, and histories that show only what was measured -------------------

# each case its own size: its chart's title (group: policy and size) names it
CASE_NUMEL = {case: (k + 1) << 20 for k, case in enumerate(("a", "b", "c", "d", "up", "down", "weak"))}


def _bench(case: str, invocations: list[float], *, sources: list[str] | None = None, machines: list | None = None,
           gate: dict | None = None, numel: int | None = None, policy: str = "bind:0", family: str = "touch") -> dict:
    numel = numel or CASE_NUMEL.get(case, 1 << 20)
    x = {"family": family, "phase": "touch", "nprocess": 1, "numel": numel, "dtype": "fp32", "policy": policy,
         "invocation_medians_s": invocations}
    if sources:
        x["invocation_sources"] = sources
    if machines:
        x["invocation_machines"] = machines
    if gate:
        x["gate"] = gate
    name = f"test_{family}[{case}]"
    return {"name": name, "fullname": f"benchmarks/test_{family}.py::{name}", "extra_info": x,
            "stats": {"median": statistics.median(invocations), "mean": statistics.mean(invocations)}}


def _keyrun(when: str, benches: list[dict], machine: str = "box", commit: str = "", nodes: int = 1) -> dict:
    return {"machine_info": {"node": "n", "numabench": {"hardware_key": "K1", "machine_instance": machine,
                                                        "numa_nodes": nodes}},
            "commit_info": {"id": commit or when.replace(":", "").replace("-", "")}, "datetime": when,
            "benchmarks": benches}


def _chart(site: Path, page: str, case: str) -> dict:
    want = f"numel={_size(CASE_NUMEL[case])}"
    return next(c for c in site_data(site / page)["charts"] if c["title"].endswith(want))


def _changed_section(html_text: str) -> str:
    m = re.search(r'<section id="what-changed".*?</section>', html_text, re.S)
    assert m, "no what-changed block"
    return m.group(0)


def test_a_history_point_is_a_runs_own_measurement(tmp_path):
    """A merge carries an entry forward (the same medians, now labelled) and later pools new
    invocations into it: the history has a point at the run that measured it and at the run that
    added invocations, made of those alone, and none where it was only carried."""
    first = [1.0, 1.01, 0.99]
    src = ["0001_a.json (vm, 2026-01-01)"] * 3
    runs = [("0001_a.json", _keyrun("2026-01-01T00:00:00", [_bench("a", first)])),
            ("0002_b.json", _keyrun("2026-01-02T00:00:00", [_bench("a", first, sources=src),
                                                            _bench("b", [2.0, 2.02])])),
            ("0003_c.json", _keyrun("2026-01-03T00:00:00", [_bench("a", first, sources=src),
                                                            _bench("b", [2.0, 2.02], sources=["0002"] * 2)])),
            ("0004_d.json", _keyrun("2026-01-04T00:00:00", [
                _bench("a", first + [1.2, 1.22, 1.18], sources=src + ["new.json"] * 3),
                _bench("b", [2.0, 2.02], sources=["0002"] * 2)]))]
    build_site(runs, tmp_path / "site")
    a = _chart(tmp_path / "site", "K1--touch.html", "a")
    assert [(p[0], p[1], p[2], p[3]) for p in a["series"][0]["points"]] == [(0, 1.0, 0.99, 1.01),
                                                                            (3, pytest.approx(1.2), 1.18, 1.22)]
    b = _chart(tmp_path / "site", "K1--touch.html", "b")
    assert [p[0] for p in b["series"][0]["points"]] == [1]  # measured once, carried twice: one point
    assert "1 of 3" in (tmp_path / "site" / "K1--touch.html").read_text()  # its row: measured in 1 of the 3 runs
    # the axis still spans every run of the key, each named once
    assert a["xspan"] == [0, 3] and len({t[1] for t in a["xticks"]}) == 4


def test_change_points_are_coloured_by_their_direction(tmp_path):
    """A slower and a faster change point: each says its direction (the chart's line, the row's
    text), so a -30% never reads like a +50%; one that coincides with a machine joining, or whose
    new band still holds the previous value, says so."""
    def run(k: int, up: float, down: float, weak: list[float], machine: str) -> tuple[str, dict]:
        jitter = 1 + k / 1000  # each run its own measurement
        return (f"000{k}_r.json", _keyrun(f"2026-01-0{k}T00:00:00", [
            _bench("up", [up * jitter, up * 1.01, up * 0.99], machines=[machine] * 3),
            _bench("down", [down * jitter, down * 1.01, down * 0.99], machines=[machine] * 3),
            _bench("weak", [w * jitter for w in weak], machines=["m1"] * 3)], machine=machine))
    runs = [run(1, 1.0, 1.0, [1.0, 1.01, 0.99], "m1"), run(2, 1.5, 0.7, [1.2, 1.21, 0.98], "m2"),
            run(3, 1.5, 0.7, [1.2, 1.21, 0.98], "m2")]
    build_site(runs, tmp_path / "site")
    page = (tmp_path / "site" / "K1--touch.html").read_text()
    up, down, weak = (_chart(tmp_path / "site", "K1--touch.html", c) for c in ("up", "down", "weak"))
    assert [v[2] for v in up["vlines"]] == [1] and up["vlines"][0][3].startswith("+")
    assert [v[2] for v in down["vlines"]] == [-1] and down["vlines"][0][3].startswith("-")
    assert re.search(r'class="v-slower"[^>]*>0002 01-02 00:00: \+50\.\d%', page)
    assert re.search(r'class="v-faster"[^>]*>0002 01-02 00:00: -29\.\d%', page)
    assert "coincides with m2 joining" in up["vlines"][0][1] and "inside" not in up["vlines"][0][1]
    (w,) = weak["vlines"]
    assert "the previous value lies inside this run's band" in w[1] and "joining" not in w[1] and w[3].endswith("*")


def test_the_band_is_a_bar_at_each_measurement_never_an_area_between_runs(tmp_path):
    runs = [(f"000{k}_r.json", _keyrun(f"2026-01-0{k}T00:00:00", [_bench("a", v)]))
            for k, v in ((1, [1.0, 1.01, 0.99]), (2, [2.0, 2.2, 1.8]))]
    build_site(runs, tmp_path / "site")
    spec = _chart(tmp_path / "site", "K1--touch.html", "a")
    (series,) = spec["series"]
    assert series["band"] == "bars"  # site.js: one bar per point from lo to hi
    assert [(p[2], p[3]) for p in series["points"]] == [(0.99, 1.01), (1.8, 2.2)]
    js = (tmp_path / "site" / "site.js").read_text()
    assert "polygon" not in js  # nothing draws an area from one run's band to the next


def _gated_site(tmp_path: Path) -> Path:
    slow = {"verdict": "slower", "confirmation": "slower", "beyond_band_pct": 12.0, "why": None}
    slight = {"verdict": "slower", "confirmation": "same", "beyond_band_pct": 4.0, "why": None}
    fast = {"verdict": "faster", "confirmation": None, "beyond_band_pct": -20.0, "why": None}
    same = {"verdict": "same", "confirmation": None, "beyond_band_pct": -1.0, "why": None}
    old = [_bench(c, [1.0, 1.01, 0.99]) for c in ("a", "b", "c", "d")]
    new = [_bench("a", [1.2, 1.21, 1.19], gate=slow), _bench("b", [1.06, 1.07, 1.05], gate=slight),
           _bench("c", [0.7, 0.71, 0.69], gate=fast), _bench("d", [1.0, 1.02, 0.98], gate=same)]
    runs = [("0001_base.json", _keyrun("2026-01-01T00:00:00", old, machine="boxA", commit="aaaa1111")),
            ("run.json", _keyrun("2026-01-02T03:04:00", new, machine="boxB", commit="bbbb2222cccc"))]
    build_site(runs, tmp_path / "site")
    return tmp_path / "site"


def test_the_index_and_each_family_page_lead_with_what_changed(tmp_path):
    """The newest run's verdicts come first: named, dated, with its commit and machine; the gate's
    verdicts with slower and faster entries largest change first, coloured, each linked to its
    row; the families before the runs, and the runs folded."""
    site = _gated_site(tmp_path)
    index = (site / "index.html").read_text()
    main = index.split("<main>", 1)[1]
    assert main.lstrip().startswith('<section id="what-changed"')
    block = _changed_section(index)
    for text in ("run 01-02 03:04", "2026-01-02 03:04 UTC", "bbbb2222", "boxB", "regression gate"):
        assert text in block, text
    assert re.search(r'class="v-slower">2 slower</span>, <span class="v-faster">1 faster</span>, '
                     r'<span class="v-same">1 same', block)
    pcts = re.findall(r'<td class="num v-(slower|faster)">([+-][\d.]+)%', block)
    assert pcts == [("faster", "-20.0"), ("slower", "+12.0"), ("slower", "+4.0")]  # largest change first
    assert "not confirmed" in block  # the slower one its confirmation cleared says so
    for href in re.findall(r'<a href="([^"#]+)#([^"]+)"', block):
        target = (site / href[0]).read_text()
        assert f'id="{href[1]}"' in target, href
    assert index.index('class="families"') < index.index('<details class="runs">')
    family = (site / "K1--touch.html").read_text()
    assert family.split("<main>", 1)[1].lstrip().startswith('<section id="what-changed"')
    assert _changed_section(family).count("<tr>") == 3


def test_a_run_not_gated_is_judged_against_the_previous_measurement_and_says_so(tmp_path):
    runs = [("0001_a.json", _keyrun("2026-01-01T00:00:00", [_bench("a", [1.0, 1.01, 0.99]),
                                                            _bench("b", [1.0, 1.01, 0.99])])),
            ("0002_b.json", _keyrun("2026-01-02T00:00:00", [_bench("a", [1.5, 1.51, 1.49]),
                                                            _bench("b", [1.0, 1.01, 0.99])]))]
    build_site(runs, tmp_path / "site")
    block = _changed_section((tmp_path / "site" / "index.html").read_text())
    assert "not judged by the gate" in block and "+50.0%" in block
    assert "1 entry measured in this run, 1 carried from earlier runs" in block


def test_one_name_per_run_on_every_axis_and_table(tmp_path):
    """git's versions of one file, two of them at one code commit: each run one name, never two
    alike on an axis, the same on the axis, in the runs table and in the page's data."""
    out = tmp_path / "site"
    history = ["--git"] if (ROOT / ".git").exists() else []
    res = subprocess.run([sys.executable, "-m", "numabench", "publish", str(BASELINES), *history, "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    pages = sorted(p for p in out.glob("*--*.html") if not p.name.endswith(("--numa.html", "--offload.html")))
    for page in pages:
        for c in site_data(page)["charts"]:
            ticks = [t[1] for t in c["xticks"]]
            assert len(set(ticks)) == len(ticks), f"{page.name}: {c['title']}: {ticks}"
    for page in pages:
        data, text = site_data(page), page.read_text()
        names = [n for n, _ in data["runs"]]
        assert all(f"<b>{n}</b>" in text for n in names), page.name  # the runs table
        assert all([t[1] for t in c["xticks"]] == names for c in data["charts"]), page.name


def test_times_are_shown_in_a_unit_that_fits_them(tmp_path):
    runs = [("0001_a.json", _keyrun("2026-01-01T00:00:00", [_bench("a", [12.19e-6, 11.55e-6, 13.25e-6])]))]
    build_site(runs, tmp_path / "site")
    page = (tmp_path / "site" / "K1--touch.html").read_text()
    assert "12.19 µs" in page and "11.55&ndash;13.25 µs" in page
    assert _chart(tmp_path / "site", "K1--touch.html", "a")["yunit"] == "s"  # site.js picks us, ms or s


def test_a_one_node_key_says_it_has_no_placement_choice_first(tmp_path):
    benches = [_bench(f"{p}-{n}", [t * 1.0, t * 1.01, t * 0.99], policy=p, numel=n)
               for p, t in (("bind:0", 1.0), ("default", 1.02), ("interleave:all", 1.01))
               for n in (1 << 20, 1 << 24)]
    build_site([("0001_a.json", _keyrun("2026-01-01T00:00:00", benches, nodes=1))], tmp_path / "site")
    numa = (tmp_path / "site" / "K1--numa.html").read_text()
    main = numa.split("<main>", 1)[1]
    assert "no placement choice" in main[:400]
    assert "data-chart=" not in numa  # no panels of coinciding policies
    assert re.search(r"<td>touch</td>|>touch</a></td><td class=\"num\">2</td>", main)


def test_a_single_size_is_a_dot_per_policy(tmp_path):
    benches = [_bench(p, [t, t * 1.01, t * 0.99], policy=p, numel=32) for p, t in (("bind:0", 1.0), ("bind:1", 1.3))]
    build_site([("0001_a.json", _keyrun("2026-01-01T00:00:00", benches, nodes=2))], tmp_path / "site")
    (chart,) = [c for c in site_data(tmp_path / "site" / "K1--numa.html")["charts"] if c["kind"] == "dots"]
    assert chart["kind"] == "dots" and not chart["xlog"]
    assert [t[1] for t in chart["xticks"]] == ["bind:0", "bind:1"]
    assert [s["points"][0][0] for s in chart["series"]] == [0, 1]


def test_the_advisor_table_names_each_column_once_and_recommends_only_what_stands(tmp_path):
    out = publish_seed_site(tmp_path)
    numa = next(out.glob("*--numa.html")).read_text()
    advisor = numa[numa.index("<h2>Advisor</h2>"):]
    header = re.findall(r"<th>([^<]*)</th>", advisor.split("</thead>", 1)[0])
    assert len(header) == len(set(header)), header
    # the seed's copies are link-bound: no ratio is predicted faster than the fast node alone
    rows = re.findall(r"<tr><td>(adam_offload (?:h2d|d2h)[^<]*)</td>(.*?)</tr>", advisor)
    assert rows and all("<td>weighted:" not in cells for _, cells in rows)
