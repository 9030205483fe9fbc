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

import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from numabench.families.base import Family, Worker

BASE_AXES = ("nprocess", "numel", "dtype", "policy")  # every case has these
# a family's extra axes where its module cannot say (e.g. an imported seed CSV's family)
FALLBACK_EXTRA_AXES = ("impl", "schedule", "kernel")
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


@functools.lru_cache(maxsize=None)
def family_extra_axes(key: str) -> tuple[str, ...]:
    """The family's extra axes (impl, method, binding, ...) in the order it declares them, then its
    knobs (chunk_numel, place, ...: an entry carries one where it is not at auto)."""
    try:
        fam = family(key)
    except (KeyError, ImportError):
        return FALLBACK_EXTRA_AXES
    return tuple(fam.extra_axes) + tuple(fam.knobs)


@functools.lru_cache(maxsize=None)
def family_axes(key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The axes every entry of family ``key`` has (the base ones) and those it may carry (the
    family's own and its knobs: an imported seed CSV has fewer; a knob at auto is left out)."""
    return BASE_AXES, tuple(a for a in family_extra_axes(key) if a not in BASE_AXES)


def family_knobs(key: str) -> tuple[str, ...]:
    """The family's knobs: an entry without one ran it at ``auto`` (left out of ids and entries)."""
    try:
        return tuple(family(key).knobs)
    except (KeyError, ImportError):
        return ()
