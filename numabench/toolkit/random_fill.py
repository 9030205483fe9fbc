"""Filling large host tensors with seeded random values on several threads.

torch's CPU generators fill one element after another: ``normal_`` over a 134M-element state
takes about half a second on one core, and a CPU Adam worker fills four of them in every pair of
an A/B run. Here each chunk of CHUNK elements draws from its own generator, seeded by the seed
and the chunk's index, and chunks are filled on a pool of threads (torch lets go of the GIL):
the values depend on the seed alone, never on the number of threads.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

CHUNK = 1 << 22  # elements a generator fills: values are the same for any thread count
DISTRIBUTIONS = ("normal", "uniform")


def fill_random_(tensor: "object", distribution: str, a: float, b: float, seed: int, threads: int) -> "object":
    """Fill contiguous ``tensor`` in place: ``normal`` (mean ``a``, standard deviation ``b``) or
    ``uniform`` (in [a, b)), chunk i from a generator seeded by (``seed``, i), on ``threads``
    threads. Returns ``tensor``."""
    import torch

    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}: allowed {', '.join(DISTRIBUTIONS)}")
    if not tensor.is_contiguous():
        raise ValueError("fill_random_ needs a contiguous tensor")
    if not 0 <= seed < 1 << 32:
        raise ValueError(f"seed {seed}: allowed 0 to 2**32 - 1")
    flat = tensor.view(-1)

    def fill(i: int) -> None:
        part = flat[i * CHUNK:(i + 1) * CHUNK]
        gen = torch.Generator().manual_seed((seed << 24) + i)
        if distribution == "normal":
            part.normal_(a, b, generator=gen)
        else:
            part.uniform_(a, b, generator=gen)

    chunks = range(-(-flat.numel() // CHUNK))
    if threads <= 1 or len(chunks) <= 1:
        for i in chunks:
            fill(i)
    else:
        with ThreadPoolExecutor(max_workers=min(threads, len(chunks)), thread_name_prefix="numabench-fill") as pool:
            list(pool.map(fill, chunks))  # list(): an error in a chunk is raised here
    return tensor
