"""Command line: the ``numabench`` subcommands, one ``cmd_*`` function each (``publish``'s in
numabench/publish/cli.py). The only place that prints. ``build_parser()`` makes them
(tests/test_cli_layout.py checks this list against it):

- ``topo``: NUMA nodes, GPUs, distances, policies this machine can apply (``--key``,
  ``--bandwidth``)
- ``first-touch``: what touching memory not used yet costs here, GiB by GiB (a VM whose memory grows)
- ``build``: compile the C++/CUDA kernels into the cache
- ``csv``, ``import-csv``: a run as the seed benchmark's CSV, and back
- ``report``: tables and plots of runs
- ``advise``: which weighted-interleave ratio, from the runs
- ``history``: a hardware key's saved runs in time order, with change points
- ``compare``: judge a run against a baseline (exit 1 on a regression)
- ``merge``: saved runs of one key into one baseline
- ``learn``: fold a passing gated run into the key's rolling baseline
- ``fleet``: push and pull runs in a fleet's store (PostgreSQL, Elasticsearch/OpenSearch)
- ``ab``: A/B two git revisions on this machine
- ``plan``: the time plan of a run without running it (``--list``: the families)
- ``publish``: a static site of saved runs
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn, Sequence

from numabench import bounds
from numabench.errors import NumabenchError, UsageError, WriteError
from numabench.interrupts import Stopped, put_back, restore_interrupts, stop_on_signals
from numabench.redact import redact_text
from numabench.numerals import integer
from numabench.gate.rule import DEFAULT_COARSEST, DEFAULT_THRESHOLD
from numabench.gate.pairs import PAIR_RATIO, PAIR_RATIOS
from numabench.ab import settings as ab_settings
from numabench.gate.formats import FORMAT_HELP, FORMATS



class StdoutError(WriteError):
    """Standard output could not be written (what is left in its buffer is dropped)."""


class GuardedStdout:
    """sys.stdout whose write errors (a full disk: `numabench csv RUN > /dev/full`, a file-size
    limit) are a StdoutError: one line on stderr, not a traceback. A closed pipe stays
    BrokenPipeError (the reader went away: not an error)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _guarded(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(f"cannot write to standard output: {e.strerror or e}") from None

    def write(self, text: str) -> int:
        return self._guarded(self._stream.write, text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _discard_stdout() -> None:
    """Point fd 1 at /dev/null, so that Python's flush of what is left at exit cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class OneLineParser(argparse.ArgumentParser):
    """argparse's usage errors in one line, naming where the whole usage is (--help); exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def check_family(name: str | None) -> None:
    """--family: one of the families (None: every one)."""
    from numabench.families import FAMILIES

    if name is not None and name not in FAMILIES:
        raise UsageError(f"--family {name!r}: allowed {', '.join(FAMILIES)}")


def pytest_error_line(text: str) -> str | None:
    """The line of pytest's output that says what was wrong with its arguments (its own
    argument parser's error without the usage block), or None."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("ERROR: usage:"):
            said = next((x for x in lines[i + 1:] if ": error: " in x), None)
            return f"ERROR: {said.split(': error: ', 1)[1]}" if said else ln
        if ln.startswith("ERROR:"):
            return ln
    return None


def cmd_topo(ns: argparse.Namespace) -> int:
    from numabench.machine.capabilities import probe
    from numabench.machine.describe import render_topology
    from numabench.machine.topology import discover

    if not Path(ns.root).is_dir():
        raise UsageError(f"--root {ns.root}: not a folder: allowed the root of a (recorded) file system tree")
    topo = discover(ns.root)
    if ns.key:
        from numabench.machine.hwkey import hardware_key

        print(hardware_key(topo))
        return 0
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    if ns.bandwidth:
        from numabench.tools.host_bandwidth import bandwidth_matrix, render_matrix

        matrix = bandwidth_matrix(topo, caps)
        from numabench.tools.gpu_bandwidth import gpu_bandwidth_matrix, render_gpu_matrix

        gpu_matrix = gpu_bandwidth_matrix(topo, caps)  # None without GPUs
    if ns.json:
        out = {"topology": topo.to_dict(), "capabilities": caps.to_dict()}
        if ns.bandwidth:
            out["bandwidth"] = matrix
            if gpu_matrix:
                out["gpu_bandwidth"] = gpu_matrix
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        print(render_topology(topo, caps))
        if ns.bandwidth:
            print()
            print(render_matrix(matrix))
            if gpu_matrix:
                print()
                print(render_gpu_matrix(gpu_matrix))
    return 0


def cmd_first_touch(ns: argparse.Namespace) -> int:
    from numabench.machine.first_touch import GIB, first_touch, render_first_touch

    most = int(bounds.BOUNDS["first_touch_gib"].high)  # GiB: a PiB, beyond any host's memory (1e30 overflowed)
    for option, value in (("--gib", ns.gib), ("--chunk-gib", ns.chunk_gib)):
        bounds.check("first_touch_gib", value, f"{option} {value:g}")
    for option, value in (("--floor-gib", ns.floor_gib), ("--wait-s", ns.wait_s)):
        if not 0 <= value <= most:
            raise UsageError(f"{option} {value:g}: allowed a number >= 0, at most {most}")
    if ns.passes < 1:
        raise UsageError(f"--passes {ns.passes}: allowed 1 or more")
    page = 4096
    result = first_touch(int(ns.gib * GIB), passes=ns.passes, chunk_bytes=max(page, int(ns.chunk_gib * GIB) // page * page),
                         floor_bytes=int(ns.floor_gib * GIB), wait_s=ns.wait_s)
    print(json.dumps(result.to_dict(), indent=2) if ns.json else render_first_touch(result))
    return 0


def cmd_build(ns: argparse.Namespace) -> int:
    from numabench.kernels import prebuild

    failed = 0
    for name, status in prebuild.build_all(ns.kernels or None):
        print(f"{name}: {status}", flush=True)
        failed += status.startswith("FAILED")
    return 1 if failed else 0


def cmd_csv(ns: argparse.Namespace) -> int:
    from numabench.results.seed_csv import run_json_to_csv

    sys.stdout.write(run_json_to_csv(ns.run_json, weighted=True if ns.weighted else None, dtype=ns.dtype,
                                     impl=ns.impl, schedule=ns.schedule))
    return 0


def cmd_import_csv(ns: argparse.Namespace) -> int:
    from numabench.results.csv_import import import_csv

    run = import_csv(ns.csv_file, gpus=ns.gpu, dtype=ns.dtype, impl=ns.impl, schedule=ns.schedule, alloc=ns.alloc,
                     cpu_model=ns.cpu, numa_nodes=ns.numa_nodes, hardware_key=ns.hardware_key)
    from numabench.results.merge import write_run

    out = ns.out
    write_run(run, out)  # never overwrites, as merge; whole or not at all
    for warning in run["machine_info"]["numabench"].get("import_warnings", []):
        print(f"numabench: warning: {warning}", file=sys.stderr)
    rows = len({b["extra_info"]["csv_line"] for b in run["benchmarks"]})
    print(f"{ns.csv_file}: {rows} rows -> {len(run['benchmarks'])} benchmarks (means only) in {out} "
          f"[{run['machine_info']['numabench']['hardware_key']}]")
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    from numabench.results.report import build_report
    from numabench.results.tables import parse_where

    check_family(ns.family)
    if ns.out is not None and Path(ns.out).exists() and not Path(ns.out).is_dir():
        raise UsageError(f"--out {ns.out} is a file: allowed a directory (new or existing) for report.md and the PNGs")
    rep = build_report(ns.run_json, ns.out, family=ns.family, where=parse_where(ns.where), plots=not ns.no_plots)
    sys.stdout.write(rep.markdown if ns.markdown else rep.text)
    if rep.markdown_path:
        print(f"\nwrote {rep.markdown_path} and {len(rep.images)} plot(s) in {rep.markdown_path.parent}")
    return 0


def cmd_advise(ns: argparse.Namespace) -> int:
    from numabench.cases import parse_sizes
    from numabench.numa.place import parse_bytes
    from numabench.results import storage
    from numabench.results.advise import advise, render
    from numabench.results.budget_advice import budget_advice, render_budget
    from numabench.results.report import combine_runs
    from numabench.results.tables import parse_where

    check_family(ns.family)
    if ns.at_numel and not ns.dram_budget:
        raise UsageError("--at-numel answers the --dram-budget question: give --dram-budget too")
    if ns.dram_budget and ns.family not in (None, "adam_offload"):
        raise UsageError(f"--dram-budget models adam_offload's copies; --family {ns.family} has none to model")
    budgets = [parse_bytes(b) for b in ns.dram_budget or ()]
    at = parse_sizes(ns.at_numel)[0] if ns.at_numel else None
    run = combine_runs(ns.run_json) if len(ns.run_json) > 1 else storage.load_run(ns.run_json[0])
    if budgets:
        sys.stdout.write(render_budget(budget_advice(run, budgets, at, parse_where(ns.where))))
    else:
        sys.stdout.write(render(advise(run, ns.family, parse_where(ns.where))))
    return 0


def this_machine_key() -> str:
    """This machine's hardware key (what `numabench topo --key` prints)."""
    from numabench.machine.hwkey import hardware_key
    from numabench.machine.topology import discover

    return hardware_key(discover())


def cmd_history(ns: argparse.Namespace) -> int:
    from numabench.results.history import histories, render_all

    if ns.out and Path(ns.out).exists() and not Path(ns.out).is_dir():  # a traceback from mkdir before
        raise UsageError(f"--out {ns.out}: a file; allowed a folder for the plots (new or existing)")
    key = ns.key if ns.key is not None or not ns.index else this_machine_key()
    hists = histories(ns.folder, threshold=ns.threshold, from_git=ns.git, index=ns.index, key=key)
    sys.stdout.write(render_all(hists, show="all" if ns.all else "changes"))
    if ns.out:
        from numabench.results.history import trend_plots

        try:
            paths = [p for h in hists for p in trend_plots(h, Path(ns.out) / h.key if len(hists) > 1 else ns.out)]
        except OSError as e:  # a full disk, a file-size limit, a folder that cannot be made
            raise UsageError(f"--out {ns.out}: cannot write the plots: {e.strerror or e}") from None
        print(f"wrote {len(paths)} plot(s) in {ns.out}")
    return 0


def cmd_compare(ns: argparse.Namespace) -> int:
    from numabench.gate.table import render_refusal

    try:
        return _compare(ns)
    except UsageError as e:  # a refusal: in the format a machine reads it in, and on stderr as always
        shown = render_refusal(str(e), ns.format)
        if shown:
            sys.stdout.write(shown)
        raise


def _compare(ns: argparse.Namespace) -> int:
    from numabench.results.compare import compare_runs
    from numabench.gate.table import render_as

    if len(ns.runs) > 2:
        raise UsageError(f"compare takes [BASELINE] NEW: got {len(ns.runs)} runs ({' '.join(ns.runs)})")
    if len(ns.runs) == 2:
        old, new = ns.runs
    else:  # the newest baseline of NEW's hardware key
        from numabench.machine.hwkey import run_hardware_key
        from numabench.results import storage

        new = ns.runs[0]
        key = run_hardware_key(storage.load_run(new))
        if not key:
            raise UsageError(f"{new} records no hardware key: name the baseline (numabench compare BASELINE NEW)")
        hint = ("save one on a machine of that key with `pytest benchmarks --benchmark-save=NAME "
                "--benchmark-save-data --numa-repeats=3`, or name it: numabench compare BASELINE NEW")
        old = str(storage.check_baselines(Path(ns.storage) / key, True, key, what="compare", hint=hint)[0])
    res = compare_runs(old, new, threshold=ns.threshold, coarsest=ns.coarsest, allow_foreign=ns.allow_foreign)
    show = "changed" if ns.changed_only or (ns.format == "markdown" and not ns.all) else "all"
    sys.stdout.write(render_as(res, ns.format, show=show))
    return res.exit_code


def cmd_ab(ns: argparse.Namespace) -> int:
    from numabench.ab.run import run_ab
    from numabench.ab.formats import add_run_record, from_json, render_as, to_json

    if ns.show is not None:  # a saved A/B run, rendered again: nothing measured
        if ns.rejudge is not None:
            raise UsageError(f"--show {ns.show} renders a saved A/B run as it was judged, --rejudge a kept session "
                             "judged again: allowed one of them")
        if ns.base is not None or ns.head is not None or ns.pytest_args:
            raise UsageError(f"--show {ns.show}: renders a saved A/B run: allowed without BASE, HEAD and pytest "
                             "arguments")
        try:
            res = from_json(json.loads(Path(ns.show).read_text()), ns.show)
        except OSError as e:
            raise UsageError(f"--show {ns.show}: {e.strerror}: allowed the JSON that numabench ab --json wrote") \
                from None
        except ValueError as e:  # not JSON, or not an A/B run
            raise UsageError(f"--show {ns.show}: {e}: allowed the JSON that numabench ab --json wrote") from None
        sys.stdout.write(render_as(res, ns.format))
        return res.exit_code
    if ns.rejudge is not None:
        return rejudge_session(ns)
    if ns.pair_ratio is not None:
        raise UsageError("--pair-ratio goes with --rejudge SESSION (a measured run judges each pair by its ABBA quads "
                         "of rounds)")
    if ns.base is None:
        raise UsageError("ab needs BASE (a git revision), --show FILE (a saved A/B run) or --rejudge SESSION (a kept "
                         "session)")
    settings = ab_settings.from_namespace(ns)
    passes = ab_settings.passes(ns)  # --passes given where it cannot be: a usage error
    settings = settings.resolved(bool(ns.head_axis))
    json_path = Path(ns.json) if ns.json else None
    session_path = Path(ns.session_json) if ns.session_json else None
    for option, path in (("--json", json_path), ("--session-json", session_path)):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"{option} {path}: {path.parent} is not a folder: allowed a file in an existing folder")
    if session_path is not None and (settings.interleave != "rounds" or ns.head_axis):
        raise UsageError("--session-json keeps the rounds mode's session JSON: allowed with --interleave=rounds "
                         "and without --head-axis")
    res = run_ab(ns.base, ns.head, with_test_path(ns.pytest_args or []), pairs=settings.pairs,
                 threshold_pct=settings.threshold, confidence=settings.confidence, coarsest_pct=settings.coarsest,
                 base_env=dict(settings.base_env), head_env=dict(settings.head_env),
                 progress=lambda line: print(f"[ab] {line}", file=sys.stderr, flush=True),
                 interleave=settings.interleave, head_axis=ns.head_axis, session_json=session_path,
                 max_pairs=settings.max_pairs, target_pct=settings.target_resolution,
                 confirm_pairs=settings.confirm_pairs, workers=settings.workers, same_cpus=settings.same_cpus,
                 passes=passes, time_budget_s=settings.time_budget, confirm_confidence=settings.confirm_confidence,
                 rewarm=settings.rewarm, scope=settings.scope, round_target_pct=settings.round_target,
                 round_cap=settings.round_cap, focus_budget_s=settings.focus_budget)
    try:
        res.hardware_key = this_machine_key()
    except (OSError, NumabenchError):
        res.hardware_key = None
    if session_path is not None and session_path.is_file():  # kept: how the run ran, for --rejudge
        try:
            add_run_record(session_path, res)
        except OSError as e:
            raise UsageError(f"--session-json {ns.session_json}: {e.strerror}") from None
    if json_path is not None:
        try:
            json_path.write_text(json.dumps(to_json(res), indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"--json {ns.json}: {e.strerror}") from None
    sys.stdout.write(render_as(res, ns.format))
    return res.exit_code


def with_test_path(pytest_args: Sequence[str]) -> list[str]:
    """numabench ab's pytest arguments with ``benchmarks`` first where they name no test path
    (``-- -k touch``): pytest would collect tests/ too, in both checkouts."""
    def a_path(arg: str) -> bool:
        where = arg.split("::")[0]
        return where == "benchmarks" or where.startswith("benchmarks/") or Path(where).exists()
    if any(not a.startswith("-") and a_path(a) for a in pytest_args):
        return list(pytest_args)
    return ["benchmarks", *pytest_args]


def rejudge_session(ns: argparse.Namespace) -> int:
    """numabench ab --rejudge SESSION: a kept session's verdicts again, nothing measured."""
    from numabench.ab.formats import render_as, to_json
    from numabench.ab.rejudge import rejudge
    from numabench.results import storage

    measuring = [o for o, given in (("BASE", ns.base is not None), ("pytest arguments", bool(ns.pytest_args)),
                                    ("--session-json", ns.session_json), ("--base-env", ns.base_env),
                                    ("--head-env", ns.head_env), ("--head-axis", ns.head_axis),
                                    ("--max-pairs", ns.max_pairs is not None),
                                    ("--confirm-pairs", ns.confirm_pairs is not None),
                                    ("--passes", ns.passes is not None), ("--time-budget", ns.time_budget),
                                    ("--focus-budget", ns.focus_budget is not None),
                                    ("--rewarm", ns.rewarm is not None), ("--workers", ns.workers is not None),
                                    ("--same-cpus", ns.same_cpus is not None),
                                    ("--target-resolution", ns.target_resolution is not None),
                                    ("--interleave", ns.interleave is not None))
                 if given]
    if measuring:
        raise UsageError(f"--rejudge {ns.rejudge}: judges a kept session again, measuring nothing: allowed without "
                         f"{measuring[0]} (with --pairs, --threshold, --confidence, --confirm-confidence, --coarsest, "
                         "--pair-ratio, "
                         "--format, --json)")
    try:
        run = storage.load_run(ns.rejudge)  # a kept session is a run file: the run files' schema checks it
    except UsageError as e:
        raise UsageError(f"--rejudge: {e}: allowed the JSON numabench ab --session-json kept") from None
    settings = ab_settings.from_namespace(ns)  # --pairs: each entry's first this many; not given: every pair
    res = rejudge(run, ns.rejudge, pairs=None if ns.pairs is None else settings.pairs,
                  threshold_pct=settings.threshold, confidence=settings.confidence, coarsest_pct=settings.coarsest,
                  pair_ratio=ns.pair_ratio or PAIR_RATIO, confirm_confidence=settings.confirm_confidence)
    if ns.json:
        try:
            Path(ns.json).write_text(json.dumps(to_json(res), indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"--json {ns.json}: {e.strerror}") from None
    sys.stdout.write(render_as(res, ns.format))
    return res.exit_code


def cmd_plan(ns: argparse.Namespace) -> int:
    import subprocess
    import tempfile
    import time

    if ns.list or ns.markdown or ns.readme:
        if ns.ab_pairs is not None:
            raise UsageError("--ab-pairs goes with a plan of benchmarks, not with --list")
        return plan_list(ns)
    pairs = None if ns.ab_pairs is None else parse_ab_pairs(ns.ab_pairs)
    if pairs is None and ns.ab_workers is not None:
        raise UsageError(f"--ab-workers {ns.ab_workers} goes with --ab-pairs N (the plan of numabench ab)")
    if pairs is None and ns.ab_passes is False:
        raise UsageError("--no-ab-passes goes with --ab-pairs N (the plan of numabench ab)")
    ns.ab_workers = ns.ab_workers or ab_settings.DEFAULTS.workers
    ns.ab_passes = ab_settings.DEFAULTS.resolved().passes if ns.ab_passes is None else ns.ab_passes
    args = ns.pytest_args or ["benchmarks"]
    if pairs is None and (ns.ab_rewarm is not None or ns.ab_max_pairs is not None):
        raise UsageError(f"{'--ab-max-pairs' if ns.ab_max_pairs is not None else '--no-ab-rewarm'} goes with "
                         "--ab-pairs N (the plan of numabench ab)")
    settings = ab_settings.from_namespace(ns, ("workers", "passes", "rewarm", "max_pairs"), prefix="ab_")
    rewarm = settings.rewarm
    if pairs is not None and ns.ab_workers == "forked" and "--numa-forkserver" not in args:
        args.append("--numa-forkserver")  # numabench ab's default: the plan of its session
    most = settings.max_pairs  # the upper figure, where every worker run takes that many pairs
    with tempfile.TemporaryDirectory(prefix="numabench-plan-") as tmp:
        figures = Path(tmp) / "plan.json"
        env = {**os.environ, "NUMABENCH_PLAN_JSON": str(figures)} if pairs else None
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              *args], capture_output=True, text=True, env=env)
        session_s = time.monotonic() - started  # pytest's start and collection, as every invocation pays it
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("numabench plan:")]
        if out.returncode not in (0, 5) or not lines:
            said = pytest_error_line(out.stdout + "\n" + out.stderr)  # a usage error: its one line
            sys.stderr.write(f"{said}\n" if said else out.stdout[-3000:] + out.stderr[-3000:])
            return out.returncode or 1
        print("\n".join(lines))
        if pairs:
            from numabench.ab.plan import ab_estimate, build_kernels

            print(ab_estimate(json.loads(figures.read_text()), pairs, session_s, build_kernels(),
                              rewarm=rewarm, max_pairs=most, passes=ns.ab_passes).summary())
    return 0


