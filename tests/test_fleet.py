"""numabench fleet: runs of many runners in one Elasticsearch/OpenSearch index, pulled back as one
baseline whose bands pool every runner's invocations.

CI has no index server: the plumbing is tested against a small in-process stand-in that answers
the requests numabench sends the way Elasticsearch 8 does (index creation, _bulk, _search with a
term filter, sort and search_after, a terms aggregation). A real server is tested where one can
be had: NUMABENCH_ES_URL, or an `elasticsearch` / `opensearch` executable this test starts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from helpers import PortTaken, QuietJsonHandler, start_on_a_free_port
from numabench.cli import main
from numabench.errors import UsageError
from numabench.results.fleet import KEY_FIELD, FleetIndex, parse_index_url, run_id
from numabench.gate.invocations import INVOCATION_SOURCES, invocation_medians


def _run(key: str, node: str, when: str, values: dict[str, float]) -> dict:
    benches = []
    for name, v in values.items():
        benches.append({"name": name, "fullname": f"benchmarks/test_x.py::{name}", "group": None, "param": name,
                        "params": {"numa_case": name}, "options": {},
                        "stats": {"median": v, "mean": v, "min": v, "max": v, "rounds": 3, "data": [v] * 3},
                        "extra_info": {"invocation_medians_s": [v]}})
    return {"machine_info": {"node": node, "numabench": {"hardware_key": key}}, "commit_info": {"id": "c0ffee"},
            "datetime": when, "version": "5.2.3", "benchmarks": benches}


class _FakeIndexServer(QuietJsonHandler):
    """Answers the Elasticsearch requests numabench makes (and nothing else: anything else is a 400)."""
    indices: ClassVar[dict[str, dict]] = {}

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_PUT(self):
        name = self.path.strip("/")
        body = json.loads(self._body())
        if name in self.indices:
            return self._reply(400, {"error": {"type": "resource_already_exists_exception"}, "status": 400})
        assert set(body) == {"mappings"} and body["mappings"]["properties"][KEY_FIELD] == {"type": "keyword"}
        self.indices[name] = {}
        self._reply(200, {"acknowledged": True, "index": name})

    def do_POST(self):
        path = self.path.split("?")[0]
        if path == "/_bulk":
            assert self.headers["Content-Type"] == "application/x-ndjson"
            lines = self._body().decode().splitlines()
            items = []
            for action, doc in zip(lines[::2], lines[1::2]):
                meta = json.loads(action)["index"]
                self.indices.setdefault(meta["_index"], {})[meta["_id"]] = json.loads(doc)
                items.append({"index": {"_id": meta["_id"], "status": 201}})
            return self._reply(200, {"errors": False, "items": items})
        name, _, op = path.strip("/").partition("/")
        if op != "_search":
            return self._reply(400, {"error": f"unexpected {path}"})
        if name not in self.indices:
            return self._reply(404, {"error": {"type": "index_not_found_exception"}, "status": 404})
        q = json.loads(self._body())
        docs = list(self.indices[name].values())
        if "aggs" in q:
            field = q["aggs"]["keys"]["terms"]["field"]
            return self._reply(200, {"hits": {"hits": []}, "aggregations": {"keys": {"buckets": [
                {"key": k, "doc_count": sum(d.get(field) == k for d in docs)} for k in {d.get(field) for d in docs}]}}})
        (term,) = q["query"]["bool"]["filter"]
        (field, value), = term["term"].items()
        keys = [next(iter(s)) for s in q["sort"]]
        hits = sorted(([d[k] for k in keys], d) for d in docs if d.get(field) == value)
        if "search_after" in q:
            hits = [h for h in hits if h[0] > q["search_after"]]
        self._reply(200, {"hits": {"hits": [{"_source": d, "sort": s} for s, d in hits[:q["size"]]]}})


@pytest.fixture
def fake_index(monkeypatch):
    monkeypatch.setattr("numabench.results.fleet.PAGE", 2)  # several pages with a few entries
    _FakeIndexServer.indices = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeIndexServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/numabench-test"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_index_urls():
    assert parse_index_url("http://es:9200/numabench") == ("http://es:9200", "numabench")
    assert parse_index_url("elasticsearch+https://u:p@es:9200/bench/benchmark?project_name=x") == (
        "https://u:p@es:9200", "bench")
    for bad in ("es:9200/numabench", "http://es:9200", "ftp://es/x", "http://es:9200/Upper", "http://es:9200/_x"):
        with pytest.raises(UsageError, match="index"):
            parse_index_url(bad)


def test_push_twice_stores_once_and_pull_pools_runners(fake_index, tmp_path):
    idx = FleetIndex(fake_index)
    a = _run("K", "runner-a", "2026-11-20T10:00:00.000000+00:00", {"t[a]": 1.0, "t[b]": 2.0, "t[c]": 3.0})
    b = _run("K", "runner-b", "2026-11-21T10:00:00.000000+00:00", {"t[a]": 1.2, "t[b]": 2.2})
    other = _run("L", "runner-c", "2026-11-22T10:00:00.000000+00:00", {"t[a]": 9.0})
    for run in (a, b, other, a):  # a pushed twice
        idx.push(json.loads(json.dumps(run)))
    assert len(_FakeIndexServer.indices["numabench-test"]) == 3 + 2 + 1
    assert [rid for rid, _ in idx.runs("K")] == [run_id(a), run_id(b)]
    assert idx.keys() == ["K", "L"]

    res = idx.pull("K")
    by_name = {x["name"]: x for x in res.run["benchmarks"]}
    assert invocation_medians(by_name["t[a]"]) == [1.0, 1.2]  # one invocation per runner
    assert invocation_medians(by_name["t[c]"]) == [3.0]
    assert [s.split(" ")[1] for s in by_name["t[b]"]["extra_info"][INVOCATION_SOURCES]] == ["(runner-a,", "(runner-b,"]
    assert res.run["machine_info"]["numabench"]["hardware_key"] == "K"
    assert KEY_FIELD not in by_name["t[a]"]
    newest = {x["name"]: x for x in idx.pull("K", last=1).run["benchmarks"]}
    assert set(newest) == {"t[a]", "t[b]"} and invocation_medians(newest["t[a]"]) == [1.2]
    with pytest.raises(UsageError, match="no runs of hardware key 'M'; keys there: K, L"):
        idx.pull("M")


def test_push_refuses_a_run_without_hardware_key_or_rounds(fake_index):
    run = _run("K", "r", "2026-11-20T10:00:00+00:00", {"t[a]": 1.0})
    del run["machine_info"]["numabench"]
    with pytest.raises(UsageError, match="no hardware key"):
        FleetIndex(fake_index).push(run)
    run = _run("K", "r", "2026-11-20T10:00:00+00:00", {"t[a]": 1.0, "t[b]": 2.0})
    del run["benchmarks"][1]["stats"]["data"]
    with pytest.raises(UsageError, match=r"1 entries have no per-round data, e.g. benchmarks/test_x.py::t\[b\]"):
        FleetIndex(fake_index).push(run)
    assert _FakeIndexServer.indices == {}  # nothing stored


def test_cli_push_pull_then_compare(fake_index, tmp_path, capsys):
    a = _run("K", "runner-a", "2026-11-20T10:00:00+00:00", {"t[a]": 1.0, "t[b]": 2.0})
    b = _run("K", "runner-b", "2026-11-21T10:00:00+00:00", {"t[a]": 1.01, "t[b]": 2.02})
    c = _run("K", "runner-c", "2026-11-21T12:00:00+00:00", {"t[a]": 1.02, "t[b]": 2.04})
    paths = []
    for name, run in (("a.json", a), ("b.json", b), ("c.json", c)):
        (tmp_path / name).write_text(json.dumps(run))
        paths.append(str(tmp_path / name))
    assert main(["fleet", "push", *paths, "--index", fake_index]) == 0
    assert "2 entries in" in capsys.readouterr().out
    out = tmp_path / "baseline.json"
    assert main(["fleet", "pull", "--index", fake_index, "--key", "K", "--output", str(out)]) == 0
    assert "2 benchmarks from 3 runs of K" in capsys.readouterr().out
    assert main(["fleet", "pull", "--index", fake_index, "--key", "K", "--output", str(out)]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err
    # the pulled baseline is what the gate reads: a 30% slower entry is flagged against the pooled band
    new = _run("K", "runner-d", "2026-11-22T10:00:00+00:00", {"t[a]": 1.4, "t[b]": 2.03})
    (tmp_path / "new.json").write_text(json.dumps(new))
    assert main(["compare", str(out), str(tmp_path / "new.json")]) == 1
    text = capsys.readouterr().out
    assert "t[a]" in text and "slower" in text
    assert main(["fleet", "pull", "--index", fake_index, "--last", "0", "--output", str(tmp_path / "o.json")]) == 2
    assert "--last=0: allowed an integer >= 1" in capsys.readouterr().err
    assert main(["fleet", "pull", "--index", "http://127.0.0.1:9/x", "--key", "K", "--output",
                 str(tmp_path / "o.json")]) == 2
    assert "cannot reach the server" in capsys.readouterr().err


def test_history_of_a_key_in_the_index(fake_index, capsys):
    idx = FleetIndex(fake_index)
    for day, value in enumerate((1.0, 1.01, 1.3, 1.31)):  # a 30% step at the third run, the fourth agreeing
        idx.push(_run("K", f"runner-{day % 2}", f"2026-11-2{day}T10:00:00+00:00", {"t[a]": value, "t[b]": 2.0}))
    idx.push(_run("L", "runner-9", "2026-11-25T10:00:00+00:00", {"t[a]": 5.0}))
    assert main(["history", "--index", fake_index, "--key", "K"]) == 0
    out = capsys.readouterr().out
    assert f"history of {fake_index} [K]: 4 saved runs, 2 entries" in out
    assert "t[a]: 1000 -> 1010 -> 1300 -> 1310 ms" in out and "change at run 2" in out and "(+28.7%)" in out
    assert "1 of 2 entries changed" in out
    assert main(["history"]) == 2
    assert "name a folder" in capsys.readouterr().err
    assert main(["history", "somewhere", "--index", fake_index, "--key", "K"]) == 2
    assert "not both" in capsys.readouterr().err


# -- a real server, where one can be had --------------------------------------------------------

def _server_binary() -> tuple[str, str] | None:
    for kind in ("elasticsearch", "opensearch"):
        home = os.environ.get(f"{kind.upper()}_HOME")
        found = shutil.which(kind) or (home and shutil.which(kind, path=str(Path(home) / "bin")))
        if found:
            return kind, found
    return None


@pytest.fixture
def real_index():
    url = os.environ.get("NUMABENCH_ES_URL")
    if url:
        yield url.rstrip("/") + f"/numabench-test-{os.getpid()}"
        return
    found = _server_binary()
    if found is None:
        pytest.skip("no Elasticsearch or OpenSearch server: NUMABENCH_ES_URL is unset and no elasticsearch or "
                    "opensearch executable is on PATH, ELASTICSEARCH_HOME or OPENSEARCH_HOME (neither server is "
                    "packaged by Debian or PyPI: install one from its vendor's tarball)")
    kind, exe = found
    proc, data, port = start_on_a_free_port(lambda p: _start_search_server(kind, exe, p))
    try:
        yield f"http://127.0.0.1:{port}/numabench-test"
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def _start_search_server(kind: str, exe: str, port: int) -> tuple[subprocess.Popen, str, int]:
    """The server on ``port``, answering; PortTaken where another process holds the port (it
    takes no port 0)."""
    data = tempfile.mkdtemp(prefix="numabench-es-")
    security = "xpack.security.enabled=false" if kind == "elasticsearch" else "plugins.security.disabled=true"
    proc = subprocess.Popen([exe, "-E", f"http.port={port}", "-E", f"path.data={data}", "-E", f"path.logs={data}",
                             "-E", "discovery.type=single-node", "-E", security],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_cluster/health?wait_for_status=yellow&timeout=5s",
                                   timeout=10)
            if proc.poll() is None:  # this server answered, not another on the port
                return proc, data, port
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
            proc.wait()
            logs = " ".join(p.read_text(errors="replace") for p in Path(data).glob("*.log"))
            shutil.rmtree(data, ignore_errors=True)
            if "Address already in use" in logs or "BindException" in logs:
                raise PortTaken(port)
            pytest.fail(f"{exe} did not start on port {port} (exit {proc.poll()})")
        time.sleep(2)


def test_a_real_index_server(real_index):
    idx = FleetIndex(real_index)
    a = _run("K", "runner-a", "2026-11-20T10:00:00.000000+00:00", {f"t[{i}]": 1.0 + i for i in range(7)})
    b = _run("K", "runner-b", "2026-11-21T10:00:00.000000+00:00", {f"t[{i}]": 1.1 + i for i in range(7)})
    try:
        for run in (a, b, a):
            idx.push(json.loads(json.dumps(run)))
        assert idx.keys() == ["K"]
        res = idx.pull("K")
        assert len(res.run["benchmarks"]) == 7
        assert all(invocation_medians(x) == [pytest.approx(x["stats"]["data"][0]), pytest.approx(x["stats"]["data"][-1])]
                   for x in res.run["benchmarks"])
    finally:
        if os.environ.get("NUMABENCH_ES_URL"):  # a shared server: leave it as found
            idx._request("DELETE", f"/{idx.index}")
