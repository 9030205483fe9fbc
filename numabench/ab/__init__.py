"""The same-runner A/B (``numabench ab``): two revisions measured on this machine, now.

- run.py: the whole A/B: checkouts, builds, the sessions, every entry judged (run_ab)
- passes.py: pair p of every worker run in a session of its own; further and confirming passes
- budget.py: which worker runs a time budget's further pairs go to
- session.py: a session's JSON read back as both sides' pairs
- rejudge.py: a kept session judged again, nothing measured
- formats.py: an A/B run as text, Markdown, GitHub annotations and JSON (gate/formats.py's registry)
- plan.py: what an A/B of a selection will cost, before it runs
- settings.py: every setting of an A/B, declared once (numabench ab's options, the session's --numa-ab)
- extend.py: which worker runs take further and confirming pairs
- scope.py: which families a change touches (--scope diff)
- noise.py: where an entry's spread comes from, within a pair or between pairs

The rule that judges an entry's pairs is numabench.gate.pairs, beside the baseline's rule.
"""
