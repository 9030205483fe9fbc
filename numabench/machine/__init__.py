"""The machine: NUMA topology, GPUs, kernel and numactl capabilities, the hardware key."""
