"""Compiled kernels (csrc/) and how they are built; torch is imported lazily."""
