"""A throw-away PostgreSQL server for the fleet tests: Debian's binaries, a temporary data
folder, a local port nobody held (helpers.start_on_a_free_port), password (SCRAM) authentication over TCP, run as an unprivileged
user (PostgreSQL refuses to run as root: under root the server runs as ``nobody``), stopped
and its folder removed by ``stop`` whatever the tests did."""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import PortTaken, start_on_a_free_port

SUPERUSER = "numabench"


def find_bindir() -> Path | None:
    """Where initdb and postgres are: $NUMABENCH_PG_BINDIR, `pg_config --bindir`, else the newest
    /usr/lib/postgresql/*/bin (Debian keeps them off PATH)."""
    candidates = []
    if os.environ.get("NUMABENCH_PG_BINDIR"):
        candidates.append(os.environ["NUMABENCH_PG_BINDIR"])
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    for c in candidates:
        if (Path(c) / "initdb").is_file() and (Path(c) / "postgres").is_file():
            return Path(c)
    return None


@dataclass
class Server:
    bindir: Path
    folder: Path
    port: int
    password: str
    proc: subprocess.Popen
    user: str | None  # the unprivileged user it runs as (None: this process's user)

    def url(self, dbname: str = "postgres") -> str:
        """Without the password: the tests give it through PGPASSWORD, as a runner would."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # "fast" shutdown: roll back, close sessions, exit
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start(bindir: Path, timeout_s: float = 60) -> Server:
    """initdb a temporary cluster and start its server; RuntimeError with the server's log where it fails."""
    as_user = "nobody" if os.geteuid() == 0 else None
    folder = Path(tempfile.mkdtemp(prefix="numabench-pg-"))
    run_as: dict = {}
    if as_user:
        pw = pwd.getpwnam(as_user)
        os.chown(folder, pw.pw_uid, pw.pw_gid)
        run_as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    password = secrets.token_hex(12)
    try:
        pwfile = folder / "pwfile"
        pwfile.write_text(password + "\n")
        if as_user:
            os.chown(pwfile, run_as["user"], run_as["group"])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": str(folder)}
        init = subprocess.run([str(bindir / "initdb"), "-D", str(folder / "data"), "-U", SUPERUSER,
                               f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust",
                               "-E", "UTF8", "--locale=C", "-N"],
                              capture_output=True, text=True, env=env, cwd=folder, **run_as)
        pwfile.unlink()
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed (exit {init.returncode}): {init.stderr.strip()[-500:]}")
        return start_on_a_free_port(lambda port: _serve(bindir, folder, port, password, env, run_as, as_user,
                                                        timeout_s))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _serve(bindir: Path, folder: Path, port: int, password: str, env: dict, run_as: dict, as_user: str | None,
           timeout_s: float) -> Server:
    """The server on ``port``; PortTaken where another process holds it."""
    log = open(folder / "server.log", "w")
    if as_user:
        os.chown(folder / "server.log", run_as["user"], run_as["group"])
    # fsync off: a test cluster that is thrown away needs no durability, and it saves seconds
    proc = subprocess.Popen([str(bindir / "postgres"), "-D", str(folder / "data"), "-p", str(port),
                             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={folder}",
                             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                             "-c", "max_connections=40"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder,
                            start_new_session=True, **run_as)
    log.close()
    server = Server(bindir, folder, port, password, proc, as_user)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is None and _postmaster_ready(folder / "data"):
            return server
        if proc.poll() is not None or time.monotonic() > deadline:
            text = (folder / "server.log").read_text()[-800:]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if "Address already in use" in text:
                raise PortTaken(port)
            shutil.rmtree(folder, ignore_errors=True)
            raise RuntimeError(f"postgres did not start on port {port} (exit {proc.poll()}): {text}")
        time.sleep(0.2)


def _postmaster_ready(data: Path) -> bool:
    """This server (not another on the same port: pg_isready cannot tell) accepts connections:
    its postmaster.pid says "ready" (its 8th line, PostgreSQL 10 and later)."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"
