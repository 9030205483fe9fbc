"""Bad results and failed writes for the results commands (compare, report, csv, merge, publish,
import-csv, fleet, history): each ends in ONE line naming the bad value or the write that failed
and what is allowed, exit 2 (bad input and a failed write alike; 130 for Ctrl-C), no traceback,
nothing half-written and nothing left running. Every case runs the real command in a subprocess.

- a run nested 200,000 deep (a RecursionError before), corrupt timings (NaN, infinite, zero,
  negative, strings: in stats, stats.data and the invocation medians), mean-only entries pooled;
- `merge DIR/`, the same run merged twice, `import-csv` with node 99999999999, an index URL that
  does not parse;
- a write refused (an immutable folder, a path under a file), stdout on a full disk (/dev/full), a
  file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored so the write gets EFBIG);
- Ctrl-C during `fleet pull` from a server that accepts and never answers;
- a password in a fleet URL, never printed (every command that takes one, every scheme).
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers import QuietJsonHandler, end_child, start_child

ROOT = Path(__file__).resolve().parents[1]
SEED_CSV = ROOT / "tests" / "data" / "seed" / "qwen2.5-7B_normal_interleave.csv"
GPU = ["--gpu", "NVIDIA H100 80GB HBM3"]
NB = [sys.executable, "-m", "numabench"]
HEADER = "ngpus,numa_nodes,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),avg_d2h_latency(ms)"
SECRET = "s3cretPW"


def _run(values: dict[str, float], when: str, node: str = "runner-a", medians=None, data=None) -> dict:
    """A saved run of hardware key K: per entry its stats, rounds and invocation medians."""
    benches = []
    for name, v in values.items():
        stats = {"min": v, "max": v, "mean": v, "stddev": 0.0, "median": v, "rounds": 3, "iqr": 0.0, "q1": v,
                 "q3": v, "ld15iqr": v, "hd15iqr": v, "total": v, "iterations": 1, "outliers": "0;0",
                 "data": data if data is not None else [v, v, v]}
        if isinstance(v, float) and v > 0 and v != float("inf"):
            stats["ops"] = 1 / v
        benches.append({"group": None, "name": name, "fullname": f"benchmarks/test_x.py::{name}", "params": None,
                        "param": None, "options": {}, "stats": stats,
                        "extra_info": {"invocation_medians_s": medians if medians is not None else [v, v, v]}})
    return {"machine_info": {"node": node, "numabench": {"hardware_key": "K"}}, "commit_info": {"id": "c0ffee"},
            "datetime": when, "version": "5.2.3", "benchmarks": benches}


def _run_with(value, when: str = "2026-11-22T00:00:00", **kw) -> dict:
    return _run({"t[a]": value, "t[b]": 0.01}, when, **kw)


def _corrupt_import(seed: dict, value) -> dict:
    """The seed import with one entry's mean and median replaced (its cells then show in report's tables)."""
    run = json.loads(json.dumps(seed))
    run["benchmarks"][0]["stats"].update(mean=value, median=value)
    return run


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("results")
    out = subprocess.run([*NB, "import-csv", str(SEED_CSV), "--out", str(d / "seed.json"), *GPU], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seed = json.loads((d / "seed.json").read_text())
    write = {
        "good.json": _run_with(0.01),
        "good2.json": _run_with(0.0102, when="2026-11-23T00:00:00", node="runner-b"),
        "nan.json": _run_with(float("nan")),
        "inf.json": _run_with(float("inf")),
        "zero.json": _run_with(0.0),
        "negative.json": _run_with(-0.01),
        "string.json": _run_with("0.01", medians=["0.01"] * 3, data=["0.01"] * 3),
        "median-nan.json": _run_with(0.01, medians=[0.01, float("nan"), 0.01]),
        "data-string.json": _run_with(0.01, data=[0.01, "x", 0.01]),
        "seed-string.json": _corrupt_import(seed, "0.5"),
        "seed-nan.json": _corrupt_import(seed, float("nan")),
    }
    for name, run in write.items():
        (d / name).write_text(json.dumps(run))
    (d / "copy.json").write_text((d / "good.json").read_text())
    (d / "deep-list.json").write_text("[" * 200000 + "]" * 200000)
    (d / "deep-object.json").write_text('{"a":' * 200000 + "1" + "}" * 200000)
    # the seed import again, every mean 10% slower: entries of the same names, means only
    other = json.loads(json.dumps(seed))
    other["datetime"] = "2026-11-24T00:00:00"
    for b in other["benchmarks"]:
        b["stats"] = {k: v * 1.1 if k in ("min", "max", "mean", "median", "q1", "q3", "ld15iqr", "hd15iqr", "total")
                      else v for k, v in b["stats"].items()}
        b["stats"]["ops"] = 1 / b["stats"]["mean"]
    (d / "seed-slower.json").write_text(json.dumps(other))
    (d / "outdir").mkdir()
    (d / "bignode.csv").write_text(f"{HEADER}\n1,99999999999,1835008,0.5,0.01,0.5\n")
    (d / "inf.csv").write_text(f"{HEADER}\n1,0,1835008,inf,inf,inf\n")  # one inf cell: left out, named
    (d / "huge.csv").write_text(f"{HEADER}\n1,0,1e23,0.5,0.01,0.5\n")
    merged = subprocess.run([*NB, "merge", str(d / "merged.json"), str(d / "good.json"), str(d / "good2.json")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert merged.returncode == 0, merged.stderr
    return d


CORRUPT = [  # (file, what the line names)
    ("nan.json", "benchmarks[0] (benchmarks/test_x.py::t[a]) stats.min is NaN"),
    ("inf.json", "benchmarks[0] (benchmarks/test_x.py::t[a]) stats.min is Infinity"),
    ("zero.json", "benchmarks[0] (benchmarks/test_x.py::t[a]) stats.min is 0.0"),
    ("negative.json", "benchmarks[0] (benchmarks/test_x.py::t[a]) stats.min is -0.01"),
    ("string.json", 'benchmarks[0] (benchmarks/test_x.py::t[a]) stats.min is "0.01"'),
    ("median-nan.json", "benchmarks[0] (benchmarks/test_x.py::t[a]) extra_info.invocation_medians_s[1] is NaN"),
    ("data-string.json", 'benchmarks[0] (benchmarks/test_x.py::t[a]) stats.data[1] is "x"'),
]
ALLOWED_TIMING = "allowed a finite number of seconds > 0"
DEEP = "is nested deeper than 500 levels: allowed a pytest-benchmark run file"

READERS = [  # (id, the command reading run file {f}) for every results command that reads runs
    ("compare", "compare {d}/good.json {f}"), ("compare-baseline", "compare {f} {d}/good.json"),
    ("report", "report {f} --no-plots"), ("csv", "csv {f}"), ("merge", "merge {d}/m.json {d}/good.json {f}"),
    ("publish", "publish {f} --out {d}/site"),
]
# (id, numabench arguments ({d}: the files folder, {csv}: the seed CSV), texts the one line must hold)
ROWS = [
    *[(f"{cmd}-deep-{kind}", args.replace("{f}", f"{{d}}/deep-{kind}.json"), [f"{{d}}/deep-{kind}.json {DEEP}"])
      for kind in ("list", "object") for cmd, args in READERS],
    *[(f"{cmd}-{name.removesuffix('.json')}", args.replace("{f}", "{d}/" + name),
       ["{d}/" + name, what, ALLOWED_TIMING])
      for name, what in CORRUPT for cmd, args in READERS],
    ("report-string-in-a-table", "report {d}/seed-string.json --no-plots",
     ["{d}/seed-string.json: benchmarks[0]", 'stats.mean is "0.5"', ALLOWED_TIMING]),
    ("report-nan-in-a-table", "report {d}/seed-nan.json --no-plots",
     ["{d}/seed-nan.json: benchmarks[0]", "stats.mean is NaN", ALLOWED_TIMING]),
    ("merge-mean-only-pooled", "merge {d}/m.json {d}/seed.json {d}/seed-slower.json --allow-no-data",
     ["holds no median to pool (a mean-only import): allowed --replace"]),
    ("merge-out-a-folder", "merge {d}/outdir {d}/good.json {d}/good2.json",
     ["{d}/outdir is a folder: allowed a new file name"]),
    ("merge-out-a-folder-slash", "merge {d}/outdir/ {d}/good.json {d}/good2.json",
     ["{d}/outdir/ is a folder: allowed a new file name"]),
    ("merge-out-a-new-folder-slash", "merge {d}/newdir/ {d}/good.json {d}/good2.json",
     ["{d}/newdir/ ends in a slash (a folder's name): allowed a new file name"]),
    ("merge-same-run-twice", "merge {d}/m.json {d}/good.json {d}/good.json",
     ["runs 1 (good.json) and 2 (good.json) hold the same run good.json of 2026-11-22T00:00:00",
      "--allow-duplicate-sources"]),
    ("merge-same-run-three-times", "merge {d}/m.json {d}/good2.json {d}/good.json {d}/good.json {d}/good.json",
     ["runs 2 (good.json) and 3 (good.json) hold the same run good.json"]),
    ("merge-a-copy", "merge {d}/m.json {d}/good.json {d}/copy.json", ["runs 1 (good.json) and 2 (copy.json) hold the "
                                                                      "same entries (a copy)"]),
    ("merge-merged-and-its-run", "merge {d}/m.json {d}/merged.json {d}/good2.json",
     ["runs 1 (merged.json) and 2 (good2.json) hold the same run good2.json of 2026-11-23T00:00:00"]),
    ("import-csv-node-huge", "import-csv {d}/bignode.csv --out {d}/o.json",
     ["{d}/bignode.csv line 2: numa_nodes '99999999999'", "node 99999999999", "allowed node ids 0..1023"]),
    ("import-csv-numa-nodes-huge", "import-csv {csv} --out {d}/o.json --numa-nodes=99999999999",
     ["numa nodes 99999999999: allowed an integer <= 1024"]),
    ("import-csv-key-a-path", "import-csv {csv} --out {d}/o.json --hardware-key ../../x/y",
     ["hardware key '../../x/y': allowed a plain name"]),
    ("import-csv-inf", "import-csv {d}/inf.csv --out {d}/o.json", ["{d}/inf.csv: no data rows"]),
    ("import-csv-1e23-elements", "import-csv {d}/huge.csv --out {d}/o.json",
     ["{d}/huge.csv line 2: update_element '1e23': more than 1e13 elements"]),
    ("fleet-index-bad-ipv6", "fleet pull --index http://[::1:9200/idx --output {d}/f.json --key K",
     ["index URL 'http://[::1:9200/idx': Invalid IPv6 URL: allowed http(s)://HOST:PORT/INDEX"]),
    ("fleet-index-bad-port", "fleet keys --index http://127.0.0.1:99999/idx",
     ["index URL 'http://127.0.0.1:99999/idx': Port out of range"]),
    ("history-index-bad-ipv6", "history --index http://[::1:9200/idx --key K",
     ["index URL 'http://[::1:9200/idx': Invalid IPv6 URL"]),
    ("history-out-a-file", "history baselines --out {d}/good.json",
     ["--out {d}/good.json: a file; allowed a folder for the plots"]),
    ("publish-fleet-bad-ipv6", "publish --fleet http://[::1:9200/idx --out {d}/site",
     ["index URL 'http://[::1:9200/idx': Invalid IPv6 URL"]),
]


def _listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def one_line(out: subprocess.CompletedProcess) -> str:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text[-3000:]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, (out.returncode, text[-3000:])
    return lines[0]


@pytest.mark.parametrize("args, texts", [pytest.param(a, t, id=i) for i, a, t in ROWS])
def test_a_bad_result_is_one_line_exit_2_and_nothing_written(files, args, texts):
    def fill(s: str) -> str:
        return s.replace("{d}", str(files)).replace("{csv}", str(SEED_CSV))

    before = _listing(files)
    cmd = [*NB, *(fill(a) for a in args.split(" "))]
    if "import-csv" in cmd:
        cmd += GPU
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    line = one_line(out)
    assert out.returncode == 2, (out.returncode, line)
    for text in texts:
        assert fill(text) in line, line
    assert _listing(files) == before  # nothing written, no temporary file left


def test_merge_pools_a_run_twice_only_when_asked(files, tmp_path):
    """--allow-duplicate-sources: a one-session band on purpose (each invocation counted twice)."""
    out = subprocess.run([*NB, "merge", str(tmp_path / "m.json"), str(files / "good.json"), str(files / "good.json"),
                          "--allow-duplicate-sources"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    merged = json.loads((tmp_path / "m.json").read_text())
    assert all(len(b["extra_info"]["invocation_medians_s"]) == 6 for b in merged["benchmarks"])


# -- writes that fail ------------------------------------------------------------------------------

@contextlib.contextmanager
def immutable(folder: Path):
    """``folder`` made immutable (chattr +i: root too is refused writes there), and made mutable
    again whatever happens; skips where the file system has no such attribute."""
    folder.mkdir()
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here (no chattr, or a file system without the attribute)")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


WRITES = [  # (id, where: an immutable folder or a regular file, arguments with {out}: what the command writes)
    ("publish-immutable-folder", "immutable-folder", "publish {d}/good.json --out {out}"),
    ("publish-under-a-file", "under-a-file", "publish {d}/good.json --out {out}"),
    ("report-immutable-folder", "immutable-folder", "report {d}/seed.json --out {out} --no-plots"),
    ("report-under-a-file", "under-a-file", "report {d}/seed.json --out {out} --no-plots"),
    ("merge-immutable-folder", "immutable-folder", "merge {out} {d}/good.json {d}/good2.json"),
]


@pytest.mark.parametrize("where, args", [pytest.param(w, a, id=i) for i, w, a in WRITES])
def test_a_write_that_is_refused_is_one_line_and_leaves_nothing(files, tmp_path, where, args):
    with contextlib.ExitStack() as stack:
        if where == "immutable-folder":
            folder = stack.enter_context(immutable(tmp_path / "ro"))
        else:
            folder = tmp_path / "a-file"
            folder.write_text("keep me")
        target = folder / "out"
        out = subprocess.run([*NB, *args.format(d=files, out=target).split(" ")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        line = one_line(out)
        assert out.returncode == 2 and f"cannot write {target}" in line, (out.returncode, line)
        assert ("Operation not permitted" if where == "immutable-folder" else "Not a directory") in line, line
    assert _listing(tmp_path) == (["ro"] if where == "immutable-folder" else ["a-file"])


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this machine")
def test_stdout_on_a_full_disk_is_one_line(files):
    with open("/dev/full", "w") as full:
        out = subprocess.run([*NB, "csv", str(files / "seed.json")], cwd=ROOT, stdout=full, stderr=subprocess.PIPE,
                             text=True, timeout=60)
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr
    assert out.stderr.splitlines() == ["numabench: cannot write to standard output: No space left on device"]
    assert out.returncode == 2


def _file_size_limit(limit: int):
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write gets EFBIG instead of the process a SIGXFSZ
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


LIMITED = [  # (id, arguments, a file-size limit (bytes) that some of its files fit in and one does not)
    ("merge", "merge {out} {d}/good.json {d}/good2.json", 3000),
    ("publish", "publish {d}/seed.json --out {out}", 20000),
    ("publish-at-site-js", "publish {d}/good.json --out {out}", 10000),  # the pages fit, site.js (18 kB) not
    ("report", "report {d}/seed.json --out {out}", 5000),
]


@pytest.mark.parametrize("args, limit", [pytest.param(a, n, id=i) for i, a, n in LIMITED])
def test_a_file_size_limit_is_one_line_and_leaves_nothing_half_written(files, tmp_path, args, limit):
    target = tmp_path / "out"
    out = subprocess.run([*NB, *args.format(d=files, out=target).split(" ")], cwd=ROOT, capture_output=True,
                         text=True, timeout=180, preexec_fn=_file_size_limit(limit))  # noqa: PLW1509
    line = one_line(out)
    assert out.returncode == 2 and f"cannot write {target}: File too large" in line, (out.returncode, line)
    assert _listing(tmp_path) == []  # no cut file, no empty folder, no temporary file


def test_a_report_into_a_folder_of_other_files_keeps_them_when_a_write_fails(files, tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    out = subprocess.run([*NB, "report", str(files / "seed.json"), "--out", str(tmp_path)], cwd=ROOT,  # noqa: PLW1509
                         capture_output=True, text=True, timeout=180, preexec_fn=_file_size_limit(5000))
    assert out.returncode == 2 and "File too large" in one_line(out)
    assert _listing(tmp_path) == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "keep me"


# -- Ctrl-C ----------------------------------------------------------------------------------------

def test_ctrl_c_during_a_fleet_pull_from_a_server_that_never_answers(tmp_path):
    """The server accepts the connection and never answers (the socket is bound here and kept
    open: its port read back, never released to another process)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.settimeout(60)
        port = server.getsockname()[1]
        proc = start_child([*NB, "fleet", "pull", "--index", f"http://127.0.0.1:{port}/idx", "--key", "K",
                            "--output", str(tmp_path / "f.json")], cwd=ROOT)
        try:
            conn, _ = server.accept()  # the request is on its way: the pull now waits for an answer
            with conn:
                time.sleep(0.5)
                os.kill(proc.pid, signal.SIGINT)
                out, _ = proc.communicate(timeout=30)
        finally:
            end_child(proc)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert out.splitlines() == ["numabench: fleet pull interrupted (SIGINT): stopped"], out
    assert proc.returncode == 130
    assert _listing(tmp_path) == []


