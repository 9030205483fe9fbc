"""A fleet's results in PostgreSQL: push saved runs, pull the newest runs of a hardware key as
one pooled baseline, list keys, read a key's runs back (for ``numabench history`` and other
modules) and one entry's history.

Rows, not blobs (numabench.results.fleet_schema). A push is one transaction: a push cut off
midway (the runner killed, the network gone) leaves no part of the run; two runners pushing
at once each insert their own rows; the same run pushed twice is stored once (its
``run_key``, numabench.results.fleet_run.run_id, is unique: the second insert does nothing).

Credentials never come from the command line: a URL that holds a password is refused, and
libpq takes it from PGPASSWORD, PGSERVICEFILE (``postgresql:///?service=NAME``) or
~/.pgpass (PGPASSFILE). Every URL numabench prints is redacted. Server errors become one
FleetError line naming the redacted URL and what to check.

psycopg 3 is an optional dependency (``numabench[fleet-postgres]``).
"""
from __future__ import annotations

import json
import os
import re
import urllib.parse
from datetime import datetime, timezone
from typing import Any, Sequence

from numabench.errors import UsageError
from numabench.redact import redact_text, redact_url
from numabench.results.fleet_schema import migrate
from numabench.gate.invocations import (
    INVOCATION_MACHINES,
    INVOCATION_MEDIANS,
    INVOCATION_SOURCES,
    invocation_medians,
    run_machine,
)
from numabench.results.merge import MergeResult, merge_loaded

SCHEMES = ("postgresql", "postgres")
CONNECT_TIMEOUT_S = 10  # a server that does not answer: one line after this, not a hung CI step
_LISTS = (INVOCATION_MEDIANS, INVOCATION_SOURCES, INVOCATION_MACHINES)


class FleetError(UsageError):
    """The database could not be reached, refused the credentials or a statement."""


def is_postgres_url(url: str) -> bool:
    # the scheme alone: a URL that parses no further (a bad IPv6 host) is refused where it is used
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    return bool(scheme) and scheme.group(1).lower() in SCHEMES


def check_url(url: str) -> str:
    """``url`` when it is a postgresql:// URL without a password; else a UsageError saying why."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (a port that is no number, or beyond 65535, raises here)
    except ValueError as e:
        raise UsageError(f"database URL {redact_url(url)!r}: {e}: allowed postgresql://[USER@]HOST[:PORT]/DBNAME "
                         "or postgresql:///?service=NAME") from None
    if parts.scheme not in SCHEMES:
        raise UsageError(f"database URL {redact_url(url)!r}: allowed postgresql://[USER@]HOST[:PORT]/DBNAME "
                         "or postgresql:///?service=NAME")
    if parts.password is not None or "password" in dict(urllib.parse.parse_qsl(parts.query)):
        raise UsageError(f"database URL {redact_url(url)!r} holds a password: command lines and logs are read by "
                         "others; put it in PGPASSWORD, a service file (PGSERVICEFILE) or ~/.pgpass instead")
    return url


def _one_line(err: BaseException) -> str:
    """libpq's message in one line: its first line's cause (after 'connection to server at ...
    failed: '), with any password removed."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = " ".join((lines[0] if lines else type(err).__name__).rsplit(" failed: ", 1)[-1].split())
    secret = os.environ.get("PGPASSWORD")
    return redact_text(text.replace(secret, "***") if secret else text)


def _psycopg() -> Any:
    """The psycopg module (an optional dependency), or a UsageError saying how to install it."""
    try:
        import psycopg
    except ImportError:
        raise UsageError("numabench fleet on PostgreSQL needs psycopg 3: pip install 'numabench[fleet-postgres]' "
                         "(or 'psycopg[binary]')") from None
    return psycopg


def _parse_time(text: Any) -> datetime:
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        raise UsageError(f"run datetime {text!r}: allowed an ISO 8601 time (pytest-benchmark's 'datetime')") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)  # pytest-benchmark saves UTC


