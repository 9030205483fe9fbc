"""How the site names things other than runs: hardware keys, file-safe slugs, and an entry's
axes as text (``policy=bind:0 numel=268M``)."""
from __future__ import annotations

import re

from numabench.cases import format_size
from numabench.families import BASE_AXES, family_extra_axes

UNKNOWN_KEY = "unknown-hardware-key"
# Axes that vary inside one chart or table group; the rest name the group.
SERIES_AXES = ("policy", "numel")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def hardware_key(run: dict) -> str:
    return ((run.get("machine_info") or {}).get("numabench") or {}).get("hardware_key") or UNKNOWN_KEY


def entry_axes(extra: dict) -> dict:
    """The entry's axes (its family's own included; an unknown family: tables' fallback axes)."""
    extra_axes = family_extra_axes(extra.get("family", ""))
    return {k: extra[k] for k in (*BASE_AXES, *extra_axes) if k in extra and k != "phase"}


def axes_text(axes: dict, keys) -> str:
    return " ".join(f"{k}={format_size(axes[k]) if k == 'numel' else axes[k]}" for k in keys if k in axes)
