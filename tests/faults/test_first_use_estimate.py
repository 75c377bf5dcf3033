"""Silent first-use waits, the index side (issue 42): the ColBERT build estimate said "~0 s" for
a build that took 39 s (the estimate had no fixed start-up cost), and nothing said that the
first build on a machine also compiles colbert-ai's C++ extensions. No colbert-ai needed: the
estimate and the start message are checked without building (a multi-process build's
message, which installs no colbert-ai hooks)."""

from __future__ import annotations

import io

import pytest

pytestmark = pytest.mark.fault("Retriever / index faults")


@pytest.mark.parametrize("n", [1, 12, 40, 300])
def test_a_small_build_is_never_estimated_at_zero_seconds(n, record_property):
    from ambiqa.retrieval.colbert.progress import (
        STARTUP_SECONDS,
        estimate_build_seconds,
        fmt_seconds,
    )

    record_property("cases", 1)
    est = estimate_build_seconds(n)
    assert est >= STARTUP_SECONDS >= 30
    assert fmt_seconds(est) not in ("0 s", "1 s")
    assert estimate_build_seconds(10 * n) > est  # still grows with the corpus


def _start_message(n: int) -> str:
    from ambiqa.retrieval.colbert.progress import BuildProgress

    stream = io.StringIO()
    with BuildProgress(n, nranks=2, stream=stream):
        pass
    return " ".join(stream.getvalue().split())


def test_the_build_message_says_when_extensions_will_compile(tmp_path, monkeypatch):
    ext = tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    text = _start_message(20)
    assert "rough estimate ~" in text and "~0 s" not in text
    assert "compile colbert-ai's C++ extensions" in text  # none built yet: said up front
    (ext / "segmented_maxsim_cpp").mkdir(parents=True)
    (ext / "segmented_maxsim_cpp" / "segmented_maxsim_cpp.so").write_bytes(b"")
    assert "compile colbert-ai's C++ extensions" not in _start_message(20)
