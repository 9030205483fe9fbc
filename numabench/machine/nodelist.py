"""Linux cpulist/nodelist strings ("0-3,8,10-11") to and from integer tuples."""
from __future__ import annotations

from typing import Iterable

from numabench.errors import UsageError
from numabench.numerals import integer


def parse_list(text: str, what: str = "list", *, unique: bool = False, most: int | None = None) -> tuple[int, ...]:
    """Parse a kernel-style list such as ``0-3,8``; '' gives (). ``unique``: a number named twice
    is an error (a user's list, where ``0,0`` is a typo, not the kernel's). ``most``: the largest
    number allowed (checked before a range is spelled out: ``0-99999999`` is refused at once)."""
    text = text.strip()
    if not text:
        return ()
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a, b = (integer(lo), integer(hi)) if sep else (integer(part), integer(part))
            if a > b:
                raise ValueError
        except ValueError:
            raise UsageError(
                f"bad {what} entry {part!r} in {text!r}: allowed are numbers (ASCII digits 0-9) and ranges like 0-3, "
                "comma separated"
            ) from None
        if most is not None and b > most:
            raise UsageError(f"{what} {part} in {text!r}: allowed {what} ids 0..{most}")
        out.extend(range(a, b + 1))
        if out and out[-1] < 0:
            raise UsageError(f"bad {what} entry {part!r} in {text!r}: numbers must be >= 0")
    if unique and len(set(out)) != len(out):
        repeated = sorted({n for n in out if out.count(n) > 1})
        raise UsageError(f"{what} {', '.join(map(str, repeated))} named twice in {text!r}: allowed each once")
    return tuple(sorted(set(out)))


def format_list(values: Iterable[int]) -> str:
    """Inverse of parse_list, compressing runs: (0,1,2,5) -> '0-2,5'."""
    vals = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        parts.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(parts)
