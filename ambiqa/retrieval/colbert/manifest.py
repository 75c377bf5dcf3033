"""An index's manifest, its collection file and the corpus fingerprint that ties them together.

The manifest (``ambiqa_manifest.json``) is written last and atomically by a build; an index
without a valid one never loads. Everything here reads files only: no colbert-ai import.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ambiqa.data.corpus import iter_corpus as _iter_corpus
from ambiqa.errors import ConfigError, DataError, RetrievalIndexError
from ambiqa.jsonio import read_json
from ambiqa.retrieval.integrity import verify_files
from ambiqa.types import Passage

MANIFEST = "ambiqa_manifest.json"
COLLECTION = "collection.jsonl"
COLBERT_TSV = "collection.tsv"
LOG_FILE = "colbert.log"
FORMAT_VERSION = 1
# colbert-ai files every finished index has (chunk files are checked against metadata.json).
COLBERT_FILES = ("metadata.json", "plan.json", "centroids.pt", "buckets.pt", "avg_residual.pt",
                 "ivf.pid.pt")
MANIFEST_KEYS = {
    "format": int, "name": str, "corpus_sha256": str, "n_passages": int, "checkpoint": dict,
    "nbits": int, "doc_maxlen": int, "query_maxlen": int, "dim": int, "build_seconds": float,
    "built_at": str, "colbert_ai_version": str,
}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def iter_corpus(path: str | os.PathLike[str]) -> Iterator[Passage]:
    """Stream a corpus JSONL file as passages (the data layer's validating reader)."""
    return _iter_corpus(Path(path).expanduser())


class CorpusFingerprint:
    """sha256 over (id, title, text) of every passage, in order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def update(self, p: Passage) -> None:
        self._h.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False).encode() + b"\n")

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def corpus_fingerprint(corpus: Iterable[Passage] | str | os.PathLike[str]) -> str:
    """The sha256 of the passages' contents that an index manifest records.

    Unlike :func:`ambiqa.data.corpus_fingerprint` (bytes of a file), this hashes (id, title,
    text) in order, so the same passages reformatted or passed as a list fingerprint the same.
    """
    fp = CorpusFingerprint()
    for p in passages_of(corpus):
        fp.update(p)
    return fp.hexdigest()


def passages_of(corpus: Iterable[Passage] | str | os.PathLike[str]) -> Iterator[Passage]:
    if isinstance(corpus, (str, os.PathLike)):
        return iter_corpus(corpus)
    return iter(corpus)


def rebuild_hint(name: str) -> str:
    return f"ambiqa index CORPUS --name {name}"


def validate_manifest(data: object, index_dir: Path) -> dict[str, Any]:
    """Check a manifest's keys and types; raise :class:`RetrievalIndexError` naming the problem."""
    name = index_dir.name
    where = index_dir / MANIFEST
    if not isinstance(data, dict):
        raise RetrievalIndexError(f"index manifest {where} is not a JSON object",
                                  hint=f"rebuild the index: {rebuild_hint(name)}")
    for key, typ in MANIFEST_KEYS.items():
        value = data.get(key)
        ok = isinstance(value, typ) and not isinstance(value, bool)
        if typ is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise RetrievalIndexError(f"index manifest {where} lacks a valid {key!r}",
                                      hint=f"rebuild the index: {rebuild_hint(name)}")
    if data["format"] != FORMAT_VERSION:
        raise RetrievalIndexError(
            f"index {index_dir} has manifest format {data['format']}, this ambiqa "
            f"reads format {FORMAT_VERSION}",
            hint=f"rebuild the index: {rebuild_hint(name)}")
    if data["n_passages"] < 1:
        raise RetrievalIndexError(f"index manifest {where} records no passages",
                                  hint=f"rebuild the index: {rebuild_hint(name)}")
    ckpt = data["checkpoint"]
    if not isinstance(ckpt.get("path"), str) or ckpt.get("kind") not in ("identity", "trained"):
        raise RetrievalIndexError(f"index manifest {where} has no valid checkpoint record",
                                  hint=f"rebuild the index: {rebuild_hint(name)}")
    return data


def read_manifest(index_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate ``<index_dir>/ambiqa_manifest.json``."""
    index_dir = Path(index_dir)
    name = index_dir.name
    if not index_dir.is_dir():
        raise RetrievalIndexError(f"no ColBERT index at {index_dir}",
                                  hint=f"build it first: {rebuild_hint(name)}")
    path = index_dir / MANIFEST
    if not path.is_file():
        raise RetrievalIndexError(f"{index_dir} has no {MANIFEST}: the index is incomplete "
                                  "(an interrupted build) or not an ambiqa index",
                                  hint=f"rebuild it: {rebuild_hint(name)}")
    data = read_json(path, error=RetrievalIndexError, what="index manifest",
                     hint=f"rebuild the index: {rebuild_hint(name)}")
    manifest = validate_manifest(data, index_dir)
    verify_files(index_dir, manifest, "colbert")  # size + sha256 of each file (issue 33)
    return manifest


def check_colbert_files(index_dir: Path, n_passages: int) -> None:
    """colbert-ai's files exist and its metadata agrees with the manifest's passage count."""
    name = index_dir.name
    missing = [f for f in COLBERT_FILES if not (index_dir / f).is_file()]
    if missing:
        raise RetrievalIndexError(f"index {index_dir} lacks colbert-ai files: {', '.join(missing)}",
                                  hint=f"rebuild the index: {rebuild_hint(name)}")
    fix = f"rebuild the index: {rebuild_hint(name)}"
    try:
        meta = read_json(index_dir / "metadata.json", error=RetrievalIndexError, hint=fix)
        n_chunks = int(meta["num_chunks"])
        counted = 0
        for i in range(n_chunks):
            counted += len(read_json(index_dir / f"doclens.{i}.json", error=RetrievalIndexError,
                                     max_bytes=None, hint=fix))
            for suffix in ("codes.pt", "residuals.pt"):
                if not (index_dir / f"{i}.{suffix}").is_file():
                    raise FileNotFoundError(f"{i}.{suffix}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RetrievalIndexError(
            f"index {index_dir} has corrupt or missing colbert-ai files ({exc})",
            hint=f"rebuild the index: {rebuild_hint(name)}") from exc
    if counted != n_passages:
        raise RetrievalIndexError(
            f"index {index_dir} holds {counted} passages but its manifest says "
            f"{n_passages}", hint=f"rebuild the index: {rebuild_hint(name)}")


def read_collection(index_dir: Path, manifest: dict[str, Any]) -> list[Passage]:
    """Read ``collection.jsonl`` and check it against the manifest's fingerprint."""
    path = index_dir / COLLECTION
    hint = f"rebuild the index: {rebuild_hint(index_dir.name)}"
    if not path.is_file():
        raise RetrievalIndexError(f"index {index_dir} lacks {COLLECTION}", hint=hint)
    passages, fp = [], CorpusFingerprint()
    try:
        for p in iter_corpus(path):
            passages.append(p)
            fp.update(p)
    except DataError as exc:
        raise RetrievalIndexError(f"index collection is corrupt: {exc.message}", hint=hint) from exc
    if len(passages) != manifest["n_passages"] or fp.hexdigest() != manifest["corpus_sha256"]:
        raise RetrievalIndexError(
            f"{path} does not match the index manifest (changed after the build)",
            hint=hint)
    return passages


def check_corpus(manifest: dict[str, Any], corpus: Iterable[Passage] | str | os.PathLike[str],
                 index_dir: Path) -> None:
    """Raise :class:`RetrievalIndexError` if ``corpus`` is not the one the index was built from."""
    sha = corpus_fingerprint(corpus)
    if sha != manifest["corpus_sha256"]:
        raise RetrievalIndexError(
            f"index {index_dir} was built from a different corpus "
            f"(fingerprint {manifest['corpus_sha256'][:16]}, given corpus {sha[:16]})",
            hint=f"rebuild it from this corpus: {rebuild_hint(index_dir.name)}")


def check_name(name: object) -> None:
    if not isinstance(name, str) or not NAME_RE.match(name) or ".tmp-" in name \
            or ".old-" in name:
        raise ConfigError(f"invalid index name {name!r}",
                          hint="use letters, digits, '.', '_' and '-' (no slashes), "
                               "e.g. --name wiki")
