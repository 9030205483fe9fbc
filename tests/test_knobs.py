"""Knobs (numabench.cases.KNOBS): settings that change a result are axes of the case, not
environment variables. At ``auto`` a knob leaves the case (id, entry) as it was before the
knob existed; any other value shows in the case id, the entry and reaches the worker. The
variables they replace are refused, naming the axis. README lists every remaining variable."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from numabench.cases import KNOBS, Case, parse_knob, retired_env_error
from numabench.errors import UsageError
from numabench.families import FAMILIES, family
from numabench.families.base import WorkerSpec
from numabench.families.matrix import case_matrix, worker_run_key
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.numa.policy import Policy
from numabench.results.entry import case_fields, case_of_entry

ROOT = Path(__file__).resolve().parent.parent
MACHINES = Path(__file__).resolve().parent / "data" / "machines"

# each knob: its family, a value other than auto, the old variable
CONVERTED = [
    ("adam_offload", "chunk_numel", "1048576", "NUMABENCH_CHUNK_ELEMS"),
    ("dataloader", "loader_workers", "3", "NUMABENCH_LOADER_WORKERS"),
    ("dataloader", "loader_batches", "2", "NUMABENCH_LOADER_BATCHES"),
    ("dataloader", "image_px", "64", "NUMABENCH_IMAGE_SIDE"),
    ("train_step", "rank_threads", "5", "NUMABENCH_RANK_THREADS"),
    ("cpu_adam", "simd_level", "scalar", "NUMABENCH_CPU_ADAM_SIMD"),
    ("broadcast", "chunk_nbytes", "65536", "NUMABENCH_BCAST_CHUNK_BYTES"),
]


@cache
def machine(name: str):
    return discover(MACHINES / name)


def cases(key: str, overrides=None, topo="dgx-2socket-8gpu"):
    return [c for c, _ in case_matrix(family(key), machine(topo), probe(first_node=0), axis_overrides=overrides)]


def test_every_knob_is_a_family_s_and_every_old_variable_is_named():
    owned = {k for key in FAMILIES for k in family(key).knobs}
    assert owned == set(KNOBS)
    # every knob but place (new, tests/test_place.py), loader_drain and train_step's split and ZenFlow
    # settings (new, tests/test_train_step_split.py) replaced a variable
    assert {k for k, knob in KNOBS.items() if knob.retired_env} == {k for _, k, _, _ in CONVERTED} == \
        set(KNOBS) - {"place", "loader_drain", "offload_ratio", "zenflow_topk", "zenflow_update_interval"}
    assert {KNOBS[k].retired_env for _, k, _, env in CONVERTED} == {env for *_, env in CONVERTED}


@pytest.mark.parametrize("key, knob, value, env", CONVERTED)
def test_auto_leaves_the_case_as_it_was(key, knob, value, env):
    plain = cases(key)
    assert plain and all(knob not in dict(c.extra) and f"{knob}=" not in c.id for c in plain)
    assert [c.id for c in cases(key, {knob: ["auto"]})] == [c.id for c in plain]


@pytest.mark.parametrize("key, knob, value, env", CONVERTED)
def test_a_value_shows_in_the_id_the_run_key_and_the_entry(key, knob, value, env):
    plain = cases(key)
    both = cases(key, {knob: ["auto", value]})
    assert len(both) == 2 * len(plain)
    set_ = [c for c in both if knob in dict(c.extra)]
    assert [c.id for c in set_] == [f"{c.id}-{knob}={value}" for c in plain]  # the knob last, named
    fam = family(key)
    for case in set_[:3]:
        assert case.param(knob) == value
        assert f"{knob}={value}" in worker_run_key(case, fam)  # its own worker run
        fields = case_fields(case, "p", "hk")
        assert fields[knob] == value
        assert case_of_entry(fields, fam) == case  # an entry reads back as its case


@pytest.mark.parametrize("key, knob, value, env", CONVERTED)
def test_the_value_reaches_the_worker_s_spec(key, knob, value, env):
    [case] = [c for c in cases(key, {knob: [value]})][:1]
    spec = WorkerSpec.from_dict(WorkerSpec(numel=4, variants=(dict(case.extra),)).to_dict())
    assert spec.knob(knob) == value
    assert WorkerSpec(numel=4, variants=({"x": "y"},)).knob(knob) is None  # auto


def test_values_are_checked_and_canonical():
    assert parse_knob("chunk_nbytes", "64K") == "65536" and parse_knob("chunk_nbytes", "auto") == "auto"
    assert parse_knob("simd_level", "avx2") == "avx2"
    for name, bad in (("chunk_numel", "abc"), ("chunk_numel", "0"), ("simd_level", "sse9"), ("rank_threads", "-1"),
                      ("loader_workers", "0")):
        with pytest.raises(UsageError, match=f"--numa-axis {name}: '{bad}': allowed auto"):
            parse_knob(name, bad)
    with pytest.raises(UsageError, match="--numa-axis chunk_numel"):
        cases("adam_offload", {"chunk_numel": ["1.5"]})


def test_one_run_of_different_knob_values_is_refused():
    spec = WorkerSpec(numel=4, variants=({"chunk_numel": "1"}, {"chunk_numel": "2"}))
    with pytest.raises(ValueError, match="different chunk_numel values"):
        spec.knob("chunk_numel")


@pytest.mark.parametrize("key, knob, value, env", CONVERTED)
def test_the_old_variable_is_refused_naming_the_axis(key, knob, value, env, monkeypatch):
    assert retired_env_error({}) is None and retired_env_error({env: "auto"}) is None
    msg = retired_env_error({env: value})
    assert msg == (f"{env} is no longer read: the setting is the axis {knob} (--numa-axis {knob}=VALUE, "
                   f"shown in the case id); unset {env}")
    # the runner refuses it before any worker starts
    from numabench.workers.run import run_case

    monkeypatch.setenv(env, value)
    case = Case("touch", 1, 1000, Policy.parse("default"), "fp32", ())
    topo = discover("/")
    with pytest.raises(UsageError, match=f"{env} is no longer read"):
        run_case(case, family("touch"), topo, probe(first_node=(topo.memory_node_ids or (0,))[0]), rounds=1,
                 warmup=0)


# -- the workers: each knob's value is what the worker uses ---------------------------------

def test_chunk_numel_sets_adam_offload_s_chunk():
    pytest.importorskip("torch")
    from numabench.families.adam_offload.worker import Worker, auto_chunk

    spec = {"numel": 1 << 24, "gpu": 0, "variants": [{"impl": "ours", "schedule": "overlap", "alloc": "register",
                                                      "chunk_numel": "1048576"}]}
    assert Worker(spec).chunk == 1048576  # torch.device only: no CUDA call in __init__
    spec["variants"] = [{"impl": "ours", "schedule": "overlap", "alloc": "register"}]
    assert Worker(spec).chunk == auto_chunk(1 << 24, 4)


def test_dataloader_knobs_set_the_loader():
    from numabench.families.dataloader.worker import loader_settings

    knobs = {"loader_workers": "3", "loader_batches": "2", "image_px": "64"}
    spec = WorkerSpec(numel=8, variants=({"binding": "bound", **knobs},))
    assert loader_settings(spec, cuda=False) == {"num_workers": 3, "batches_per_round": 2, "drain_batches": 6,
                                                 "image_side": 64}
    plain = WorkerSpec(numel=8, variants=({"binding": "bound"},))
    assert loader_settings(plain, cuda=False) == {"num_workers": 2, "batches_per_round": 4, "drain_batches": 4,
                                                  "image_side": 224}
    undrained = WorkerSpec(numel=8, variants=({"binding": "bound", "loader_drain": "0"},))
    assert loader_settings(undrained, cuda=False)["drain_batches"] == 0


def test_rank_threads_sets_train_step_s_threads():
    from numabench.families.train_step.worker import rank_threads

    cpus = tuple(range(8))
    assert rank_threads(WorkerSpec(numel=2, cpus=cpus, variants=({"mode": "ddp", "rank_threads": "5"},))) == 5
    assert rank_threads(WorkerSpec(numel=2, cpus=cpus, variants=({"mode": "ddp"},))) == 8


def test_chunk_nbytes_sets_broadcast_s_chunk():
    from numabench.families.broadcast.worker import chunk_bytes

    spec = WorkerSpec(numel=4, variants=({"method": "pipelined", "chunk_nbytes": "65536"},))
    assert chunk_bytes(2**30, spec.knob("chunk_nbytes")) == 65536
    assert chunk_bytes(2**30, WorkerSpec(numel=4).knob("chunk_nbytes")) == 16 * 2**20


def test_simd_level_runs_cpu_adam_at_that_level(monkeypatch):
    """Through the runner (a worker process): the entry's ``simd`` is the knob's level."""
    pytest.importorskip("torch")
    from numabench.kernels import cpu_adam, prebuild
    from numabench.workers.run import run_case

    monkeypatch.delenv(cpu_adam.SIMD_ENV, raising=False)
    topo = discover("/")
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    try:
        prebuild.ensure_built(("cpu_adam",))
    except Exception as e:  # noqa: BLE001 - no compiler here: the kernel tests say why
        pytest.skip(f"cpu_adam kernel does not build here: {e}")
    node = (topo.cpu_node_ids or (0,))[0]
    case = Case("cpu_adam", 1, 1 << 16, Policy.parse(f"bind:{node}"), "fp32",
                (("impl", "ours"), ("simd_level", "scalar")))
    res = run_case(case, family("cpu_adam"), topo, caps, rounds=1, warmup=0, timeout_s=300)
    assert res.setup_info[0].simd == "scalar"
    assert family("cpu_adam").metrics(res, "step")["simd"] == "scalar"
    assert res.case.id.endswith("-ours-simd_level=scalar")


def test_pytest_selects_a_knob_by_numa_axis_and_refuses_the_old_variable():
    base = [sys.executable, "-m", "pytest", "benchmarks/test_dataloader.py", "--co", "-q", "-p", "no:cacheprovider",
            "--numa-tier=smoke"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMABENCH_")}
    out = subprocess.run([*base, "--numa-axis", "image_px=auto,64"], cwd=ROOT, capture_output=True, text=True,
                         check=False, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line for line in out.stdout.splitlines() if "::test_dataloader[" in line]
    with_knob = [i for i in ids if i.endswith("-image_px=64]")]
    assert with_knob and len(with_knob) * 2 == len(ids)
    assert {i.replace("-image_px=64]", "]") for i in with_knob} == {i for i in ids if "image_px" not in i}
    bad = subprocess.run([*base, "--numa-axis", "image_px=huge"], cwd=ROOT, capture_output=True, text=True,
                         check=False, env=env, timeout=120)
    assert bad.returncode == 4 and "--numa-axis image_px: 'huge': allowed auto" in bad.stdout + bad.stderr
    old = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, check=False, timeout=120,
                         env={**env, "NUMABENCH_IMAGE_SIDE": "64"})
    assert old.returncode == 4
    assert "NUMABENCH_IMAGE_SIDE is no longer read: the setting is the axis image_px" in old.stdout + old.stderr


# -- README lists every environment variable the code reads --------------------------------

CODE = [ROOT / "numabench", ROOT / "fixtures", ROOT / "benchmarks", ROOT / "conftest.py", ROOT / "csrc"]
NAME = re.compile(r"NUMABENCH_[A-Z0-9_]*[A-Z0-9]")


def code_names() -> set[str]:
    names = set()
    for top in CODE:
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.suffix in (".py", ".cpp", ".cu", ".h")]
        for f in files:
            names.update(NAME.findall(f.read_text(errors="replace")))
    return names


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Environment variables\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert m, "README.md has no '## Environment variables' section"
    return m.group(1)


def test_readme_lists_every_environment_variable_the_code_names():
    section = readme_section()
    listed = set(re.findall(r"`(NUMABENCH_[A-Z0-9_]+)", section))
    missing = sorted(code_names() - listed)
    assert not missing, f"README.md's 'Environment variables' section lacks {missing}"
    assert code_names() >= {"NUMABENCH_FAULT", "NUMABENCH_BUILD_DIR"}  # the scan finds what is there


def test_readme_names_the_retired_variables_with_their_axes():
    section = readme_section()
    for _, knob, _, env in CONVERTED:
        line = next(line for line in section.splitlines() if f"`{env}`" in line)
        assert f"--numa-axis {knob}=" in line

