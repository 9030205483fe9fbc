"""A fleet's shared history: saved runs of many runners in one Elasticsearch or OpenSearch index.

pytest-benchmark's own storage (``--benchmark-storage=elasticsearch+http://...``) was written
for Elasticsearch 2-6: it passes ``doc_type`` (gone from elasticsearch-py 8 and from the
servers' APIs), creates its index with a ``string`` mapping that servers since 5.0 refuse,
and loads entries without ``extra_info``, where numabench keeps each entry's invocation
medians (the gate's band). So numabench talks to the index itself, over plain HTTP (no
client library to match to the server's version), in pytest-benchmark's document shape: one
document per entry, the run's ``machine_info``, ``commit_info``, ``datetime`` and ``version``
copied into it, plus ``numabench_hardware_key`` and ``numabench_run`` (which run it came from).

- ``push``: a saved run's entries into the index. A document's id is the run id and the
  entry's fullname, so pushing a run twice stores it once.
- ``pull``: the newest runs of one hardware key, merged as ``numabench merge`` merges files
  (each entry's invocations pooled over the runs and machines that measured it): a baseline
  file for ``pytest benchmarks --benchmark-compare=FILE``.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from numabench.errors import UsageError
from numabench.redact import redact_url
from numabench.results.fleet_run import pushable_key, run_id
from numabench.results.merge import MergeResult, merge_loaded
from numabench.results.storage import loads_json

if TYPE_CHECKING:
    from numabench.results.fleet_pg import FleetDB

RUN_FIELDS = ("machine_info", "commit_info", "datetime", "version")  # pytest-benchmark copies these into each doc
KEY_FIELD = "numabench_hardware_key"
RUN_ID_FIELD = "numabench_run"
PAGE = 500  # documents per search request (an entry with its rounds is a few KiB)
# Only what numabench searches and sorts on is indexed; everything else (rounds, params,
# extra_info, machine_info) is kept in the document but not mapped: no mapping conflicts
# between runners, no explosion of fields.
MAPPING = {"dynamic": False, "properties": {
    KEY_FIELD: {"type": "keyword"}, RUN_ID_FIELD: {"type": "keyword"}, "fullname": {"type": "keyword"},
    "name": {"type": "keyword"}, "datetime": {"type": "date"},
}}


ALLOWED_INDEX_URL = ("allowed http(s)://HOST:PORT/INDEX, e.g. http://localhost:9200/numabench "
                     "(or pytest-benchmark's elasticsearch+http://HOST:PORT/INDEX/DOCTYPE)")


def parse_index_url(url: str) -> tuple[str, str]:
    """``http(s)://host:port/INDEX`` (or pytest-benchmark's ``elasticsearch+http://host:port/INDEX/...``)
    -> (server URL, with any USER:PASSWORD@ as given, and index name). Messages name it redacted."""
    shown = redact_url(url)
    text = url.removeprefix("elasticsearch+")
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 (a port that is no number, or beyond 65535, raises here)
    except ValueError as e:
        raise UsageError(f"index URL {shown!r}: {e}: {ALLOWED_INDEX_URL}") from None
    segments = [s for s in parts.path.split("/") if s]
    if parts.scheme not in ("http", "https") or not parts.hostname or not segments:
        raise UsageError(f"index URL {shown!r}: {ALLOWED_INDEX_URL}")
    index = segments[0]
    if index != index.lower() or index.startswith(("_", "-", "+")):
        raise UsageError(f"index URL {shown!r}: index name {index!r} must be lower case and not start with _, - or +")
    return f"{parts.scheme}://{parts.netloc}", index


class FleetIndex:
    """One index on an Elasticsearch (7 or later) or OpenSearch server."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.server, self.index = parse_index_url(url)
        self.url = f"{self.server}/{self.index}"
        self.shown = redact_url(self.url)  # what output and messages name: never the password
        parts = urllib.parse.urlsplit(self.server)
        # urllib takes no credentials in a URL: they go as HTTP basic auth, the server without them
        self._base = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
        self._auth = None
        if parts.username is not None:
            pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._auth = "Basic " + base64.b64encode(pair.encode()).decode()
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, body: Any = None, ndjson: bool = False) -> dict:
        data = None
        headers = {"Accept": "application/json"}
        if self._auth:
            headers["Authorization"] = self._auth
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            headers["Content-Type"] = "application/x-ndjson" if ndjson else "application/json"
        req = urllib.request.Request(f"{self._base}{path}", data=data, method=method, headers=headers)
        said = f"{method} {redact_url(self.server + path)}"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                answer = resp.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            raise FleetError(f"{said}: HTTP {e.code}: {detail}", e.code, detail) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            raise FleetError(f"{said}: cannot reach the server ({reason})", None, "") from None
        try:
            return loads_json(answer or "{}", f"{said}: the answer")
        except json.JSONDecodeError as e:
            raise FleetError(f"{said}: the answer is not JSON ({e.msg}): allowed an Elasticsearch or OpenSearch "
                             "server", None, "") from None

    def ensure_index(self) -> None:
        """Create the index with numabench's mapping; one that exists is used as it is."""
        try:
            self._request("PUT", f"/{self.index}", {"mappings": MAPPING})
        except FleetError as e:
            if e.status != 400 or "already_exists" not in e.detail:
                raise

    def push(self, run: dict) -> tuple[str, int]:
        """Index every entry of ``run``; (its run id, entries stored)."""
        key = pushable_key(run, "index")
        rid = run_id(run)
        self.ensure_index()
        lines = []
        for b in run["benchmarks"]:
            doc = {**b, **{f: run.get(f) for f in RUN_FIELDS}, KEY_FIELD: key, RUN_ID_FIELD: rid}
            doc_id = hashlib.sha1(f"{rid}\n{b.get('fullname') or b['name']}".encode()).hexdigest()
            lines.append(json.dumps({"index": {"_index": self.index, "_id": doc_id}}))
            lines.append(json.dumps(doc))
        if lines:
            reply = self._request("POST", "/_bulk?refresh=true", "\n".join(lines) + "\n", ndjson=True)
            if reply.get("errors"):
                failed = [i for i in reply.get("items", []) if (i.get("index") or {}).get("error")]
                raise FleetError(f"{self.shown}: {len(failed)} of {len(run['benchmarks'])} entries were refused, "
                                 f"first: {json.dumps(failed[0]['index']['error'])[:300] if failed else '?'}", None, "")
        return rid, len(run["benchmarks"])

    def _documents(self, key: str) -> Iterator[dict]:
        """Every document of hardware key ``key`` (paged with search_after)."""
        query: dict[str, Any] = {"size": PAGE, "query": {"bool": {"filter": [{"term": {KEY_FIELD: key}}]}},
                                 "sort": [{RUN_ID_FIELD: "asc"}, {"fullname": "asc"}]}
        while True:
            try:
                hits = self._request("POST", f"/{self.index}/_search", query)["hits"]["hits"]
            except FleetError as e:
                if e.status == 404:
                    raise UsageError(f"{self.shown}: no such index (push a run first)") from None
                raise
            for h in hits:
                yield h["_source"]
            if len(hits) < PAGE:
                return
            query["search_after"] = hits[-1]["sort"]

    def runs(self, key: str) -> list[tuple[str, dict]]:
        """The runs of hardware key ``key`` as (run id, run), oldest first."""
        runs: dict[str, dict] = {}
        for doc in self._documents(key):
            rid = doc.pop(RUN_ID_FIELD)
            doc.pop(KEY_FIELD, None)
            run_info = {f: doc.pop(f, None) for f in RUN_FIELDS}
            runs.setdefault(rid, {**run_info, "benchmarks": []})["benchmarks"].append(doc)
        return sorted(runs.items(), key=lambda item: (str(item[1].get("datetime")), item[0]))

    def pull(self, key: str, last: int | None = None) -> MergeResult:
        """The newest ``last`` runs of ``key`` (all when None) merged into one baseline run."""
        runs = self.runs(key)
        if not runs:
            raise UsageError(f"{self.shown}: no runs of hardware key {key!r}; keys there: "
                             f"{', '.join(self.keys()) or 'none'}")
        chosen: Sequence[tuple[str, dict]] = runs[-last:] if last else runs
        return merge_loaded(chosen, allow_duplicates=True)  # the index stores a run once (its run id)

    def keys(self) -> list[str]:
        reply = self._request("POST", f"/{self.index}/_search",
                              {"size": 0, "aggs": {"keys": {"terms": {"field": KEY_FIELD, "size": 1000}}}})
        return sorted(b["key"] for b in reply.get("aggregations", {}).get("keys", {}).get("buckets", []))


class FleetError(UsageError):
    """The index server refused a request or could not be reached."""

    def __init__(self, message: str, status: int | None, detail: str) -> None:
        super().__init__(message)
        self.status, self.detail = status, detail


def open_fleet(url: str) -> "FleetIndex | FleetDB":
    """The fleet store at ``url``: a PostgreSQL database (postgresql://, numabench.results.fleet_pg)
    or an Elasticsearch/OpenSearch index (http(s)://)."""
    from numabench.results.fleet_pg import FleetDB, is_postgres_url

    return FleetDB(url) if is_postgres_url(url) else FleetIndex(url)


def fleet_runs(url: str, key: str) -> list[tuple[str, dict]]:
    """The runs of hardware key ``key`` at ``url`` (either store) as (name, run dict), oldest first."""
    store = open_fleet(url)
    try:
        return store.runs(key)
    finally:
        if hasattr(store, "close"):
            store.close()
