"""Benchmark workers: processes re-exec'd under a policy, driven over pipes.

``run`` runs one case end to end (weights, launch, placement check, timed
rounds); ``group`` is the parent side (spawn, lockstep, time-outs, teardown);
``main`` the worker side (protocol loop, fault points); ``protocol`` the line
format; ``forks/`` the fork server a side's workers are forked from (``--numa-forkserver``). What the families' workers use inside a rank (placed buffers, the gate's slowdown
pad) is numabench.toolkit, below them. Each family's per-rank work is its ``numabench/families/<key>/worker.py``, which
imports torch only if it needs it.
"""
