"""transfer: H2D, D2H and bidirectional copies between policy-placed host memory and each GPU.

Each phase (h2d, d2h, bidir) is its own entry per memory kind (pinned,
pageable); with nprocess > 1 every GPU copies at once (max over ranks per
round, aggregate_GBps in extra_info).
"""
FAMILY_KEY = "transfer"


def test_transfer(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
