"""The gate is plain code: numabench.gate imports neither pytest nor fixtures/ (the pytest
wiring), so the offline compare, the CLI and the session judge by the same library."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gate_package_imports_neither_pytest_nor_fixtures():
    code = ("import json, sys\n"
            "import numabench.gate, numabench.gate.rule, numabench.gate.band, numabench.gate.invocations\n"
            "import numabench.gate.confirm, numabench.gate.pool, numabench.gate.table, numabench.gate.pairs\n"
            "import numabench.results.compare\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'pytest' or m.startswith(('_pytest', 'fixtures')))))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == []
