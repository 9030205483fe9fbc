"""SIGINT and SIGTERM reach numabench whatever its caller left ignored.

Ignored signals stay ignored across fork and exec: a background job of a non-interactive
shell starts with SIGINT ignored, and so does a command under ``trap '' INT`` or some CI
wrappers. Python installs its KeyboardInterrupt handler only where SIGINT was at its
default, so such a run would take no notice of Ctrl-C (or of a CI's SIGINT to the job's
process group) and go on until its per-request timeout, with its workers and their
scratch folders. The pytest plugin (fixtures.safety) and every worker (workers.main)
call ``restore_interrupts`` first; processes they start then inherit the defaults.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

Handler = Callable[[int, Any], Any] | int | signal.Handlers | None

# What a Python process has when its caller ignored nothing: SIGINT raises KeyboardInterrupt
# (finally blocks run: workers ended, weights restored), SIGTERM ends it.
DEFAULTS: dict[signal.Signals, Handler] = {signal.SIGINT: signal.default_int_handler,
                                           signal.SIGTERM: signal.SIG_DFL}


def restore_interrupts() -> dict[signal.Signals, Handler]:
    """Give SIGINT and SIGTERM their defaults where they are ignored; a handler someone
    installed is left alone. Returns the dispositions replaced (signal -> previous), for
    ``put_back``. Main thread only: signal.signal raises ValueError elsewhere."""
    replaced: dict[signal.Signals, Handler] = {}
    for sig, default in DEFAULTS.items():
        if signal.getsignal(sig) == signal.SIG_IGN:
            replaced[sig] = signal.signal(sig, default)
    return replaced


def put_back(replaced: dict[signal.Signals, Handler]) -> None:
    """Undo ``restore_interrupts`` (a pytest run inside a caller's process leaves its
    signals as it found them)."""
    for sig, previous in replaced.items():
        signal.signal(sig, previous)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised as an interrupt so that finally blocks run (worktrees and
    staged files removed, children and workers ended); ``signum`` names the signal."""

    def __init__(self, signum: int, message: str | None = None) -> None:
        self.signum = signum
        super().__init__(message or f"{signal.Signals(signum).name} received")


STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # what stops a run in order


def stop_handler(stopped: Callable[[int], Stopped] = Stopped) -> Callable[[int, Any], None]:
    """A handler that raises KeyboardInterrupt for SIGINT and ``stopped(signum)`` for the
    others, for the first signal only: the orderly exit that follows is not cut short by a
    second one (a Ctrl-C reaches the whole job, and .ci/bench passes its copy on as well)."""
    def handler(signum: int, frame: Any) -> None:
        for sig in STOPS:
            if signal.getsignal(sig) is handler:
                signal.signal(sig, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise stopped(signum)
    return handler


def stop_on_signals() -> dict[signal.Signals, Handler]:
    """SIGINT as KeyboardInterrupt (also where the caller ignored it), SIGTERM and SIGHUP as
    ``Stopped`` where the caller left them at their default (``nohup``'s SIGHUP stays
    ignored). Returns the dispositions replaced, for ``put_back``. Main thread only."""
    handler = stop_handler()
    replaced: dict[signal.Signals, Handler] = {}
    for sig in STOPS:
        current = signal.getsignal(sig)
        if sig == signal.SIGINT or current == signal.SIG_DFL:
            replaced[sig] = signal.signal(sig, handler)
    return replaced


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the block ends, then reach their handlers.

    Starting a child is not atomic: an interrupt raised inside ``subprocess.Popen`` after the
    fork loses the child's pid, and whoever would end the child on the way out never learns of
    it (it runs on, orphaned, past the caller's exit). Around a start, and around recording its
    result, an interrupt is therefore held and raised once the caller knows the child. Only
    signals with a Python handler are held (at their default or ignored, nothing changes), and
    only in the main thread (the only one Python signal handlers run in)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    held = {}
    for sig in STOPS:
        current = signal.getsignal(sig)
        if callable(current):
            held[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, previous in held.items():
            signal.signal(sig, previous)
        if pending:  # the first one, as its handler would have seen it (a later one it would ignore)
            signal.raise_signal(pending[0])