def parse_ab_pairs(text: str, option: str = "--ab-pairs") -> int:
    """--ab-pairs (or ``option``): numabench ab's pairs, in their range (numabench.bounds)."""
    try:
        pairs = integer(text)
    except ValueError:
        pairs = 0
    return int(bounds.check("pairs", pairs, f"{option} {text}"))


def plan_list(ns: argparse.Namespace) -> int:
    """numabench plan --list: the families as text, as the README's Markdown table, or that
    table rewritten in a README (numabench.families.listing renders all three)."""
    import shutil

    from numabench.families import listing

    if not ns.list:
        raise UsageError("--markdown and --readme go with --list (numabench plan --list --markdown)")
    if ns.markdown and ns.readme:
        raise UsageError("--list takes --markdown (print the table) or --readme FILE (rewrite it there), not both")
    if ns.readme:
        path = Path(ns.readme)
        try:
            text = path.read_text()
            new = listing.replace_readme_table(text)
            if new != text:
                path.write_text(new)
        except OSError as e:
            raise UsageError(f"--readme {path}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--readme {path}: not UTF-8 text: allowed a Markdown README") from None
        except ValueError as e:
            raise UsageError(f"--readme {path}: {e}") from None
        print(f"{path}: family table " + ("rewritten" if new != text else "up to date")
              + f" ({len(listing.family_rows())} families)")
        return 0
    if ns.markdown:
        sys.stdout.write(listing.render_markdown())
    else:
        sys.stdout.write(listing.render_text(width=shutil.get_terminal_size().columns))
    return 0


