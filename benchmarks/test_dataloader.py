"""dataloader: DataLoader throughput into the GPU (or host memory), loader workers bound or unbound (seed 003)."""
FAMILY_KEY = "dataloader"


def test_dataloader(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
