"""Numbers as a user writes them on a command line: ASCII digits only.

Python's ``int()`` and ``float()`` also take other scripts' digits (``'٠'``, ``'０'``),
underscores (``'1_0'``) and, for floats, ``inf``/``nan``: in a policy, a size or an
option such a value is a typo or a look-alike, and would run as a case other than the
one the user read. These take only what the error messages say is allowed, and raise
ValueError, as ``int()`` does, for anything else.
"""
from __future__ import annotations

import re

_BLANKS = " \t\r\n\f\v"  # ASCII white space, which int() would strip too
_INTEGER = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def integer(text: str) -> int:
    """``text`` as an int: an optional ``-`` and ASCII digits, blanks around allowed."""
    t = text.strip(_BLANKS)
    if not _INTEGER.fullmatch(t):
        raise ValueError(f"not an integer in ASCII digits: {text!r}")
    return int(t)


def decimal(text: str) -> float:
    """``text`` as a float: an optional ``-``, ASCII digits with an optional fraction and
    exponent (``12.8``, ``1e6``), blanks around allowed; no inf, nan or underscores."""
    t = text.strip(_BLANKS)
    if not _DECIMAL.fullmatch(t):
        raise ValueError(f"not a decimal number in ASCII digits: {text!r}")
    return float(t)
