"""Benchmarks: each is a module, run from the repository root as ``python -m benchmarks.NAME``."""