def cmd_merge(ns: argparse.Namespace) -> int:
    from numabench.results.merge import merge_runs, write_run

    res = merge_runs(ns.runs, allow_foreign=ns.allow_foreign, require_data=not ns.allow_no_data,
                     replace=ns.replace, allow_duplicates=ns.allow_duplicate_sources)
    path = write_run(res.run, ns.output)
    how = "the later run's entry kept" if ns.replace else "their invocations pooled"
    print(f"{path}: {len(res.run['benchmarks'])} benchmarks from {len(ns.runs)} runs"
          + (f"; {len(res.again)} measured by several runs, {how}" if res.again else ""))
    return 0


def cmd_learn(ns: argparse.Namespace) -> int:
    from numabench.results.window import learn

    from numabench.results.fleet_pg import is_postgres_url

    if "://" in ns.window and not is_postgres_url(ns.window):  # a URL where a folder is meant: never a folder of it
        raise UsageError(f"--window {redact_text(ns.window)}: a URL; allowed a folder, or a PostgreSQL database "
                         "(postgresql://USER@HOST/DB)")
    if is_postgres_url(ns.window):
        from numabench.results.window import learn_fleet

        fres = learn_fleet(ns.window, ns.run, keep=ns.keep, seed=ns.seed)
        print(f"{fres.url} [{fres.key}]: " + (f"run {fres.learnt} stored" if fres.learnt else "run stored before")
              + (f" (the window started from {fres.seeded})" if fres.seeded else "")
              + f"; the window: the newest {len(fres.members)} passing runs, {fres.entries} entries (pull it with "
                f"numabench fleet pull --passed --last {ns.keep})")
        return 0
    res = learn(ns.window, ns.run, keep=ns.keep, seed=ns.seed)
    print(f"{res.folder}: {len(res.members)} runs ({', '.join(res.members)})"
          + (f"; dropped {', '.join(res.dropped)}" if res.dropped else "")
          + f"; {res.entries} entries in {res.baseline} (judge with --benchmark-compare={res.baseline})")
    return 0


