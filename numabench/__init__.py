"""numabench: NUMA-aware GPU offload benchmarks.

The core (topology, policy, launch, placement, weights) imports no torch so it
runs on any Linux machine, inside a small VM too. Families that need torch
import it in their worker modules only.
"""
__version__ = "0.1.0"
