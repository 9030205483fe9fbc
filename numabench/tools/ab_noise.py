"""``python -m numabench.tools.ab_noise SESSION [SESSION ...]``: where each entry's spread in a
kept A/B session comes from, within a pair (round to round) or between pairs, the
resolution other numbers of pairs and rounds would give, and per worker run the cheapest pairs x
rounds that bring all its entries to the threshold (1%) with the measuring that would take
(numabench.ab.noise), and each pair's huge-page shares beside its ratio (numabench.ab.suspects)."""
from __future__ import annotations

import sys

from numabench.ab.noise import cost_table, session_run_costs, session_spreads, table
from numabench.ab.settings import DEFAULTS
from numabench.ab.suspects import huge_page_links, link_table
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
            run = storage.load_run(path)
            spreads = session_spreads(run)
        except (UsageError, ValueError) as e:
            print(f"ab_noise: {path}: {e}", file=sys.stderr)
            return 2
        print(f"{path}: {len(spreads)} entries with both sides' rounds")
        print("\n".join(table(spreads)))
        costs = session_run_costs(run, spreads)
        if costs:
            print(f"\nwhat a resolution of {DEFAULTS.threshold:g}% would cost each worker run (an estimate: a pair's "
                  "stepping from its head's wall per step request, the rest of its median pair wall fixed per pair, "
                  "further passes' start-up left out)")
            print("\n".join(cost_table(costs, DEFAULTS.threshold)))
        links = huge_page_links(run)
        if links:
            print("\neach pair's buffers in transparent huge pages, per side, against its ratio (numabench.ab.suspects: "
                  "a suspect of the between-pair spread; r: Pearson's, over the pairs, of head - base share with the "
                  "log pair ratio)")
            print("\n".join(link_table(links)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