def fleet_url(given: str | None) -> str:
    """--index, else $NUMABENCH_FLEET_URL (how a CI job names its fleet's database)."""
    url = given or os.environ.get("NUMABENCH_FLEET_URL")
    if not url:
        raise UsageError("name the fleet's store: --index URL or NUMABENCH_FLEET_URL (postgresql://[USER@]HOST[:PORT]/"
                         "DBNAME, postgresql:///?service=NAME, or an Elasticsearch/OpenSearch http(s)://HOST:PORT/INDEX)")
    return url


def cmd_fleet(ns: argparse.Namespace) -> int:
    from numabench.results import storage
    from numabench.results.fleet import FleetIndex, open_fleet

    if ns.last is not None and ns.last < 1:
        raise UsageError(f"--last={ns.last}: allowed an integer >= 1 (the newest runs to pull)")
    store = open_fleet(fleet_url(ns.index))
    shown = store.shown  # the URL without its password
    try:
        if ns.action == "push":
            if not ns.runs:
                raise UsageError("fleet push needs saved run files (with --benchmark-save-data)")
            for path in ns.runs:
                if isinstance(store, FleetIndex):
                    rid, count = store.push(storage.load_run(path))
                    print(f"{path}: {count} entries in {shown} as run {rid}")
                else:
                    rid, count, new = store.push(storage.load_run(path), Path(path).name)
                    print(f"{path}: {count} entries in {shown} as run {rid}" + ("" if new else " (stored before: kept once)"))
            return 0
        if ns.action == "keys":
            print("\n".join(store.keys()))
            return 0
        if ns.runs:
            raise UsageError("fleet pull takes no run files: name the output with --output")
        if not ns.output:
            raise UsageError("fleet pull needs --output FILE (the baseline to write)")
        key = ns.key if ns.key is not None else this_machine_key()
        from numabench.results.merge import write_run

        if ns.passed and isinstance(store, FleetIndex):
            raise UsageError("--passed: allowed with a PostgreSQL database only (an index keeps no verdicts)")
        res = store.pull(key, ns.last) if isinstance(store, FleetIndex) else store.pull(key, ns.last,
                                                                                         passed_only=ns.passed)
        path = write_run(res.run, ns.output)
        print(f"{path}: {len(res.run['benchmarks'])} benchmarks from {len(res.run['numabench_merged_from'])} runs of "
              f"{key} in {shown}" + (f"; {len(res.again)} measured by several runs, their invocations pooled"
                                     if res.again else ""))
        return 0
    finally:
        if not isinstance(store, FleetIndex):
            store.close()


