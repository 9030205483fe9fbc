"""Whose code a worker runs: this checkout's, or another checkout's (a same-runner A/B).

A side is a checkout of numabench whose workers (the family's worker module, its kernels, the
step protocol's worker half) time the case. The parent (this checkout's harness) starts each
side's workers with that checkout as their working directory and first on PYTHONPATH, so
``python -m numabench.workers.main`` imports that checkout's package; a side's environment
(an injected slowdown, say) reaches its workers only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from numabench.numa.launch import worker_env

THIS_CHECKOUT = "this"

# An A/B's rewarm (numabench.workers.run.run_sides): a variant whose untimed steps of the first
# round took this long or longer, on either side, is timed without them from the second round on
# (unless its family rewarms every round: Family.rewarm_every_round, the families whose threads
# fill the node's CPUs). Such a step meets what the other side left (caches, the allocator's
# pages, the GPU's queue) once, at its start: a small share of it; and the long steps this applies
# to (adam_offload 545M, pinned_alloc 67.9M, transfer 268M: 0.1-0.3 s on the GPU VMs) stream far
# more than the last-level cache holds. Without their untimed steps (and dataloader's) a fresh H200
# VM measured the ci tier's A/A in 494-518 s, against 721 s with all of them on an earlier one.
REWARM_BELOW_S = 0.1


@dataclass(frozen=True)
class WorkerSide:
    label: str  # "head", "base", or THIS_CHECKOUT
    path: Path | None = None  # the checkout its workers import; None: this one
    env: Mapping[str, str] = field(default_factory=dict)
    # its fork server's socket (numabench.workers.forks.pool): workers forked from it; None: exec'd
    fork_socket: str | None = None

    def environment(self) -> dict[str, str]:
        """The workers' environment: this checkout's worker_env, the side's checkout first on
        PYTHONPATH, the side's variables on top."""
        env = worker_env()
        if self.path is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.path), env.get("PYTHONPATH")]))
        env.update(self.env)
        return env

    @property
    def cwd(self) -> str | None:
        # ``python -m`` puts the working directory first on sys.path: the side's checkout wins
        return str(self.path) if self.path is not None else None

    def describe(self) -> str:
        return self.label if self.path is None else f"{self.label} ({self.path})"


THIS_SIDE = WorkerSide(THIS_CHECKOUT)


def checkout_side(label: str, path: str | Path, env: Mapping[str, str] | None = None) -> WorkerSide:
    """A side whose workers run the numabench of the checkout at ``path``; a path that holds no
    numabench package is an error naming it."""
    root = Path(path).resolve()
    if not (root / "numabench" / "workers" / "main.py").is_file():
        raise ValueError(f"{label} checkout {str(path)!r}: allowed a numabench checkout (no "
                         f"numabench/workers/main.py there)")
    return WorkerSide(label, root, dict(env or {}))
