"""The site's offload page over synthetic runs: which offload wins, the report's offload section
(modes table, out-of-memory notes, capacity) as HTML, linked from the key's navigation only where
the key has train_step modes; and the Markdown converter it stands on."""
from __future__ import annotations

import pytest

from numabench.publish.build import build_site
from numabench.publish.pages import esc
from numabench.publish.page_offload import markdown_html
from numabench.results import memory_outcomes
from numabench.results.offload_modes import mode_rows, winner_sentences
from offload_runs import GIB, N, bench, oom, ts

KEY = "H100x1_k"


def transfer(gbps: float) -> dict:
    name = "test_transfer[h2d-np1-268435456-default-fp32-pinned]"
    return bench(name, 0.01, family="transfer", phase="h2d", nprocess=1, numel=268435456, dtype="fp32",
                 policy="default", GBps=gbps, memory="pinned")


def run(*benchmarks, key: str = KEY, when: str = "2026-11-25T00:00:00", memory: dict | None = None) -> dict:
    out = {"machine_info": {"numabench": {"hardware_key": key}}, "benchmarks": list(benchmarks), "datetime": when,
           "commit_info": {"id": "0123456789abcdef"}}
    if memory is not None:
        out[memory_outcomes.KEY] = memory
    return out


def offload_run() -> dict:
    mem = memory_outcomes.section(128 * GIB, "--numa-host-memory", [80 * GIB], [oom("no-offload-master")])
    return run(ts("no-offload-master", 0.100, mem_peak_per_rank_bytes=[int(18 * N + 10 * GIB)]),
               ts("streamed", 0.280), ts("torchao-offload", 0.330), transfer(50.0), memory=mem)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("offload") / "site"
    older = run(ts("streamed", 0.900), when="2026-11-24T00:00:00")  # replaced by the newer run's entry
    runs = [("0001_old.json", older), ("0002_new.json", offload_run()),
            ("0003_plain.json", run(transfer(20.0), key="nogpu_k")),
            ("0004_one.json", run(ts("no-offload-master", 0.1), ts("streamed", 0.3), key="one_mode_k"))]
    build_site(runs, out, source="synthetic")
    return out


def test_the_offload_page_leads_with_the_winner_and_shows_the_reports_section(site):
    page = site / f"{KEY}--offload.html"
    text = page.read_text()
    assert f"<title>{KEY}: which offload wins</title>" in text
    [win] = winner_sentences(mode_rows(offload_run()))
    assert f"<li>{esc(win)}</li>" in text and "streamed wins (280.0 ms a step" in win
    assert "<td>streamed</td><td>bf16 + fp32 master (host)</td><td>1b</td>" in text
    assert '<td class="num">280.00</td>' in text and "900.00" not in text  # the newer run's entry
    assert "<td>torchao-offload</td>" in text
    assert "predicted: needs ~99.9 GiB per GPU; the GPU has 79.6 GiB; met: OutOfMemoryError: CUDA out of " \
           "memory" in text
    assert "<p>Capacity of each mode on this machine (one rank):</p>" in text
    assert "<b>0001 11-24 00:00</b>, <b>0002 11-25 00:00</b>" in text  # the runs that hold modes, by name
    assert "Which offload wins on" not in text.split("<ul class=\"lead\">", 1)[1]  # said once, at the top


def test_the_key_navigation_links_the_offload_page_only_where_there_is_one(site):
    index = (site / "index.html").read_text()
    assert f'<a href="{KEY}--offload.html">offload</a>' in index
    assert f"{KEY}--offload.html" in (site / f"{KEY}--numa.html").read_text()
    assert "<b>offload</b>" in (site / f"{KEY}--offload.html").read_text()  # the page shown, not linked
    assert not (site / "nogpu_k--offload.html").exists()
    assert "offload" not in (site / "nogpu_k--numa.html").read_text()
    assert "nogpu_k--offload" not in index


def test_a_key_with_one_offload_mode_says_there_is_nothing_to_rank(site):
    text = (site / "one_mode_k--offload.html").read_text()
    assert "No group (model, dtype, ranks, policy) has two measured offload modes" in text
    assert "<td>streamed</td>" in text


def test_the_converter_headings_paragraphs_lists_tables_code_and_escaping():
    html = markdown_html(["## Modes & <costs>", "", "first `a<b` line", "second & last", "",
                          "- one `x&y`", "- two <i>", "",
                          "| mode | step ms |\n|---|---:|\n| a<b | 1 & 2 |\n| `c` | 3 |", ""])
    assert "<h2>Modes &amp; &lt;costs&gt;</h2>" in html
    assert "<p>first <code>a&lt;b</code> line second &amp; last</p>" in html
    assert "<ul><li>one <code>x&amp;y</code></li><li>two &lt;i&gt;</li></ul>" in html
    assert ("<table><thead><tr><th>mode</th><th>step ms</th></tr></thead><tbody>"
            "<tr><td>a&lt;b</td><td class=\"num\">1 &amp; 2</td></tr>"
            "<tr><td><code>c</code></td><td class=\"num\">3</td></tr></tbody></table>") in html
    assert "<i>" not in html


def test_the_converter_names_what_it_cannot_read():
    with pytest.raises(ValueError, match=r"not a pipe table.*\| a \| b \|"):
        markdown_html(["| a | b |", "| c | d |"])
    with pytest.raises(ValueError, match="not a Markdown heading: '##x'"):
        markdown_html(["##x"])
