"""pinned_alloc: the cost of making N bytes of pinned host memory, and the bytes it really takes.

Phases alloc (allocate + touch every page) and free, per allocator (register:
mmap + first touch + cudaHostRegister; torch: pin_memory through the caching
host allocator; cudahostalloc: exact-size cudaHostAlloc). extra_info carries
requested vs reserved bytes and whether the allocator honoured the policy.
"""
FAMILY_KEY = "pinned_alloc"


def test_pinned_alloc(benchmark, numa_phase, numa_case, numa_runner):
    numa_runner.record(benchmark, numa_case, numa_phase)
