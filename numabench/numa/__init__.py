"""NUMA placement: policies, the mempolicy syscalls, launching under a policy, checking
where pages landed, weighted-interleave weights."""
