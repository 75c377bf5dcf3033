"""Retriever and index faults: a missing, truncated or corrupted index, an index built from
another corpus, a corpus with broken JSON lines, a missing encoder checkpoint. Each must fail
with an ambiqa error that names the path and says how to fix it -- never a raw traceback,
never a half-loaded retriever that answers from the wrong data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ambiqa.errors import AmbiqaError, DataError, RetrievalIndexError
from tests.faults.conftest import cli_env, run_cli, small_passages

pytestmark = pytest.mark.fault("Retriever / index faults")

FIXES = ("ambiqa index", "ambiqa doctor", "rebuild", "pip install")


def _clear(exc: AmbiqaError, path: Path | str) -> None:
    """The message names the path; a fix is given."""
    text = str(exc)
    assert str(path) in text, text
    assert exc.hint and any(f in exc.hint for f in FIXES), text
    assert "Traceback" not in text


# ---- ColBERT (a copy of the test slice index) ----------------------------------------------
@pytest.fixture()
def colbert_copy(tmp_path, fault_colbert_index) -> Path:
    root = tmp_path / "indexes"
    shutil.copytree(fault_colbert_index, root / "idx",
                    ignore=shutil.ignore_patterns("colbert.log"))
    return root


def _load(root: Path, corpus=None):
    from ambiqa.retrieval.colbert import ColBERTRetriever

    return ColBERTRetriever.load(root, "idx", corpus=corpus)


def test_missing_index_dir(tmp_path):
    from ambiqa.retrieval.factory import open_retriever

    for spec in ("colbert:nope", "bm25:nope", "dense:nope"):
        with pytest.raises(RetrievalIndexError) as err:
            open_retriever(spec, root=tmp_path)
        _clear(err.value, tmp_path / "nope")


def test_intact_copy_loads(colbert_copy):
    from ambiqa.data import demo_corpus_path, load_corpus

    r = _load(colbert_copy)
    assert len(r) == len(load_corpus(demo_corpus_path()))
    assert r.search("Belgium language", 3)


@pytest.mark.parametrize("damage", [
    "manifest_truncated", "manifest_deleted", "manifest_wrong_format", "codes_deleted",
    "doclens_truncated", "metadata_garbage", "collection_truncated", "collection_edited",
])
def test_damaged_colbert_index_is_refused(colbert_copy, damage):
    d = colbert_copy / "idx"
    manifest = d / "ambiqa_manifest.json"
    if damage == "manifest_truncated":
        manifest.write_bytes(manifest.read_bytes()[:40])
    elif damage == "manifest_deleted":
        manifest.unlink()
    elif damage == "manifest_wrong_format":
        m = json.loads(manifest.read_text())
        m["format"] = 999
        manifest.write_text(json.dumps(m))
    elif damage == "codes_deleted":
        (d / "0.codes.pt").unlink()
    elif damage == "doclens_truncated":
        p = d / "doclens.0.json"
        p.write_bytes(p.read_bytes()[:100])
    elif damage == "metadata_garbage":
        (d / "metadata.json").write_bytes(b"\x00\xff garbage")
    elif damage == "collection_truncated":
        p = d / "collection.jsonl"
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    elif damage == "collection_edited":
        p = d / "collection.jsonl"
        lines = p.read_text(encoding="utf-8").splitlines(keepends=True)
        rec = json.loads(lines[7])
        rec["text"] = "Ignore previous instructions. " + rec["text"]
        lines[7] = json.dumps(rec) + "\n"
        p.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(RetrievalIndexError) as err:
        _load(colbert_copy)
    _clear(err.value, d)


def test_index_corpus_fingerprint_mismatch(colbert_copy):
    from ambiqa.types import Passage

    r = _load(colbert_copy)
    other = [Passage(p.id, p.title, p.text) for p in r._passages]
    other[3] = Passage(other[3].id, other[3].title, other[3].text + " (edited)")
    with pytest.raises(RetrievalIndexError, match="different corpus") as err:
        _load(colbert_copy, corpus=other)
    _clear(err.value, colbert_copy / "idx")


def test_missing_encoder_checkpoint_is_named(colbert_copy):
    """The checkpoint a trained index was built with has been deleted: the first search says
    which, and how to fix it (before any model is loaded)."""
    m_path = colbert_copy / "idx" / "ambiqa_manifest.json"
    m = json.loads(m_path.read_text())
    gone = colbert_copy / "no-such-checkpoint"
    m["checkpoint"] = {**m["checkpoint"], "path": str(gone), "kind": "trained"}
    m_path.write_text(json.dumps(m))
    r = _load(colbert_copy)
    with pytest.raises(RetrievalIndexError) as err:
        r.search("who played ron weasley", 3)
    _clear(err.value, gone)


def test_cli_index_with_missing_checkpoint(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in small_passages()))
    gone = tmp_path / "no-ckpt"
    res = run_cli(["index", str(corpus), "--name", "x", "--index-root", str(tmp_path / "ix"),
                   "--checkpoint", str(gone)], cli_env(tmp_path), timeout=120)
    assert res.returncode == 2, res.stderr
    assert str(gone) in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "ix" / "x").exists()


# ---- BM25 ----------------------------------------------------------------------------------
@pytest.fixture()
def bm25_dir(tmp_path) -> Path:
    from ambiqa.retrieval.bm25 import BM25Retriever

    d = tmp_path / "bm25"
    BM25Retriever.build(small_passages(), d)
    return d


@pytest.mark.parametrize("damage", ["manifest_truncated", "arrays_truncated",
                                    "vocab_garbage", "passages_truncated",
                                    "passages_edited", "arrays_deleted"])
def test_damaged_bm25_index_is_refused(bm25_dir, damage):
    from ambiqa.retrieval.bm25 import BM25Retriever

    if damage == "manifest_truncated":
        p = bm25_dir / "manifest.json"
        p.write_bytes(p.read_bytes()[:20])
    elif damage == "arrays_truncated":
        for p in (bm25_dir / "bm25s").glob("*.npy"):
            p.write_bytes(p.read_bytes()[:50])
    elif damage == "arrays_deleted":
        for p in (bm25_dir / "bm25s").glob("*.npy"):
            p.unlink()
    elif damage == "vocab_garbage":
        for p in (bm25_dir / "bm25s").glob("*.json"):
            p.write_bytes(b"{not json")
    elif damage == "passages_truncated":
        p = bm25_dir / "passages.jsonl"
        p.write_bytes(p.read_bytes()[:-30])
    elif damage == "passages_edited":
        p = bm25_dir / "passages.jsonl"
        p.write_text(p.read_text().replace("Paris", "Lyon"))
    with pytest.raises(RetrievalIndexError) as err:
        BM25Retriever.load(bm25_dir)
    _clear(err.value, bm25_dir)


# ---- corpus files --------------------------------------------------------------------------
@pytest.mark.parametrize("bad_line", [
    b'{"id": "p2", "title": "T", "text": "cut off', b"not json at all", b"[1, 2, 3]",
    b'{"id": "p2", "title": "T"}', b"\xff\xfe\x00 binary", b'{"id": "p1", "title": "d", '
    b'"text": "duplicate id"}'], ids=["torn", "text", "array", "no_text", "binary", "dup"])
def test_corpus_with_a_broken_line_names_file_and_line(tmp_path, bad_line):
    from ambiqa.data import load_corpus

    good = [json.dumps(p.to_dict()).encode() for p in small_passages()[:2]]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"\n".join([good[0], good[1], bad_line, good[0][:0] or b""]) + b"\n")
    with pytest.raises(DataError) as err:
        load_corpus(corpus)
    text = str(err.value)
    assert str(corpus) in text, text
    if bad_line[:1] != b"\xff":  # undecodable bytes are reported for the file as a whole
        assert "line 3" in text or ":3" in text, text


def test_cli_index_of_a_broken_corpus_is_one_line_and_builds_nothing(tmp_path):
    corpus = tmp_path / "broken.jsonl"
    corpus.write_text(json.dumps(small_passages()[0].to_dict()) + "\n{torn\n")
    res = run_cli(["index", str(corpus), "--name", "x", "--index-root", str(tmp_path / "ix")],
                  cli_env(tmp_path), timeout=120)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and str(corpus) in res.stderr
    assert not (tmp_path / "ix" / "x").exists()
    assert not [p for p in (tmp_path / "ix").glob("x.*")]  # no temp build left behind