def build_parser() -> OneLineParser:
    """The ``numabench`` parser: one subparser per subcommand (the module docstring lists them)."""
    parser = OneLineParser(prog="numabench", description="NUMA-aware GPU offload benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("topo", help="show NUMA nodes, GPUs, distances, and what policies this machine can apply")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--bandwidth", action="store_true", help="also measure the node x node host bandwidth matrix")
    p.add_argument("--key", action="store_true", help="print only this machine's hardware key (its baseline folder)")
    p.add_argument("--root", default="/", help=argparse.SUPPRESS)  # recorded trees in tests
    p.set_defaults(func=cmd_topo)
    p = sub.add_parser("first-touch", help="what this machine pays to touch memory it has not used yet (a VM whose "
                       "memory grows as used): fresh memory touched GiB by GiB, twice, with MemTotal after each")
    p.add_argument("--gib", type=float, default=8.0, help="memory to touch in each pass (default 8)")
    p.add_argument("--passes", type=int, default=2, help="passes, each over fresh memory freed at its end (default 2)")
    p.add_argument("--chunk-gib", type=float, default=1.0, help="timed chunk (default 1)")
    p.add_argument("--floor-gib", type=float, default=2.0,
                   help="stop before MemAvailable falls below this and does not grow within --wait-s (default 2)")
    p.add_argument("--wait-s", type=float, default=3.0, help="how long to wait for a growing VM (default 3)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_first_touch)
    p = sub.add_parser("build", help="compile the C++/CUDA kernels into the cache")
    p.add_argument("kernels", nargs="*", metavar="KERNEL", help="only these (stream, cpu_adam, cuda_adam)")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("csv", help="write a pytest-benchmark run as the seed benchmark's CSV")
    p.add_argument("run_json", help="a saved run (baselines/.../NNNN_name.json) or --benchmark-json file")
    p.add_argument("--weighted", action="store_true", help="the weighted format (default: if the run has weighted cases)")
    p.add_argument("--dtype", default="fp32", help="which dtype's rows (the seed CSV has no dtype column)")
    p.add_argument("--impl", default="ours", help="which kernel's rows: ours or torch")
    p.add_argument("--schedule", default="serial", help="which schedule's rows: serial or overlap")
    p.set_defaults(func=cmd_csv)
    p = sub.add_parser("import-csv", help="convert a seed benchmark CSV into a pytest-benchmark-shaped run JSON")
    p.add_argument("csv_file", help="CSV with the seed's columns (numa_weight after numa_nodes when weighted)")
    p.add_argument("--out", required=True, help="where to write the run JSON")
    p.add_argument("--gpu", action="extend", nargs="+", metavar="NAME",
                   help="GPU model(s) of the machine that made the CSV, e.g. 'NVIDIA H100 80GB HBM3' "
                        "(one name: that many as the CSV's largest ngpus)")
    p.add_argument("--cpu", default="unknown", help="CPU model of that machine (for the hardware key)")
    p.add_argument("--numa-nodes", type=int, default=None, help="its NUMA node count (default: from numa_nodes)")
    p.add_argument("--hardware-key", default=None, help="set the hardware key instead of deriving it")
    p.add_argument("--dtype", default="fp32", help="dtype of the rows (the seed CSV has no dtype column)")
    p.add_argument("--impl", default=None, help="stamp an impl (e.g. ours) so names match new runs")
    p.add_argument("--schedule", default=None, help="stamp a schedule (e.g. serial) so names match new runs")
    p.add_argument("--alloc", default=None, help="stamp an allocator (e.g. register) so names match new runs")
    p.set_defaults(func=cmd_import_csv)
    p = sub.add_parser("report", help="tables (terminal / Markdown) and PNG plots of a run, or of several runs of "
                                      "one machine combined (e.g. plain and weighted-interleave imports)")
    p.add_argument("run_json", nargs="+", help="saved runs (baselines/.../NNNN_name.json), --benchmark-json files or "
                                                "imports")
    p.add_argument("--out", default=None, help="directory for report.md and the PNGs (none: tables only)")
    p.add_argument("--markdown", action="store_true", help="print the Markdown (report.md) instead of text tables")
    p.add_argument("--family", default=None, help="only this family")
    p.add_argument("--where", action="append", metavar="AXIS=VALUE",
                   help="only benchmarks with this axis value, e.g. --where dtype=fp32 --where impl=ours")
    p.add_argument("--no-plots", action="store_true", help="write report.md without PNGs")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("advise", help="which weighted-interleave ratio: a model from the cases measured bound to "
                                      "each of two nodes, checked against the weighted cases measured")
    p.add_argument("run_json", nargs="+", help="runs of one machine (combined), e.g. plain and weighted imports")
    p.add_argument("--family", default=None, help="only this family")
    p.add_argument("--where", action="append", metavar="AXIS=VALUE", help="only entries with this axis value")
    p.add_argument("--dram-budget", action="append", metavar="SIZE",
                   help="instead: with SIZE of DRAM per GPU (K/M/G binary, e.g. 4G; repeatable), which kinds of "
                        "adam_offload's state go to the slower node and what the step costs (docs/ADVISOR.md)")
    p.add_argument("--at-numel", default=None, metavar="N",
                   help="with --dram-budget: answer at N elements (e.g. 7.6G) instead of each measured size")
    p.set_defaults(func=cmd_advise)
    p = sub.add_parser("history", help="the saved runs of a hardware key in time order: per entry its series and "
                                       "change points (the gate's rule between consecutive runs)")
    p.add_argument("folder", nargs="?", default=None, help="baselines/<hardware key>/ (every saved run below it)")
    p.add_argument("--index", default=None, help="instead of a folder: the runs in a fleet's store "
                                                 "(postgresql://... or http(s)://HOST:PORT/INDEX, see numabench fleet)")
    p.add_argument("--key", default=None, help="with --index: this hardware key (default: this machine's); with a "
                                               "folder: only this key's runs (default: one history per key)")
    p.add_argument("--threshold", default=DEFAULT_THRESHOLD, help="beyond the previous run's band by more than this")
    p.add_argument("--out", default=None, help="directory for trend plots (PNG, one per family)")
    p.add_argument("--all", action="store_true", help="list every entry, not only those with a change point")
    p.add_argument("--git", action="store_true", help="every run ever committed under FOLDER (merged runs are "
                                                     "removed from the tree, not from git)")
    p.set_defaults(func=cmd_history)
    p = sub.add_parser("compare", help="judge run NEW against baseline OLD: slower or faster only beyond the "
                                       "baseline's band of invocation medians by more than the threshold; exit 1 "
                                       "on a regression")
    p.add_argument("runs", nargs="+", metavar="[BASELINE] NEW",
                   help="the baseline run JSON and the new one; NEW alone: the newest baseline of NEW's hardware "
                        "key under --storage")
    p.add_argument("--storage", default="baselines", help="where baselines live, by hardware key (default baselines)")
    p.add_argument("--threshold", default=None,
                   help="how far beyond the band a value must lie at least; a noisier entry's own threshold is larger "
                        "(default: the threshold a gated NEW run was judged with, else "
                        f"{DEFAULT_THRESHOLD.replace('%', '%%')})")
    p.add_argument("--coarsest", default=None,
                   help="an entry that cannot detect a slowdown this small is informational (default: as a gated NEW "
                        f"run was judged, else {DEFAULT_COARSEST.replace('%', '%%')})")
    p.add_argument("--allow-foreign", action="store_true", help="compare runs from different hardware keys")
    p.add_argument("--changed-only", action="store_true", help="list only benchmarks whose verdict is not 'same'")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help=f"{FORMAT_HELP}; markdown tables the changed entries unless --all")
    p.add_argument("--all", action="store_true", help="markdown: every entry, not only the changed ones")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("merge", help="join saved runs of one hardware key into one baseline run (an entry several "
                                     "runs measured: its invocations pooled)")
    p.add_argument("output", help="the new run file, e.g. baselines/<key>/<platform>/0002_name.json")
    p.add_argument("runs", nargs="+", help="saved runs, oldest first")
    p.add_argument("--allow-foreign", action="store_true", help="merge runs from different hardware keys")
    p.add_argument("--allow-no-data", action="store_true", help="accept entries without per-round data")
    p.add_argument("--replace", action="store_true",
                   help="an entry several runs measured: keep the last run's instead of pooling")
    p.add_argument("--allow-duplicate-sources", action="store_true",
                   help="pool a run given twice (or a merged run and one it holds): its invocations counted twice")
    p.set_defaults(func=cmd_merge)
    p = sub.add_parser("learn", help="fold a passing gated run into a hardware key's rolling baseline (the last "
                                     "--keep runs, oldest out), so its bands learn how runners of the key differ")
    p.add_argument("run", help="the gated run (--benchmark-json with --benchmark-save-data); refused if it holds a "
                               "confirmed regression")
    p.add_argument("--window", required=True, help="the window's folder (created; kept as a CI cache or artifact), or "
                                                   "a fleet's PostgreSQL database (postgresql://...: the run is pushed)")
    p.add_argument("--keep", type=int, default=10, help="runs the window keeps (default 10)")
    p.add_argument("--seed", default=None, help="what a new window starts from: a run file, or a baselines folder "
                                                "(the newest committed run of the run's hardware key)")
    p.set_defaults(func=cmd_learn)
    p = sub.add_parser("fleet", help="runs of many runners in one PostgreSQL database (or Elasticsearch/OpenSearch "
                                     "index): push saved runs, "
                                     "pull the newest runs of a hardware key as one baseline (invocations pooled)")
    p.add_argument("action", choices=("push", "pull", "keys"))
    p.add_argument("runs", nargs="*", help="push: saved runs (with --benchmark-save-data)")
    p.add_argument("--index", default=None, help="postgresql://[USER@]HOST[:PORT]/DBNAME (password from PGPASSWORD, "
                                                 "PGSERVICEFILE or ~/.pgpass, never here) or http(s)://HOST:PORT/INDEX;"
                                                 " default $NUMABENCH_FLEET_URL")
    p.add_argument("--key", default=None, help="pull: this hardware key (default: this machine's)")
    p.add_argument("--last", type=int, default=None, help="pull: only the newest N runs (default: all)")
    p.add_argument("--output", default=None, help="pull: the baseline file to write (never overwritten)")
    p.add_argument("--passed", action="store_true", help="pull (PostgreSQL): only runs without a confirmed regression "
                                                         "(the rolling window that numabench learn keeps there)")
    p.set_defaults(func=cmd_fleet)
    p = sub.add_parser("ab", help="A/B two git revisions on this machine: both sides' workers timed round by "
                                  "round in one session (or whole invocations in turn), a t-interval per entry; "
                                  "exit 1 where it lies beyond the threshold",
                       usage="numabench ab BASE [HEAD] [options] [-- PYTEST_ARGS...] | numabench ab --show FILE "
                             "[--format F] | numabench ab --rejudge SESSION [--pairs N] [--pair-ratio R] [options]")
    p.add_argument("base", nargs="?", default=None, help="base revision (any git revision)")
    p.add_argument("head", nargs="?", default=None,
                   help="head revision (default: the working tree as it is, uncommitted changes included)")
    ab_settings.add_arguments(p)  # every A/B setting, its default and help: numabench.ab.settings
    p.add_argument("--head-axis", default=None, metavar="KNOB=VALUE",
                   help="head runs with this knob value (e.g. place=master:bind:0+grads:bind:0+moments:bind:0), base "
                        "at its default; each head entry judged against the base entry of the same case (with BASE "
                        "the head's revision: an A/B of the setting)")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help=FORMAT_HELP)
    p.add_argument("--json", default=None, metavar="PATH", help="also write the A/B run as JSON here")
    p.add_argument("--rejudge", default=None, metavar="SESSION",
                   help="judge a kept session (what --session-json wrote) again, measuring nothing: with --pairs, "
                        "--threshold, --confidence, --confirm-confidence, --coarsest, --pair-ratio")
    p.add_argument("--pair-ratio", choices=tuple(PAIR_RATIOS), default=None,
                   help="with --rejudge: each pair's ratio the median over its ABBA quads of rounds (quads: default, as "
                        "a measured run judges), the median of its round-by-round ratios (rounds: as runs were judged "
                        "before quads) or the ratio of its medians")
    p.add_argument("--session-json", default=None, metavar="PATH",
                   help="also keep the session's pytest-benchmark JSON here (rounds mode; in passes, theirs merged): "
                        "each entry's base "
                        "medians and both sides' rounds per pair in extra_info.ab_base, each run's costs "
                        "(run_fixed_s, run_step_wall_s)")
    p.add_argument("--show", default=None, metavar="FILE",
                   help="render a saved A/B run (what --json wrote) in --format; exit code as its verdicts")
    p.set_defaults(func=cmd_ab, pytest_args=None)
    p = sub.add_parser("plan", help="the time plan of a benchmark run without running it: entries, worker runs, "
                                    "estimated minutes per family; --list: the families",
                       usage="numabench plan [PYTEST_ARGS...] | numabench plan --list [--markdown | --readme FILE]",
                       description="The time plan of `pytest benchmarks PYTEST_ARGS` (default: benchmarks, the ci "
                                   "tier) from this hardware key's baseline, without running anything; e.g. "
                                   "numabench plan benchmarks --numa-tier=full. PYTEST_ARGS are any of pytest's and "
                                   "numabench's options (pytest benchmarks --help lists them). With --list: the "
                                   "families instead, what one round of each measures and what it needs.")
    p.add_argument("--list", action="store_true", help="list the families (each Family's description and needs)")
    p.add_argument("--ab-pairs", default=None, metavar="N",
                   help="also estimate numabench ab of this selection with N pairs: two builds and 2N invocations")
    # with --ab-pairs: as numabench ab's own (numabench.ab.settings), prefixed
    ab_settings.add_arguments(p, ("workers", "passes", "rewarm", "max_pairs"), prefix="ab-")
    p.add_argument("--markdown", action="store_true", help="with --list: the README's family table (Markdown)")
    p.add_argument("--readme", default=None, metavar="FILE",
                   help="with --list: rewrite the family table of FILE (README.md) from the families")
    p.set_defaults(func=cmd_plan, pytest_args=None)
    from numabench.publish.cli import add_parser as add_publish_parser  # numabench publish: its own package
    add_publish_parser(sub)
    return parser


