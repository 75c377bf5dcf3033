"""``ambiqa doctor``'s index, checkpoint and extension-cache checks on broken directories,
plus sharded retrieval and the build-speed settings (no model is loaded)."""

from __future__ import annotations

import json
import types

import pytest

from ambiqa import doctor
from ambiqa.errors import RetrievalIndexError
from ambiqa.retrieval import colbert as cb
from ambiqa.retrieval.bm25 import BM25Retriever
from ambiqa.retrieval.sharded import ShardedRetriever
from ambiqa.types import Passage
from tests.unit.retrieval.test_colbert_unit import (
    PASSAGES,
    fake_index,
    make_manifest,
    rerecord,
    write_jsonl,
)


def _lines(**kw):
    out: list[str] = []
    ok = doctor.run_checks(print_fn=out.append, **kw)
    return ok, out


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AMBIQA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache" / "ext"))
    # environment checks that only import heavy packages are stubbed: these tests are about
    # the cache, checkpoint and index checks
    monkeypatch.setattr(doctor, "_model", lambda name: (lambda: "skipped in tests"))
    for name in ("_torch", "_faiss", "_encoder"):
        monkeypatch.setattr(doctor, name, lambda: "skipped in tests")
    monkeypatch.setattr(doctor, "importlib", types.SimpleNamespace(
        import_module=lambda m: types.SimpleNamespace(__version__="stub")))
    return tmp_path / "cache"


def test_healthy_fake_index_passes_and_matches_its_corpus(tmp_path):
    d = fake_index(tmp_path)
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"id": p.id, "title": p.title, "text": p.text} for p in PASSAGES])
    assert "3 passages" in doctor.check_index(d)
    assert "matches the given corpus" in doctor.check_index(d, corpus)


@pytest.mark.parametrize("breakage, words", [
    (lambda d: (d / cb.MANIFEST).unlink(), "no manifest"),
    (lambda d: (d / cb.MANIFEST).write_text("{"), "invalid JSON"),
    (lambda d: (d / "centroids.pt").unlink(), "centroids.pt"),
    (lambda d: (d / "0.codes.pt").unlink(), "0.codes.pt"),
    (lambda d: (d / "doclens.0.json").write_text("[1]"), "doclens.0.json does not match"),
    (lambda d: ((d / "doclens.0.json").write_text("[1]"), rerecord(d)), "holds 1 passages"),
    (lambda d: (d / cb.COLLECTION).write_text('{"id": "zz", "title": "", "text": "x"}\n'),
     "does not match"),
])
def test_broken_colbert_index_fails_with_a_fix(tmp_path, breakage, words):
    d = fake_index(tmp_path)
    breakage(d)
    with pytest.raises(doctor.CheckFailed) as err:
        doctor.check_index(d)
    assert words in str(err.value)
    assert err.value.fix and ("rebuild" in err.value.fix or "delete" in err.value.fix)


def test_corpus_mismatch_and_missing_trained_checkpoint(tmp_path):
    d = fake_index(tmp_path)
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "x", "title": "", "text": "y"}])
    with pytest.raises(doctor.CheckFailed, match="different corpus"):
        doctor.check_index(d, other)
    m = make_manifest(checkpoint={"path": str(tmp_path / "gone"), "kind": "trained",
                                  "id": "t@1"})
    d2 = fake_index(tmp_path, "idx2", manifest=m)
    with pytest.raises(doctor.CheckFailed, match="missing") as err:
        doctor.check_index(d2)
    assert "ambiqa colbert train" in err.value.fix


def test_bm25_index_checks(tmp_path):
    corpus = [Passage("a", "A", "alpha beta"), Passage("b", "B", "gamma delta")]
    BM25Retriever.build(corpus, tmp_path / "bm")
    assert "bm25, 2 passages" in doctor.check_index(tmp_path / "bm")
    other = write_jsonl(tmp_path / "o.jsonl", [{"id": "a", "title": "A", "text": "changed"},
                                               {"id": "b", "title": "B", "text": "gamma delta"}])
    with pytest.raises(doctor.CheckFailed, match="different corpus"):
        doctor.check_index(tmp_path / "bm", other)
    (tmp_path / "bm" / "passages.jsonl").write_text("")
    with pytest.raises(doctor.CheckFailed):
        doctor.check_index(tmp_path / "bm")


