"""History is per hardware key; each run is one measurement once (git versions of one run are
one run, carried-forward values are marked and judged by nothing); renamed ids keep one series;
a change at the newest run is unconfirmed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import git_in

from numabench.cli import main
from numabench.errors import UsageError
from numabench.results.history import histories, history
from numabench.results.ids import current_id


def bench(name: str, inv: list[float], family: str = "touch", extra: dict | None = None,
          sources: list[str] | None = None) -> dict:
    x = {"family": family, "invocation_medians_s": inv, **(extra or {})}
    if sources:
        x["invocation_sources"] = sources
    return {"name": name, "fullname": f"benchmarks/test_{family}.py::test_{family}[{name}]", "extra_info": x,
            "stats": {"median": sorted(inv)[len(inv) // 2], "data": inv}}


def run(benches: list[dict], key: str, when: str, commit: str = "c") -> dict:
    return {"machine_info": {"numabench": {"hardware_key": key}}, "benchmarks": benches, "datetime": when,
            "commit_info": {"id": commit}}


def save(root: Path, key: str, name: str, data: dict) -> Path:
    folder = root / key / "Linux-CPython-3.12-64bit"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(data))
    return folder / name


def test_runs_of_several_hardware_keys_are_never_one_series(tmp_path, capsys):
    root = tmp_path / "baselines"
    save(root, "H200x2", "0001_a.json", run([bench("w", [1.0, 1.0, 1.0])], "H200x2", "2026-01-01T00:00:00"))
    save(root, "H200x1", "0001_b.json", run([bench("w", [1.3, 1.3, 1.3])], "H200x1", "2026-01-02T00:00:00"))
    save(root, "H100", "0001_c.json", run([bench("w", [1.6, 1.6, 1.6])], "H100", "2026-01-03T00:00:00"))
    hists = histories(root)
    assert [h.key for h in hists] == ["H100", "H200x1", "H200x2"]
    assert all(len(h.runs) == 1 and not any(s.changes for s in h.series) for h in hists)
    with pytest.raises(UsageError, match="3 hardware keys .*H100, H200x1, H200x2"):
        history(root)
    assert history(root, key="H100").series[0].points[0].value == pytest.approx(1.6)
    assert main(["history", str(root)]) == 0
    out = capsys.readouterr().out
    assert "3 hardware keys" in out and "[H200x1]" in out and "entries changed" in out
    assert "0 of 1 entries changed" in out and " 1 of " not in out


def test_a_change_at_the_newest_run_is_unconfirmed(tmp_path, capsys):
    root = tmp_path / "baselines"
    save(root, "K", "0001_a.json", run([bench("w", [1.0, 1.01, 0.99])], "K", "2026-01-01T00:00:00"))
    save(root, "K", "0002_b.json", run([bench("w", [1.5, 1.51, 1.49])], "K", "2026-01-02T00:00:00"))
    h = history(root / "K")
    (c,) = h.series[0].changes
    assert c.run == 1 and not c.confirmed
    assert main(["history", str(root / "K")]) == 0
    assert "unconfirmed: no later run yet" in capsys.readouterr().out


def test_carried_values_are_marked_and_judged_by_nothing(tmp_path, capsys):
    root = tmp_path / "baselines"
    a = bench("a", [1.0, 1.01, 0.99])
    save(root, "K", "0001_r.json", run([a, bench("b", [2.0, 2.0, 2.0])], "K", "2026-01-01T00:00:00"))
    # run 2 measures only b (slower); the merged file carries a forward unchanged
    save(root, "K", "0002_r.json", run([a, bench("b", [3.0, 3.0, 3.0])], "K", "2026-01-02T00:00:00"))
    save(root, "K", "0003_r.json", run([a, bench("b", [3.0, 3.01, 2.99])], "K", "2026-01-03T00:00:00"))
    h = history(root / "K")
    by = {s.name.split("[")[1]: s for s in h.series}
    assert [p.carried for p in by["a]"].points] == [False, True, True]
    assert [c.run for c in by["b]"].changes] == [1]
    # a pooled entry is judged by the invocations it adds
    pooled = bench("a", [1.0, 1.01, 0.99, 1.5, 1.5, 1.5], sources=["r1"] * 3 + ["r4"] * 3)
    first = bench("a", [1.0, 1.01, 0.99], sources=["r1"] * 3)
    save(root, "P", "0001_r.json", run([first], "P", "2026-01-01T00:00:00"))
    save(root, "P", "0002_r.json", run([pooled], "P", "2026-01-02T00:00:00"))
    p = history(root / "P").series[0].points
    assert p[1].value == pytest.approx(1.5) and not p[1].carried
    assert main(["history", str(root / "K"), "--all"]) == 0
    assert "1000 -> 1000* -> 1000* ms" in capsys.readouterr().out


def test_renamed_ids_follow_the_id_map():
    old = "benchmarks/test_adam_offload.py::test_adam_offload[h2d-np1-1.84M-default-fp32-ours-serial]"
    assert current_id(old, {"family": "adam_offload", "alloc": "register"}) == old[:-1] + "-register]"
    assert current_id(old[:-1] + "-torch]", {"family": "adam_offload", "alloc": "torch"}) == old[:-1] + "-torch]"
    ts = "benchmarks/test_train_step.py::test_train_step[step-np2-32-default-bf16-fsdp-offload-small]"
    assert current_id(ts, {"family": "train_step"}) == ts[:-1] + "-node]"
    assert current_id(ts[:-1] + "-rank-cores]", {"family": "train_step", "cpu_bind": "rank-cores"}) \
        == ts[:-1] + "-rank-cores]"


def test_git_history_reads_each_run_once_and_follows_renames(tmp_path, capsys):
    repo = tmp_path / "repo"
    root = repo / "baselines"

    def git(*args):
        git_in(repo, *args)

    repo.mkdir()
    git("init", "-q")
    old = bench("h2d-np1-1M-default-fp32-ours-serial", [1.0, 1.01, 0.99], family="adam_offload")
    save(root, "K", "0001_a.json", run([old], "K", "2026-01-01T00:00:00"))
    git("add", "-A"); git("commit", "-qm", "first")
    new = bench("h2d-np1-1M-default-fp32-ours-serial-register", [1.0, 1.01, 0.99], family="adam_offload",
                extra={"alloc": "register"})
    save(root, "K", "0001_a.json", run([new], "K", "2026-01-01T00:00:00"))  # relabelled, nothing measured
    git("add", "-A"); git("commit", "-qm", "relabel")
    again = bench("h2d-np1-1M-default-fp32-ours-serial-register", [1.3, 1.31, 1.29], family="adam_offload",
                  extra={"alloc": "register"})
    save(root, "K", "0002_b.json", run([again], "K", "2026-01-02T00:00:00"))
    git("add", "-A"); git("commit", "-qm", "second")
    h = history(root / "K", from_git=True)
    assert len(h.runs) == 2 and h.runs[0].versions == 2
    (s,) = h.series
    assert s.name.endswith("-register]") and len(s.points) == 2 and len(s.changes) == 1
    assert main(["history", str(root), "--git"]) == 0
    assert "2 committed versions" in capsys.readouterr().out


def test_a_merge_that_labels_carried_invocations_adds_none(tmp_path):
    """An entry saved before merges labelled invocations, carried into a merged run that labels
    it with its first run and pools new invocations beside it: the merged run's point is the new
    invocations alone, the relabelled one is not measured again."""
    root = tmp_path / "baselines"
    save(root, "K", "0001_r.json", run([bench("a", [1.0])], "K", "2026-01-01T00:00:00"))
    pooled = bench("a", [1.0, 2.0, 2.2], sources=["0001_r.json (vm, 2026-01-01)", "new.json", "new.json"])
    save(root, "K", "0002_r.json", run([pooled], "K", "2026-01-02T00:00:00"))
    (series,) = history(root / "K").series
    assert [(p.value, p.low, p.high, p.carried) for p in series.points] == [(1.0, 1.0, 1.0, False),
                                                                          (2.1, 2.0, 2.2, False)]
