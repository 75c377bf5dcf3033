"""Real colbert-ai training on CPU for a few steps (tiny data), resuming after a timeout, and
ColBERT re-ranking with the result and with the test index's checkpoint."""

from __future__ import annotations

import json

import pytest

from ambiqa.retrieval.triples import TrainingData, colbert_text
from ambiqa.types import Passage

pytestmark = pytest.mark.integration

TEXTS = [
    ("Eiffel Tower", "The Eiffel Tower in Paris was completed in 1889."),
    ("Tower Bridge", "Tower Bridge in London was completed in 1894."),
    ("Colosseum", "The Colosseum in Rome was completed in 80 AD."),
    ("Taj Mahal", "The Taj Mahal in Agra was completed around 1653."),
]
QUERIES = ["When was the Eiffel Tower completed?", "When was Tower Bridge completed?",
           "When was the Colosseum completed?", "When was the Taj Mahal completed?"]


@pytest.fixture()
def tiny_data():
    collection = [colbert_text(t, x) for t, x in TEXTS]
    triples = [[i, i, (i + 1) % 4] for i in range(4)] + [[i, i, (i + 2) % 4] for i in range(4)]
    return TrainingData(QUERIES, collection, triples, {"tiny": True})


def test_train_a_few_steps_resume_after_timeout_and_load(tmp_path, tiny_data):
    from ambiqa.retrieval.checkpoint import checkpoint_info
    from ambiqa.retrieval.rerank import ColBERTReranker
    from ambiqa.retrieval.training import TrainingTimeout, train_colbert

    out = tmp_path / "ckpt"
    with pytest.raises(TrainingTimeout, match="resume|again"):
        train_colbert(out, data=tiny_data, steps=3, bsize=2, save_every=1, timeout_s=0,
                      progress=False)
    state = json.loads((tmp_path / "ckpt.work" / "state.json").read_text())
    assert state["steps_done"] == 1 and not out.exists()
    path = train_colbert(out, data=tiny_data, steps=3, bsize=2, save_every=1, progress=False)
    assert path == out
    info = checkpoint_info(out)
    assert info["kind"] == "trained" and info["training"]["steps_done"] == 3
    assert info["training"]["triples"] == {"tiny": True}
    assert not list(out.glob("*.bin")) and not list(out.glob("optimizer.*"))
    meta = json.loads((out / "artifact.metadata").read_text())
    assert meta["checkpoint"] == str(out) and "model_name" not in meta
    # the trained checkpoint loads offline and scores
    rr = ColBERTReranker(checkpoint=out)
    docs = [Passage(str(i), t, x) for i, (t, x) in enumerate(TEXTS)]
    ranked = rr.rerank("When was the Colosseum in Rome completed?", docs)
    assert ranked[0].id == "2"


def test_colbert_reranks_bm25_candidates(colbert_retriever, colbert_gold_questions,
                                         corpus_passages, tmp_path):
    from ambiqa.retrieval.bm25 import BM25Retriever
    from ambiqa.retrieval.rerank import ColBERTReranker, RerankingRetriever

    bm25 = BM25Retriever.build(list(colbert_retriever._passages), tmp_path / "bm25")
    rr = RerankingRetriever(bm25, ColBERTReranker(colbert_retriever), depth=20)
    found = 0
    for question, pid in colbert_gold_questions:
        hits = rr.search(question, 5)
        assert len(hits) == 5
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        found += pid in {h.id for h in hits}
    assert found >= 4
    # exact MaxSim of the reranker agrees with the index's own ranking at the top
    q = colbert_gold_questions[0][0]
    top = colbert_retriever.search(q, 3)
    again = ColBERTReranker(colbert_retriever).rerank(q, top)
    assert again[0].id == top[0].id
