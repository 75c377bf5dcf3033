"""Re-ranking: SentenceBERT cosine over a candidate set, the re-ranking retriever wrapper, and
bad-input behaviour shared by the retrievers (empty corpus, empty text, duplicate ids, k larger
than the corpus, over-long queries)."""

from __future__ import annotations

import functools
import logging

import numpy as np
import pytest

from ambiqa.errors import ConfigError, DataError
from ambiqa.retrieval.base import InMemoryRetriever, Retriever, check_passages
from ambiqa.retrieval.bm25 import BM25Retriever
from ambiqa.retrieval.dense import DenseRetriever
from ambiqa.retrieval.rerank import RerankingRetriever, SentenceReranker
from ambiqa.testing import HashEncoder
from ambiqa.types import Passage

CORPUS = [
    Passage("p1", "Paris", "Paris is the capital and largest city of France."),
    Passage("p2", "Berlin", "Berlin is the capital of Germany."),
    Passage("p3", "Everest", "Mount Everest is the highest mountain on Earth."),
    Passage("p4", "Nile", "The Nile is a river in Africa."),
]


# Bag-of-words vectors over 512 hashed buckets (the corpus has no apostrophes).
BagEncoder = functools.partial(HashEncoder, 512, name="bag")


def test_sentence_reranker_orders_by_cosine_and_keeps_ties_stable():
    rr = SentenceReranker(BagEncoder())
    ranked = rr.rerank("highest mountain", CORPUS)
    assert ranked[0].id == "p3" and len(ranked) == 4
    assert [p.score for p in ranked] == sorted((p.score for p in ranked), reverse=True)
    assert [p.id for p in rr.rerank("highest mountain", CORPUS, k=2)] == [p.id for p in
                                                                         ranked[:2]]
    assert rr.rerank("x", []) == []
    # several queries: mean cosine (Diva's relevance to all interpretations)
    multi = rr.rerank(["capital of France", "river in Africa"], CORPUS, k=2)
    assert {p.id for p in multi} == {"p1", "p4"}
    with pytest.raises(ConfigError):
        rr.rerank("q", CORPUS, k=0)


def test_reranking_retriever_is_a_retriever_over_a_deeper_list():
    base = InMemoryRetriever(CORPUS)
    rr = RerankingRetriever(base, SentenceReranker(BagEncoder()), depth=4)
    assert isinstance(rr, Retriever)
    hits = rr.search("the capital city of France", 1)
    assert [p.id for p in hits] == ["p1"]
    assert rr.fingerprint.startswith("rerank(sbert:bag,4)[memory:")
    assert rr.batch_search(["Nile river"], 1)[0][0].id == "p4"
    assert rr.get("p2") == CORPUS[1]
    with pytest.raises(ConfigError):
        RerankingRetriever(base, SentenceReranker(BagEncoder()), depth=0)


@pytest.mark.parametrize("bad, match", [
    ([], "zero passages"),
    ([Passage("a", "T", "x"), Passage("a", "U", "y")], "duplicate passage id"),
    ([Passage("", "T", "x")], "empty id"),
    ([Passage("a", " ", "  ")], "neither title nor text"),
])
def test_bad_corpora_are_refused_by_every_builder(tmp_path, bad, match):
    with pytest.raises(DataError, match=match):
        check_passages(bad, "test")
    with pytest.raises(DataError, match=match):
        BM25Retriever.build(bad, tmp_path / "bm25")
    with pytest.raises(DataError, match=match):
        DenseRetriever.build(bad, tmp_path / "dense", encoder=BagEncoder())


def test_title_only_passage_is_kept_and_findable(tmp_path):
    corpus = CORPUS + [Passage("t", "Zanzibar archipelago", "")]
    bm25 = BM25Retriever.build(corpus, tmp_path / "bm25")
    assert bm25.search("Zanzibar", 1)[0].id == "t"


def test_k_larger_than_the_corpus_returns_every_passage(tmp_path):
    dense = DenseRetriever.build(CORPUS, tmp_path / "dense", encoder=BagEncoder())
    assert len(dense.search("capital", 50)) == len(CORPUS)
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    assert 0 < len(bm25.search("capital", 50)) <= len(CORPUS)  # zero-score passages dropped
    assert len(InMemoryRetriever(CORPUS).search("capital", 50)) == len(CORPUS)


def test_faiss_backend_equals_numpy(tmp_path):
    DenseRetriever.build(CORPUS, tmp_path / "dense", encoder=BagEncoder())
    exact = DenseRetriever.load(tmp_path / "dense", encoder=BagEncoder())
    viaf = DenseRetriever.load(tmp_path / "dense", encoder=BagEncoder(), backend="faiss")
    for q in ("capital of Germany", "mountain", "river"):
        a, b = exact.search(q, 3), viaf.search(q, 3)
        assert a[0].id == b[0].id  # the rest may tie at 0 and come in either order
        assert np.allclose([p.score for p in a], [p.score for p in b], atol=1e-5)
    assert viaf.batch_search(["river", "capital"], 2) == [viaf.search("river", 2),
                                                          viaf.search("capital", 2)]
    with pytest.raises(ConfigError, match="backend"):
        DenseRetriever.load(tmp_path / "dense", encoder=BagEncoder(), backend="annoy")


def test_dense_warns_on_queries_longer_than_the_encoder_reads(tmp_path, caplog):
    class Tok:
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": text.split()}

    class Model:
        tokenizer = Tok()
        max_seq_length = 8

    enc = BagEncoder()
    enc.model = Model()
    dense = DenseRetriever.build(CORPUS, tmp_path / "dense", encoder=enc)
    with caplog.at_level(logging.WARNING):
        dense.search("short query", 2)
        assert not caplog.records
        dense.search(" ".join(["word"] * 20), 2)
    assert "reads only the first 8" in caplog.text


def test_dense_counts_query_tokens_through_the_encoders_locked_counter(tmp_path, caplog):
    """The model's tokenizer is not thread-safe; the packaged encoder counts under its lock,
    so the retriever must use that counter and never the raw tokenizer beside it."""

    class RawTokenizer:
        def __call__(self, *a, **kw):
            raise AssertionError("the raw tokenizer was called outside the encoder's lock")

    class Model:
        tokenizer = RawTokenizer()
        max_seq_length = 8

    enc = BagEncoder()
    enc.model = Model()
    enc.max_tokens = 8
    counted: list[str] = []
    enc.token_count = lambda text: counted.append(text) or len(text.split())
    dense = DenseRetriever.build(CORPUS, tmp_path / "dense", encoder=enc)
    with caplog.at_level(logging.WARNING):
        dense.search(" ".join(["word"] * 20), 2)
        dense.batch_search(["short query"], 2)
    assert counted == [" ".join(["word"] * 20), "short query"]
    assert "reads only the first 8" in caplog.text
