"""Benchmarks (``make bench``): timings written to ``reports/benchmarks/``."""
