"""numabench publish from a fleet's PostgreSQL database (a real server, tests/pgserver.py): the
site of the runs pushed there is the site of the same run files, and the password never reaches
a page. Outside CI a machine without PostgreSQL or psycopg skips, saying so; under CI=true
(where .ci/fleet-setup installs them) it must run."""
from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import pytest

import pgserver
from numabench.cli import main

pytestmark = pytest.mark.xdist_group("postgres")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def db_url():
    why = None
    try:
        import psycopg
    except ImportError:
        why = "psycopg is not installed in the venv (bash .ci/fleet-setup)"
    bindir = pgserver.find_bindir() if why is None else None
    if why is None and bindir is None:
        why = "no PostgreSQL server binaries (apt-get install postgresql; bash .ci/fleet-setup does it under CI)"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true needs the fleet database tests to run, but {why}")
        pytest.skip(why)
    server = pgserver.start(bindir)
    old = os.environ.get("PGPASSWORD")
    os.environ["PGPASSWORD"] = server.password
    try:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        yield server.url(name), server.password
    finally:
        if old is None:
            os.environ.pop("PGPASSWORD", None)
        else:
            os.environ["PGPASSWORD"] = old
        server.stop()


def test_the_site_of_the_fleet_database_is_the_site_of_its_files(db_url, tmp_path):
    url, password = db_url
    files = sorted(str(p) for p in (ROOT / "baselines").glob("H200x1_*/*/*.json"))
    if not files:
        pytest.skip("no committed H200 x1 baseline in baselines/")
    assert main(["fleet", "push", *files, "--index", url]) == 0
    assert main(["publish", *files, "--out", str(tmp_path / "from-files")]) == 0
    assert main(["publish", "--fleet", url, "--out", str(tmp_path / "from-fleet")]) == 0
    pages = sorted(p.name for p in (tmp_path / "from-files").iterdir())
    assert pages == sorted(p.name for p in (tmp_path / "from-fleet").iterdir())

    def data(site: str, name: str) -> dict:
        text = (tmp_path / site / name).read_text()
        assert password not in text
        return json.loads(re.search(r'id="site-data">(.*?)</script>', text, re.S).group(1).replace("<\\/", "</"))

    for name in pages:
        if name.endswith(".html") and name != "index.html":
            a, b = data("from-files", name), data("from-fleet", name)
            # the same charts with the same numbers; only the run's label (file name or its label there) may differ
            strip = lambda d: json.dumps([[s["points"] for s in c["series"]] for c in d["charts"]])  # noqa: E731
            assert strip(a) == strip(b), name
    assert password not in (tmp_path / "from-fleet" / "index.html").read_text()
