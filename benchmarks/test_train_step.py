"""train_step: a small GPT's training step under DDP / FSDP / FSDP + CPU offload, one rank per GPU."""
FAMILY_KEY = "train_step"


def test_train_step(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
