"""The benchmark families: the one registry.

A family is a folder here: ``__init__.py`` defines ``FAMILY`` (a
``numabench.families.base.Family``: what it measures, its axes, requirements and
hooks) and imports no torch; ``reply.py`` (torch-free too) its setup reply class (a frozen
``numabench.replies.SetupReply`` subclass, named by ``Family.setup_reply``: what its
worker's set-up returns and its metrics read); ``worker.py`` defines ``Worker`` (a
``numabench.families.base.Worker``: one rank's set-up and timed steps). The folder's
name is the family's key; ``benchmarks/test_<key>.py`` makes it a pytest module.
numabench.families.listing renders the families for people (``numabench plan --list``, the
README's family table) from each ``Family``'s ``description`` and ``needs``.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from numabench.families.base import Family, Worker

FAMILIES: tuple[str, ...] = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg))


def _check(key: str) -> None:
    if key not in FAMILIES:
        raise KeyError(f"unknown family {key!r}: allowed {', '.join(FAMILIES)}")


def family(key: str) -> "Family":
    """The family ``key`` (torch-free)."""
    _check(key)
    return importlib.import_module(f"{__name__}.{key}").FAMILY


def worker_class(key: str) -> "type[Worker]":
    """The worker of family ``key`` (imported in worker processes: it may import torch)."""
    _check(key)
    return importlib.import_module(f"{__name__}.{key}.worker").Worker
