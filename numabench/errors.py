"""Error types. Every message names the bad value and what is allowed."""
from __future__ import annotations

from pathlib import Path


class NumabenchError(Exception):
    """Base class for errors this package raises on purpose."""


class UsageError(NumabenchError, ValueError):
    """A bad value from the user: a policy string, an option, a size."""


class WriteError(NumabenchError):
    """A file, folder or standard output that could not be written (no permission, no space,
    beyond the file-size limit): nothing of it is left (numabench.atomic)."""


class PolicyError(UsageError):
    """A policy string that does not parse or does not fit the machine."""


class PlacementError(NumabenchError):
    """Pages did not land where the policy promised."""


class WorkerError(NumabenchError):
    """A benchmark worker died, raised, or stopped answering."""

    def __init__(self, message: str, rank: int | None = None, stderr_tail: str = "") -> None:
        self.rank = rank
        self.stderr_tail = stderr_tail
        text = message if rank is None else f"rank {rank}: {message}"
        if stderr_tail:
            text += "\n--- worker stderr (last lines) ---\n" + stderr_tail
        super().__init__(text)


class BuildError(NumabenchError):
    """A kernel the case needs did not compile: ``kernel`` names it, ``log`` is its build log."""

    def __init__(self, message: str, kernel: str | None = None, log: Path | None = None) -> None:
        self.kernel = kernel
        self.log = log
        super().__init__(message)
