"""The CI scripts' set-up, in sandboxes (copies of the scripts in a temporary repo, a fake venv
python that records its calls, stub host tools on a PATH of their own; no QEMU, no network, no
pip, nothing written outside tmp_path):

- .ci/guest/setup installs virtme-ng into the project's venv with the venv's pip, never into the
  system python3; without pip it fails with one ERROR line; host packages are apt-installed only
  in CI or with NUMABENCH_GUEST_APT=1, else it names the apt-get command;
- .ci/test under CI=true fails at once, in one line, where the guest set-up fails, and runs the
  guest tests as required (NUMABENCH_GUEST_REQUIRED=1); a required guest run that skips fails;
- .ci/setup's no-op path: one python process, no pip, while its stamp is current; any change of
  its inputs or a missing module runs the whole set-up again."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL_TOOLS = ("bash", "sh", "dirname", "basename", "mkdir", "cat", "head", "tail", "grep", "sed", "awk", "rm", "mv",
              "cp", "ls", "cmp", "chmod", "mktemp", "ldd", "env", "sha256sum", "cut", "readlink", "stat", "timeout",
              "tr", "sort", "touch", "printf")
HOST_TOOLS = ("qemu-system-x86_64", "depmod", "autoreconf", "automake", "libtoolize", "make", "cc", "dpkg-deb",
              "busybox", "numactl")
VENV_PYTHON = r"""#!/bin/bash
# A venv's python: records its calls; pip only with FAKE_PIP=1 (its install puts a vng in bin/).
echo "venv-python $*" >>"$CALLS"
bin=$(dirname "$0")
case "$1 ${2:-}" in
  "-m pip")
    [ "${FAKE_PIP:-}" = 1 ] || { echo "$0: No module named pip" >&2; exit 1; }
    if [ "${3:-}" = install ]; then printf '#!/bin/sh\necho "virtme-ng 1.42"\n' >"$bin/vng"; chmod +x "$bin/vng"; fi
    exit 0 ;;
  "-m ensurepip") echo "$0: No module named ensurepip" >&2; exit 1 ;;
  "-m pytest") echo "pytest NUMABENCH_GUEST_REQUIRED=${NUMABENCH_GUEST_REQUIRED:-}" >>"$CALLS"; exit 0 ;;
esac
case "$1" in
  -c) case "$2" in
        *purelib*) echo "$FAKE_SITE" ;;
        *"print(f"*) echo "python 3, torch fake, cuda False" ;;
        *"import torch"*) [ -z "${FAKE_NO_TORCH:-}" ] || exit 1 ;;
      esac
      exit 0 ;;
  -) shift; exec "$REAL_PY" - "$@" ;;
