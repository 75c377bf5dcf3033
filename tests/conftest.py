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
def colbert_gold_questions(shared_data, corpus_passages):
    """Five NQ-oracle questions whose gold passage is in the corpus (matched by exact text).

    ``[(question, gold passage id)]``; the ColBERT test slice always contains these passages.
    """
    by_text = {(p.title, p.text): p.id for p in corpus_passages}
    found = []
    with open(shared_data / "nq" / "oracle.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            gold = d["ctxs"][0]
            pid = by_text.get((gold["title"], gold["text"]))
            if pid is not None:
                found.append((d["question"], pid))
            if len(found) == 5:
                break
    if len(found) < 5:
        pytest.skip("fewer than 5 NQ-oracle gold passages found in the corpus")
    return found


@pytest.fixture(scope="session")
def colbert_retriever(corpus_passages, colbert_gold_questions):
    """A real ColBERT index over a slice of the shared corpus (built once, kept in the cache).

    The slice holds the first 1,500 corpus passages plus the gold passages of
    ``colbert_gold_questions``, so retrieval is non-trivial but quick to index (~1 min on 2
    cores). A cached index is reused only if it was built from exactly this slice.
    """
    try:
        from ambiqa.retrieval.colbert import ColBERTRetriever
    except ImportError as exc:
        pytest.skip(f"ColBERT retriever unavailable: {exc}")
    from ambiqa.errors import RetrievalIndexError

    gold = {pid for _, pid in colbert_gold_questions}
    head = corpus_passages[:1500]
    in_head = {p.id for p in head}
    passages = head + [p for p in corpus_passages if p.id in gold and p.id not in in_head]
    root = Path(os.environ["AMBIQA_CACHE"]) / "test-indexes"
    name = "corpus-slice-1500-nq5"
    try:
        return ColBERTRetriever.load(root, name, corpus=passages)
    except RetrievalIndexError:
        return ColBERTRetriever.build(passages, index_root=root, name=name, progress=False)


@pytest.fixture()
def retriever(request, record_property):
    """The integration tests' retriever: the real ColBERT slice index when it can be built,
    else the token-overlap retriever (recorded in the test report, so a run says which)."""
    try:
        found = request.getfixturevalue("colbert_retriever")
        kind = "colbert"
    except pytest.skip.Exception:
        found = request.getfixturevalue("memory_retriever")
        kind = "memory (token overlap; ColBERT retriever unavailable)"
    record_property("retriever", kind)
    print(f"retriever: {kind}")
    return found
