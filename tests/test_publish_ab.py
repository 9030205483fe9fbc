"""``numabench publish`` of A/B runs (``numabench ab --json``): each a page of its own that leads
with what changed (slowest first, with intervals), a chart of every entry's ratio with its
interval, the whole table; the index lists the A/B runs and says which need a look.

The A/B run in tests/data/ab/h100-smoke-inject5.json was measured on an H100 x1 VM (the smoke tier, 4
pairs, rounds interleaved, 5% injected into the head); the others are made here."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from numabench.cli import main
from numabench.publish.page_ab import family_of
from numabench.ab.run import ABResult, ABRow, Side
from numabench.ab.formats import from_json, to_json

DATA = Path(__file__).resolve().parent / "data" / "ab"
MEASURED = DATA / "h100-smoke-inject5.json"


def chart_data(page: Path) -> dict:
    blob = re.search(r'<script type="application/json" id="site-data">(.*?)</script>', page.read_text(), re.S)
    return json.loads(blob.group(1).replace("<\\/", "</"))


def same_everywhere(tmp_path: Path) -> Path:
    """An A/A run: 3 entries, every one same, written as numabench ab --json writes it."""
    rows = [ABRow(f"test_touch[write-np1-{n}M-default-fp32]", [1e-3 * n] * 3, [1e-3 * n * 1.001] * 3, 1.001,
                  0.995, 1.007, "same", 0.6, f"benchmarks/test_touch.py::test_touch[write-np1-{n}M-default-fp32]")
            for n in (1, 2, 4)]
    res = ABResult(Side("HEAD", "a" * 40, None, {}), Side("HEAD", "a" * 40, None, {}), 3, 1.0, 0.95, rows=rows,
                   hardware_key="nogpu_AMD-EPYC_1node", interleave="rounds", when="2026-11-25T10:00:00Z")
    path = tmp_path / "aa.json"
    path.write_text(json.dumps(to_json(res)))
    return path


def test_an_ab_run_is_a_page_that_leads_with_what_changed(tmp_path, capsys):
    out = tmp_path / "site"
    assert main(["publish", str(MEASURED), "--out", str(out)]) == 0
    assert "1 A/B run(s)" in capsys.readouterr().out
    page = out / "ab-h100-smoke-inject5.html"
    text = page.read_text()
    measured = json.loads(MEASURED.read_text())
    # what changed comes first: the block before the chart and the full table
    assert text.index('id="what-changed"') < text.index("data-chart=") < text.index("Every entry (10)")
    block = text[text.index('id="what-changed"'):text.index("</section>")]
    assert "REGRESSION: 6 of 10 entries slower" in text
    changed = [e for e in measured["entries"] if e["verdict"] != "same"]
    names = re.findall(r'<a href="#e\d+">([^<]+)</a>', block)
    assert names == [e["name"] for e in sorted(changed, key=lambda e: -e["ratio"])]  # slowest first
    cpu_adam = changed[0]
    assert cpu_adam["name"].startswith("test_cpu_adam")
    low, high = cpu_adam["interval"]
    assert f"{(low - 1) * 100:+.2f}% to {(high - 1) * 100:+.2f}%" in block
    assert f"{cpu_adam['resolution_pct']:.2f}%" in block
    # the chart: every entry once, at its ratio with its interval, coloured by its verdict
    spec = chart_data(page)["charts"][0]
    points = {p[0]: p for s in spec["series"] if s["name"] in ("slower", "faster", "same", "unresolved")
              for p in s["points"]}
    assert sorted(points) == list(range(1, 11))
    by_rank = sorted(measured["entries"], key=lambda e: (-e["ratio"], e["name"]))
    for i, e in enumerate(by_rank, 1):
        assert points[i][1:4] == [e["ratio"], *e["interval"]], e["name"]
    lines = {s["name"]: s["points"] for s in spec["series"] if s.get("marker") == "none"}
    assert {p[1] for p in lines["no change"]} == {1.0} and {p[1] for p in lines["threshold +1%"]} == {1.01}


def test_the_index_says_which_ab_runs_and_families_need_a_look(tmp_path):
    out = tmp_path / "site"
    assert main(["publish", str(MEASURED), str(same_everywhere(tmp_path)), "--out", str(out)]) == 0
    index = (out / "index.html").read_text()
    look = index[index.index("Needs a look"):index.index("A/B runs (2, newest first)")]
    assert "h100-smoke-inject5.json" in look and "aa.json" not in look  # the A/A needs no look
    for fam, verdicts in {"cpu_adam": "1 slower", "transfer": "2 slower", "host_membw": "1 unresolved"}.items():
        assert re.search(rf"{fam} \(<span[^>]*>{verdicts}", look), (fam, look)
    assert (out / "ab-aa.html").is_file() and 'href="ab-aa.html"' in index


def test_nothing_needs_a_look_when_every_entry_is_same(tmp_path):
    out = tmp_path / "site"
    assert main(["publish", str(same_everywhere(tmp_path)), "--out", str(out)]) == 0
    index = (out / "index.html").read_text()
    assert "Needs a look: nothing" in index
    page = (out / "ab-aa.html").read_text()
    assert "no regression in 3 entries" in page and "No entry slower, faster or unresolved." in page


def test_entries_not_judged_are_named_and_need_a_look(tmp_path):
    data = json.loads(same_everywhere(tmp_path).read_text())
    data["missing"] = ["FAILED benchmarks/test_train_step.py::test_train_step[step-np1-small-default-bf16] - WorkerError"]
    path = tmp_path / "failed.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "site"
    assert main(["publish", str(path), "--out", str(out)]) == 0
    page = (out / "ab-failed.html").read_text()
    assert "1 entries NOT JUDGED" in page and "test_train_step[step-np1-small-default-bf16]" in page
    index = (out / "index.html").read_text()
    assert re.search(r"train_step \(<span[^>]*>1 not judged", index)


def test_a_stopped_ab_run_says_so_first_and_needs_a_look(tmp_path):
    data = json.loads(same_everywhere(tmp_path).read_text())
    data["stopped_by"] = "SIGTERM"
    path = tmp_path / "stopped.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "site"
    assert main(["publish", str(path), "--out", str(out)]) == 0
    page = (out / "ab-stopped.html").read_text()
    lead = page.index("STOPPED (SIGTERM) before the session&#x27;s end")
    assert lead < page.index("no regression in 3 entries") and "exit 143" in page
    assert "Needs a look: nothing" not in (out / "index.html").read_text()


@pytest.mark.parametrize("bad", [math.nan, -1.0, 0.0, math.inf, "1.02"])
def test_an_ab_run_with_a_corrupt_ratio_is_refused_naming_the_entry(tmp_path, capsys, bad):
    data = json.loads(MEASURED.read_text())
    data["entries"][3]["ratio"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert main(["publish", str(path), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert data["entries"][3]["name"] in err and "finite number > 0" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "site").exists()


def test_the_json_round_trip_keeps_when_it_ran():
    res = from_json(json.loads(MEASURED.read_text()))
    res.when = "2026-11-25T10:00:00Z"
    assert from_json(to_json(res)).when == "2026-11-25T10:00:00Z"


def test_an_entry_s_family_is_read_from_its_test_name():
    assert family_of("benchmarks/test_cpu_adam.py::test_cpu_adam[step-np1-16.8M-default-fp32-ours]") == "cpu_adam"
    assert family_of("test_host_membw[time-np1-16.8M-default-fp32-copy]") == "host_membw"
    assert family_of("FAILED benchmarks/test_pinned_alloc.py::test_pinned_alloc[alloc-np1-1M] - boom") == "pinned_alloc"


def test_a_confirmed_entry_says_on_how_many_pairs_it_was_judged(tmp_path):
    row = ABRow("test_touch[write-np1-1M-default-fp32]", [1e-3] * 8, [1.05e-3] * 8, 1.05, 1.04, 1.06, "slower", 0.9,
                "benchmarks/test_touch.py::test_touch[write-np1-1M-default-fp32]", 4)
    res = ABResult(Side("main", "b" * 40, None, {}), Side("HEAD", "a" * 40, None, {}), 4, 1.0, 0.95, rows=[row],
                   hardware_key="nogpu_AMD-EPYC_1node", interleave="rounds", when="2026-11-25T10:00:00Z",
                   confirm_pairs=4, workers="forked")
    path = tmp_path / "confirmed.json"
    path.write_text(json.dumps(to_json(res)))
    out = tmp_path / "site"
    assert main(["publish", str(path), "--out", str(out)]) == 0
    text = (out / "ab-confirmed.html").read_text()
    block = text[text.index('id="what-changed"'):text.index("</section>")]
    assert "0.90% (8 pairs, 4 confirming)" in block
    assert "took 4 confirming pairs" in text and "forked from a server per side" in text