def _split_entry(entry: dict) -> tuple[dict, list[float] | None, list[str], list[tuple]]:
    """An entry as its rows: (body, rounds, the invocation lists it held, invocation rows)."""
    body = json.loads(json.dumps(entry))  # a copy that JSONB can hold
    stats = body.get("stats") or {}
    rounds = stats.pop("data", None)
    extra = body.get("extra_info") or {}
    medians = invocation_medians(entry)
    lists = []
    if INVOCATION_MEDIANS in extra and extra[INVOCATION_MEDIANS] == medians:
        lists.append(INVOCATION_MEDIANS)
    columns = {}
    for name in (INVOCATION_SOURCES, INVOCATION_MACHINES):
        value = extra.get(name)
        if isinstance(value, list) and len(value) == len(medians) and medians and \
                all(v is None or isinstance(v, str) for v in value):
            lists.append(name)
            columns[name] = value
    for name in lists:
        del extra[name]
    rows = [(i, m, (columns.get(INVOCATION_SOURCES) or [None] * len(medians))[i],
             (columns.get(INVOCATION_MACHINES) or [None] * len(medians))[i]) for i, m in enumerate(medians)]
    return body, rounds, lists, rows


def _join_entry(body: dict, rounds: list[float] | None, lists: list[str], rows: list[tuple]) -> dict:
    """The entry that ``_split_entry`` split."""
    if rounds is not None:
        body.setdefault("stats", {})["data"] = list(rounds)
    if lists:
        extra = body.setdefault("extra_info", {})
        values = {INVOCATION_MEDIANS: [r[0] for r in rows], INVOCATION_SOURCES: [r[1] for r in rows],
                  INVOCATION_MACHINES: [r[2] for r in rows]}
        for name in lists:
            extra[name] = values[name]
    return body


