"""The regression gate as plain code: no pytest, no fixtures/ (which only wires it to a session).

- invocations.py: an entry's invocation medians, the unit of noise the gate judges by
- band.py: a baseline entry's band, its threshold and status (gated, insufficient, informational)
- rule.py: the verdicts (slower, faster, same, ...) of one entry and of two runs, against a baseline
- pairs.py: the same-runner A/B's rule: one entry judged by its pair ratios head/base
- confirm.py: the session's gate: which entries re-run as confirmation, how the verdicts combine
- pool.py: a run's invocations pooled into one entry with its invocation medians
- formats.py: the output formats of every verdict (text, Markdown, GitHub annotations, JSON), one registry
- table.py: the baseline gate's verdicts in those formats, and extra_info["gate"]
"""
