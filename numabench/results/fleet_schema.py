"""The PostgreSQL schema of a fleet's results, as numbered migrations.

A run is rows, not one JSON blob: ``runs`` (one per saved run), ``entries`` (one per
benchmark entry of a run, its rounds as an array) and ``invocations`` (one per invocation
of an entry: its median, the run and the machine it came from), so that the questions a
fleet asks are indexed queries: the newest runs of a hardware key
(``runs_key_time``), and the history of one entry on one key (``entries_key_name``: the key
is repeated in ``entries`` for it). What numabench does not query (machine_info, params,
options, the rest of extra_info) stays as JSONB beside the columns, so a run pulled back is
the run pushed.

``migrate`` applies the steps the database lacks, in order, each in its own transaction,
and records each in ``numabench_schema``; two runners migrating at once take turns on an
advisory lock, so the second finds nothing left to do. A database already at the newest
version is left untouched.
"""
from __future__ import annotations

from typing import Any

# pg_advisory_xact_lock key: any constant that other applications on the database are unlikely to use
MIGRATION_LOCK = 0x6E756D61  # "numa"

MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "runs, entries and invocations as rows", """
CREATE TABLE numabench_runs (
    id            bigserial PRIMARY KEY,
    run_key       text NOT NULL UNIQUE,       -- numabench.results.fleet_run.run_id: the same run pushed twice is one row
    label         text NOT NULL,              -- the name it was pushed under (the file's name)
    hardware_key  text NOT NULL,
    node          text,
    machine       text,                       -- machine_info.numabench.machine_instance
    run_datetime  text,                       -- as the run says it (pytest-benchmark's ISO text)
    run_time      timestamptz NOT NULL,       -- the same, parsed: what "newest" sorts by
    commit_id     text,
    passed        boolean NOT NULL,           -- no confirmed regression in it: a window learns only these
    info          jsonb NOT NULL,             -- the run's other top-level fields (machine_info, commit_info, ...)
    pushed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX numabench_runs_key_time ON numabench_runs (hardware_key, run_time DESC, run_key DESC);

CREATE TABLE numabench_entries (
    id            bigserial PRIMARY KEY,
    run_id        bigint NOT NULL REFERENCES numabench_runs (id) ON DELETE CASCADE,
    hardware_key  text NOT NULL,              -- repeated from the run: an entry's history is one index scan
    fullname      text NOT NULL,
    name          text,
    family        text,
    median_s      double precision,           -- stats.median
    rounds_s      double precision[],         -- stats.data
    lists         text[] NOT NULL,            -- which invocation lists extra_info held (rebuilt from invocations)
    body          jsonb NOT NULL,             -- the entry without stats.data and those lists
    UNIQUE (run_id, fullname)
);
CREATE INDEX numabench_entries_key_name ON numabench_entries (hardware_key, fullname);

CREATE TABLE numabench_invocations (
    entry_id      bigint NOT NULL REFERENCES numabench_entries (id) ON DELETE CASCADE,
    ordinal       integer NOT NULL,
    median_s      double precision NOT NULL,
    source        text,                       -- extra_info.invocation_sources[i]
    machine       text,                       -- extra_info.invocation_machines[i]
    PRIMARY KEY (entry_id, ordinal)
);
"""),
]

LATEST = MIGRATIONS[-1][0]


def current_version(conn: Any) -> int:
    """The newest migration applied to the database behind ``conn`` (0: none, an empty database)."""
    row = conn.execute("SELECT to_regclass('numabench_schema') IS NOT NULL").fetchone()
    if not row[0]:
        return 0
    return conn.execute("SELECT coalesce(max(version), 0) FROM numabench_schema").fetchone()[0]


def migrate(conn: Any) -> list[int]:
    """Apply the migrations the database lacks (a psycopg connection in autocommit mode: each
    step is its own transaction); the versions applied now, [] when it was up to date."""
    applied: list[int] = []
    if current_version(conn) >= LATEST:
        return applied
    for version, _what, sql in MIGRATIONS:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS numabench_schema (version integer PRIMARY KEY, "
                         "what text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
            if conn.execute("SELECT 1 FROM numabench_schema WHERE version = %s", (version,)).fetchone():
                continue  # another runner applied it while this one waited on the lock
            conn.execute(sql)
            conn.execute("INSERT INTO numabench_schema (version, what) VALUES (%s, %s)", (version, _what))
            applied.append(version)
    return applied
