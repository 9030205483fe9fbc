"""broadcast: one policy-placed host tensor to every GPU (needs >= 2 GPUs), one process driving all.

Methods (one entry each): pageable (copies in turn), pinned (pinned source,
non_blocking, a stream per GPU), pipelined (chunks through double-buffered
pinned staging to all GPUs), relay (chunks to GPU 0, then GPU 0 to its peers).
"""
FAMILY_KEY = "broadcast"


def test_broadcast(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
