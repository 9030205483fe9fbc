"""Worker entry point: ``python -m numabench.workers.main FAMILY`` (argv[1]).

Each family's ``worker.py`` provides ``Worker(spec)`` (numabench.families.base.Worker:
``setup() -> SetupReply``, ``step(variant=...) -> {phase: seconds}``, ``close()``); the
spec arrives as JSON and is parsed here, once, into a ``WorkerSpec``. Both replies are
checked here, where they are made, so that a broken one is this worker's error: setup's must
be an instance of the family's ``Family.setup_reply`` class; it goes back wrapped in a
``SetupDone`` (the checks run here, this process's CPUs, a ``SetupTiming``), as JSON; a step's
phase names must be the family's phases or step parts and its times finite and >= 0
(numabench.replies).

Fault injection (tests of the suite itself): env ``NUMABENCH_FAULT``, see
numabench.faults. Faults fire here, for every family: ``setup`` ones after the
family's setup (so ``oom`` is an allocation on top of the placed buffers),
``stepN`` ones before the N-th step request is carried out.

A worker also asks the kernel to SIGKILL it when its parent dies
(PR_SET_PDEATHSIG), so a parent killed without cleanup leaves no worker behind, and
gives SIGINT and SIGTERM their defaults where its caller ignored them
(numabench.interrupts), so that a signal sent to it takes effect.
"""
from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import time
import traceback

from numabench import faults as faultlib
from numabench.families import FAMILIES, family, worker_class
from numabench.families.base import Family, WorkerSpec
from numabench.replies import SetupDone, SetupReply, SetupTiming, check_step
from numabench.interrupts import restore_interrupts
from numabench.numa.numastat import node_memory
from numabench.toolkit.inject import SLOWDOWN_ENV, slowdown_factor
from numabench.workers.protocol import OP_EXIT, OP_SETUP, OP_STEP, decode, encode

PR_SET_PDEATHSIG = 1


def injecting_families() -> list[str]:
    """Families whose workers pad their timed phases for NUMABENCH_INJECT_SLOWDOWN."""
    return [key for key in FAMILIES if family(key).injects_slowdown]


def die_with_parent() -> None:
    """SIGKILL this process when the parent that started it goes away."""
    parent = os.getppid()
    try:
        libc = _libc()
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent already went before prctl took effect
        os._exit(1)


def current_cpu() -> int | None:
    """The CPU this thread runs on now (sched_getcpu), None where libc cannot say: which CPU a
    single-threaded step ran on explains a process that is slower than its twin."""
    try:
        cpu = int(_libc().sched_getcpu())
    except (OSError, AttributeError):
        return None
    return cpu if cpu >= 0 else None


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check_affinity(spec: WorkerSpec) -> list[int]:
    """This process's CPUs; where the parent bound it (``spec.cpus``) they must be some of
    those (a cpuset may narrow a node, never widen a binding): else the run would claim a
    binding it did not get."""
    affinity = sorted(os.sched_getaffinity(0))
    if spec.cpus is not None and not set(affinity) <= set(spec.cpus):
        raise RuntimeError(f"rank {spec.rank} runs on CPUs {affinity}; it was bound to {sorted(spec.cpus)}")
    return affinity


def check_size(spec: WorkerSpec, fam: Family) -> None:
    """The spec carries the case's size where the family reads it (``batch`` or ``numel``)."""
    if fam.size_is_batch and spec.batch is None:
        raise ValueError(f"family {fam.key}'s size is a batch: its WorkerSpec needs batch, got numel={spec.numel}")
    if not fam.size_is_batch and spec.numel is None:
        raise ValueError(f"family {fam.key}'s size is in elements: its WorkerSpec needs numel, got batch={spec.batch}")


def setup_reply(info: SetupReply, fam: Family) -> SetupReply:
    """``info`` if it is of the family's reply class, else a TypeError naming both."""
    if not isinstance(info, fam.setup_reply):
        raise TypeError(f"{fam.key}'s Worker.setup() returned {type(info).__name__}: allowed "
                        f"{fam.setup_reply.__name__} (Family.setup_reply)")
    return info


def main() -> int:
    main_at = time.time()  # the parent's spawn time minus this: interpreter start and imports
    restore_interrupts()
    die_with_parent()
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, never into the protocol stream
    out = os.fdopen(proto_fd, "wb", buffering=0)
    key = sys.argv[1]
    worker = None
    rank = gpu = None
    nstep = 0
    faults: list[faultlib.Fault] = []
    fault_error: Exception | None = None
    try:
        faults = faultlib.from_env()
    except Exception as e:  # reported with the setup reply
        fault_error = e
    for raw in sys.stdin.buffer:
        msg = decode(raw)
        op = msg.get("op")
        try:
            if op == OP_SETUP:
                if fault_error is not None:
                    raise fault_error
                spec = WorkerSpec.from_dict(msg["spec"])
                rank, gpu = spec.rank, spec.gpu
                check_size(spec, family(key))
                if slowdown_factor() != 1.0 and not family(key).injects_slowdown:
                    raise ValueError(f"{SLOWDOWN_ENV} is not supported by family {key!r}: allowed for "
                                     f"{', '.join(injecting_families())}")
                affinity = check_affinity(spec)
                t0 = time.perf_counter()
                worker = worker_class(key)(spec)
                t1 = time.perf_counter()
                info = setup_reply(worker.setup(), family(key))
                faultlib.fire(faults, "setup", None, rank, gpu)
                timing = SetupTiming(main_at=main_at, import_s=t1 - t0, setup_s=time.perf_counter() - t1,
                                     parts_s=worker.setup_parts_s)
                done = SetupDone(info=info, verified=worker.verified_now, affinity=affinity, timing=timing,
                                 node_memory=node_memory())
                reply = {"ok": True, "info": done.to_dict()}
            elif op == OP_STEP:
                nstep += 1
                faultlib.fire(faults, "step", nstep, rank, gpu)
                times = check_step(worker.step(msg.get("variant") or None), family(key).step_names())
                reply = {"ok": True, "times": times, "cpu": current_cpu()}
            elif op == OP_EXIT:
                if worker is not None:
                    worker.close()
                out.write(encode({"ok": True}))
                return 0
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as e:  # reported to the parent, which fails the case with it
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            # The parent shows the tail of stderr: let the error be its last lines.
            print(f"numabench worker (rank {rank}): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        out.write(encode(reply))
        if not reply["ok"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
