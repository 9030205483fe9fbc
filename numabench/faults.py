"""Fault injection for testing the suite's own robustness (never set it in a real run).

``NUMABENCH_FAULT`` holds ``|``-separated faults, each ``KIND@WHEN[:rankN]``::

    kill@step3:rank1     rank 1 SIGKILLs itself before its 3rd step request
    raise@setup          every rank raises InjectedFault at the end of setup
    hang@step2           every rank stops answering before its 2nd step (sleeps forever)
    oom@setup            a real out-of-memory: after the family's setup, an absurd extra
                         allocation (1 PiB) on the rank's GPU (torch.OutOfMemoryError) when the
                         rank has one, else in host memory (MemoryError)
    exit@step1           the rank exits with code 3 (no reply, no traceback)
    misplace@setup       parent side: the placement check expects every page on a node that does
                         not exist, so the check fails as it would for a mis-placed buffer

WHEN is ``setup``, ``stepN`` (N >= 1, counting every step request, warm-up
rounds included), ``step`` (every step), ``load`` (a worker loading a compiled
kernel, under the build lock; ``kill@load`` first leaves torch's build marker
behind, as a builder killed mid-compile does) or ``build`` (the child that
builds a kernel before the workers start). Without ``:rankN`` a fault hits
every rank. With ``NUMABENCH_FAULT_ONCE=PATH`` a fault fires once per PATH
(the first process to create the file), so the cases after it run normally. Worker faults fire in numabench.workers.main, whatever the family;
each first prints one line naming itself on the worker's stderr, so the
parent's error carries it in the stderr tail. The parent (numabench.workers.run)
parses the variable before it starts any worker: a malformed value is a usage
error naming it.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable

from numabench.errors import UsageError

FAULT_ENV = "NUMABENCH_FAULT"
WORKER_KINDS = ("kill", "raise", "hang", "oom", "exit")
PARENT_KINDS = ("misplace",)
KINDS = WORKER_KINDS + PARENT_KINDS
OOM_BYTES = 1 << 50  # 1 PiB: more than any GPU or host has (and than x86-64 user space)
_ALLOWED = ("KIND@WHEN[:rankN] joined by '|', KIND one of " + ", ".join(KINDS)
            + "; WHEN setup, step, stepN (N >= 1), load or build; e.g. kill@step3:rank1|hang@setup")
_ITEM = re.compile(r"(?P<kind>[a-z]+)@(?P<when>setup|load|build|step(?P<n>[0-9]+)?)(?::rank(?P<rank>[0-9]+))?")
ONCE_ENV = "NUMABENCH_FAULT_ONCE"


class InjectedFault(RuntimeError):
    """What ``raise@...`` raises."""


@dataclass(frozen=True)
class Fault:
    kind: str
    when: str  # "setup" or "step"
    step: int | None = None  # only for "step": which one (1-based); None: every step
    rank: int | None = None  # None: every rank

    def hits(self, when: str, step: int | None, rank: int | None) -> bool:
        if self.when != when or (self.rank is not None and self.rank != rank):
            return False
        return self.step is None or self.step == step

    def __str__(self) -> str:
        text = f"{self.kind}@{self.when}{self.step or ''}"
        return text + (f":rank{self.rank}" if self.rank is not None else "")


def parse(text: str) -> list[Fault]:
    """The faults in ``text`` (none where it is empty); UsageError naming a malformed one."""
    if not text.strip():
        return []
    out = []
    for item in (t.strip() for t in text.split("|")):
        if not item:
            raise UsageError(f"{FAULT_ENV}: empty entry in {text!r}: allowed {_ALLOWED}")
        m = _ITEM.fullmatch(item)
        if not m or m["kind"] not in KINDS:
            raise UsageError(f"{FAULT_ENV}: bad fault {item!r} in {text!r}: allowed {_ALLOWED}")
        n = int(m["n"]) if m["n"] else None
        if n is not None and n < 1:
            raise UsageError(f"{FAULT_ENV}: bad fault {item!r}: steps count from 1")
        kind, when = m["kind"], m["when"] if m["when"] in ("setup", "load", "build") else "step"
        if kind in PARENT_KINDS and when != "setup":
            raise UsageError(f"{FAULT_ENV}: bad fault {item!r}: {kind} acts on the placement check, "
                             f"write {kind}@setup")
        out.append(Fault(kind, when, n, int(m["rank"]) if m["rank"] else None))
    return out


def check_ranks(found: list[Fault], most_ranks: int) -> None:
    """UsageError where a fault names a rank that no selected case has (``most_ranks``: the largest
    nprocess among them): it would never fire, and the test that set it would pass unfaulted."""
    for f in found:
        if f.rank is not None and f.rank >= most_ranks:
            raise UsageError(f"{FAULT_ENV}: fault {str(f)!r} names rank {f.rank}, but the selected cases have "
                             f"ranks 0..{most_ranks - 1} at most (nprocess up to {most_ranks}): allowed a rank "
                             "below the largest nprocess selected, or no :rankN (every rank)")


def from_env(env: dict[str, str] | None = None) -> list[Fault]:
    return parse((os.environ if env is None else env).get(FAULT_ENV, ""))


def parent_fault(kind: str, env: dict[str, str] | None = None) -> list[Fault]:
    return [f for f in from_env(env) if f.kind == kind]


def _first_time() -> bool:
    """False when NUMABENCH_FAULT_ONCE names a file that exists already (the fault fired)."""
    path = os.environ.get(ONCE_ENV)
    if not path:
        return True
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except FileExistsError:
        return False


def fire(faults: list[Fault], when: str, step: int | None, rank: int | None, gpu: int | None = None,
         before_kill: "Callable[[], None] | None" = None) -> None:
    """In a worker (or a kernel builder): carry out the first worker fault that hits (when,
    step, rank), if any. ``before_kill`` runs first for a kill (to leave what a real one would)."""
    for f in faults:
        if f.kind in WORKER_KINDS and f.hits(when, step, rank):
            if not _first_time():
                return
            if f.kind == "kill" and before_kill is not None:
                before_kill()
            where = f"{when} {step}" if step else when
            who = f" on rank {rank}" if rank is not None else f" in process {os.getpid()}"
            print(f"numabench fault injection ({FAULT_ENV}={f}): {f.kind} at {where}{who}", file=sys.stderr, flush=True)
            _carry_out(f, where, rank, gpu)
            return


def _carry_out(f: Fault, where: str, rank: int | None, gpu: int | None) -> None:
    if f.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # the signal is on its way
    elif f.kind == "raise":
        raise InjectedFault(f"injected fault at {where}" + (f" on rank {rank}" if rank is not None else ""))
    elif f.kind == "hang":
        while True:
            time.sleep(3600)
    elif f.kind == "exit":
        sys.stderr.flush()
        os._exit(3)
    elif f.kind == "oom":
        allocate_absurd(gpu)


def allocate_absurd(gpu: int | None, nbytes: int = OOM_BYTES) -> None:
    """A real allocation failure: on the GPU through torch's caching allocator, else host memory."""
    if gpu is not None:
        import torch

        torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", int(gpu)))
        return
    try:
        bytearray(nbytes)
    except MemoryError as e:
        raise MemoryError(f"cannot allocate {nbytes} bytes of host memory") from e
