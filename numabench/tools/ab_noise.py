"""``python -m numabench.tools.ab_noise SESSION [SESSION ...]``: where each entry's spread in a
kept A/B session comes from, within a pair (round to round) or between pairs, and the
resolution other numbers of pairs and rounds would give (numabench.ab.noise)."""
from __future__ import annotations

import sys

from numabench.ab.noise import session_spreads, table
from numabench.errors import UsageError
from numabench.results import storage


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths or any(p.startswith("-") for p in paths):
        print("usage: python -m numabench.tools.ab_noise SESSION [SESSION ...] (what numabench ab --session-json kept)",
              file=sys.stderr)
        return 2
    for path in paths:
        try:
            spreads = session_spreads(storage.load_run(path))
        except (UsageError, ValueError) as e:
            print(f"ab_noise: {path}: {e}", file=sys.stderr)
            return 2
        print(f"{path}: {len(spreads)} entries with both sides' rounds")
        print("\n".join(table(spreads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
