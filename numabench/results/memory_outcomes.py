"""What a run's JSON keeps about memory beside its entries: ``numabench_memory``.

pytest-benchmark keeps an entry only for a case with timings, so a case that ran out of memory has
none: its outcome is kept here instead, with the case's fields (those an entry's extra_info starts
with: numabench.results.entry.case_fields), the error's out-of-memory line and, where the family
predicted it, what the case needs against what the machine has. Beside them, the host and GPU
memory the run's fits-in-memory checks counted (the report's capacity figures start from them).

    "numabench_memory": {"host_bytes": 137438953472, "host_source": "--numa-host-memory",
                         "gpu_bytes": [85520809984],
                         "out_of_memory": [{"name": ..., "fullname": ..., "extra_info": {...},
                                            "message": "OutOfMemoryError: CUDA out of memory. ...",
                                            "predicted": "mode no-offload, model 5b ... needs ..."}]}
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

KEY = "numabench_memory"
OUTCOME = "out of memory"
# the lines of a worker's error that say it ran out of memory: torch's (CUDA caching allocator,
# pinned allocations through CUDA, its CPU allocator), Python's, and our cudaHostRegister's (CUDA
# error 2: cudaErrorMemoryAllocation)
_OOM = re.compile(r"(OutOfMemoryError: .*|MemoryError(: .*)?$|.*CUDA error: out of memory.*|"
                  r".*DefaultCPUAllocator: can't allocate memory.*|"
                  r".*cudaHostRegister\(\d+ bytes\) failed with CUDA error 2\b.*)", re.MULTILINE)
MESSAGE_CHARS = 400


def oom_message(error_text: str) -> str | None:
    """The line of a worker's error that says it ran out of memory, or None where it says something else."""
    m = _OOM.search(error_text)
    if m is None:
        return None
    line = m.group(0).strip()
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 3] + "..."


def outcome(name: str, fullname: str, extra_info: dict[str, Any], message: str, predicted: str | None) -> dict:
    """The record of one entry that ran out of memory."""
    return {"name": name, "fullname": fullname, "extra_info": dict(extra_info), "outcome": OUTCOME,
            "message": message, "predicted": predicted}


def section(host_bytes: int | None, host_source: str, gpu_bytes: Sequence[int], records: Sequence[dict]) -> dict:
    """The ``numabench_memory`` object of a run."""
    return {"host_bytes": host_bytes, "host_source": host_source, "gpu_bytes": list(gpu_bytes),
            "out_of_memory": list(records)}


def memory_of(run: dict) -> dict | None:
    """The run's ``numabench_memory``, or None (a run from before it, or of another tool)."""
    mem = run.get(KEY)
    return mem if isinstance(mem, dict) else None


def out_of_memory(run: dict) -> list[dict]:
    """The run's out-of-memory records (each with an ``extra_info`` dict)."""
    mem = memory_of(run) or {}
    return [r for r in mem.get("out_of_memory") or [] if isinstance(r, dict) and isinstance(r.get("extra_info"), dict)]


def combined(runs: Sequence[dict]) -> dict | None:
    """One ``numabench_memory`` for several runs of one machine: every run's records (a later
    run's record of an entry replaces an earlier one; an entry a later run measured drops the
    record: it ran there), the memory figures of the last run that has them. None where no run
    has any."""
    records: dict[str, dict] = {}
    figures: dict | None = None
    for run in runs:
        for b in run.get("benchmarks") or []:
            records.pop(b.get("fullname") or b.get("name") or "", None)
        for r in out_of_memory(run):
            records[r.get("fullname") or r.get("name") or ""] = r
        mem = memory_of(run)
        if mem is not None and (mem.get("host_bytes") or mem.get("gpu_bytes")):
            figures = mem
    if figures is None and not records:
        return None
    figures = figures or {}
    return section(figures.get("host_bytes"), str(figures.get("host_source", "")), figures.get("gpu_bytes") or [],
                   list(records.values()))
