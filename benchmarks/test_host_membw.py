"""host_membw: STREAM copy/triad from each CPU node to policy-placed memory (the MLC-style matrix)."""
FAMILY_KEY = "host_membw"


def test_host_membw(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
