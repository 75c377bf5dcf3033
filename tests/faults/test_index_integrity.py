"""Index integrity (issue 33 item 5): every index kind records the size and sha256 of its
files in its manifest and checks them on open, with the rebuild command in the error. Before,
a BM25 index whose arrays were scrambled at the same size answered wrongly with exit 0 (the
fingerprint covers the passages, not the index files). Issue 42: a file scrambled with its
mtime put back passed the mtime-keyed cache, and a manifest without ``files`` was accepted;
small indexes are now hashed on every open, large ones cache by size, mtime, ctime and inode."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from ambiqa.errors import RetrievalIndexError
from tests.faults.conftest import cli_env, run_cli, small_passages

pytestmark = pytest.mark.fault("Retriever / index faults")


def _scramble_npy(path: Path) -> None:
    """Reverse a saved array's values in place: same size, same header, other content."""
    arr = np.load(path, allow_pickle=False)
    flat = arr.reshape(-1)
    assert flat.size > 1 and not np.all(flat == flat[0])
    with open(path, "wb") as fh:
        np.save(fh, flat[::-1].reshape(arr.shape), allow_pickle=False)


def _bm25(tmp_path: Path) -> Path:
    from ambiqa.retrieval.bm25 import BM25Retriever

    index_dir = tmp_path / "indexes" / "tiny"
    BM25Retriever.build(small_passages(), index_dir)
    return index_dir


def test_scrambled_bm25_index_is_refused_at_open(tmp_path, record_property):
    from ambiqa.retrieval.bm25 import BM25Retriever

    index_dir = _bm25(tmp_path)
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["files"] and all(len(r["sha256"]) == 64 for r in manifest["files"].values())
    before = BM25Retriever.load(index_dir).search("Weasley Phelps", 3)
    arrays = sorted((index_dir / "bm25s").glob("*.npy"), key=lambda p: p.stat().st_size)
    target = arrays[-1]                                   # the largest: the score data
    size = target.stat().st_size
    _scramble_npy(target)
    assert target.stat().st_size == size                  # same size: only a hash can tell
    with pytest.raises(RetrievalIndexError) as err:
        BM25Retriever.load(index_dir)
    text = str(err.value)
    assert target.name in text and "damaged" in text
    assert "ambiqa index CORPUS --name tiny --kind bm25" in text
    record_property("cases", 1)
    record_property("data_lost", 0)
    assert before  # the intact index answered


def test_scrambled_dense_embeddings_are_refused(tmp_path):
    from ambiqa.retrieval.dense import EMBEDDINGS, DenseRetriever
    from ambiqa.testing import SeededEncoder

    index_dir = tmp_path / "dense"
    DenseRetriever.build(small_passages(), index_dir, encoder=SeededEncoder())
    DenseRetriever.load(index_dir, encoder=SeededEncoder())
    _scramble_npy(index_dir / EMBEDDINGS)
    with pytest.raises(RetrievalIndexError, match="embeddings.npy .*damaged") as err:
        DenseRetriever.load(index_dir, encoder=SeededEncoder())
    assert "--kind dense" in str(err.value)


def test_truncated_or_missing_index_file_is_refused(tmp_path):
    from ambiqa.retrieval.bm25 import BM25Retriever

    index_dir = _bm25(tmp_path)
    passages = index_dir / "passages.jsonl"
    passages.write_bytes(passages.read_bytes()[:-10])
    with pytest.raises(RetrievalIndexError,
                       match=r"passages.jsonl does not match its manifest \(\d+ bytes, \d+ rec"):
        BM25Retriever.load(index_dir)
    passages.unlink()
    with pytest.raises(RetrievalIndexError, match="lacks passages.jsonl"):
        BM25Retriever.load(index_dir)