def test_run_checks_reports_each_broken_index_with_its_fix(cache, monkeypatch):
    root = cache / "indexes"
    fake_index(root, "good")
    bad = fake_index(root, "bad")
    (bad / "ivf.pid.pt").unlink()
    (root / "leftover").mkdir()
    (root / "wiki.tmp-1-abcd").mkdir()  # an in-progress build is not reported
    ok, out = _lines()
    text = "\n".join(out)
    assert not ok
    assert "[ok] index good" in text
    assert "[FAIL] index bad" in text and "ivf.pid.pt" in text
    assert "[FAIL] index leftover" in text and "no manifest" in text
    assert "wiki.tmp" not in text
    assert text.count("fix:") >= 2
    ok, out = _lines(index="colbert:good")
    assert "index good" in "\n".join(out) and "index bad" not in "\n".join(out)


def test_stale_extension_lock_is_reported(cache):
    ext = cache / "ext" / "segmented_maxsim_cpp"
    ext.mkdir(parents=True)
    (ext / "lock").write_text("")
    ok, out = _lines()
    text = "\n".join(out)
    assert "[FAIL] extension cache" in text and "stale build lock" in text
    assert "delete the listed lock files" in text


def test_broken_checkpoint_in_cache_is_reported(cache):
    ck = cache / "colbert" / "minilm-trained-384"
    ck.mkdir(parents=True)
    for f in ("config.json", "artifact.metadata", "vocab.txt", "ambiqa_checkpoint.json"):
        (ck / f).write_text("{}")
    (ck / "model.safetensors").write_bytes(b"tampered")
    ok, out = _lines()
    text = "\n".join(out)
    assert "[FAIL] ColBERT checkpoints" in text and "sha256" in text
    assert f"rm -r {ck}" in text and "ambiqa colbert train" in text


# ---- sharded retrieval -----------------------------------------------------------------------
class FakeShard:
    def __init__(self, passages, ckpt="ck@1"):
        self.passages = passages
        self.manifest = {"checkpoint": {"id": ckpt}}
        self.fingerprint = "colbert:" + "-".join(p.id for p in passages)

    def __len__(self):
        return len(self.passages)

    def search(self, query, k=5):
        return sorted(self.passages, key=lambda p: -p.score)[:k]

    def get(self, pid):
        return next((p for p in self.passages if p.id == pid), None)


def test_sharded_search_merges_by_score():
    a = FakeShard([Passage("a1", "", "x", 3.0), Passage("a2", "", "y", 1.0)])
    b = FakeShard([Passage("b1", "", "z", 2.0), Passage("b2", "", "w", 0.5)])
    s = ShardedRetriever("wiki", [a, b])
    assert [p.id for p in s.search("q", 3)] == ["a1", "b1", "a2"]
    assert len(s) == 4 and s.get("b2").text == "w" and s.get("nope") is None
    assert s.batch_search(["q"], 1) == [[a.passages[0]]]
    with pytest.raises(RetrievalIndexError, match="different checkpoints"):
        ShardedRetriever("wiki", [a, FakeShard([], "ck@2")])


def test_sharded_index_opens_through_the_factory(tmp_path):
    from ambiqa.retrieval.factory import open_retriever

    fake_index(tmp_path, "wiki-0", PASSAGES[:2], make_manifest(PASSAGES[:2], name="wiki-0"))
    fake_index(tmp_path, "wiki-1", PASSAGES[2:], make_manifest(PASSAGES[2:], name="wiki-1"))
    (tmp_path / "wiki.shards.json").write_text(json.dumps({"shards": ["wiki-0", "wiki-1"]}))
    r = open_retriever("wiki", root=tmp_path)
    assert isinstance(r, ShardedRetriever) and len(r) == 3 and r.get("c3") == PASSAGES[2]


# ---- build-speed settings --------------------------------------------------------------------
def test_kmeans_sample_and_centroid_caps():
    # the shared corpus: colbert-ai would encode all 12,843 passages twice
    assert cb.kmeans_sample_size(12843, 1.0) == 12843
    assert cb.kmeans_sample_size(12843) == 3211
    assert cb.kmeans_sample_size(500) == 500  # small corpora: at least 1,000 (or all)
    # above ~500k passages colbert-ai's own sample is already smaller than 25%
    assert cb.kmeans_sample_size(2_000_000, None) == 1 + int(16 * (120 * 2_000_000) ** 0.5)
    assert cb.partitions_for(1.16e6, 1.16e6, 1.0) == 16384
    assert cb.partitions_for(1.16e6, 2.9e5) == 8192
    assert cb.partitions_for(100, 10) == 2
    assert cb.estimate_build_seconds(12843) < cb.estimate_build_seconds(12843, kmeans_share=1.0)
