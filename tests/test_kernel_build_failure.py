"""A kernel of ours that does not compile is an error of the cases that need it, in one line
(the compiler's first error and the build log; "failed earlier" for the cases after the first),
and of no other case: torch's implementations of the same worker run are measured as usual."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.families import family
from numabench.kernels.prebuild import first_error

ROOT = Path(__file__).resolve().parents[1]
COMPILER_ERROR = "cpu_adam.cpp:12:5: error: 'fake_symbol' was not declared in this scope"


def _failing_compiler(folder: Path) -> Path:
    """A `c++` that fails every compile of numabench's kernels (their build folders are named
    numabench_*) with a compiler's error lines, and passes anything else to the real one."""
    real = shutil.which("c++") or shutil.which("g++")
    if real is None:
        pytest.skip("no C++ compiler on PATH")
    fake = folder / "c++"
    fake.write_text(f"""#!/bin/sh
case "$*" in
  *numabench_*)
    case " $* " in *" -c "*)
      echo "/src/{COMPILER_ERROR}" >&2
      echo "/src/cpu_adam.cpp:20:1: error: a second error" >&2
      exit 1;;
    esac;;
esac
exec {real} "$@"
""")
    fake.chmod(0o755)
    return fake


def test_a_failed_build_errors_only_the_cases_that_need_it_once_each_in_a_line(tmp_path):
    build = tmp_path / "build"
    env = {**os.environ, "CXX": str(_failing_compiler(tmp_path)), "NUMABENCH_BUILD_DIR": str(build)}
    # two worker runs (two policies) of every impl; deepspeed's impl, which needs none of our
    # kernels either (as test_which_variants_need_the_kernel shows), is left out for time: its
    # first step JIT-builds DeepSpeed's own op
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_cpu_adam.py", "-p", "no:cacheprovider",
                          "-rA", "--benchmark-disable", "--numa-policies=default;local", "--param-sizes=256K",
                          "--numa-rounds=2", "--numa-warmup=0", "-k", "not deepspeed"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    log = build / "logs" / "cpu_adam.log"
    passed = sorted(ln.split("[", 1)[1].rstrip("]") for ln in out.stdout.splitlines() if ln.startswith("PASSED "))
    errors = sorted(ln.split("[", 1)[1].split("]")[0] for ln in out.stdout.splitlines() if ln.startswith("ERROR "))
    assert passed == sorted(f"step-np1-256K-{p}-fp32-{impl}" for p in ("default", "local")
                            for impl in ("torch-fused", "torch-fused+copy", "torch-foreach")), text[-3000:]
    assert errors == sorted(f"step-np1-256K-{p}-fp32-{impl}" for p in ("default", "local")
                            for impl in ("ours", "ours+copy")), text[-3000:]
    assert "Traceback" not in text and "During handling" not in text, text[-3000:]
    # the first case needing the kernel: its compiler's first error and the build log, in one line
    first = f"kernel cpu_adam did not build: FAILED (exit 1): /src/{COMPILER_ERROR}; build log: {log}"
    # once in the error reports; pytest's short summary ("ERROR id - Failed: ...") repeats each
    # message where it does not cut lines (under CI=true)
    reports = "\n".join(ln for ln in text.splitlines() if not ln.startswith("ERROR "))
    assert reports.count(first) == 1 and "a second error" not in text, text[-3000:]
    assert [ln for ln in text.splitlines() if ln.startswith("kernel cpu_adam")] == [first] + [
        f"kernel cpu_adam build failed earlier: {log}"] * 3, text[-3000:]
    assert "a second error" in log.read_text()  # the whole output is in the log


def test_which_variants_need_the_kernel():
    cpu_adam, offload, membw = family("cpu_adam"), family("adam_offload"), family("host_membw")
    assert [cpu_adam.kernels_for({"impl": i}) for i in ("ours", "ours+copy", "torch-fused", "torch-foreach",
                                                         "deepspeed")] == [("cpu_adam",)] * 2 + [()] * 3
    assert cpu_adam.kernels_for((("impl", "torch-fused+copy"),)) == ()
    assert offload.kernels_for({"impl": "ours", "schedule": "overlap"}) == ("cuda_adam",)
    assert offload.kernels_for({"impl": "torch"}) == ()
    assert membw.kernels_for({"kernel": "copy"}) == ("stream",)  # every variant: the family's kernels


@pytest.mark.parametrize("lines, want", [
    (["[1/2] c++ -c x.cpp", "x.cpp:3:1: error: first", "x.cpp:9:1: error: second", "ninja: build stopped"],
     "x.cpp:3:1: error: first"),
    (["In file included from a.h:1,", "a.h:2:10: fatal error: b.h: No such file or directory"],
     "a.h:2:10: fatal error: b.h: No such file or directory"),
    (["kernel.cu(7): error: identifier \"q\" is undefined"], "kernel.cu(7): error: identifier \"q\" is undefined"),
    (["Traceback (most recent call last):", "  File \"x\", line 1", "RuntimeError: Error building extension 'e'",
      "numabench.faults.InjectedFault: injected fault at build"], "numabench.faults.InjectedFault: injected fault at build"),
    (["a", "b", "c", "d"], "b | c | d"),
])
def test_the_first_error_line(lines, want):
    assert first_error(lines) == want
