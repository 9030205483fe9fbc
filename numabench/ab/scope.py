"""Which families a change touches, from the diff of its two revisions: what the pull-request
gate runs at the ``ci`` tier's sizes instead of the ``smoke`` slice (``numabench ab --scope
diff``, the default).

A family's own code is its folder (numabench/families/KEY/), its benchmark module
(benchmarks/test_KEY.py) and the sources in csrc/ of the kernels its workers load (a header there
is every kernel's). Where a family's changed paths are all kernel sources, only its variants that
load one of the changed kernels run (a torch or DeepSpeed reference beside them runs none of the
changed code). Code every family runs (numabench/numa/, workers/, toolkit/, kernels/,
machine/, the families' shared modules, the case, reply and tier modules, fixtures/, conftest.py,
pytest.ini, pyproject.toml) touches them all: the whole ``ci`` tier runs. What no worker run
executes (the A/B and the gate, reports, the site, tools, the CLI, docs/, tests/, .ci/, baselines)
touches none. Plain code: the paths in, the scope and why out.
"""
from __future__ import annotations

import importlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Sequence

from numabench.errors import UsageError

# code every family's worker runs or is collected by: a change there is a change to every family
SHARED = ("numabench/numa/", "numabench/workers/", "numabench/toolkit/", "numabench/kernels/", "numabench/machine/",
          "numabench/families/", "numabench/cases.py", "numabench/replies.py", "numabench/tiers.py",
          "numabench/faults.py", "numabench/interrupts.py", "numabench/errors.py", "numabench/atomic.py",
          "numabench/numerals.py", "numabench/__init__.py", "fixtures/", "conftest.py", "pytest.ini", "pyproject.toml",
          "benchmarks/conftest.py", "benchmarks/__init__.py")
HEADERS = (".h", ".cuh", ".hpp")  # in csrc/: compiled into every kernel


@dataclass(frozen=True)
class Scope:
    """Which families run their ``ci`` slice and why: ``whole`` (shared code changed: every
    family, ``shared`` the paths that say so), else ``families`` (key -> its changed paths)."""
    whole: bool = False
    families: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    shared: tuple[str, ...] = ()
    others: int = 0  # changed paths that touch no family
    # a family whose changed paths are all csrc/ sources -> the kernels compiled from them it loads:
    # only its variants that load one of these run (--numa-family-kernels)
    kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def pytest_args(self, tier: str) -> list[str]:
        """What the selection's ``--numa-tier=TIER`` becomes: the whole ci tier, or TIER with the
        touched families at ci (``--numa-family-tier``); nothing where TIER already takes as much."""
        if tier != "smoke":
            return []
        if self.whole:
            return ["--numa-tier=ci"]
        return [f"--numa-family-tier={key}=ci" for key in sorted(self.families)] + [
            f"--numa-family-kernels={key}={','.join(kernels)}" for key, kernels in sorted(self.kernels.items())]

    def lines(self, tier: str) -> list[str]:
        """The selection and why, for the progress and the summary."""
        if tier != "smoke":
            return [f"scope: the {tier} tier as given, every family"]
        if self.whole:
            shown = ", ".join(self.shared[:5]) + (", ..." if len(self.shared) > 5 else "")
            return [f"scope: the whole ci tier: code every family runs changed ({shown})"]
        if not self.families and not self.others:
            return ["scope: the smoke tier: no path differs between base and head"]
        if not self.families:
            return [f"scope: the smoke tier: no family's own code changed ({self.others} changed paths touch none)"]
        out = [f"scope: the ci tier of {', '.join(sorted(self.families))}, whose own code changed; the smoke tier "
               "of the others"]
        out += [f"scope: {key}: {', '.join(paths[:5])}{', ...' if len(paths) > 5 else ''}"
                + (f" (kernel sources alone: only its variants that load {', '.join(self.kernels[key])})"
                   if key in self.kernels else "")
                for key, paths in sorted(self.families.items())]
        return out

    def to_json(self) -> dict:
        return {"whole": self.whole, "families": {k: list(v) for k, v in sorted(self.families.items())},
                "shared": list(self.shared), "others": self.others,
                "kernels": {k: list(v) for k, v in sorted(self.kernels.items())}}


