"""numabench compare --format markdown|github|json, a gated run's recorded confirmation
judged as the gate judged it, and NEW alone finding its baseline by hardware key."""
from __future__ import annotations

import json
from pathlib import Path

from test_compare import KEY, bench, run, write

from numabench.cli import main
from numabench.gate.rule import CONFIRM_INVOCATIONS
from numabench.gate.table import render_github, render_markdown, to_json
from numabench.results.compare import compare_runs

BASE = [0.0100, 0.0101, 0.0102]  # band 10.0-10.2 ms, three invocations


def _runs():
    old = run([bench("h2d", n, "default", None, 0.0101, BASE) for n in (1, 2, 3)])
    new = run([
        bench("h2d", 1, "default", None, 0.0101, [0.0101, 0.0100]),  # same
        # slower, confirmed by its last two invocations (the gate re-ran it)
        bench("h2d", 2, "default", None, 0.0120, [0.0120, 0.0121, 0.0119, 0.0122]),
        # slower at first, the confirmation within the band: not a regression
        bench("h2d", 3, "default", None, 0.0120, [0.0120, 0.0121, 0.0101, 0.0100]),
    ])
    for b in new["benchmarks"][1:]:
        b["extra_info"]["gate"] = {"verdict": "slower", CONFIRM_INVOCATIONS: 2}
    return old, new


def test_a_recorded_confirmation_is_judged_as_the_gate_judged_it():
    old, new = _runs()
    res = compare_runs(old, new)
    verdicts = [(r.verdict, r.confirm_verdict, r.regression) for r in res.rows]
    assert verdicts == [("same", None, False), ("slower", "slower", True), ("slower", "same", False)]
    assert res.exit_code == 1
    # without the record, all four medians are one new value: entry 3's median lies in between
    for b in new["benchmarks"]:
        b["extra_info"].pop("gate", None)
    assert [r.confirm_verdict for r in compare_runs(old, new).rows] == [None, None, None]


def test_github_format_annotates_each_regression_once_and_escapes():
    old, new = _runs()
    out = render_github(compare_runs(old, new)).splitlines()
    errors = [ln for ln in out if ln.startswith("::error ")]
    warnings = [ln for ln in out if ln.startswith("::warning ")]
    assert len(errors) == 1 and "np1-2-default" in errors[0] and "confirmed" in errors[0]
    assert len(warnings) == 1 and "np1-3-default" in warnings[0] and "not confirmed (same)" in warnings[0]
    assert out[-1].startswith("::notice title=numabench gate::3 entries: 2 slower")
    # workflow-command escaping: no raw newline, % or (in the title) comma or colon
    title = errors[0].split("::")[1]
    assert "," not in title.split("title=", 1)[1] and ":" not in title.split("title=", 1)[1]
    assert "%25" in out[-1] or "%" not in out[-1].replace("%25", "").replace("%0A", "")


def test_markdown_and_json_formats():
    old, new = _runs()
    res = compare_runs(old, new)
    md = render_markdown(res)
    assert md.startswith("### numabench gate: **1 regression(s)**")
    rows = [ln for ln in md.splitlines() if ln.startswith("| test_adam_offload")]
    assert len(rows) == 2  # the changed entries only
    assert "| 2 |" not in md and len(render_markdown(res, show="all").splitlines()) > len(md.splitlines())
    data = json.loads(json.dumps(to_json(res)))
    assert data["regressions"] == 1 and data["exit_code"] == 1
    e = {x["name"]: x for x in data["entries"]}
    reg = e["test_adam_offload[h2d-np1-2-default-fp32-ours-serial]"]
    assert reg["regression"] and reg["confirm_medians_s"] == [0.0119, 0.0122] and reg["band_s"] == [0.01, 0.0102]


def test_cli_formats_and_new_alone(tmp_path, capsys):
    old, new = _runs()
    store = tmp_path / "baselines" / KEY / "Linux-CPython-3.11-64bit"
    store.mkdir(parents=True)
    (store / "0001_base.json").write_text(json.dumps(old))
    new_path = write(tmp_path, "new.json", new)
    assert main(["compare", new_path, "--storage", str(tmp_path / "baselines"), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["baseline"].endswith("0001_base.json") and data["regressions"] == 1
    assert main(["compare", write(tmp_path, "old.json", old), new_path, "--format", "github"]) == 1
    assert capsys.readouterr().out.count("::error ") == 1
    other = tmp_path / "empty"
    other.mkdir()
    assert main(["compare", new_path, "--storage", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"no baseline for this machine's hardware key {KEY!r}" in err and Path(other).name in err
    assert err.startswith("numabench: compare: no baseline") and "numabench compare BASELINE NEW" in err


def test_a_gated_runs_threshold_is_the_offline_default():
    old, new = _runs()
    assert compare_runs(old, new).threshold_pct == 3.0  # nothing recorded: the default
    for b in new["benchmarks"][1:]:
        b["extra_info"]["gate"]["threshold_pct"] = 50.0
    res = compare_runs(old, new)
    assert res.threshold_pct == 50.0 and not res.regressions  # +19% is within 50%: as the session judged
    assert compare_runs(old, new, threshold="3%").regressions  # an explicit threshold wins


def test_markdown_does_not_table_entries_without_a_baseline():
    old, new = _runs()
    extra = [bench("d2h", n, "default", None, 0.0101, [0.0101]) for n in range(1, 41)]
    new["benchmarks"] += extra
    md = render_markdown(compare_runs(old, new))
    assert sum(1 for ln in md.splitlines() if ln.startswith("| test_adam_offload")) == 2
    assert "40 entries have no baseline entry (not tabled" in md
    assert md.count("d2h-np") <= 6
