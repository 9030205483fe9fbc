"""Stand-alone measurement tools built on the families (bandwidth matrices, probes, speed tables)."""
