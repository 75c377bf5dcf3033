"""BM25 (bm25s) and dense (MiniLM) retrievers: search, persistence without pickles, errors."""

from __future__ import annotations

import json
import pickle
import threading

import numpy as np
import pytest

from ambiqa.errors import ConfigError, DataError, RetrievalIndexError
from ambiqa.retrieval.base import Retriever
from ambiqa.retrieval.bm25 import BM25Retriever
from ambiqa.retrieval.dense import DenseRetriever
from ambiqa.testing import HashEncoder
from ambiqa.tracing import track
from ambiqa.types import Passage

CORPUS = [
    Passage("p1", "Paris", "Paris is the capital and largest city of France."),
    Passage("p2", "Berlin", "Berlin is the capital of Germany and its largest city."),
    Passage("p3", "Mount Everest", "Mount Everest is Earth's highest mountain above sea level."),
    Passage("p4", "Amazon River", "The Amazon is the largest river by discharge of water."),
    Passage("p5", "Marie Curie", "Marie Curie was a physicist who won two Nobel Prizes."),
    Passage("p6", "Python", "Python is a programming language created by Guido van Rossum."),
    Passage("p7", "Rome", "Rome is the capital city of Italy."),
    Passage("p8", "Nile", "The Nile is a major north-flowing river in Africa."),
]
QUERIES = ["capital of France", "highest mountain", "who created Python", "river in Africa"]


def _no_pickle(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("an index load used pickle")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)


def _assert_numpy_files_are_plain(index_dir):
    npys = list(index_dir.rglob("*.npy"))
    assert npys
    for f in npys:
        np.load(f, allow_pickle=False)  # raises if the array needed pickle
    assert not [f for f in index_dir.rglob("*") if f.suffix in (".pkl", ".pickle", ".pt")]
    assert not [f for f in index_dir.rglob("*") if f.name.endswith(".tmp")]


