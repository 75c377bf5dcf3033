"""test_compare.py also tests benchmarks/compare_methods.py and benchmarks/render.py; the
fixture that loads a benchmark script lives with the other benchmark tests."""

from __future__ import annotations

from tests.benchmarks.conftest import benchmark_script  # noqa: F401  (a pytest fixture)
