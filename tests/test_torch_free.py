"""The pytest process stays torch-free: collecting the benchmarks, checking the options and
running a torch-free family import no torch there (only workers do), so a suite run
starts fast and works under an interpreter without torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import sys, pytest
rc = pytest.main({args!r})
print("TORCH-IMPORTED" if "torch" in sys.modules else "TORCH-FREE", rc)
"""


def run_probe(tmp_path: Path, *args: str) -> str:
    code = PROBE.format(args=[*args, f"--rootdir={ROOT}", "-c", str(ROOT / "pytest.ini"), "-p", "no:cacheprovider",
                              "-q"])
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    return out.stdout + out.stderr


def test_collecting_every_benchmark_imports_no_torch(tmp_path):
    out = run_probe(tmp_path, str(ROOT / "benchmarks"), "--collect-only")
    assert "TORCH-FREE 0" in out, out[-3000:]


def test_running_a_case_imports_no_torch_in_the_pytest_process(tmp_path):
    out = run_probe(tmp_path, str(ROOT / "benchmarks/test_touch.py"), "--param-sizes=1M", "--numa-policies=default",
                    "--numa-rounds=2", f"--benchmark-storage=file://{tmp_path}/store")
    assert "1 passed" in out and "TORCH-FREE 0" in out, out[-3000:]