# -- passwords -------------------------------------------------------------------------------------

class _Index(QuietJsonHandler):
    """An index server that wants HTTP basic auth (alice, SECRET) and holds the runs pushed to it."""
    docs: list[dict] = []

    def _authorized(self) -> bool:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.body = body
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode():
            self._reply(401, {"error": "security_exception: missing authentication credentials"})
            return False
        return True

    def do_PUT(self):
        if self._authorized():
            self._reply(200, {"acknowledged": True})

    def do_POST(self):
        if not self._authorized():
            return
        if self.path.startswith("/_bulk"):
            lines = self.body.decode().splitlines()
            self.docs += [json.loads(doc) for doc in lines[1::2]]
            return self._reply(200, {"errors": False, "items": []})
        query = json.loads(self.body)
        if "aggs" in query:
            return self._reply(200, {"hits": {"hits": []}, "aggregations": {"keys": {"buckets": [{"key": "K"}]}}})
        hits = [] if "search_after" in query else [{"_source": d, "sort": [i]} for i, d in enumerate(self.docs)]
        self._reply(200, {"hits": {"hits": hits}})


@pytest.fixture
def index_with_a_password():
    _Index.docs = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _everything_written(out: subprocess.CompletedProcess, folder: Path) -> str:
    files = [p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()]
    return "\n".join([out.stdout, out.stderr, *files])


