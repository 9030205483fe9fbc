"""cpu_adam: Adam on the CPU over NUMA-placed host state (ours, torch fused/foreach, DeepSpeed)."""
FAMILY_KEY = "cpu_adam"


def test_cpu_adam(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
