"""Benchmarks behind ``innet bench``: arbiter, reduction unit, GPU model, co-simulation, soak
and numerics. Every ratio is measured in the same run."""
