"""numabench fleet on PostgreSQL, against a real server: Debian's postgres started once per
session from a temporary folder (tests/pgserver.py: a random port, another where that one was
taken), as an unprivileged user, stopped and removed at the end whatever the tests did. Outside CI a machine without the
binaries or psycopg skips these tests saying so; under CI=true they must run (a server that
cannot start fails them).

All in one xdist group: one server per session, not one per worker."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import pgserver
from helpers import refused_port
from numabench.cli import main
from numabench.errors import UsageError
from numabench.gate.invocations import invocation_machines, invocation_medians

pytestmark = pytest.mark.xdist_group("postgres")
REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI") == "true"


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"CI=true needs the PostgreSQL fleet tests to run, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def have_psycopg() -> None:
    """psycopg importable, else the test skips (fails under CI=true) saying how to get it."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed in the venv (pip install 'numabench[fleet-postgres]', "
                     "or bash .ci/fleet-setup)")


@pytest.fixture(scope="session")
def pg_server(have_psycopg):
    bindir = pgserver.find_bindir()
    if bindir is None:
        _unavailable("no PostgreSQL server binaries (initdb, postgres) via NUMABENCH_PG_BINDIR, pg_config or "
                     "/usr/lib/postgresql/*/bin: apt-get install postgresql (bash .ci/fleet-setup does it under CI)")
    try:
        server = pgserver.start(bindir)
    except (RuntimeError, OSError) as e:
        pytest.fail(f"the PostgreSQL server for the fleet tests did not start: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def db_url(pg_server, monkeypatch):
    """A new, empty database for one test; the password through PGPASSWORD, as on a runner."""
    import psycopg

    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    monkeypatch.delenv("NUMABENCH_FLEET_URL", raising=False)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_server.url(name)
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _run(key: str, node: str, when: str, values: dict[str, float], machine: str | None = None) -> dict:
    benches = []
    for name, v in values.items():
        benches.append({"name": name, "fullname": f"benchmarks/test_x.py::{name}", "group": None, "param": name,
                        "params": {"numa_case": name}, "options": {},
                        "stats": {"median": v, "mean": v, "min": v * 0.99, "max": v * 1.01, "rounds": 3,
                                  "data": [v * 0.99, v, v * 1.01]},
                        "extra_info": {"invocation_medians_s": [v, v * 1.02], "family": "x"}})
    info = {"node": node, "numabench": {"hardware_key": key}}
    if machine:
        info["numabench"]["machine_instance"] = machine
    return {"machine_info": info, "commit_info": {"id": "c0ffee"}, "datetime": when, "version": "5.2.3",
            "benchmarks": benches}


def _count(url: str, table: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_migration_from_empty_and_again_is_a_no_op(db_url):
    import psycopg

    from numabench.results.fleet_schema import LATEST, current_version, migrate

    with psycopg.connect(db_url, autocommit=True) as conn:
        assert current_version(conn) == 0
        assert migrate(conn) == list(range(1, LATEST + 1))
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"numabench_runs", "numabench_entries", "numabench_invocations", "numabench_schema"} <= tables
        before = conn.execute("SELECT version, applied_at FROM numabench_schema").fetchall()
        assert migrate(conn) == []  # up to date: nothing applied, nothing rewritten
        assert conn.execute("SELECT version, applied_at FROM numabench_schema").fetchall() == before
        # an entry's history on one key is one index scan (forced: the table is tiny)
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT * FROM numabench_entries WHERE hardware_key = 'K' AND fullname = 'f'"))
        assert "numabench_entries_key_name" in plan


def test_push_is_idempotent_and_the_run_comes_back_as_pushed(db_url, tmp_path):
    from numabench.results.fleet_pg import FleetDB

    a = _run("K", "runner-a", "2026-11-20T10:00:00.000000+00:00", {"t[a]": 1.0, "t[b]": 2.0}, machine="vm-1")
    a["benchmarks"][0]["extra_info"]["invocation_sources"] = ["x.json (n, d)", "y.json (n, d)"]
    a["benchmarks"][0]["extra_info"]["invocation_machines"] = ["vm-1", None]
    with FleetDB(db_url) as db:
        rid, n, new = db.push(json.loads(json.dumps(a)), "a.json")
        assert (n, new) == (2, True)
        assert db.push(json.loads(json.dumps(a)), "a.json") == (rid, 2, False)
        assert db.run_count() == 1 and db.keys() == ["K"]
        [(label, back)] = db.runs("K")
        assert label == "a.json" and back == a  # every field, the rounds and the invocation lists
        assert [h[2:] for h in db.entry_history("K", "benchmarks/test_x.py::t[a]")] == [(1.0, [1.0, 1.02])]
    assert _count(db_url, "numabench_entries") == 2 and _count(db_url, "numabench_invocations") == 4
    (tmp_path / "a.json").write_text(json.dumps(a))
    assert main(["fleet", "push", str(tmp_path / "a.json"), "--index", db_url]) == 0
    assert _count(db_url, "numabench_runs") == 1


def test_pull_of_the_last_10_matches_merge_of_the_files(db_url, tmp_path, capsys):
    paths = []
    for i in range(12):
        run = _run("K", f"runner-{i % 3}", f"2026-11-{10 + i}T10:00:00.000000+00:00",
                   {"t[a]": 1.0 + i / 100, "t[b]": 2.0 + i / 50, **({"t[c]": 3.0} if i % 2 else {})},
                   machine=f"vm-{i % 3}")
        path = tmp_path / f"{i:04d}_run.json"
        path.write_text(json.dumps(run))
        paths.append(str(path))
    assert main(["fleet", "push", *reversed(paths), "--index", db_url]) == 0  # pushed out of order
    capsys.readouterr()
    assert main(["fleet", "pull", "--index", db_url, "--key", "K", "--last", "10",
                 "--output", str(tmp_path / "pulled.json")]) == 0
    assert "from 10 runs of K in postgresql://" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "merged.json"), *paths[-10:]]) == 0
    pulled = json.loads((tmp_path / "pulled.json").read_text())
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert pulled["benchmarks"] == merged["benchmarks"]  # entry for entry: stats, medians, sources, machines
    assert [b["name"] for b in pulled["benchmarks"]] == ["t[a]", "t[b]", "t[c]"]
    assert len(invocation_medians(pulled["benchmarks"][0])) == 20
    assert set(invocation_machines(pulled["benchmarks"][0])) == {"vm-0", "vm-1", "vm-2"}
    assert pulled["numabench_merged_from"] == merged["numabench_merged_from"]
    capsys.readouterr()
    assert main(["fleet", "keys", "--index", db_url]) == 0
    assert capsys.readouterr().out.strip() == "K"


