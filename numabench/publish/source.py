"""Where the site's runs come from, each as (label, run dict): run files and folders of them,
every run ever committed under a folder (git), or a fleet's store (PostgreSQL or an index). Any other source plugs in by
producing the same list."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from numabench.errors import UsageError
from numabench.results import storage
from numabench.ab.run import ABResult

Run = tuple[str, dict]


def ab_result_of(path: Path) -> ABResult | None:
    """The A/B run in ``path`` (what ``numabench ab --json`` writes), or None where the file is
    something else (a run file); UsageError for an A/B file that cannot be read."""
    from numabench.ab.formats import SCHEMA, from_json

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"publish: {path}: cannot be read ({e}): allowed a run file or an A/B run's JSON") from None
    if f'"{SCHEMA}"' not in text[:4096]:  # json.dumps puts "schema" first
        return None
    try:
        return from_json(storage.loads_json(text, str(path)), str(path))
    except ValueError as e:
        raise UsageError(f"publish: {e}") from None


def ab_from_paths(paths: list[str | Path]) -> tuple[list[str], list[tuple[str, ABResult]]]:
    """The A/B runs among ``paths`` (files named, and ``*.json`` directly in each folder named):
    (the paths that are not A/B files, [(label, A/B result)])."""
    rest: list[str] = []
    found: list[tuple[str, ABResult]] = []
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.glob("*.json")):
                res = ab_result_of(f)
                if res is not None:
                    found.append((f.name, res))
            if not storage.run_files(p) and found:
                continue  # a folder of A/B runs alone
        elif p.is_file():
            res = ab_result_of(p)
            if res is not None:
                found.append((p.name, res))
                continue
        rest.append(str(p))
    return rest, found


def runs_from_paths(paths: list[str | Path]) -> list[Run]:
    """Run files as named, and every saved run (NNNN_name.json) under each folder named."""
    out: list[Run] = []
    for p in map(Path, paths):
        if p.is_dir():
            files = storage.run_files(p)
            if not files:
                raise UsageError(f"publish: no saved runs (NNNN_name.json) under {p}")
            out += [(f.name, storage.load_run(f)) for f in files]
        elif p.exists():
            out.append((p.name, storage.load_run(p)))
        else:
            raise UsageError(f"publish: {p} does not exist: allowed a run file or a folder of saved runs")
    return out


def _git(cwd: Path, *args: str, what: str) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise UsageError(f"publish --git: git {args[0]} failed for {what}: {res.stderr.strip()[:200]}")
    return res.stdout


def runs_from_git(folder: str | Path) -> list[Run]:
    """Every saved run ever committed under ``folder``, each once (by content): baselines are
    merged and the merged files removed, so a key's history lives in git, not in the tree."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise UsageError(f"publish --git: {folder} is not a folder")
    top = Path(_git(root, "rev-parse", "--show-toplevel", what=str(folder)).strip())
    rel = str(root.relative_to(top))
    seen: set[str] = set()
    out: list[Run] = []
    for line in _git(top, "log", "--format=%H", "--", rel, what=rel).split():
        for item in _git(top, "ls-tree", "-r", line, "--", rel, what=rel).splitlines():
            meta, path = item.split("\t", 1)
            blob, name = meta.split()[2], Path(path).name
            if blob in seen or not (name[:4].isdigit() and name.endswith(".json")):
                continue
            seen.add(blob)
            try:
                data = storage.run_from_text(_git(top, "cat-file", "-p", blob, what=path), f"{path}@{line[:8]}")
            except UsageError:
                continue  # a committed file that is not a run: the site shows what can be read
            data.setdefault("commit_info", {}).setdefault("id", line)
            out.append((f"{name}@{line[:8]}", data))
    if not out:
        raise UsageError(f"publish --git: no saved run was ever committed under {rel}")
    return out


def runs_from_fleet(url: str, keys: list[str] | None = None) -> list[Run]:
    """The runs of ``keys`` (default: every key) in a fleet's store: its PostgreSQL database
    (postgresql://...) or an Elasticsearch/OpenSearch index (http(s)://HOST:PORT/INDEX)."""
    from numabench.redact import redact_url
    from numabench.results.fleet_pg import is_postgres_url

    out: list[Run] = []
    if is_postgres_url(url):
        from numabench.results.fleet_pg import FleetDB

        with FleetDB(url) as db:
            for key in keys or db.keys():
                out += db.runs(key)
    else:
        from numabench.results.fleet import FleetIndex

        index = FleetIndex(url)
        for key in keys or index.keys():
            out += list(index.runs(key))
    if not out:
        raise UsageError(f"publish: no runs{' of ' + ', '.join(keys) if keys else ''} in the fleet store "
                         f"{redact_url(url)}")
    return out


def dedupe(runs: list[Run]) -> list[Run]:
    """One copy of each run (the same file from the tree and from git), under the label that says
    most: the git one (FILE@COMMIT) where both are there."""
    at: dict[str, int] = {}
    out: list[Run] = []
    for label, run in runs:
        sig = json.dumps([run.get("datetime"), (run.get("commit_info") or {}).get("id"),
                          len(run.get("benchmarks", [])),
                          ((run.get("machine_info") or {}).get("numabench") or {}).get("hardware_key")])
        if sig not in at:
            at[sig] = len(out)
            out.append((label, run))
        elif "@" in label and "@" not in out[at[sig]][0]:
            out[at[sig]] = (label, out[at[sig]][1])
    return out
