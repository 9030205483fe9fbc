"""``numabench publish`` as a subcommand: its arguments and what it does (numabench/cli.py
registers it with one call, so the subcommand lives with the package)."""
from __future__ import annotations

import argparse
import sys
import time

from numabench.errors import UsageError
from numabench.gate.rule import DEFAULT_THRESHOLD


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help="a self-contained static site of saved runs (per hardware key and family: "
                                       "histories with bands and change points, gate verdicts, NUMA policies, "
                                       "weighted-interleave model and advisor, the machine of each run)")
    p.add_argument("sources", nargs="*", help="run files and folders of saved runs (e.g. baselines results/ci/run.json); "
                                              "A/B runs (numabench ab --json FILE) each get a page of their own")
    p.add_argument("--out", required=True, help="the site's folder (must be empty or new; --force replaces it)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    p.add_argument("--git", action="store_true", help="also every run ever committed under each folder named")
    p.add_argument("--fleet", "--index", dest="fleet", default=None, metavar="URL",
                   help="also the runs in a fleet's store: its PostgreSQL database (postgresql://USER@HOST/DB) or "
                        "an index (http(s)://HOST:PORT/INDEX)")
    p.add_argument("--key", action="append", default=None, help="with --fleet: only this hardware key (repeatable)")
    p.add_argument("--threshold", default=DEFAULT_THRESHOLD, help="change point: beyond the previous run's band by "
                                                                  "more than this")
    p.set_defaults(func=cmd_publish)


def cmd_publish(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from numabench.publish.build import build_site
    from numabench.publish.source import ab_from_paths, dedupe, runs_from_git, runs_from_fleet, runs_from_paths

    if not ns.sources and not ns.fleet:
        raise UsageError("publish: name run files or folders (e.g. baselines), A/B runs (numabench ab --json), or "
                         "--fleet URL")
    t0 = time.monotonic()
    run_sources, ab = ab_from_paths(ns.sources)
    runs = runs_from_paths(run_sources) if run_sources else []
    if ns.git:
        for s in ns.sources:
            if Path(s).is_dir():
                runs += runs_from_git(s)
    if ns.fleet:
        runs += runs_from_fleet(ns.fleet, ns.key)
    shown = []
    if ns.fleet:
        from numabench.redact import redact_url

        shown = [redact_url(ns.fleet)]  # no password on the pages
    site = build_site(dedupe(runs), ns.out, source=" ".join(ns.sources + shown),
                      threshold=ns.threshold, force=ns.force, ab=ab)
    ab_text = f", {site.ab_runs} A/B run(s)" if site.ab_runs else ""
    print(f"wrote {len(site.pages)} pages for {site.keys} hardware key(s), {site.runs} run(s){ab_text} in {site.out} "
          f"({time.monotonic() - t0:.1f} s); open {site.out / 'index.html'}", file=sys.stdout)
    return 0
