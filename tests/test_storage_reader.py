"""numabench.results.storage is the one reader of run files: what it refuses (naming the file
and what is allowed), the order it lists a storage's runs in, and that compare, report,
history, fleet push and the progress estimate all read through it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import types
from pathlib import Path

import pytest
from helpers import git_in

from fixtures import progress
from numabench.cli import main
from numabench.errors import UsageError
from numabench.publish.source import runs_from_git
from numabench.ab import run as ab
from numabench.results import fleet, storage
from numabench.results.compare import compare_runs
from numabench.results.history import history
from numabench.results.report import build_report

PLATFORM = "Linux-CPython-3.12-64bit"


def bench(name: str, inv: list[float]) -> dict:
    return {"name": name, "fullname": f"benchmarks/test_touch.py::test_touch[{name}]",
            "extra_info": {"family": "touch", "invocation_medians_s": inv},
            "stats": {"median": sorted(inv)[len(inv) // 2], "mean": sum(inv) / len(inv), "data": inv}}


def a_run(when: str = "2026-01-01T00:00:00", value: float = 1.0) -> dict:
    return {"machine_info": {"numabench": {"hardware_key": "K"}}, "datetime": when, "commit_info": {"id": "c"},
            "benchmarks": [bench("w", [value, value * 1.01, value * 0.99])]}


def write(path: Path, data: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def binary(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- what it refuses ------------------------------------------------------------------------

def test_a_good_run_is_returned_as_saved(tmp_path):
    f = write(tmp_path / "run.json", a_run())
    assert storage.load_run(f) == a_run()
    assert storage.load_run(f, baseline_for="--benchmark-compare") == a_run()


@pytest.mark.parametrize("text", [json.dumps(a_run())[:50], ""], ids=["truncated", "empty"])
def test_a_malformed_file_names_the_file_and_what_is_allowed(tmp_path, text):
    f = write(tmp_path / "0001_cut.json", text)
    with pytest.raises(UsageError) as ei:
        storage.load_run(f)
    msg = str(ei.value)
    assert msg.startswith(f"run file {f} is not valid JSON (") and "line 1 column" in msg
    assert "corrupt or truncated; allowed a complete pytest-benchmark run file" in msg
    with pytest.raises(UsageError, match=r"^--benchmark-compare: baseline .*0001_cut.json is not valid JSON"):
        storage.load_run(f, baseline_for="--benchmark-compare")


def test_a_missing_benchmarks_key_is_refused(tmp_path):
    f = write(tmp_path / "0001_x.json", {"machine_info": {}})
    with pytest.raises(UsageError, match=r"^run file .*0001_x.json has no 'benchmarks' list: not a pytest-benchmark"):
        storage.load_run(f)
    with pytest.raises(UsageError, match=r"^compare: baseline .*0001_x.json is not a pytest-benchmark run "
                                         r"\(no 'benchmarks' list with 'fullname' and 'stats'"):
        storage.load_run(f, baseline_for="compare")


def test_entries_must_be_objects_and_every_reader_gets_what_compare_reads(tmp_path):
    f = write(tmp_path / "run.json", {"benchmarks": [{"fullname": "t::a", "stats": {"median": 1.0}, "extra_info": []}]})
    with pytest.raises(UsageError, match=r"benchmarks\[0\] \(t::a\) extra_info is \[\]: allowed a JSON object$"):
        storage.load_run(f)
    g = write(tmp_path / "plain.json", {"benchmarks": [{"name": "a"}]})
    # a report, a merge or a publish reads the same fields a compare does: no entry without them
    with pytest.raises(UsageError, match=r"benchmarks\[0\] \(a\) fullname is missing: required \(and 1 more problem\)"):
        storage.load_run(g)
    with pytest.raises(UsageError, match="'fullname' and 'stats' in each entry"):
        storage.load_run(g, baseline_for="--benchmark-compare")


@pytest.mark.parametrize("make, says", [
    (lambda d: d / "absent.json", "does not exist"),
    (lambda d: d, "is a directory: allowed a pytest-benchmark run file"),
    (lambda d: binary(d / "bin.json", b'{"a": "\xff"}'), "is not UTF-8 text (byte 0xff at offset 7)"),
], ids=["missing", "directory", "not-utf8"])
def test_unreadable_files(tmp_path, make, says):
    with pytest.raises(UsageError, match="^run file ") as ei:
        storage.load_run(make(tmp_path))
    assert says in str(ei.value)


# -- the order of a storage's runs ------------------------------------------------------------

def test_run_files_in_path_order_saved_runs_only(tmp_path):
    root = tmp_path / "baselines"
    for rel in ("K/B-platform/0002_b.json", "K/A-platform/0003_c.json", "K/A-platform/0001_a.json",
                "L/A-platform/0001_l.json", "K/A-platform/baseline.json", "K/A-platform/notes.txt"):
        write(root / rel, a_run())
    names = [str(p.relative_to(root)) for p in storage.run_files(root)]
    assert names == ["K/A-platform/0001_a.json", "K/A-platform/0003_c.json", "K/B-platform/0002_b.json",
                     "L/A-platform/0001_l.json"]
    # a hardware key's storage keeps its runs one folder down, in platform folders
    assert [p.name for p in storage.run_files(root / "K", platform_folders=True)] == \
        ["0001_a.json", "0003_c.json", "0002_b.json"]
    assert storage.run_files(root, platform_folders=True) == []
    assert storage.run_files(tmp_path / "absent") == []
    assert storage.keys_with_baselines(root) == ["K", "L"]


def test_a_storage_folder_another_session_removes_mid_listing_holds_no_runs(tmp_path, monkeypatch):
    """pytest sessions of one checkout (xdist workers running benchmarks) make and remove empty
    baselines/<key>/ folders while others list baselines/: a folder gone between its parent's
    listing and its own holds nothing, and listing goes on (Path.glob raised FileNotFoundError)."""
    root = tmp_path / "baselines"
    write(root / "K/A-platform/0001_a.json", a_run())
    real = {"listdir": os.listdir, "scandir": os.scandir}
    doomed: list[Path] = []

    def lister(name):
        def list_after_the_other_session(path="."):
            # the other session removes the folder once its parent has been listed, before its own listing
            if doomed and not isinstance(path, int) and Path(path) == doomed[0]:
                shutil.rmtree(doomed.pop())
            return real[name](path)
        return list_after_the_other_session

    for name in real:
        monkeypatch.setattr(os, name, lister(name))
    for listed, gone in ((storage.keys_with_baselines, "nogpu"), (storage.run_files, "nogpu/A-platform")):
        (root / "nogpu" / "A-platform" / "deeper").mkdir(parents=True)  # empty: what a running session made
        doomed.append(root / gone)
        found = listed(root)
        assert not doomed and not (root / gone).exists()  # it was removed mid-listing
        assert found == (["K"] if listed is storage.keys_with_baselines else [root / "K/A-platform/0001_a.json"])
        shutil.rmtree(root / "nogpu", ignore_errors=True)


def test_newest_run_is_the_highest_number_that_can_be_read(tmp_path):
    root = tmp_path / "K"
    write(root / "A-platform/0001_a.json", a_run(value=1.0))
    write(root / "B-platform/0002_b.json", a_run(value=2.0))
    assert storage.newest_run(root) == (a_run(value=2.0), root / "B-platform/0002_b.json")
    write(root / "A-platform/0003_cut.json", json.dumps(a_run())[:30])  # a broken newer one is passed over
    write(root / "A-platform/0004_not_a_run.json", {"machine_info": {}})
    assert storage.newest_run(root)[1].name == "0002_b.json"
    assert storage.newest_run(tmp_path / "absent") is None


# -- every consumer reads through it -----------------------------------------------------------

@pytest.fixture
def reads(monkeypatch) -> list[Path]:
    """The files storage.load_run reads, in order (fails on a storage without the reader)."""
    seen: list[Path] = []
    real = storage.load_run

    def spy(path, **kw):
        seen.append(Path(path))
        return real(path, **kw)

    monkeypatch.setattr(storage, "load_run", spy)
    return seen


def test_compare_reads_through_storage(tmp_path, reads):
    a = write(tmp_path / "a.json", a_run())
    b = write(tmp_path / "b.json", a_run(value=1.0))
    compare_runs(a, b)
    assert reads == [a, b]


def test_compare_cli_finds_the_baseline_through_storage(tmp_path, reads, capsys):
    base = write(tmp_path / "baselines/K" / PLATFORM / "0001_base.json", a_run())
    new = write(tmp_path / "new.json", a_run())
    assert main(["compare", str(new), "--storage", str(tmp_path / "baselines")]) == 0
    assert reads[0] == new and base.resolve() in [p.resolve() for p in reads]


def test_report_reads_through_storage(tmp_path, reads):
    a = write(tmp_path / "a.json", a_run())
    b = write(tmp_path / "b.json", a_run(when="2026-01-02T00:00:00"))
    build_report(a, plots=False)
    build_report([a, b], plots=False)
    assert reads == [a, a, b]


def test_history_lists_and_reads_through_storage(tmp_path, reads, monkeypatch):
    root = tmp_path / "K"
    files = [write(root / PLATFORM / f"000{i}_r.json", a_run(f"2026-01-0{i}T00:00:00")) for i in (1, 2)]
    listed: list[Path] = []
    real = storage.run_files
    monkeypatch.setattr(storage, "run_files", lambda r, **kw: listed.append(Path(r)) or real(r, **kw))
    assert len(history(root).runs) == 2
    assert listed == [root] and reads == files
    write(root / PLATFORM / "0003_x.json", {"machine_info": {}})
    with pytest.raises(UsageError, match=r"^history: run file .*0003_x.json has no 'benchmarks' list"):
        history(root)


def test_fleet_push_reads_through_storage(tmp_path, reads, monkeypatch, capsys):
    pushed = []

    class Store:  # a fleet database that keeps what it is given
        shown = "fake-db"

        def push(self, run, name):
            pushed.append((name, run))
            return "rid", len(run["benchmarks"]), True

        def close(self):
            pass

    monkeypatch.setattr(fleet, "open_fleet", lambda url: Store())
    f = write(tmp_path / "0001_r.json", a_run())
    assert main(["fleet", "push", str(f), "--index", "postgresql:///fake"]) == 0
    assert reads == [f] and pushed == [("0001_r.json", a_run())]
    bad = write(tmp_path / "0002_bad.json", "{")
    capsys.readouterr()
    assert main(["fleet", "push", str(bad), "--index", "postgresql:///fake"]) == 2
    assert f"run file {bad} is not valid JSON" in capsys.readouterr().err and not pushed[1:]


def test_progress_estimate_reads_the_newest_run_through_storage(tmp_path, reads):
    root = tmp_path / "store"
    write(root / PLATFORM / "0001_a.json", a_run(value=1.0))
    write(root / PLATFORM / "0002_b.json", "{")  # broken: the older one is used
    config = types.SimpleNamespace(option=types.SimpleNamespace(benchmark_storage=f"file://{root}"))
    assert progress._baseline(config) == (a_run(value=1.0), "0001_a.json")
    assert [p.name for p in reads] == ["0002_b.json", "0001_a.json"]
    config.option.benchmark_storage = "elasticsearch+http://localhost:9200/x"
    assert progress._baseline(config) == (None, None)


def test_git_history_and_publish_parse_committed_runs_through_storage(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    root = repo / "baselines" / "K"

    def git(*args):
        git_in(repo, *args)

    repo.mkdir()
    git("init", "-q")
    write(root / PLATFORM / "0001_a.json", a_run())
    git("add", "-A")
    git("commit", "-qm", "first")
    parsed: list[str] = []
    real = storage.run_from_text
    monkeypatch.setattr(storage, "run_from_text", lambda text, name, **kw: parsed.append(str(name)) or
                        real(text, name, **kw))
    assert len(history(root, from_git=True).runs) == 1
    (label, _), = runs_from_git(root)
    assert label.startswith("0001_a.json@")
    assert len(parsed) == 2 and all("0001_a.json" in n for n in parsed)
    write(root / PLATFORM / "0002_cut.json", "{")
    git("add", "-A")
    git("commit", "-qm", "broken")
    with pytest.raises(UsageError, match=r"^history --git: run file .*0002_cut.json \(commit [0-9a-f]{12}\) is "
                                         r"not valid JSON"):
        history(root, from_git=True)
    assert len(runs_from_git(root)) == 1  # the site shows what can be read


def test_ab_reads_its_invocations_json_through_storage(tmp_path, reads, monkeypatch):
    out = tmp_path / "base-0.json"

    def pytest_run(cmd, cwd, env, what):  # what pytest --benchmark-json leaves behind
        write(out, a_run(value=2.0))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(ab, "run_child", pytest_run)
    side = ab.Side("worktree", None, tmp_path, {})
    assert ab.invoke(side, ["benchmarks"], out) == {a_run()["benchmarks"][0]["fullname"]: 2.0}
    assert reads == [out]


def test_a_baseline_named_by_path_is_found_outside_the_storage_folder(tmp_path):
    """`--benchmark-compare=/elsewhere/run.json` on a machine whose key has no folder yet (a fresh
    runner judged against a file it was handed): the file, not "no baseline for this key"."""
    from numabench.errors import UsageError
    from numabench.results.storage import check_baselines

    run_file = write(tmp_path / "elsewhere" / "0001_before.json", a_run())
    storage_root = tmp_path / "baselines" / "K"  # does not exist
    assert check_baselines(storage_root, str(run_file), "K") == [run_file]
    assert not storage_root.exists()
    with pytest.raises(UsageError, match="no baseline matching '0001' for this machine's hardware key 'K'"):
        check_baselines(storage_root, "0001", "K")
