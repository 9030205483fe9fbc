"""Bad input: each is one line naming the value and what is allowed, pytest's usage-error
exit code (4) before anything runs, and nothing half-written (no --benchmark-json file
left behind, no saved run, no weight changed). Cases this machine cannot run (a node it
lacks, more GPUs than it has) stay skips with the reason, so one matrix serves many
machines."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

import fixtures.plugin as plugin
from numabench.cases import Case
from numabench.errors import UsageError
from numabench.families import family
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.machine.weights_sysfs import read_weights
from numabench.numa.policy import Policy
from numabench.numa.weights import WeightSetting
from numabench.results.storage import run_files

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ROOT / "tests" / "data" / "machines"


def run_suite(tmp_path: Path, *args: str, test: str = "benchmarks/test_touch.py") -> tuple[subprocess.CompletedProcess, Path]:
    out_json = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "pytest", test, "-p", "no:cacheprovider", "-q",
           f"--benchmark-json={out_json}", f"--benchmark-storage=file://{tmp_path / 'store'}", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120), out_json


BAD = [
    pytest.param("--numa-policies=foo:1", "unknown policy kind 'foo' in 'foo:1': allowed default, local, bind:N",
                 id="unknown-policy-kind"),
    pytest.param("--numa-policies=bind:5000", "policy 'bind:5000': node 5000 in '5000': allowed node ids 0..1023",
                 id="node-id-out-of-range"),
    pytest.param("--numa-policies=bind:-1", "bad node entry '-1'", id="negative-node"),
    pytest.param("--numa-policies=weighted:0=0", "weight 0 for node 0 in 'weighted:0=0' is out of range: allowed 1..255",
                 id="weight-0"),
    pytest.param("--numa-policies=weighted:0=256",
                 "weight 256 for node 0 in 'weighted:0=256' is out of range: allowed 1..255", id="weight-256"),
    pytest.param("--param-sizes=0", "bad size '0' in '0': must be a positive whole number of elements", id="size-0"),
    pytest.param("--param-sizes=-4M", "bad size '-4M' in '-4M': must be a positive whole number", id="size-negative"),
    pytest.param("--param-sizes=1G --numa-host-memory=1", "size 1G (1000000000 elements, 1.9 GiB at 2 bytes each) is "
                 "more than the 80% of this machine's memory (1.0 GiB) a case may use: allowed up to 429496729 "
                 "elements", id="size-beyond-memory"),
    pytest.param("--param-sizes=1M,,2M", "empty entry in sizes '1M,,2M'", id="sizes-empty-entry"),
    pytest.param("--param-sizes=12x", "bad size '12x' in '12x': allowed are positive element counts", id="size-junk"),
    pytest.param("--dtypes=fp8", "unknown dtype 'fp8': allowed fp32, fp16, bf16", id="unknown-dtype"),
    pytest.param("--nprocess=0", "bad nprocess list '0': allowed positive integers", id="nprocess-0"),
    pytest.param("--numa-rounds=0", "--numa-rounds=0: allowed a whole number from 1 to 100000 rounds", id="rounds-0"),
    pytest.param("--numa-timeout=-1", "--numa-timeout=-1.0: allowed a number > 0 and at most 604800 seconds", id="timeout-negative"),
]


@pytest.mark.parametrize("arg, message", BAD)
def test_bad_option_is_one_line_usage_error(arg, message, tmp_path):
    proc, out_json = run_suite(tmp_path, *arg.split(" "), "--benchmark-save=never")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: --"), proc.stderr
    assert message in errors[0]
    assert arg.split("=", 1)[0] in errors[0]  # names the option
    assert not out_json.exists(), "an empty --benchmark-json file was left behind"
    assert not list((tmp_path / "store").rglob("*.json")) if (tmp_path / "store").exists() else True


def _make_baseline(tmp_path: Path, text: str) -> Path:
    from pytest_benchmark.utils import get_machine_id
    d = tmp_path / "store" / get_machine_id()
    d.mkdir(parents=True)
    f = d / "0001_base.json"
    f.write_text(text)
    return f


GOOD_RUN = {"machine_info": {}, "benchmarks": [{"fullname": "x", "stats": {"median": 1.0}}]}


@pytest.mark.parametrize("text, message", [
    (json.dumps(GOOD_RUN)[:40], "is not valid JSON (Unterminated string starting at: line 1 column"),
    ("", "is not valid JSON (Expecting value: line 1 column 1): corrupt or truncated"),
    (json.dumps({"machine_info": {}}), "is not a pytest-benchmark run (no 'benchmarks' list"),
], ids=["truncated", "empty", "not-a-run"])
def test_corrupt_baseline_for_compare_is_a_usage_error(text, message, tmp_path):
    f = _make_baseline(tmp_path, text)
    proc, out_json = run_suite(tmp_path, "--benchmark-compare=0001", "--param-sizes=1M", "--numa-policies=default")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith(f"ERROR: --benchmark-compare: baseline {f} ") and message in line, line
    assert not out_json.exists()
    assert f.read_text() == text  # untouched


def test_corrupt_run_for_numabench_csv_is_one_line(tmp_path):
    f = tmp_path / "0001_cut.json"
    f.write_text(json.dumps(GOOD_RUN)[:40])
    proc = subprocess.run([sys.executable, "-m", "numabench", "csv", str(f)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2  # the CLI's usage-error code (argparse's)
    assert proc.stdout == ""  # no half CSV
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"numabench: run file {f} is not valid JSON") and "corrupt or truncated" in line


# -- in-process checks of the same validation -------------------------------------------

def fake_config(caps=None, **options) -> types.SimpleNamespace:
    defaults = {"nprocess": None, "param_sizes": None, "numa_policies": None, "dtypes": None, "numa_rounds": None,
                "numa_warmup": None, "numa_timeout": 600.0, "numa_tolerance": 2.0, "numa_host_memory": None,
                "benchmark_compare": [], "benchmark_storage": "", "benchmark_skip": False, "dist": "no"}
    defaults.update(options)
    stash = pytest.Stash()
    stash[plugin._topology_key] = discover("/")
    stash[plugin._caps_key] = caps or probe()
    return types.SimpleNamespace(getoption=lambda name, default=None: defaults.get(name, default),
                                 option=types.SimpleNamespace(**defaults), stash=stash)


def test_weighted_policy_without_root_is_a_usage_error():
    """Simulated: the capability probe found the weights not writable (as for a non-root user)."""
    from dataclasses import replace
    cfg = fake_config(caps=replace(probe(), weights_dir=True, weights_writable=False),
                      numa_policies="default;weighted:0=7")
    with pytest.raises(UsageError) as info:
        plugin.validate_options(cfg)
    msg = str(info.value)
    assert msg.startswith("--numa-policies: weighted:0=7 sets weights in /sys/kernel/mm/mempolicy/weighted_interleave,"
                          " which this user (uid ") and "allowed without root are the other policy kinds" in msg
    plugin.validate_options(fake_config(caps=replace(probe(), weights_dir=True, weights_writable=False),
                                        numa_policies="default;bind:0"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to drop to nobody)")
def test_weights_write_as_non_root_fails_in_one_line_and_changes_nothing(request):
    """A real non-root writer (a forked child that dropped to uid nobody) against a weights tree
    laid out and owned as sysfs's is (root, 0644; tests never write the real one)."""
    top = Path(tempfile.mkdtemp(prefix="numabench-fake-sysfs-"))  # pytest's tmp_path is 0700: nobody could not enter
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    wdir = top / "weighted_interleave"
    wdir.mkdir()
    (wdir / "node0").write_text("1\n")
    (wdir / "auto").write_text("true\n")
    for f in (top, wdir, wdir / "node0", wdir / "auto"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    before = (read_weights(wdir), (wdir / "auto").read_text())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            with WeightSetting({0: 2}, weights_dir=wdir):
                msg = "no error"
        except BaseException as e:
            msg = f"{type(e).__name__}: {e}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        msg = fh.read()
    os.waitpid(pid, 0)
    assert msg == f"PermissionError: cannot write weighted interleave weights in {wdir}: Permission denied; this needs root"
    assert (read_weights(wdir), (wdir / "auto").read_text()) == before


def test_nprocess_beyond_gpus_is_a_skip_with_the_reason():
    fam = family("adam_offload")
    topo = discover(MACHINES / "h200x2-vm")
    case = Case("adam_offload", 4, 1 << 20, Policy.parse("default"), "fp32",
                tuple((k, v[0]) for k, v in fam.extra_axes.items()))
    assert fam.skip_reason(case, topo, probe()) == "nprocess=4 needs 4 GPUs; this machine has 2"


def test_node_missing_on_this_machine_is_a_skip_with_the_reason(tmp_path):
    missing = max(discover("/").node_ids) + 1
    proc, _ = run_suite(tmp_path, f"--numa-policies=bind:{missing}", "--param-sizes=1M", "-rs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"policy bind:{missing} needs NUMA node(s) {missing} with memory; this machine has" in proc.stdout


def test_import_csv_of_non_utf8_bytes_is_one_line(tmp_path, capsys):
    from numabench.cli import main
    bad = tmp_path / "seed.csv"
    bad.write_bytes(b"ngpus,numa_nodes,update_element\n1,0,\xff\xfe\n")
    assert main(["import-csv", str(bad), "--out", str(tmp_path / "out.json"), "--gpu", "X"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not UTF-8 text (byte 0xff at line 2)" in err
    assert not (tmp_path / "out.json").exists()


def test_pytest_help_lists_every_numabench_option():
    """argparse formats each help text with %: a bare % in one (a threshold's default) made
    `pytest --help` a traceback."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--help", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "1000"})  # no help text wrapped
    assert proc.returncode == 0, proc.stderr[-2000:]
    from fixtures import options

    class Recorder:
        names: list[str] = []

        def getgroup(self, *a, **k):
            return self

        def addoption(self, *names, **k):
            self.names.extend(names)

        def addini(self, *a, **k):
            pass

    options.pytest_addoption(Recorder())
    assert Recorder.names and all(name in proc.stdout for name in Recorder.names)
    assert "(default 3%)" in proc.stdout


# -- the numabench command: files that are not what they should be ------------------------------

def _cli(args: list[str], capsys) -> tuple[int, str]:
    from numabench.cli import main

    rc = main(args)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("command", [["compare", "{d}", "{d}"], ["report", "{d}"], ["advise", "{d}"], ["csv", "{d}"],
                                     ["learn", "{d}", "--window", "{w}"]], ids=lambda c: c[0])
def test_a_directory_for_a_run_file_is_one_line(command, tmp_path, capsys):
    args = [a.format(d=tmp_path, w=tmp_path / "w") for a in command]
    rc, err = _cli(args, capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"run file {tmp_path} is a directory: allowed a pytest-benchmark run file" in err


def test_a_directory_for_import_csv_is_one_line(tmp_path, capsys):
    rc, err = _cli(["import-csv", str(tmp_path), "--out", str(tmp_path / "o.json"), "--gpu", "X"], capsys)
    assert rc == 2 and err.count("\n") == 1 and f"CSV file {tmp_path} is a directory" in err, err


def test_non_utf8_run_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "run.json"
    bad.write_bytes(b'{"benchmarks": ["\xff\xfe"]}')
    for args in (["compare", str(bad), str(bad)], ["csv", str(bad)]):
        rc, err = _cli(args, capsys)
        assert rc == 2 and err.count("\n") == 1 and "is not UTF-8 text (byte 0xff at offset 17)" in err, err


def test_report_out_an_existing_file_is_one_line(tmp_path, capsys):
    run = ROOT / "tests" / "data" / "seed"
    src = next(run.glob("*.json"), None) if run.is_dir() else None
    if src is None:  # run_files: other sessions' storage folders may come and go meanwhile
        src = run_files(ROOT / "baselines")[0]
    target = tmp_path / "report.md"
    target.write_text("keep me")
    rc, err = _cli(["report", str(src), "--out", str(target)], capsys)
    assert rc == 2 and err.count("\n") == 1 and f"--out {target} is a file: allowed a directory" in err, err
    assert target.read_text() == "keep me"


def test_import_csv_never_overwrites(tmp_path, capsys):
    csv_file = tmp_path / "seed.csv"
    csv_file.write_text("ngpus,numa_nodes,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),"
                        "avg_d2h_latency(ms)\n1,0,1835008,0.56,0.02,0.40\n")
    out = tmp_path / "seed.json"
    out.write_text("earlier")
    rc, err = _cli(["import-csv", str(csv_file), "--out", str(out), "--gpu", "NVIDIA H100 80GB HBM3"], capsys)
    assert rc == 2 and "exists: choose a new name" in err and out.read_text() == "earlier", err
    out.unlink()
    rc, _ = _cli(["import-csv", str(csv_file), "--out", str(out), "--gpu", "NVIDIA H100 80GB HBM3"], capsys)
    assert rc == 0 and json.loads(out.read_text())["benchmarks"]


@pytest.mark.parametrize("text, message", [
    ("interleave:0,0", "node 0 named twice in '0,0': allowed each once"),
    ("bind:1,0-2", "node 1 named twice in '1,0-2'"),
])
def test_a_node_named_twice_is_an_error(text, message):
    with pytest.raises(UsageError, match=message):
        Policy.parse(text)


@pytest.mark.parametrize("text", ["1e99", "inf", "nan", "2e13"])
def test_absurd_sizes_are_refused_in_a_short_line(text):
    from numabench.cases import parse_sizes

    with pytest.raises(UsageError) as e:
        parse_sizes(text)
    assert len(str(e.value)) < 140 and "9999" not in str(e.value)


def test_plan_help_is_its_own_help(capsys):
    from numabench.cli import main

    with pytest.raises(SystemExit) as e:
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: numabench plan [PYTEST_ARGS...]")
    assert "pytest benchmarks --help lists them" in out


# serial: other tests' pytest sessions make (and remove) the same folder while they run
@pytest.mark.serial
def test_a_run_that_saves_nothing_leaves_no_empty_baseline_folder():
    """Nor one that an earlier session left empty (killed before its end, it removed nothing: this
    test's own session made the folder at its start, empty, as such a session leaves it)."""
    from numabench.machine.hwkey import hardware_key

    folder = ROOT / "baselines" / hardware_key(discover("/"))
    if folder.exists() and any(p.is_file() for p in folder.rglob("*")):
        pytest.skip(f"{folder} holds this machine's runs already")
    folder.mkdir(parents=True, exist_ok=True)  # as a killed session leaves it
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-q", "-p", "no:cacheprovider",
                          "--numa-policies=bind:99"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout + out.stderr
    assert not folder.exists(), f"{folder} was left behind, empty"


def test_an_empty_storage_folder_made_by_the_session_is_removed_at_its_end(tmp_path):
    from fixtures import machine

    def unconfigure(folder):
        stash = pytest.Stash()
        stash[machine._new_storage_key] = folder
        machine.pytest_unconfigure(types.SimpleNamespace(stash=stash))

    empty = tmp_path / "key-a"
    (empty / "Linux-CPython-3.11-64bit").mkdir(parents=True)
    unconfigure(empty)
    assert not empty.exists()
    saved = tmp_path / "key-b"
    (saved / "Linux-CPython-3.11-64bit").mkdir(parents=True)
    (saved / "Linux-CPython-3.11-64bit" / "0001_x.json").write_text("{}")
    unconfigure(saved)
    assert (saved / "Linux-CPython-3.11-64bit" / "0001_x.json").exists()


def test_two_sessions_removing_the_same_empty_storage_folder_do_not_fail(tmp_path, monkeypatch):
    """xdist workers of one checkout run benchmarks at once and share baselines/<key>/: the
    session whose walk finds a folder gone (the other removed it) carries on and fails nothing."""
    from fixtures import machine

    folder = tmp_path / "key"
    (folder / "Linux-CPython-3.11-64bit" / "deeper").mkdir(parents=True)
    real_rmdir = os.rmdir
    removed_by_the_other = []

    def rmdir_after_the_other_session(path, *args, **kwargs):
        if not removed_by_the_other:  # the other session empties the whole tree first
            removed_by_the_other.append(path)
            shutil.rmtree(folder)
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(machine.os, "rmdir", rmdir_after_the_other_session)
    machine.remove_empty_tree(folder)
    assert removed_by_the_other and not folder.exists()

    # a folder another session saved into while this one walked is kept, with its file
    (folder / "Linux-CPython-3.11-64bit").mkdir(parents=True)
    saved = folder / "Linux-CPython-3.11-64bit" / "0001_x.json"
    saved.write_text("{}")
    monkeypatch.setattr(machine.os, "rmdir", real_rmdir)
    machine.remove_empty_tree(folder)
    assert saved.exists()