class FleetDB:
    """A fleet's runs in one PostgreSQL database; the schema is brought up to date on first use."""

    def __init__(self, url: str) -> None:
        self.url = check_url(url)
        self.shown = redact_url(url)
        self._conn: Any = None

    # -- connection ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self._conn is not None:
            return self._conn
        psycopg = _psycopg()
        timeout = {} if "connect_timeout" in self.url else {"connect_timeout": CONNECT_TIMEOUT_S}
        try:
            conn = psycopg.connect(self.url, autocommit=True, application_name="numabench", **timeout)
        except psycopg.OperationalError as e:
            why = _one_line(e)
            if "authentication" in why or "password" in why or "role" in why:
                hint = "check the user and its password (PGPASSWORD, PGSERVICEFILE or ~/.pgpass)"
            elif "database" in why and "does not exist" in why:
                hint = "create it first (createdb -O USER DBNAME; docs/CI.md)"
            else:
                hint = "is the server running, and is the host and port right?"
            raise FleetError(f"{self.shown}: cannot connect ({why}): {hint}") from None
        try:
            migrate(conn)
        except psycopg.Error as e:
            conn.close()
            raise FleetError(f"{self.shown}: cannot bring numabench's tables up to date ({_one_line(e)})") from None
        self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "FleetDB":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        psycopg = _psycopg()

        conn = self._connect()
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.Error as e:
            raise FleetError(f"{self.shown}: {_one_line(e)}") from None

    # -- push ---------------------------------------------------------------------------------

    def push(self, run: dict, label: str) -> tuple[str, int, bool]:
        """Store ``run`` (pushed under ``label``, e.g. its file's name) in one transaction;
        (its run id, its entries, whether it was new: False where it was stored before)."""
        psycopg = _psycopg()

        from numabench.results.fleet_run import pushable_key, regressions_of, run_id

        key = pushable_key(run, "database")
        rid = run_id(run)
        when = _parse_time(run.get("datetime"))
        info = {k: v for k, v in run.items() if k != "benchmarks"}
        conn = self._connect()
        try:
            with conn.transaction():
                row = conn.execute(
                    "INSERT INTO numabench_runs (run_key, label, hardware_key, node, machine, run_datetime, run_time, "
                    "commit_id, passed, info) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (run_key) DO NOTHING RETURNING id",
                    (rid, label, key, (run.get("machine_info") or {}).get("node"), run_machine(run),
                     run.get("datetime"), when, (run.get("commit_info") or {}).get("id"), not regressions_of(run),
                     psycopg.types.json.Jsonb(info))).fetchone()
                if row is None:
                    return rid, len(run["benchmarks"]), False  # stored before (or by a runner pushing it now)
                self._insert_entries(conn, row[0], key, run["benchmarks"])
        except psycopg.Error as e:
            raise FleetError(f"{self.shown}: the push of run {rid} failed and left nothing ({_one_line(e)})") from None
        return rid, len(run["benchmarks"]), True

    def _insert_entries(self, conn: Any, run_row: int, key: str, benchmarks: list[dict]) -> None:
        from psycopg.types.json import Jsonb

        with conn.cursor() as cur:
            for b in benchmarks:
                body, rounds, lists, rows = _split_entry(b)
                cur.execute(
                    "INSERT INTO numabench_entries (run_id, hardware_key, fullname, name, family, median_s, rounds_s, "
                    "lists, body) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                    (run_row, key, b.get("fullname") or b.get("name"), b.get("name"),
                     (b.get("extra_info") or {}).get("family"), (b.get("stats") or {}).get("median"), rounds,
                     lists, Jsonb(body)))
                entry_row = cur.fetchone()[0]
                if rows:
                    cur.executemany("INSERT INTO numabench_invocations (entry_id, ordinal, median_s, source, machine) "
                                    "VALUES (%s, %s, %s, %s, %s)", [(entry_row, *r) for r in rows])

    # -- read ---------------------------------------------------------------------------------

    def keys(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT hardware_key FROM numabench_runs ORDER BY 1")]

    def run_count(self, key: str | None = None) -> int:
        if key is None:
            return self._query("SELECT count(*) FROM numabench_runs")[0][0]
        return self._query("SELECT count(*) FROM numabench_runs WHERE hardware_key = %s", (key,))[0][0]

    def runs(self, key: str, last: int | None = None, *, passed_only: bool = False) -> list[tuple[str, dict]]:
        """The runs of hardware key ``key`` (the newest ``last`` where given; with ``passed_only``
        those without a confirmed regression only) as (label, run dict), oldest first."""
        heads = self._query(
            "SELECT id, label, info FROM numabench_runs WHERE hardware_key = %s" +
            (" AND passed" if passed_only else "") + " ORDER BY run_time DESC, run_key DESC" +
            (" LIMIT %s" if last else ""), (key, last) if last else (key,))
        heads.reverse()
        if not heads:
            return []
        ids = [h[0] for h in heads]
        entries: dict[int, list[tuple]] = {}
        for row in self._query("SELECT e.run_id, e.id, e.body, e.rounds_s, e.lists FROM numabench_entries e "
                               "WHERE e.run_id = ANY(%s) ORDER BY e.id", (ids,)):
            entries.setdefault(row[0], []).append(row[1:])
        invocations: dict[int, list[tuple]] = {}
        for row in self._query("SELECT i.entry_id, i.median_s, i.source, i.machine FROM numabench_invocations i "
                               "JOIN numabench_entries e ON e.id = i.entry_id WHERE e.run_id = ANY(%s) "
                               "ORDER BY i.entry_id, i.ordinal", (ids,)):
            invocations.setdefault(row[0], []).append(row[1:])
        out = []
        for run_row, label, info in heads:
            benches = [_join_entry(body, rounds, list(lists), invocations.get(eid, []))
                       for eid, body, rounds, lists in entries.get(run_row, [])]
            out.append((label, {**info, "benchmarks": benches}))
        return out

    def pull(self, key: str, last: int | None = None, *, passed_only: bool = False) -> MergeResult:
        """The newest ``last`` runs of ``key`` (all when None) merged as ``numabench merge`` merges
        files: one baseline run, every entry's invocations pooled."""
        runs = self.runs(key, last, passed_only=passed_only)
        if not runs:
            raise UsageError(f"{self.shown}: no {'passing ' if passed_only else ''}runs of hardware key {key!r}; "
                             f"keys there: {', '.join(self.keys()) or 'none'}")
        return merge_loaded(runs, allow_duplicates=True)  # the database stores a run once (run_key)

    def entry_history(self, key: str, fullname: str) -> list[tuple[str, str | None, float | None, list[float]]]:
        """One entry on one key over its runs, oldest first: (run label, run datetime, stats.median,
        invocation medians); one indexed query (numabench_entries_key_name)."""
        rows = self._query(
            "SELECT r.label, r.run_datetime, e.median_s, "
            "ARRAY(SELECT i.median_s FROM numabench_invocations i WHERE i.entry_id = e.id ORDER BY i.ordinal) "
            "FROM numabench_entries e JOIN numabench_runs r ON r.id = e.run_id "
            "WHERE e.hardware_key = %s AND e.fullname = %s ORDER BY r.run_time, r.run_key", (key, fullname))
        return [(label, when, median, list(meds)) for label, when, median, meds in rows]


def runs_of_key(url: str, key: str, last: int | None = None) -> list[tuple[str, dict]]:
    """The runs of hardware key ``key`` in the database at ``url`` as (label, run dict), oldest
    first: what ``numabench history`` and ``numabench publish`` read."""
    with FleetDB(url) as db:
        return db.runs(key, last)
