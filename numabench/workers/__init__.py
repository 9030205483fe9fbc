"""Benchmark workers: processes re-exec'd under a policy, driven over pipes.

``group`` is the parent side (spawn, lockstep, timeouts, teardown); ``main``
the worker side (protocol loop); each family's per-rank work lives in its own
module here and imports torch only if it needs it.
"""