def kernel_sources(kernels: Iterable[str]) -> dict[str, set[str]]:
    """csrc/ source file -> the kernels compiled from it (numabench.kernels.built.MODULES' BUILDs)."""
    from numabench.kernels.built import MODULES

    out: dict[str, set[str]] = {}
    for kernel in kernels:
        for source in importlib.import_module(MODULES[kernel]).BUILD["sources"]:
            out.setdefault(source, set()).add(kernel)
    return out


def scope_of(paths: Iterable[str], family_kernels: Mapping[str, Sequence[str]]) -> Scope:
    """The scope of a change to ``paths`` (repository-relative, posix) given each family's kernels."""
    sources = kernel_sources({k for ks in family_kernels.values() for k in ks})
    families: dict[str, list[str]] = {}
    shared: list[str] = []
    others = 0
    for path in sorted(set(paths)):
        touched = _families_of(path, family_kernels, sources)
        if touched is None:
            shared.append(path)
        elif touched:
            for key in touched:
                families.setdefault(key, []).append(path)
        else:
            others += 1
    kernels = {}
    for key, changed in families.items():
        loaded = _kernels_changed(changed, family_kernels[key], sources)
        if loaded is not None:
            kernels[key] = loaded
    return Scope(bool(shared), {k: tuple(v) for k, v in families.items()}, tuple(shared), others, kernels)


def _kernels_changed(paths: Sequence[str], kernels: Sequence[str],
                     sources: Mapping[str, set[str]]) -> tuple[str, ...] | None:
    """Which of a family's ``kernels`` its changed ``paths`` change, where those are all csrc/
    files (a header: every one of them); None where any is other code of the family's."""
    changed: set[str] = set()
    for path in paths:
        if PurePosixPath(path).parts[:1] != ("csrc",):
            return None
        from_it = _csrc_kernels(path, sources)
        changed |= set(kernels) if from_it is None else from_it
    return tuple(k for k in kernels if k in changed)


def _csrc_kernels(path: str, sources: Mapping[str, set[str]]) -> set[str] | None:
    """The kernels compiled from csrc/ file ``path`` (None: a header, compiled into every kernel)."""
    if path.endswith(HEADERS):
        return None
    return sources.get(PurePosixPath(*PurePosixPath(path).parts[1:]).as_posix(), set())


def _families_of(path: str, family_kernels: Mapping[str, Sequence[str]],
                 sources: Mapping[str, set[str]]) -> list[str] | None:
    """The families ``path`` is the own code of ([] none; None: every family's)."""
    parts = PurePosixPath(path).parts
    if len(parts) >= 3 and parts[:2] == ("numabench", "families") and parts[2] in family_kernels:
        return [parts[2]]
    if len(parts) == 2 and parts[0] == "benchmarks" and parts[1].startswith("test_") and parts[1].endswith(".py"):
        key = parts[1][len("test_"):-len(".py")]
        if key in family_kernels:
            return [key]
    if parts and parts[0] == "csrc":
        kernels = _csrc_kernels(path, sources)
        return sorted(k for k, ks in family_kernels.items() if ks and (kernels is None or kernels & set(ks)))
    if any(path == s or (s.endswith("/") and path.startswith(s)) for s in SHARED):
        return None
    return []


def changed_paths(repo: Path, base: str, head: str | None) -> list[str]:
    """The paths that differ between revisions ``base`` and ``head`` of the checkout at ``repo``
    (None: its working tree, uncommitted and untracked files included)."""
    def git(*args: str) -> list[str]:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
        return [ln for ln in proc.stdout.splitlines() if ln]
    if head is not None:
        return git("diff", "--name-only", base, head, "--")
    return git("diff", "--name-only", base, "--") + git("ls-files", "--others", "--exclude-standard")


def family_kernels() -> dict[str, tuple[str, ...]]:
    """Each family's kernels (torch-free)."""
    from numabench.families import FAMILIES, family

    return {key: tuple(family(key).kernels) for key in FAMILIES}


def given_tier(pytest_args: Sequence[str], default: str) -> str:
    """The ``--numa-tier`` the selection gives (the last one), else ``default``."""
    tier = default
    for i, arg in enumerate(pytest_args):
        if arg.startswith("--numa-tier="):
            tier = arg.split("=", 1)[1]
        elif arg == "--numa-tier" and i + 1 < len(pytest_args):
            tier = pytest_args[i + 1]
    return tier