esac
exit 0
"""


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


class Sandbox:
    def __init__(self, tmp: Path, *scripts: str):
        self.tmp, self.repo, self.bin = tmp, tmp / "repo", tmp / "bin"
        self.calls, self.cache, self.site = tmp / "calls.log", tmp / "guest-cache", tmp / "site"
        for rel in scripts:
            (self.repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, self.repo / rel)
        self.bin.mkdir()
        self.site.mkdir()
        for tool in REAL_TOOLS:
            if (found := shutil.which(tool)) and not (self.bin / tool).exists():
                (self.bin / tool).symlink_to(found)
        for tool in HOST_TOOLS:
            _exe(self.bin / tool, "#!/bin/sh\nexit 0\n")
        _exe(self.bin / "id", "#!/bin/sh\necho 0\n")  # root, as on the CI machine
        # the system interpreter and apt: recorded (apt-get install puts the stubs it installs in place)
        _exe(self.bin / "python3", '#!/bin/sh\necho "python3 $*" >>"$CALLS"\n'
             'case "$*" in *sysconfig*) echo ;; *) exit 1 ;; esac\n')
        _exe(self.bin / "apt-get", '#!/bin/sh\necho "apt-get $*" >>"$CALLS"\n'
             f'case "$*" in *install*qemu-system-x86*) printf "#!/bin/sh\\n" >{self.bin}/qemu-system-x86_64; '
             f'chmod +x {self.bin}/qemu-system-x86_64 ;; esac\n')
        self.venv_bin = self.repo / ".venv" / "bin"
        _exe(self.venv_bin / "python", VENV_PYTHON)
        # a cached guest set-up: both kernels and numactl 2.0.19
        for k in ("6.12", "6.1"):
            (self.cache / "kernels" / k).mkdir(parents=True)
            (self.cache / "kernels" / k / "ok").write_text(f"{k}.0-test-amd64\n")
        _exe(self.cache / "numactl" / "bin" / "numactl", '#!/bin/sh\necho "numactl 2.0.19"\n')

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
        base = {"PATH": str(self.bin), "HOME": str(self.tmp), "CALLS": str(self.calls),
                "NUMABENCH_GUEST_CACHE": str(self.cache), "FAKE_SITE": str(self.site), "REAL_PY": sys.executable,
                "PYTHONPATH": str(self.repo), "TMPDIR": str(self.tmp)}
        return subprocess.run([str(self.bin / "bash"), str(self.repo / script), *args], cwd=self.tmp,
                              env={**base, **env}, capture_output=True, text=True, timeout=120, check=False)

    def calls_log(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


def _errors(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stderr.splitlines() if "ERROR" in line or "FAILED" in line]


# -- .ci/guest/setup -----------------------------------------------------------------------

def test_guest_setup_without_pip_in_the_venv_fails_in_one_line(tmp_path):
    box = Sandbox(tmp_path, ".ci/guest/setup")
    out = box.run(".ci/guest/setup", CI="true")
    assert out.returncode == 1, out.stdout + out.stderr
    errors = _errors(out)
    assert len(errors) == 1 and errors[0].startswith("guest-setup: ERROR: no pip in "), out.stderr
    assert str(box.repo / ".venv") in errors[0] and "ensurepip" in errors[0], errors
    calls = box.calls_log()
    assert "venv-python -m ensurepip" in calls, calls  # bootstrapping was tried
    assert not any(c.startswith("python3") for c in calls), calls  # never the system interpreter
    assert not (box.venv_bin / "vng").exists()


def test_guest_setup_installs_virtme_ng_into_the_venv(tmp_path):
    box = Sandbox(tmp_path, ".ci/guest/setup")
    out = box.run(".ci/guest/setup", CI="true", FAKE_PIP="1")
    assert out.returncode == 0, out.stdout + out.stderr
    calls = box.calls_log()
    installs = [c for c in calls if c.startswith("venv-python -m pip install")]
    assert installs == ["venv-python -m pip install -q --ignore-installed --no-deps virtme-ng==1.42",
                        "venv-python -m pip install -q virtme-ng==1.42"], calls
    assert not any(c.startswith(("python3", "apt-get")) for c in calls), calls
    assert f"installed: {box.venv_bin / 'vng'} (virtme-ng 1.42)" in out.stdout, out.stdout
    assert "guest-setup: done" in out.stdout
    # idempotent: the venv's vng is found, pip not asked again
    box.calls.unlink()
    again = box.run(".ci/guest/setup", CI="true", FAKE_PIP="1")
    assert again.returncode == 0 and f"present: {box.venv_bin / 'vng'}" in again.stdout, again.stdout
    assert not any("pip install" in c for c in box.calls_log())


def test_guest_setup_honours_numabench_venv(tmp_path):
    box = Sandbox(tmp_path, ".ci/guest/setup")
    other = tmp_path / "other-venv"
    _exe(other / "bin" / "python", VENV_PYTHON)
    out = box.run(".ci/guest/setup", CI="true", FAKE_PIP="1", NUMABENCH_VENV=str(other))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (other / "bin" / "vng").exists() and not (box.venv_bin / "vng").exists()


def test_guest_setup_without_a_venv_says_to_run_ci_setup(tmp_path):
    box = Sandbox(tmp_path, ".ci/guest/setup")
    shutil.rmtree(box.repo / ".venv")
    out = box.run(".ci/guest/setup", CI="true")
    assert out.returncode == 1 and _errors(out) == [
        (f"guest-setup: ERROR: no venv at {box.repo / '.venv'} (no {box.venv_bin / 'python'}): run `bash .ci/setup` "
         "first (NUMABENCH_VENV names another venv)")], out.stderr


@pytest.mark.parametrize("env, installs", [
    ({}, False),
    ({"NUMABENCH_GUEST_APT": "1"}, True),
    ({"CI": "true"}, True),
    ({"CI": "true", "NUMABENCH_GUEST_APT": "0"}, False),
], ids=["not-asked", "opt-in", "ci", "ci-declined"])
def test_guest_setup_apt_installs_host_packages_only_when_asked(tmp_path, env, installs):
    box = Sandbox(tmp_path, ".ci/guest/setup")
    (box.bin / "qemu-system-x86_64").unlink()
    _exe(box.venv_bin / "vng", "#!/bin/sh\necho virtme-ng 1.42\n")
    out = box.run(".ci/guest/setup", **env)
    apt = [c for c in box.calls_log() if c.startswith("apt-get")]
    if installs:
        assert out.returncode == 0, out.stdout + out.stderr
        assert apt == ["apt-get install -y -q --no-install-recommends qemu-system-x86"], apt
        assert "installing qemu-system-x86" in out.stdout
    else:
        assert out.returncode == 1 and not apt, (out.stderr, apt)
        assert _errors(out) == [
            ("guest-setup: ERROR: missing host packages: qemu-system-x86; install them with "
             "`apt-get install -y --no-install-recommends qemu-system-x86` (as root), or let this script do it: "
             "NUMABENCH_GUEST_APT=1 bash .ci/guest/setup")], out.stderr


def test_guest_setup_unusable_cache_folder_fails_in_one_line(tmp_path):
    box = Sandbox(tmp_path, ".ci/guest/setup")
    (tmp_path / "a-file").write_text("")
    out = box.run(".ci/guest/setup", CI="true", NUMABENCH_GUEST_CACHE=str(tmp_path / "a-file" / "cache"))
    assert out.returncode == 1 and _errors(out) == [
        f"guest-setup: ERROR: cannot create the cache folder {tmp_path / 'a-file' / 'cache'} (NUMABENCH_GUEST_CACHE)"]


# -- .ci/test's guest stage ------------------------------------------------------------------

def _ci_test_box(tmp_path: Path) -> Sandbox:
    box = Sandbox(tmp_path, ".ci/test", ".ci/guest/setup")
    _exe(box.repo / ".ci" / "setup", "#!/bin/sh\nexit 0\n")
    _exe(box.repo / ".ci" / "fleet-setup", "#!/bin/sh\nexit 0\n")  # PostgreSQL for tests/test_fleet_pg.py
    _exe(box.repo / ".ci" / "browser-setup", "#!/bin/sh\nexit 0\n")  # Chromium for tests/test_publish_browser.py
    return box


@pytest.mark.parametrize("env", [{"CI": "true"}, {"NUMABENCH_GUEST": "1"}], ids=["ci", "numabench-guest"])
def test_ci_test_fails_at_once_where_the_guest_setup_fails(tmp_path, env):
    box = _ci_test_box(tmp_path)
    out = box.run(".ci/test", **env)  # the venv has no pip: virtme-ng cannot be installed
    assert out.returncode == 1, out.stdout + out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("[test] FAILED: the guest tests are required (CI=true or NUMABENCH_GUEST=1) but "
                           ".ci/guest/setup failed (exit 1): no pip in "), out.stderr
    assert not any("pytest" in c for c in box.calls_log())  # before any test ran


def test_ci_test_runs_the_guest_tests_as_required_in_ci(tmp_path):
    box = _ci_test_box(tmp_path)
    out = box.run(".ci/test", "-q", CI="true", FAKE_PIP="1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "guest-setup: done" in out.stdout
    pytest_calls = [c for c in box.calls_log() if "pytest" in c]
    assert pytest_calls[-2:] == ["venv-python -m pytest tests/guest -m guest -n 2 --dist loadgroup -p no:cacheprovider "
                                 "--durations=10 -q",
                                 "pytest NUMABENCH_GUEST_REQUIRED=1"], pytest_calls
    # elsewhere: no guest set-up, no guest run
    box.calls.unlink()
    out = box.run(".ci/test", "-q", FAKE_PIP="1")
    assert out.returncode == 0 and "guest-setup" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert not any("tests/guest" in c for c in box.calls_log())


def _guest_test_count() -> int:
    """How many guest tests there are: every one of them must skip without the tooling."""
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/guest", "-m", "guest", "-p", "no:cacheprovider",
                          "-q", "-p", "no:xdist", "--collect-only"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True)
    count = sum(1 for line in out.stdout.splitlines() if "::" in line)
    assert count >= 20, out.stdout[-3000:]  # the guest suite is not empty by mistake
    return count


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "2", "--dist", "loadgroup"]],
                         ids=["one-process", "xdist"])  # .ci/test runs them on two xdist workers
@pytest.mark.parametrize("required", ["", "1"])
def test_a_required_guest_run_that_skips_fails(tmp_path, required, workers):
    env = {**os.environ, "NUMABENCH_GUEST_CACHE": str(tmp_path / "empty-cache"), "NUMABENCH_GUEST_REQUIRED": required}
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/guest", "-m", "guest", "-p", "no:cacheprovider",
                          "-q", *workers], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    guest_tests = _guest_test_count()
    assert f"{guest_tests} skipped" in out.stdout, out.stdout[-3000:]
    if required:
        assert out.returncode == 1, out.stdout[-3000:]
        assert ("FAILED: the guest tests are required here (NUMABENCH_GUEST_REQUIRED=1) but 0 passed, "
                f"{guest_tests} skipped: "
                "guest tooling not set up (missing: ") in out.stdout, out.stdout[-3000:]
    else:
        assert out.returncode == 0, out.stdout[-3000:]


# -- .ci/setup's stamp ---------------------------------------------------------------------------

def _setup_box(tmp_path: Path) -> Sandbox:
    box = Sandbox(tmp_path, ".ci/setup", "pyproject.toml")
    (box.bin / "nvidia-smi").unlink(missing_ok=True)
    return box


def _runs(box: Sandbox, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    box.calls.unlink(missing_ok=True)
    out = box.run(".ci/setup", **env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out, box.calls_log()


def test_ci_setup_no_op_path_is_one_python_process_without_pip(tmp_path):
    box = _setup_box(tmp_path)
    stamp = box.repo / ".venv" / ".numabench-setup"
    out, calls = _runs(box)  # the first run: the whole set-up, then the stamp
    assert "venv-python -c import torch" in calls and stamp.is_file(), calls
    out, calls = _runs(box)
    assert calls == [f"venv-python - .venv/.numabench-setup {box.repo}"], calls
    assert "nothing missing: set-up stamp .venv/.numabench-setup is current" in out.stderr, out.stderr
    # an input changed: the whole set-up again
    with open(box.repo / "pyproject.toml", "a") as f:
        f.write("\n# changed\n")
    out, calls = _runs(box)
    assert "venv-python -c import torch" in calls and "nothing missing" not in out.stderr, calls
    out, calls = _runs(box)
    assert len(calls) == 1, calls
    # a module the set-up ended with is gone: the whole set-up again
    lines = stamp.read_text().splitlines()
    stamp.write_text(f"{lines[0]}\n{lines[1]} numabench_test_gone_module\n{lines[2]}\n")
    out, calls = _runs(box)
    assert "venv-python -c import torch" in calls, calls


def test_ci_setup_fresh_machine_installs_what_is_missing(tmp_path):
    box = _setup_box(tmp_path)
    _, calls = _runs(box, FAKE_NO_TORCH="1", FAKE_PIP="1")
    assert "venv-python -m pip install -q torch==2.13.0" in calls, calls
    assert (box.repo / ".venv" / "bin" / "numabench").is_file()
    assert (box.site / "numabench-repo.pth").read_text().strip() == str(box.repo)
