"""Dense retrieval goes approximate (faiss HNSW) from a size threshold on: built and saved at
index time, reopened on load, scores that are the exact cosines, near-exact rankings.
The threshold is lowered through ``$AMBIQA_DENSE_ANN_MIN`` so a small corpus exercises it;
``benchmarks/ann_scale.py`` measures recall and speed at 100k and 1M."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.retrieval import ann as ann_mod
from ambiqa.retrieval.ann import ANN_FILE, ANN_MIN_ENV, HNSWIndex, ann_min_passages
from ambiqa.retrieval.dense import DenseRetriever
from ambiqa.testing import HashEncoder
from ambiqa.types import Passage

WORDS = [f"w{i}" for i in range(400)]


def _passages(n: int, seed: int = 0) -> list[Passage]:
    rng = np.random.default_rng(seed)
    return [Passage(f"p{i}", f"t{i}", " ".join(rng.choice(WORDS, 12))) for i in range(n)]


def _queries(n: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 4)) for _ in range(n)]


def test_threshold_default_and_override(monkeypatch):
    monkeypatch.delenv(ANN_MIN_ENV, raising=False)
    assert ann_min_passages() == ann_mod.ANN_MIN_PASSAGES == 100_000
    monkeypatch.setenv(ANN_MIN_ENV, "300")
    assert ann_min_passages() == 300
    assert ann_mod.wants_ann(300) and not ann_mod.wants_ann(299)
    for bad in ("x", "0"):
        monkeypatch.setenv(ANN_MIN_ENV, bad)
        with pytest.raises(ConfigError, match=ANN_MIN_ENV):
            ann_min_passages()


def test_small_index_stays_exact(tmp_path, monkeypatch):
    monkeypatch.setenv(ANN_MIN_ENV, "1000")
    r = DenseRetriever.build(_passages(200), tmp_path / "d", encoder=HashEncoder(dim=64))
    assert r.ann is None and not (tmp_path / "d" / ANN_FILE).exists()
    assert "ann" not in json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert DenseRetriever.load(tmp_path / "d", encoder=HashEncoder(dim=64)).ann is None


def test_large_index_is_searched_through_a_saved_hnsw_graph(tmp_path, monkeypatch):
    monkeypatch.setenv(ANN_MIN_ENV, "1000")
    enc = HashEncoder(dim=64)
    passages = _passages(3000)
    built = DenseRetriever.build(passages, tmp_path / "d", encoder=enc)
    assert isinstance(built.ann, HNSWIndex) and (tmp_path / "d" / ANN_FILE).is_file()
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["ann"]["kind"] == "hnsw" and manifest["ann"]["n"] == 3000
    loaded = DenseRetriever.load(tmp_path / "d", encoder=enc)
    assert isinstance(loaded.ann, HNSWIndex) and loaded.ann.ntotal == 3000
    exact = DenseRetriever(passages, loaded.embeddings, encoder=enc)  # ann=None: exact scan
    hits = total = 0
    for q in _queries(100):
        got, want = loaded.search(q, 10), exact.search(q, 10)
        # an approximate search returns the exact cosine of each passage it finds
        vec = enc.encode([q])[0]
        for p in got:
            i = int(p.id[1:])
            assert p.score == pytest.approx(float(loaded.embeddings[i] @ vec), abs=1e-5)
        assert [p.score for p in got] == sorted((p.score for p in got), reverse=True)
        # tie-aware recall@10: bag-of-words cosines tie often, so a found passage counts
        # when it scores at least the exact 10th score
        hits += sum(p.score >= want[-1].score - 1e-6 for p in got)
        total += len(want)
    assert hits / total >= 0.95


def test_k_beyond_ef_search_still_returns_k(tmp_path):
    vecs = np.random.default_rng(0).standard_normal((500, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = HNSWIndex.build(vecs, ef_search=16)
    _, ids = index.search(vecs[:3], 200)
    assert ids.shape == (3, 200) and (ids >= 0).all()
    assert all(len(set(row.tolist())) == 200 for row in ids)


def test_index_saved_without_graph_gets_one_on_load_and_a_stale_graph_is_refused(
        tmp_path, monkeypatch, caplog):
    enc = HashEncoder(dim=64)
    monkeypatch.setenv(ANN_MIN_ENV, "100000")
    DenseRetriever.build(_passages(1200), tmp_path / "d", encoder=enc)  # exact when built
    monkeypatch.setenv(ANN_MIN_ENV, "1000")
    with caplog.at_level("WARNING"):
        r = DenseRetriever.load(tmp_path / "d", encoder=enc)
    assert isinstance(r.ann, HNSWIndex) and "no saved HNSW index" in caplog.text
    # a graph over other vectors than the embeddings beside it
    other = np.random.default_rng(1).standard_normal((50, 64)).astype(np.float32)
    HNSWIndex.build(other).save(tmp_path / "d")
    with pytest.raises(RetrievalIndexError, match="files changed after building"):
        DenseRetriever.load(tmp_path / "d", encoder=enc)