def test_a_password_in_an_index_url_works_and_is_never_printed(files, tmp_path, index_with_a_password):
    url = f"http://alice:{SECRET}@{index_with_a_password}/numabench"
    shown = f"http://alice:***@{index_with_a_password}/numabench"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for args in (["fleet", "push", str(files / "good.json"), str(files / "good2.json")], ["fleet", "keys"],
                 ["fleet", "pull", "--key", "K", "--output", str(out_dir / "pulled.json")],
                 ["history", "--key", "K"], ["publish", "--key", "K", "--out", str(out_dir / "site")]):
        flag = "--fleet" if args[0] == "publish" else "--index"
        out = subprocess.run([*NB, *args, flag, url], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (args, out.stdout + out.stderr)
        assert SECRET not in _everything_written(out, out_dir), args
        if args[0] == "fleet" and args[1] != "keys":
            assert shown in out.stdout, out.stdout
    assert shown in (out_dir / "site" / "index.html").read_text()


@pytest.mark.parametrize("scheme", ["http", "https", "elasticsearch+http", "ftp"])
@pytest.mark.parametrize("args", [["fleet", "pull", "--key", "K", "--output", "{tmp}/f.json"], ["fleet", "keys"],
                                  ["history", "--key", "K"], ["publish", "--out", "{tmp}/site"]],
                         ids=["fleet-pull", "fleet-keys", "history", "publish"])
def test_a_password_in_a_url_is_never_in_an_error(tmp_path, index_with_a_password, scheme, args):
    """An error naming the URL (a server that speaks no TLS to https, one that refuses the wrong
    password, a scheme that is not allowed) names it without its password."""
    password = "wrong" + SECRET if "http" in scheme and scheme != "https" else SECRET
    url = f"{scheme}://alice:{password}@{index_with_a_password}/numabench"
    shown = f"{scheme.removeprefix('elasticsearch+')}://alice:***@{index_with_a_password}/numabench"
    flag = "--fleet" if args[0] == "publish" else "--index"
    out = subprocess.run([*NB, *(a.replace("{tmp}", str(tmp_path)) for a in args), flag, url], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    line = one_line(out)
    assert out.returncode == 2, line
    assert password not in line and shown in line, line
    assert _listing(tmp_path) == []


def test_a_postgresql_fleet_without_psycopg_is_one_line(files, tmp_path):
    """psycopg is optional: a machine without it gets the line that says how to install it,
    from every command that reaches the database (a push imported it before connecting)."""
    blocked = tmp_path / "blocked"
    (blocked / "psycopg").mkdir(parents=True)
    (blocked / "psycopg" / "__init__.py").write_text("raise ImportError('psycopg is blocked in this test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(ROOT)])}
    out = subprocess.run([*NB, "fleet", "push", str(files / "good.json"), "--index",
                          "postgresql://bench@127.0.0.1:1/fleet"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    line = one_line(out)
    assert out.returncode == 2 and "needs psycopg 3: pip install 'numabench[fleet-postgres]'" in line, line
