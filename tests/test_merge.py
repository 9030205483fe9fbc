"""numabench merge: one baseline from several runs of one machine."""
from __future__ import annotations

import json

import pytest

from numabench.cli import main
from numabench.errors import UsageError
from numabench.gate.invocations import INVOCATION_SOURCES, invocation_medians
from numabench.results.merge import merge_runs, write_run


def _run(key: str, names: list[str], value: float, data: bool = True) -> dict:
    benches = []
    for n in names:
        stats = {"median": value, "mean": value, "rounds": 3}
        if data:
            stats["data"] = [value] * 3
        benches.append({"name": n, "fullname": f"benchmarks/test_x.py::{n}", "stats": stats})
    return {"machine_info": {"numabench": {"hardware_key": key}}, "commit_info": {"id": "abc"},
            "datetime": "2026-11-22T00:00:00", "version": "5.2.3", "benchmarks": benches}


def _write(tmp_path, name: str, run: dict):
    p = tmp_path / name
    p.write_text(json.dumps(run))
    return p


def test_merge_joins_and_pools_invocations(tmp_path):
    a = _write(tmp_path, "0001_a.json", _run("K", ["t[a]", "t[b]"], 1.0))
    b = _write(tmp_path, "0002_b.json", _run("K", ["t[b]", "t[c]"], 2.0))
    res = merge_runs([a, b])
    by_name = {x["name"]: x for x in res.run["benchmarks"]}
    assert {n: x["stats"]["median"] for n, x in by_name.items()} == {"t[a]": 1.0, "t[b]": 1.5, "t[c]": 2.0}
    pooled = by_name["t[b]"]
    assert invocation_medians(pooled) == [1.0, 2.0]  # one invocation from each run
    assert pooled["stats"]["data"] == [1.0] * 3 + [2.0] * 3 and pooled["stats"]["rounds"] == 6
    assert [s.split(" ")[0] for s in pooled["extra_info"][INVOCATION_SOURCES]] == ["0001_a.json", "0002_b.json"]
    assert res.again == ["benchmarks/test_x.py::t[b]"]
    assert [s["file"] for s in res.run["numabench_merged_from"]] == ["0001_a.json", "0002_b.json"]
    assert res.run["machine_info"]["numabench"]["hardware_key"] == "K"
    # a merged baseline merged again keeps every invocation and its source
    c = _write(tmp_path, "0003_m.json", res.run)
    d = _write(tmp_path, "0004_d.json", _run("K", ["t[b]"], 4.0))
    again = {x["name"]: x for x in merge_runs([c, d]).run["benchmarks"]}["t[b]"]
    assert invocation_medians(again) == [1.0, 2.0, 4.0]
    assert [s.split(" ")[0] for s in again["extra_info"][INVOCATION_SOURCES]] == ["0001_a.json", "0002_b.json",
                                                                                   "0004_d.json"]
    # ... and the list of runs it was merged from, under its own file's entry
    sources = merge_runs([c, d]).run["numabench_merged_from"]
    assert [s["file"] for s in sources] == ["0003_m.json", "0004_d.json"]
    assert [s["file"] for s in sources[0]["merged_from"]] == ["0001_a.json", "0002_b.json"]
    assert "merged_from" not in sources[1]


def test_merge_drops_the_gate_verdict_of_a_judged_run(tmp_path):
    judged = _run("K", ["t[a]", "t[b]"], 2.0)
    for b in judged["benchmarks"]:
        b["extra_info"] = {"gate": {"verdict": "same"}, "invocation_medians_s": [2.0]}
    a = _write(tmp_path, "0001_a.json", _run("K", ["t[a]"], 1.0))
    res = merge_runs([a, _write(tmp_path, "0002_judged.json", judged)])
    by_name = {x["name"]: x for x in res.run["benchmarks"]}
    assert all("gate" not in x.get("extra_info", {}) for x in by_name.values())
    assert invocation_medians(by_name["t[a]"]) == [1.0, 2.0] and invocation_medians(by_name["t[b]"]) == [2.0]
    assert judged["benchmarks"][0]["extra_info"]["gate"]  # the input is left as it was


def test_merge_replace_keeps_the_later_entry(tmp_path):
    a = _write(tmp_path, "0001_a.json", _run("K", ["t[a]", "t[b]"], 1.0))
    b = _write(tmp_path, "0002_b.json", _run("K", ["t[b]"], 2.0))
    res = merge_runs([a, b], replace=True)
    assert {x["name"]: x["stats"]["median"] for x in res.run["benchmarks"]} == {"t[a]": 1.0, "t[b]": 2.0}


def test_merge_refuses_other_hardware_and_missing_data(tmp_path):
    a = _write(tmp_path, "a.json", _run("K1", ["t[a]"], 1.0))
    b = _write(tmp_path, "b.json", _run("K2", ["t[b]"], 1.0))
    with pytest.raises(UsageError, match="different hardware.*K1.*K2"):
        merge_runs([a, b])
    assert len(merge_runs([a, b], allow_foreign=True).run["benchmarks"]) == 2
    c = _write(tmp_path, "c.json", _run("K1", ["t[c]"], 1.0, data=False))
    with pytest.raises(UsageError, match="no per-round data"):
        merge_runs([a, c])


def test_write_never_overwrites(tmp_path):
    run = _run("K", ["t[a]"], 1.0)
    out = write_run(run, tmp_path / "0003_m.json")
    assert json.loads(out.read_text())["benchmarks"][0]["name"] == "t[a]"
    with pytest.raises(UsageError, match="exists"):
        write_run(_run("K", ["t[z]"], 9.0), out)
    assert json.loads(out.read_text())["benchmarks"][0]["name"] == "t[a]"


def test_cli_merge_exit_codes(tmp_path, capsys):
    a = _write(tmp_path, "a.json", _run("K", ["t[a]"], 1.0))
    b = _write(tmp_path, "b.json", _run("K", ["t[b]"], 1.0))
    assert main(["merge", str(tmp_path / "m.json"), str(a), str(b)]) == 0
    assert "2 benchmarks from 2 runs" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "m3.json"), str(a), str(a), "--replace"]) == 0
    assert "1 measured by several runs, the later run's entry kept" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text('{"benchmarks": [')
    assert main(["merge", str(tmp_path / "m2.json"), str(a), str(tmp_path / "bad.json")]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err
    assert not (tmp_path / "m2.json").exists()