PLAN_OWN_OPTIONS = ("--list", "--markdown", "--readme")  # numabench plan's own: anything else goes to pytest


def take_option(argv: list[str], option: str) -> tuple[list[str], str | None]:
    """``option N`` / ``option=N`` out of ``argv``: (the rest, N or None)."""
    for i, a in enumerate(argv):
        if a == option:
            if i + 1 >= len(argv):
                raise UsageError(f"{option} needs a value: allowed an integer >= 2")
            return argv[:i] + argv[i + 2:], argv[i + 1]
        if a.startswith(option + "="):
            return argv[:i] + argv[i + 1:], a.split("=", 1)[1]
    return argv, None


def take_ab_pairs(argv: list[str]) -> tuple[list[str], str | None]:
    """``plan``'s ``--ab-pairs N`` / ``--ab-pairs=N`` out of its arguments (the rest go to pytest)."""
    return take_option(argv, "--ab-pairs")


def main(argv: Sequence[str] | None = None) -> int:
    # A caller that ignores SIGINT (nohup, a background job) would leave `ab`, `plan` and
    # the bandwidth tools deaf to Ctrl-C, with their children and worktrees.
    restore_interrupts()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = None
    if argv and argv[0] == "ab" and "--" in argv:  # what follows -- selects the benchmarks
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1:]
    ab_pairs = ab_workers = ab_passes = ab_rewarm = ab_max_pairs = None
    if argv and argv[0] == "plan":  # plan's --ab-* options are its own wherever they stand (the rest goes to pytest)
        for flag, value in (("--ab-passes", True), ("--no-ab-passes", False)):
            if flag in argv:
                argv, ab_passes = [a for a in argv if a != flag], value
        for flag, value in (("--ab-rewarm", True), ("--no-ab-rewarm", False)):
            if flag in argv:
                argv, ab_rewarm = [a for a in argv if a != flag], value
        try:
            argv, ab_pairs = take_ab_pairs(argv)
            argv, ab_workers = take_option(argv, "--ab-workers")
            argv, ab_max_pairs = take_option(argv, "--ab-max-pairs")
        except UsageError as e:
            parser.error(str(e))
        if ab_workers not in (None, *ab_settings.WORKERS):
            parser.error(f"--ab-workers {ab_workers}: allowed {', '.join(ab_settings.WORKERS)}")
    if (argv and argv[0] == "plan" and not {"-h", "--help"} & set(argv[1:2])
            and not any(a.split("=", 1)[0] in PLAN_OWN_OPTIONS for a in argv[1:])):
        argv, pytest_args = argv[:1], argv[1:]  # everything after plan goes to pytest
    ns = parser.parse_args(argv)
    if pytest_args is not None:
        ns.pytest_args = pytest_args
    if ab_pairs is not None:
        ns.ab_pairs = ab_pairs
    if ab_workers is not None:
        ns.ab_workers = ab_workers
    if ab_passes is not None:
        ns.ab_passes = ab_passes
    if ab_rewarm is not None:
        ns.ab_rewarm = ab_rewarm
    if ab_max_pairs is not None:
        ns.ab_max_pairs = ab_max_pairs
    stdout = sys.stdout
    sys.stdout = GuardedStdout(stdout)
    # SIGTERM and SIGHUP as well as Ctrl-C end a command through its finally blocks: ab's
    # worktrees, a staged site, a build's tree are removed, never left behind
    replaced = stop_on_signals() if threading.current_thread() is threading.main_thread() else {}
    try:
        code = ns.func(ns)
        sys.stdout.flush()  # a full disk shows here, not in Python's flush at exit
        return code
    except NumabenchError as e:
        # every error line redacted: a URL quoted in it keeps no password (numabench.redact)
        print(f"numabench: {redact_text(str(e))}", file=sys.stderr)
        if isinstance(e, StdoutError):
            _discard_stdout()
        return 2
    except KeyboardInterrupt as e:
        # Ctrl-C, SIGTERM, SIGHUP: one line and the shell's code for the signal (128 + its
        # number); a file or folder being written was removed on the way out (numabench.atomic)
        signum = e.signum if isinstance(e, Stopped) else signal.SIGINT
        what = " ".join(str(w) for w in (ns.command, getattr(ns, "action", None)) if w)
        print(f"numabench: {what} interrupted ({signal.Signals(signum).name}): stopped", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # the reader went away (`numabench report RUN | head`): no traceback, and none at exit
        # when Python flushes stdout into the closed pipe
        _discard_stdout()
        return 0
    finally:
        put_back(replaced)
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
