"""adam_offload: one optimizer step on host-resident, NUMA-placed state (H2D, fused Adam on the GPU, D2H).

Each phase is its own benchmark entry (h2d, compute, d2h, step), max over the
concurrent ranks per round, CUDA-event timed inside the workers.
"""
FAMILY_KEY = "adam_offload"


def test_adam_offload(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
