"""touch: memset bandwidth into a host buffer placed by each NUMA policy (runs anywhere)."""
FAMILY_KEY = "touch"


def test_touch(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