def test_history_of_a_key_in_the_database(db_url, capsys):
    from numabench.results.fleet import fleet_runs
    from numabench.results.fleet_pg import FleetDB

    with FleetDB(db_url) as db:
        for day, value in enumerate((1.0, 1.01, 1.3, 1.31)):
            run = _run("K", f"runner-{day % 2}", f"2026-11-2{day}T10:00:00+00:00", {"t[a]": value, "t[b]": 2.0})
            for b in run["benchmarks"]:
                b["extra_info"]["invocation_medians_s"] = [b["stats"]["median"]]
            db.push(run, f"000{day}_run.json")
    assert [label for label, _ in fleet_runs(db_url, "K")] == [f"000{d}_run.json" for d in range(4)]
    assert main(["history", "--index", db_url, "--key", "K"]) == 0
    out = capsys.readouterr().out
    assert "t[a]: 1000 -> 1010 -> 1300 -> 1310 ms" in out and "(+28.7%)" in out


_PUSH = """
import json, sys
from numabench.results.fleet_pg import FleetDB
url, path, label = sys.argv[1:4]
with FleetDB(url) as db:
    print(db.push(json.load(open(path)), label)[2])
"""


def test_four_runners_pushing_at_once_store_every_run_once(db_url, tmp_path):
    files = []
    for r in range(4):
        for i in range(3):
            run = _run("K", f"runner-{r}", f"2026-11-2{i}T1{r}:00:00+00:00", {f"t[{j}]": 1.0 + j for j in range(20)})
            path = tmp_path / f"r{r}_{i}.json"
            path.write_text(json.dumps(run))
            files.append(path)
    shared = files[0]  # every runner also pushes the same run: stored once
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = _PUSH.replace("print(db.push(json.load(open(path)), label)[2])",
                           "print([db.push(json.load(open(p)), p) for p in path.split(',')])")
    procs = [subprocess.Popen([sys.executable, "-c", script, db_url,
                               ",".join(str(p) for p in [*files[3 * r:3 * r + 3], shared]), "x"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert _count(db_url, "numabench_runs") == 12
    assert _count(db_url, "numabench_entries") == 12 * 20
    assert _count(db_url, "numabench_invocations") == 12 * 20 * 2


def test_a_push_killed_midway_leaves_no_partial_run(db_url, tmp_path):
    run = _run("K", "runner-a", "2026-11-20T10:00:00+00:00", {f"t[{j}]": 1.0 + j for j in range(30)})
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    flag = tmp_path / "midway"
    # the pushing process stops after its 10th entry, inside the transaction, and is killed there
    script = f"""
import os, time
from numabench.results import fleet_pg
orig = fleet_pg._split_entry
n = [0]
def slow(entry):
    n[0] += 1
    if n[0] == 10:
        open({str(flag)!r}, "w").close()
        time.sleep(60)
    return orig(entry)
fleet_pg._split_entry = slow
""" + _PUSH
    proc = subprocess.Popen([sys.executable, "-c", script, db_url, str(path), "run.json"],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not flag.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    assert _count(db_url, "numabench_entries") == 0  # 9 entries inserted, not visible: not committed
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)  # the server notices the dropped connection and rolls back
    assert _count(db_url, "numabench_runs") == 0 and _count(db_url, "numabench_entries") == 0
    # an error midway in this process: rolled back too, and the run can be pushed afterwards
    from numabench.results import fleet_pg

    orig = fleet_pg._split_entry

    def failing(entry):
        if entry["name"] == "t[20]":
            raise fleet_pg.FleetError("injected")
        return orig(entry)

    with fleet_pg.FleetDB(db_url) as db:
        fleet_pg._split_entry = failing
        try:
            with pytest.raises(fleet_pg.FleetError, match="injected"):
                db.push(json.loads(path.read_text()), "run.json")
        finally:
            fleet_pg._split_entry = orig
        assert db.run_count() == 0
        assert db.push(json.loads(path.read_text()), "run.json")[1:] == (30, True)
    assert _count(db_url, "numabench_entries") == 30


def test_server_down_is_one_clear_line(have_psycopg, tmp_path, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "s3cret-pw")
    run = _run("K", "r", "2026-11-20T10:00:00+00:00", {"t[a]": 1.0})
    (tmp_path / "run.json").write_text(json.dumps(run))
    with refused_port() as port:  # held, never listening: refuses, and nobody else can take it meanwhile
        out = subprocess.run([sys.executable, "-m", "numabench", "fleet", "push", str(tmp_path / "run.json"),
                              "--index", f"postgresql://bench@127.0.0.1:{port}/fleet"],
                             capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"numabench: postgresql://bench@127.0.0.1:{port}/fleet: cannot connect (Connection refused)")
    assert "is the server running" in lines[0] and "s3cret-pw" not in out.stderr


def test_bad_credentials_are_one_line_without_the_password(pg_server, tmp_path, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "wrong-s3cret")
    out = subprocess.run([sys.executable, "-m", "numabench", "fleet", "keys", "--index", pg_server.url()],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "password authentication failed" in lines[0] and "PGPASSWORD, PGSERVICEFILE or ~/.pgpass" in lines[0]
    assert "wrong-s3cret" not in out.stderr and pg_server.password not in out.stderr
    # a password on the command line is refused before anything is sent, and not echoed
    monkeypatch.delenv("PGPASSWORD")
    url = f"postgresql://{pgserver.SUPERUSER}:{pg_server.password}@127.0.0.1:{pg_server.port}/postgres"
    out = subprocess.run([sys.executable, "-m", "numabench", "fleet", "keys", "--index", url],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 2 and "holds a password" in out.stderr and pg_server.password not in out.stderr
    assert f"{pgserver.SUPERUSER}:***@" in out.stderr


def test_service_file_credentials(pg_server, db_url, tmp_path, monkeypatch):
    """A runner's credentials in a service file and ~/.pgpass-style file, the URL naming the service only."""
    monkeypatch.delenv("PGPASSWORD")
    (tmp_path / "pg_service.conf").write_text(
        f"[fleet]\nhost=127.0.0.1\nport={pg_server.port}\nuser={pgserver.SUPERUSER}\ndbname={db_url.rsplit('/', 1)[1]}\n")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{pg_server.port}:*:{pgserver.SUPERUSER}:{pg_server.password}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "pg_service.conf"))
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    from numabench.results.fleet_pg import FleetDB

    with FleetDB("postgresql:///?service=fleet") as db:
        assert db.push(_run("K", "r", "2026-11-20T10:00:00+00:00", {"t[a]": 1.0}), "r.json")[2]
        assert db.keys() == ["K"]


def test_url_checks_and_redaction():
    from numabench.redact import redact_url as redact
    from numabench.results.fleet_pg import check_url

    assert redact("postgresql://u:pw@h:5/db?sslmode=require&password=x") == "postgresql://u:***@h:5/db?sslmode=require&password=***"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
    for bad, why in (("postgresql://u:pw@h/db", "holds a password"), ("mysql://h/db", "allowed postgresql://"),
                     ("postgresql://h/db?password=pw", "holds a password")):
        with pytest.raises(UsageError, match=why) as e:
            check_url(bad)
        assert "pw" not in str(e.value).replace("password", "")


def test_learn_keeps_the_rolling_window_in_the_database(db_url, tmp_path, capsys):
    seed = _run("K", "committed", "2026-11-01T10:00:00+00:00", {"t[a]": 1.0, "t[b]": 2.0}, machine="vm-0")
    (tmp_path / "0001_base.json").write_text(json.dumps(seed))
    for i in range(4):
        run = _run("K", f"runner-{i}", f"2026-11-2{i}T10:00:00+00:00", {"t[a]": 1.0 + i / 100, "t[b]": 2.0},
                   machine=f"vm-{i}")
        (tmp_path / f"run{i}.json").write_text(json.dumps(run))
        assert main(["learn", str(tmp_path / f"run{i}.json"), "--window", db_url, "--keep", "3",
                     "--seed", str(tmp_path / "0001_base.json")]) == 0
    out = capsys.readouterr().out
    assert "(the window started from" in out.splitlines()[0] and "the newest 2 passing runs" in out.splitlines()[0]
    assert "the newest 3 passing runs" in out.splitlines()[-1]
    bad = _run("K", "runner-x", "2026-11-29T10:00:00+00:00", {"t[a]": 2.0, "t[b]": 2.0})
    bad["benchmarks"][0]["extra_info"]["gate"] = {"verdict": "slower", "confirmation": "slower"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert main(["learn", str(tmp_path / "bad.json"), "--window", db_url]) == 2
    assert "confirmed regression" in capsys.readouterr().err
    # a regressed run pushed by `fleet push` is kept in the history but not in the window
    assert main(["fleet", "push", str(tmp_path / "bad.json"), "--index", db_url]) == 0
    capsys.readouterr()
    out_file = tmp_path / "window.json"
    assert main(["fleet", "pull", "--passed", "--last", "3", "--key", "K", "--index", db_url,
                 "--output", str(out_file)]) == 0
    window = json.loads(out_file.read_text())
    assert [m["file"] for m in window["numabench_merged_from"]] == ["run1.json", "run2.json", "run3.json"]
    assert "gate" not in json.dumps(window)


def _gate_job(step: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMABENCH_TIER": "smoke", "NUMABENCH_RESULTS": str(tmp_path / "results"),
           "NUMABENCH_BASELINES": str(tmp_path / "baselines"), **env}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(["bash", str(REPO / ".ci" / "gate-job"), step, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_gate_job_keeps_its_window_in_the_database(db_url, tmp_path):
    """learn pushes the passing run (the key's first: after the committed baseline); run pulls the
    window and judges against it; a database that is down is one line, and the committed baseline judges."""
    from numabench.cli import this_machine_key

    key = this_machine_key()
    (tmp_path / "baselines" / key).mkdir(parents=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "baselines" / key / "0001_base.json").write_text(
        json.dumps(_run(key, "committed", "2026-11-01T10:00:00+00:00", {"t[a]": 1.0})))
    (tmp_path / "results" / "run.json").write_text(
        json.dumps(_run(key, "runner-a", "2026-11-20T10:00:00+00:00", {"t[a]": 1.1})))
    learnt = _gate_job("learn", tmp_path, NUMABENCH_FLEET_URL=db_url)
    assert learnt.returncode == 0, learnt.stdout + learnt.stderr
    assert "(the window started from" in learnt.stdout and "the newest 2 passing runs" in learnt.stdout
    run = _gate_job("run", tmp_path, "-k", "test_touch", "--collect-only", "-q", NUMABENCH_FLEET_URL=db_url)
    window = tmp_path / "results" / "fleet-baseline.json"
    assert f"judging against the rolling window {window}" in run.stdout, run.stdout + run.stderr
    assert [m["file"] for m in json.loads(window.read_text())["numabench_merged_from"]] == ["0001_base.json",
                                                                                           "run.json"]
    with refused_port() as port:
        down = f"postgresql://bench@127.0.0.1:{port}/fleet"
        learn_down = _gate_job("learn", tmp_path, NUMABENCH_FLEET_URL=down)
        run_down = _gate_job("run", tmp_path, "-k", "test_touch", "--collect-only", "-q", NUMABENCH_FLEET_URL=down)
    assert learn_down.returncode == 2
    assert learn_down.stderr.strip().splitlines() == [
        f"numabench: {down}: cannot connect (Connection refused): is the server running, and is the host and port right?"]
    assert "judging against the committed baseline" in run_down.stderr and not window.exists()
    assert "rolling window" not in run_down.stdout


def test_a_committed_baseline_round_trips_and_its_size(db_url):
    """A ci-tier-sized run (the committed H200 x1 baseline: 167 entries, 8300 rounds) comes back
    as it was pushed; the database grows by well under its JSON's size (docs/CI.md quotes it)."""
    import psycopg

    from numabench.results.fleet_pg import FleetDB

    path = next(iter(sorted((REPO / "baselines").glob("H200x1_*/*/*.json"))), None)
    if path is None:
        pytest.skip("no committed H200 x1 baseline in baselines/")
    run = json.loads(path.read_text())

    def size() -> int:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
            conn.execute("VACUUM")
            return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]

    with FleetDB(db_url) as db:
        db.keys()  # the schema in place: its size is not the run's
        before = size()
        db.push(run, path.name)
        grown = size() - before
        [(_label, back)] = db.runs(run["machine_info"]["numabench"]["hardware_key"])
    assert back == run
    assert grown < path.stat().st_size, (grown, path.stat().st_size)


def _setup_box(tmp_path: Path) -> tuple[Path, dict]:
    """.ci/fleet-setup with apt-get and id stubbed (root, a Debian without PostgreSQL)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(parents=True)
    calls = tmp_path / "calls.log"
    pg_root = tmp_path / "pg"
    conf = tmp_path / "createcluster.conf"
    conf.write_text("# create_main_cluster = true\n")
    (bin_ / "id").write_text("#!/bin/sh\necho 0\n")
    (bin_ / "apt-get").write_text(
        f'#!/bin/sh\necho "apt-get $*" >>{calls}\n'
        f'case "$*" in *"install"*" postgresql") grep -q "create_main_cluster = false" {conf} || exit 1; '
        f'mkdir -p {pg_root}/15/bin && printf "#!/bin/sh\\n" >{pg_root}/15/bin/postgres && '
        f'chmod +x {pg_root}/15/bin/postgres ;; esac\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "NUMABENCH_PG_ROOT": str(pg_root),
           "NUMABENCH_PG_CLUSTER_CONF": str(conf), "NUMABENCH_VENV": str(REPO / ".venv"), "TMPDIR": str(tmp_path)}
    env.pop("NUMABENCH_PG_BINDIR", None)
    env.pop("NUMABENCH_PG_APT", None)
    return calls, env


def test_fleet_setup_installs_postgresql_without_a_cluster_under_ci_only(tmp_path):
    pytest.importorskip("psycopg")
    calls, env = _setup_box(tmp_path)
    env.pop("CI", None)
    out = subprocess.run(["bash", str(REPO / ".ci" / "fleet-setup")], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and not calls.exists(), out.stderr  # not asked: no apt, a line saying the tests skip
    assert "no PostgreSQL server binaries" in out.stderr and "will skip" in out.stderr
    out = subprocess.run(["bash", str(REPO / ".ci" / "fleet-setup")], env={**env, "CI": "true"},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    installs = [c for c in calls.read_text().splitlines() if " install " in c]
    assert installs[0].endswith("postgresql-common") and installs[-1].endswith(" postgresql")
    assert "create_main_cluster = false" in Path(env["NUMABENCH_PG_CLUSTER_CONF"]).read_text()
    assert "[fleet-setup] ready: psycopg" in out.stderr
    # under CI, an apt that fails fails the script in one line
    calls2, env2 = _setup_box(tmp_path / "again")
    (Path(env2["PATH"].split(":")[0]) / "apt-get").write_text("#!/bin/sh\nexit 100\n")
    out = subprocess.run(["bash", str(REPO / ".ci" / "fleet-setup")], env={**env2, "CI": "true"},
                         capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1].startswith("[fleet-setup] ERROR: `apt-get install")


def test_a_missing_database_is_one_line(pg_server, monkeypatch, capsys):
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    assert main(["fleet", "keys", "--index", pg_server.url("no_such_db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"numabench: {pg_server.url('no_such_db')}: cannot connect (FATAL: database \"no_such_db\" does not "
                   "exist): create it first (createdb -O USER DBNAME; docs/CI.md)"]