def _scramble_keeping_mtime(path: Path) -> None:
    """Scramble ``path`` at the same size, then put its access and modification times back
    (``touch -r``): only a hash, or the ctime the kernel moved, can tell."""
    st = path.stat()
    _scramble_npy(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def _largest_array(index_dir: Path) -> Path:
    return max((index_dir / "bm25s").glob("*.npy"), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("cached", [False, True], ids=["small-index", "large-index-cache"])
def test_scramble_with_mtime_restored_is_refused(tmp_path, monkeypatch, record_property,
                                                 cached):
    """Opened once (a verdict cached), then scrambled with the mtime put back: refused, for a
    small index (hashed on every open) and for a large one (the cache is keyed by ctime and
    inode too)."""
    from ambiqa.retrieval import integrity
    from ambiqa.retrieval.bm25 import BM25Retriever

    if cached:
        monkeypatch.setattr(integrity, "ALWAYS_HASH_BYTES", 0)
    index_dir = _bm25(tmp_path)
    BM25Retriever.load(index_dir)
    assert (index_dir / ".verified.json").exists() == cached
    target = _largest_array(index_dir)
    _scramble_keeping_mtime(target)
    with pytest.raises(RetrievalIndexError, match=f"{target.name} .*damaged") as err:
        BM25Retriever.load(index_dir)
    assert "ambiqa index CORPUS --name tiny --kind bm25" in str(err.value)
    record_property("cases", 1)


def test_large_index_hashes_are_cached(tmp_path, monkeypatch):
    """Above ALWAYS_HASH_BYTES a file hashed before is not hashed again while its size,
    mtime, ctime and inode stay; a touched file is."""
    from ambiqa.retrieval import integrity
    from ambiqa.retrieval.bm25 import BM25Retriever

    monkeypatch.setattr(integrity, "ALWAYS_HASH_BYTES", 0)
    index_dir = _bm25(tmp_path)
    calls: list[str] = []
    real = integrity.sha256_file

    def counting(path):
        calls.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(integrity, "sha256_file", counting)
    BM25Retriever.load(index_dir)
    first = len(calls)
    assert first >= 2                                     # every file hashed once
    BM25Retriever.load(index_dir)
    assert len(calls) == first                            # nothing changed: not again
    passages = index_dir / "passages.jsonl"
    st = passages.stat()
    os.utime(passages, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    BM25Retriever.load(index_dir)
    assert calls[first:] == ["passages.jsonl"]            # only the touched file


def test_small_index_is_hashed_on_every_open(tmp_path, monkeypatch):
    from ambiqa.retrieval import integrity
    from ambiqa.retrieval.bm25 import BM25Retriever

    index_dir = _bm25(tmp_path)
    calls: list[str] = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file", lambda p: calls.append(p) or real(p))
    BM25Retriever.load(index_dir)
    first = len(calls)
    BM25Retriever.load(index_dir)
    assert first >= 2 and len(calls) == 2 * first


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_index_without_file_records_is_refused(tmp_path, kind, record_property):
    """An index whose manifest lists no files cannot be checked: refused with the command
    that rebuilds it (it was accepted, so a damaged legacy index answered with exit 0)."""
    from ambiqa.retrieval.bm25 import BM25Retriever
    from ambiqa.retrieval.dense import DenseRetriever
    from ambiqa.testing import SeededEncoder

    index_dir = tmp_path / "indexes" / "tiny"
    if kind == "bm25":
        BM25Retriever.build(small_passages(), index_dir)
        load = lambda: BM25Retriever.load(index_dir)  # noqa: E731
    else:
        DenseRetriever.build(small_passages(), index_dir, encoder=SeededEncoder())
        load = lambda: DenseRetriever.load(index_dir, encoder=SeededEncoder())  # noqa: E731
    manifest = json.loads((index_dir / "manifest.json").read_text())
    del manifest["files"]
    (index_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RetrievalIndexError, match="records no file hashes") as err:
        load()
    assert f"ambiqa index CORPUS --name tiny --kind {kind}" in str(err.value)
    record_property("cases", 1)


def test_cli_refuses_an_index_without_file_records(tmp_path):
    index_dir = _bm25(tmp_path)
    manifest = json.loads((index_dir / "manifest.json").read_text())
    del manifest["files"]
    (index_dir / "manifest.json").write_text(json.dumps(manifest))
    res = run_cli(["ask", "Who played Ron Weasley?", "--program", "vanilla_rag", "--index",
                   "bm25:tiny", "--index-root", str(index_dir.parent), "--lm", "openai/x",
                   "--api-base", "http://127.0.0.1:9/v1"], cli_env(tmp_path), timeout=120)
    assert res.returncode == 2, res.stdout[-1000:] + res.stderr[-1000:]
    assert "records no file hashes" in res.stderr and "Traceback" not in res.stderr
    assert "--kind bm25" in res.stderr


@pytest.mark.parametrize("damage", [b"\xff\xfe\xfa broken \x80\n",
                                    b'{"id": "p", "text": ' + b"[" * 10_000 + b"\n"],
                         ids=["invalid-utf8", "deep-json"])
def test_damaged_passages_file_is_one_line(tmp_path, damage):
    """A legacy passages file (no hash covers it) with invalid UTF-8 or a 10,000-deep line:
    a RetrievalIndexError naming the line and the rebuild command, not a traceback."""
    from ambiqa.retrieval.dense import read_passages

    index_dir = _bm25(tmp_path)
    path = index_dir / "passages.jsonl"
    path.write_bytes(path.read_bytes() + damage)
    with pytest.raises(RetrievalIndexError) as err:
        read_passages(path, "bm25")
    text = str(err.value)
    assert "passages.jsonl, line" in text and "--kind bm25" in text


def test_missing_index_hint_names_kind_not_retriever(tmp_path):
    from ambiqa.retrieval.factory import open_retriever

    for kind in ("bm25", "dense"):
        with pytest.raises(RetrievalIndexError) as err:
            open_retriever(f"{kind}:nope", root=tmp_path)
        assert f"--kind {kind}" in str(err.value) and "--retriever" not in str(err.value)


def test_scrambled_colbert_file_is_refused(tmp_path, fault_colbert_index):
    """A ColBERT index records its files too (the cached test index predates the record, so
    the record a new build writes is added to a copy here)."""
    from ambiqa.retrieval.colbert import ColBERTRetriever
    from ambiqa.retrieval.colbert.manifest import LOG_FILE, MANIFEST
    from ambiqa.retrieval.integrity import FILES_KEY, record_files

    root = tmp_path / "indexes"
    shutil.copytree(fault_colbert_index, root / "idx",
                    ignore=shutil.ignore_patterns(LOG_FILE, ".verified.json"))
    index_dir = root / "idx"
    manifest = json.loads((index_dir / MANIFEST).read_text())
    manifest[FILES_KEY] = record_files(index_dir, {MANIFEST, LOG_FILE})
    (index_dir / MANIFEST).write_text(json.dumps(manifest))
    ColBERTRetriever.load(root, "idx")
    doclens = index_dir / "doclens.0.json"
    data = json.loads(doclens.read_text())
    doclens.write_text(json.dumps(list(reversed(data))))  # same size, other order
    with pytest.raises(RetrievalIndexError, match="doclens.0.json .*damaged") as err:
        ColBERTRetriever.load(root, "idx")
    assert "--kind colbert" in str(err.value)


def test_cli_refuses_a_scrambled_index_with_one_line(tmp_path):
    index_dir = _bm25(tmp_path)
    target = max((index_dir / "bm25s").glob("*.npy"), key=lambda p: p.stat().st_size)
    _scramble_npy(target)
    res = run_cli(["ask", "Who played Ron Weasley?", "--program", "vanilla_rag", "--index",
                   "bm25:tiny", "--index-root", str(index_dir.parent), "--lm", "openai/x",
                   "--api-base", "http://127.0.0.1:9/v1"], cli_env(tmp_path), timeout=120)
    assert res.returncode == 2, res.stdout[-1000:] + res.stderr[-1000:]
    assert "damaged" in res.stderr and "Traceback" not in res.stderr