# ---- BM25 ------------------------------------------------------------------------------------
def test_bm25_finds_the_obvious_passage(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    assert isinstance(bm25, Retriever) and bm25.name == "bm25"
    assert bm25.search("capital of France", 1)[0].id == "p1"
    assert bm25.search("highest mountain", 2)[0].id == "p3"
    hits = bm25.search("capital city", 3)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_bm25_persist_and_reload_gives_same_results_without_pickle(tmp_path, monkeypatch):
    built = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    _assert_numpy_files_are_plain(tmp_path / "bm25")
    _no_pickle(monkeypatch)
    loaded = BM25Retriever.load(tmp_path / "bm25")
    assert loaded.fingerprint == built.fingerprint
    for q in QUERIES:
        assert loaded.search(q, 3) == built.search(q, 3)
    assert loaded.batch_search(QUERIES, 2) == [built.search(q, 2) for q in QUERIES]
    assert loaded.get("p5") == CORPUS[4] and loaded.get("nope") is None


def test_bm25_stopword_or_unknown_query_returns_no_zero_score_noise(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    assert bm25.search("the of and", 3) == []
    assert bm25.search("zzzqqq", 3) == []
    assert len(bm25.search("capital", 50)) == 3  # k above the corpus size is fine


def test_bm25_counts_retriever_calls_and_checks_queries(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    with track() as t:
        bm25.search("capital", 2)
        bm25.batch_search(["river", "mountain"], 2)
    assert t.retriever_calls == 3
    with pytest.raises(ConfigError):
        bm25.search("  ", 2)
    with pytest.raises(ConfigError):
        bm25.search("capital", 0)


def test_bm25_fingerprint_depends_on_passages(tmp_path):
    a = BM25Retriever.build(CORPUS, tmp_path / "a")
    b = BM25Retriever.build(CORPUS[:-1], tmp_path / "b")
    assert a.fingerprint != b.fingerprint and a.fingerprint.startswith("bm25:")


def test_bm25_missing_or_mismatched_index_is_a_clear_error(tmp_path):
    with pytest.raises(RetrievalIndexError, match="no bm25 index"):
        BM25Retriever.load(tmp_path / "nothing")
    BM25Retriever.build(CORPUS, tmp_path / "bm25")
    (tmp_path / "bm25" / "passages.jsonl").write_text(
        json.dumps({"id": "x", "title": "", "text": "y"}) + "\n")
    with pytest.raises(RetrievalIndexError, match="does not match"):
        BM25Retriever.load(tmp_path / "bm25")
    with pytest.raises(DataError, match="zero passages"):
        BM25Retriever.build([], tmp_path / "empty")


# ---- dense -----------------------------------------------------------------------------------
def test_dense_persist_and_reload_gives_same_results_without_pickle(tmp_path, monkeypatch):
    enc = HashEncoder()
    built = DenseRetriever.build(CORPUS, tmp_path / "dense", encoder=enc)
    assert isinstance(built, Retriever) and built.name == "dense"
    _assert_numpy_files_are_plain(tmp_path / "dense")
    manifest = json.loads((tmp_path / "dense" / "manifest.json").read_text())
    assert manifest["count"] == len(CORPUS) and manifest["dim"] == 64
    _no_pickle(monkeypatch)
    loaded = DenseRetriever.load(tmp_path / "dense", encoder=enc)
    assert loaded.fingerprint == built.fingerprint
    for q in QUERIES:
        assert loaded.search(q, 3) == built.search(q, 3)
    assert loaded.batch_search(QUERIES, 2) == [built.search(q, 2) for q in QUERIES]
    assert loaded.search("Paris capital France", 1)[0].id == "p1"
    assert len(loaded.search("capital", 100)) == len(CORPUS)


def test_dense_scores_are_inner_products_in_order(tmp_path):
    enc = HashEncoder()
    dense = DenseRetriever.build(CORPUS, tmp_path / "dense", encoder=enc)
    hits = dense.search("capital city", 4)
    q = enc.encode(["capital city"])[0]
    expected = sorted(((float(dense.embeddings[i] @ q), -i) for i in range(len(CORPUS))),
                      reverse=True)[:4]
    assert [round(h.score, 5) for h in hits] == [round(s, 5) for s, _ in expected]


def test_dense_errors(tmp_path):
    with pytest.raises(RetrievalIndexError, match="no dense index"):
        DenseRetriever.load(tmp_path / "missing")
    BM25Retriever.build(CORPUS, tmp_path / "bm25")
    with pytest.raises(RetrievalIndexError, match="not 'dense'"):
        DenseRetriever.load(tmp_path / "bm25")
    with pytest.raises(RetrievalIndexError):
        DenseRetriever(CORPUS, np.zeros((3, 4), dtype=np.float32))


@pytest.mark.integration  # loading sentence-transformers takes ~15 s on a busy 2-core box
def test_dense_with_the_real_minilm_encoder(tmp_path):
    try:
        from ambiqa.retrieval.encoder import get_encoder

        enc = get_encoder()
    except Exception as exc:  # encoder package missing
        pytest.skip(f"MiniLM unavailable: {exc}")
    dense = DenseRetriever.build(CORPUS, tmp_path / "dense", encoder=enc)
    assert dense.search("Which city is the French capital?", 1)[0].id == "p1"
    assert dense.search("scientist with two Nobel prizes", 1)[0].id == "p5"
    reloaded = DenseRetriever.load(tmp_path / "dense", encoder=enc)
    assert reloaded.search("longest river in Africa", 2) == dense.search(
        "longest river in Africa", 2)

    # counting word pieces waits for the encoding lock (the Rust tokenizer is not
    # thread-safe: "Already borrowed" when a count ran beside an encode)
    assert enc.token_count("Paris") == 3 and enc.max_tokens == 256
    done = threading.Event()
    with enc._lock:
        worker = threading.Thread(target=lambda: (enc.token_count("Paris"), done.set()))
        worker.start()
        assert not done.wait(0.3)
    assert done.wait(10)
    worker.join()
