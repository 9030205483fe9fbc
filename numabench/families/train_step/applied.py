"""The memory policy a train_step rank actually runs under, against the case's.

A library's launcher can wrap a rank in its own binding (DeepSpeed's ``--bind_cores_to_rank``
runs each rank under ``numactl -m``/``-C``); a cpuset can narrow the nodes a process may use.
Each rank reads the kernel's view of its main thread (get_mempolicy(2), and /proc/self/status
``Mems_allowed_list``) and the case fails, naming the rank, where that is not the case's policy.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from numabench.numa import mempolicy
from numabench.numa.policy import Policy


def parse_list(text: str) -> tuple[int, ...]:
    """A kernel node list (``0-3,5``) as node numbers."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return tuple(out)


def mems_allowed(status: str | None = None) -> tuple[int, ...] | None:
    """The nodes this process may allocate on (cpuset), from /proc/self/status; None if unknown."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return None
    for line in status.splitlines():
        if line.startswith("Mems_allowed_list:"):
            return parse_list(line.split(":", 1)[1])
    return None


def running_policy() -> dict[str, Any]:
    """This thread's memory policy (mode name, nodes) and the process's allowed nodes."""
    mode, nodes = mempolicy.get_mempolicy()
    return {"mode": mempolicy.MODE_NAMES.get(mode, str(mode)), "mode_number": mode, "nodes": list(nodes),
            "mems_allowed": list(mems_allowed() or ())}


def mismatch(expected: Policy | None, running: dict[str, Any]) -> str | None:
    """Why ``running`` (``running_policy()``) is not the case's policy ``expected`` (resolved),
    or None where it is. ``local`` resolves to a bind on the rank's node before the rank
    starts; unresolved it is only checked for its mode."""
    if expected is None:
        return None
    policy = expected
    if running["mode_number"] != policy.mode:
        return (f"memory policy {running['mode']}:{','.join(map(str, running['nodes']))} where the case's policy is "
                f"{expected} (mode {mempolicy.MODE_NAMES.get(policy.mode, policy.mode)})")
    want = set(policy.nodes)
    if want and set(running["nodes"]) != want:
        return (f"memory policy {running['mode']} on nodes {running['nodes']} where the case's policy {expected} "
                f"names nodes {sorted(want)}")
    allowed = set(running.get("mems_allowed") or ())
    if want and allowed and not want <= allowed:
        return (f"Mems_allowed {sorted(allowed)} leaves out nodes {sorted(want - allowed)} of the case's policy "
                f"{expected}")
    return None
