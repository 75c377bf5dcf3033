"""Fixtures for the tests of the benchmark scripts (``benchmarks/``, run as
``python -m benchmarks.NAME``)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def benchmark_script() -> Callable[[str], ModuleType]:
    """``benchmark_script("verifier")`` loads a fresh copy of ``benchmarks/verifier.py`` (a
    copy per test, so module-level state never leaks between tests)."""

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCHMARKS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while executing it
        spec.loader.exec_module(mod)
        return mod

    return load
