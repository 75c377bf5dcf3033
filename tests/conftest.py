"""Shared fixtures.

Unit tests use :func:`ambiqa.testing.scripted_lm` and :class:`InMemoryRetriever` (fast,
exact). Integration tests (marked ``integration``) use the real embedded 0.5B model and a real
ColBERT index over a slice of the shared corpus; both are built once per session into a
temporary cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AMBIQA_DATA", ROOT.parent / "shared" / "data"))
# Keep the model, DSPy and extension caches of a test run together and reusable across runs.
os.environ.setdefault("AMBIQA_CACHE", str(ROOT / ".ambiqa-cache"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def corpus_passages(shared_data):
    from ambiqa.types import Passage

    out = []
    with open(shared_data / "corpus" / "wiki_passages.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            out.append(Passage(d["id"], d["title"], d["text"]))
    return out


@pytest.fixture()
def memory_retriever(corpus_passages):
    from ambiqa.retrieval.base import InMemoryRetriever

    return InMemoryRetriever(corpus_passages)


@pytest.fixture(scope="session")
def embedded_lm():
    """The real embedded 0.5B model (the fast one), uncached so each test really calls it."""
    from ambiqa.lm import FAST_MODEL, make_lm

    try:
        return make_lm(f"embedded:{FAST_MODEL}", cache=False)
    except Exception as exc:  # model parts not installed
        pytest.skip(f"embedded model unavailable: {exc}")


@pytest.fixture()
def use_lm():
    """``use_lm(lm)`` makes ``lm`` the active DSPy LM (with ambiqa tracing) for one test."""
    import dspy

    from ambiqa.lm import trace_callback
    from ambiqa.tracing import UsageTap

    contexts = []

    def _use(lm):
        ctx = dspy.context(lm=lm, callbacks=[trace_callback()], usage_tracker=UsageTap())
        ctx.__enter__()
        contexts.append(ctx)
        return lm

    yield _use
    for ctx in reversed(contexts):
        ctx.__exit__(None, None, None)


@pytest.fixture(scope="session")
def colbert_retriever(tmp_path_factory, corpus_passages):
    """A real ColBERT index over a slice of the shared corpus (built once per session).

    The slice holds the first 1,500 corpus passages plus every NQ-oracle gold passage that
    the integration tests ask about, so retrieval is non-trivial but quick to index.
    """
    try:
        from ambiqa.retrieval.colbert import ColBERTRetriever
    except ImportError as exc:
        pytest.skip(f"ColBERT retriever unavailable: {exc}")
    root = Path(os.environ["AMBIQA_CACHE"]) / "test-indexes"
    name = "corpus-slice-1500"
    try:
        return ColBERTRetriever.load(root, name)
    except Exception:
        return ColBERTRetriever.build(corpus_passages[:1500], index_root=root, name=name)
