"""The commands behind the run-file reader trust what it accepted: a run file mutated field by
field (each field of the run, of its machine_info and of an entry of each family set to a value
of another kind, out of range, or removed) is either refused at the reader, in one line with
exit 2 naming the field, or read by report, compare (as baseline and as new), merge, advise,
publish and csv without an exception other than the project's usage error.

Deterministic: the same mutations every run (no randomness), about 1,000 files; a few seconds
of a 2-core machine's time per family of commands.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from numabench.cli import main
from numabench.errors import UsageError
from numabench.results import storage

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "baselines/H200x1_Intel-Xeon_1node_cuda13/Linux-CPython-3.12-64bit/0003_h200x1-all.json"
# a value of every other kind, the edges of the ranges, and one absent (REMOVE)
REMOVE = object()
HOSTILE: tuple[Any, ...] = (None, "x", [], {}, 1e308, -1, 10**30, True, 0, [1], {"a": 1}, REMOVE)
# subtrees whose every leaf would add hundreds of cases of one kind
LEAFY = ("data", "placement", "invocation_sources", "invocation_machines", "cpu")


def small_run() -> dict:
    """The committed H200 baseline cut to one entry per family (its machine_info whole)."""
    run = json.loads(SOURCE.read_text())
    by_family: dict[str, dict] = {}
    for entry in run["benchmarks"]:
        by_family.setdefault(entry["extra_info"]["family"], entry)
    run["benchmarks"] = list(by_family.values())
    return run


def field_paths(obj: Any, at: tuple = ()) -> Iterator[tuple]:
    """Every field down to four levels (a list's first element stands for the others)."""
    items = obj.items() if isinstance(obj, dict) else [(0, obj[0])] if isinstance(obj, list) and obj else []
    for key, value in items:
        yield at + (key,)
        if len(at) < 4 and key not in LEAFY:
            yield from field_paths(value, at + (key,))


def mutated(run: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(run)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if value is REMOVE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def run_command(argv: list[str]) -> tuple[int, str]:
    """numabench ARGV in this process: its exit code and what it printed (any other exception
    propagates: that is the failure this test looks for)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 2
    return code or 0, out.getvalue()


def commands(run: Path, good: Path, scratch: Path) -> list[list[str]]:
    return [["report", "--no-plots", "--out", str(scratch / "report"), str(run)],
            ["compare", str(good), str(run)], ["compare", str(run), str(good)],
            ["merge", "--replace", "--allow-duplicate-sources", str(scratch / "merged.json"), str(run), str(good)],
            ["advise", str(run)], ["publish", "--force", "--out", str(scratch / "site"), str(run)], ["csv", str(run)]]


RUN = small_run()
PATHS = [p for p in field_paths(RUN) if not (p[0] == "machine_info" and len(p) > 3)]


@pytest.mark.parametrize("part", ["top", "machine_info", "entries"])
def test_every_command_reads_a_mutated_run_or_refuses_it_in_one_line(tmp_path, part):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(RUN))
    paths = [p for p in PATHS if {"top": p[0] not in ("machine_info", "benchmarks"), "machine_info": p[0] == "machine_info",
                                  "entries": p[0] == "benchmarks"}[part]]
    assert len(paths) > 8, paths
    refused = read = 0
    for path in paths:
        for value in HOSTILE:
            run = tmp_path / "run.json"
            run.write_text(json.dumps(mutated(RUN, path, value)))
            case = f"{'.'.join(map(str, path))} = {'(removed)' if value is REMOVE else json.dumps(value)[:30]}"
            try:
                storage.load_run(run)
            except UsageError:
                refused += 1
                code, said = run_command(["report", "--no-plots", str(run)])
                assert code == 2 and said.count("\n") == 1 and str(run) in said, f"{case}: {code} {said!r}"
                continue
            read += 1
            for argv in commands(run, good, tmp_path):
                code, said = run_command(argv)
                assert code in (0, 1, 2), f"{case}: numabench {' '.join(argv[:1])} exited {code}: {said[-300:]}"
    assert refused and read  # both sides of the door were tried


AB_VERDICTS = ROOT / "tests/data/ab/h100-smoke-inject5.json"
AB_SESSION = ROOT / "tests/data/ab/cpu-aa-smoke-3pairs.session.json"


@pytest.mark.parametrize("source, argv", [
    (AB_VERDICTS, lambda f, d: [["ab", "--show", str(f)], ["publish", "--force", "--out", str(d / "site"), str(f)]]),
    (AB_SESSION, lambda f, d: [["ab", "--rejudge", str(f)], ["ab", "--rejudge", str(f), "--format", "json"]]),
], ids=["verdicts", "session"])
def test_a_mutated_ab_file_is_shown_or_refused_in_one_line(tmp_path, source, argv):
    """numabench ab --show / publish (a verdict file) and ab --rejudge (a kept session), each field
    of the file and of its first entry mutated; plus the shapes no field can make (a list, 600
    levels deep, pairs of 1e999)."""
    data = json.loads(source.read_text())
    cut = {**data, "benchmarks": data["benchmarks"][:2]} if "benchmarks" in data else {**data, "entries": data["entries"][:2]}
    paths = [p for p in field_paths(cut) if len(p) <= 4 and "machine_info" not in p and "placement" not in p]
    files = [(f"{'.'.join(map(str, p))} = {'(removed)' if v is REMOVE else json.dumps(v)[:30]}",
              json.dumps(mutated(cut, p, v))) for p in paths for v in HOSTILE]
    files += [("a list", "[1, 2]"), ("600 deep", "[" * 600 + "]" * 600),
              ("pairs 1e999", json.dumps({**cut, "pairs": 1}).replace('"pairs": 1', '"pairs": 1e999'))]
    outcomes = set()
    for case, text in files:
        f = tmp_path / "ab.json"
        f.write_text(text)
        for command in argv(f, tmp_path):
            code, said = run_command(command)
            assert code in (0, 1, 2), f"{case}: numabench {' '.join(command[:2])} exited {code}: {said[-300:]}"
            if code == 2:
                assert said.count("\n") == 1 and str(f) in said, f"{case}: {said!r}"
            outcomes.add(code)
    assert 2 in outcomes and outcomes - {2}  # both refused and read
