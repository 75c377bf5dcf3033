"""Dense retrieval: exact inner-product search over SentenceBERT (MiniLM) passage embeddings.

Why exact search: the shared corpus is ~13k passages × 384 dims (~20 MB of float32), so a
matrix–vector product in numpy answers a query in about a millisecond and needs no approximate
index to tune. ``backend="faiss"`` loads the same matrix into ``faiss.IndexFlatIP`` (exact,
multi-threaded BLAS; faster for large batches). From
:data:`~ambiqa.retrieval.ann.ANN_MIN_PASSAGES` passages on (100k), the index is searched
through a faiss HNSW graph built at index time and saved beside the embeddings
(:mod:`ambiqa.retrieval.ann` says why HNSW; ``benchmarks/ann_scale.py`` measures it).

A query longer than the encoder's ``max_seq_length`` (256 word pieces for MiniLM) is truncated
by sentence-transformers; a warning is logged. ``k`` larger than the corpus returns every
passage.

On-disk layout of ``index_dir`` (written file by file with temp file + ``os.replace``, the
manifest last, so a half-written index is never taken for a complete one):

* ``embeddings.npy`` -- float32 matrix (n, dim), unit rows, loaded with ``allow_pickle=False``;
* ``passages.jsonl`` -- one ``{"id", "title", "text"}`` per line, row-aligned with the matrix;
* ``manifest.json`` -- kind, encoder name, dim, count and the fingerprint.

The JSONL and atomic-write helpers here are shared with :mod:`ambiqa.retrieval.bm25`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.fsutil import atomic_write
from ambiqa.jsonio import loads, read_json
from ambiqa.retrieval.ann import build_for, load_for
from ambiqa.retrieval.base import TimedSearch, check_passages, check_query
from ambiqa.retrieval.encoder import SharedEncoder, get_encoder
from ambiqa.retrieval.integrity import FILES_KEY, rebuild_command, record_files, verify_files
from ambiqa.types import Passage, SharedResource

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PASSAGES = "passages.jsonl"
EMBEDDINGS = "embeddings.npy"


# ---- small persistence helpers (shared with bm25.py) ---------------------------------------
def write_passages(path: Path, passages: Iterable[Passage]) -> None:
    def _write(fh: Any) -> None:
        for p in passages:
            fh.write(json.dumps({"id": p.id, "title": p.title, "text": p.text},
                                ensure_ascii=False) + "\n")

    atomic_write(path, _write)


def read_passages(path: Path, kind: str = "dense") -> list[Passage]:
    """The passages of an index, one guarded JSON line each (:func:`ambiqa.jsonio.loads`).

    Read as bytes and decoded line by line, so a damaged file -- invalid UTF-8 in a legacy
    index that no hash check covered, a 10,000-deep line -- is a one-line
    :class:`RetrievalIndexError` naming the line and the rebuild command, not a traceback."""
    fix = f"rebuild the index: {rebuild_command(kind, Path(path).parent.name)}"
    out: list[Passage] = []
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise RetrievalIndexError(f"cannot read {path}: {exc.strerror or exc}", hint=fix) from exc
    with fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            d = loads(line, source=f"{path}, line {n}", error=RetrievalIndexError, hint=fix)
            try:
                out.append(Passage(str(d["id"]), str(d.get("title", "")), str(d["text"])))
            except (KeyError, TypeError, AttributeError) as exc:
                raise RetrievalIndexError(f"{path}, line {n}: not a passage record ({exc})",
                                          hint=fix) from exc
    return out


def write_manifest(index_dir: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest last, listing the size and sha256 of every file of the index
    (checked on open: :mod:`ambiqa.retrieval.integrity`)."""
    manifest = {**manifest, FILES_KEY: record_files(Path(index_dir), {MANIFEST})}
    atomic_write(Path(index_dir) / MANIFEST, lambda fh: json.dump(manifest, fh, indent=2))


def read_manifest(index_dir: Path, kind: str) -> dict[str, Any]:
    """The manifest of a complete index of ``kind``; a :class:`RetrievalIndexError` says why not."""
    path = Path(index_dir) / MANIFEST
    if not path.is_file():
        raise RetrievalIndexError(f"no {kind} index at {index_dir} (manifest.json missing)",
                          hint=f"build it first: `{rebuild_command(kind, Path(index_dir).name)}`")
    manifest = read_json(path, error=RetrievalIndexError,
                         what="index manifest", hint=f"rebuild the index: "
                         f"{rebuild_command(kind, Path(index_dir).name)}")
    if not isinstance(manifest, dict) or manifest.get("kind") != kind:
        found = manifest.get("kind") if isinstance(manifest, dict) else None
        raise RetrievalIndexError(f"{index_dir} holds a {found!r} index, not {kind!r}")
    verify_files(Path(index_dir), manifest, kind)
    return manifest


def passages_fingerprint(kind: str, passages: Sequence[Passage], extra: str = "") -> str:
    """Identify an index by its retriever kind, settings and the exact passages it holds."""
    h = hashlib.sha256(extra.encode() + b"\0")
    for p in passages:
        h.update(p.id.encode() + b"\0" + p.title.encode() + b"\0" + p.text.encode() + b"\0")
    return f"{kind}:{h.hexdigest()[:16]}"


# ---- the retriever -------------------------------------------------------------------------
class DenseRetriever(SharedResource):
    """Cosine (= inner product of unit vectors) search over encoded ``title + text``."""

    name = "dense"
    encoder = SharedEncoder()

    def __init__(self, passages: Sequence[Passage], embeddings: np.ndarray,
                 encoder: Any = None, encoder_name: str = "all-MiniLM-L6-v2",
                 backend: str = "numpy", ann: Any = None) -> None:
        if backend not in ("numpy", "faiss"):
            raise ConfigError(f"unknown dense search backend {backend!r}",
                              hint="use 'numpy' (exact) or 'faiss' (exact IndexFlatIP)")
        if embeddings.ndim != 2 or embeddings.shape[0] != len(passages):
            raise RetrievalIndexError(f"dense index is inconsistent: {len(passages)} passages but "
                              f"embeddings of shape {embeddings.shape}", hint="rebuild the index")
        self.passages = list(passages)
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.encoder = encoder
        self.encoder_name = encoder_name
        self._by_id = {p.id: p for p in self.passages}
        self._fingerprint = passages_fingerprint("dense", self.passages, encoder_name)
        self.backend = backend
        self._faiss: Any = None
        if backend == "faiss":
            import faiss

            self._faiss = faiss.IndexFlatIP(self.embeddings.shape[1])
            self._faiss.add(self.embeddings)
        if ann is not None:  # a large index: approximate search (ambiqa.retrieval.ann)
            self._faiss = ann
        self.ann = ann
        #: the manifest it was opened with (None when built in this process)
        self.manifest: dict[str, Any] | None = None

    # ---- building and loading -----------------------------------------------------------
    @classmethod
    def build(cls, passages: Sequence[Passage], index_dir: str | Path, encoder: Any = None,
              batch_size: int = 64) -> DenseRetriever:
        """Encode ``passages`` and persist the index under ``index_dir``."""
        passages = check_passages(passages, "dense")
        encoder = encoder or get_encoder()
        vecs = encoder.encode([p.render() for p in passages], batch_size=batch_size)
        vecs = np.asarray(vecs, dtype=np.float32)
        enc_name = str(getattr(encoder, "name", type(encoder).__name__))

        index_dir = Path(index_dir)
        ann = build_for(vecs)  # None below the size threshold: exact search
        retriever = cls(passages, vecs, encoder=encoder, encoder_name=enc_name, ann=ann)
        retriever.save(index_dir)
        return retriever

    def save(self, index_dir: str | Path, extra: dict[str, Any] | None = None) -> None:
        """Write this index under ``index_dir``: embeddings, passages, the HNSW graph when
        there is one, the manifest last (``extra``: more manifest fields)."""
        index_dir = Path(index_dir)
        vecs = self.embeddings
        if self.ann is not None:
            self.ann.save(index_dir)
        atomic_write(index_dir / EMBEDDINGS, lambda fh: np.save(fh, vecs, allow_pickle=False),
                     mode="wb")
        write_passages(index_dir / PASSAGES, self.passages)
        write_manifest(index_dir, {"kind": "dense", "encoder": self.encoder_name,
                                   "dim": int(vecs.shape[1]), "count": len(self.passages),
                                   "fingerprint": self.fingerprint,
                                   **({"ann": self.ann.describe()} if self.ann else {}),
                                   **(extra or {})})

    @classmethod
    def load(cls, index_dir: str | Path, encoder: Any = None, backend: str = "numpy"
             ) -> DenseRetriever:
        """Load an index written by :meth:`build` (no pickles: ``allow_pickle=False``)."""
        index_dir = Path(index_dir)
        manifest = read_manifest(index_dir, "dense")
        try:
            vecs = np.load(index_dir / EMBEDDINGS, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise RetrievalIndexError(f"cannot read {index_dir / EMBEDDINGS}: {exc}",
                              hint="rebuild the index") from exc
        passages = read_passages(index_dir / PASSAGES)

        ann = load_for(index_dir, vecs) if backend == "numpy" else None
        retriever = cls(passages, vecs, encoder=encoder,
                        encoder_name=str(manifest.get("encoder", "all-MiniLM-L6-v2")),
                        backend=backend, ann=ann)
        retriever.manifest = manifest
        if manifest.get("fingerprint") not in (None, retriever.fingerprint):
            raise RetrievalIndexError(f"dense index at {index_dir} does not match its manifest "
                              "(files changed after building)", hint="rebuild the index")
        return retriever

    # ---- Retriever protocol -------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with TimedSearch(self.name, query, k):
            self._warn_if_truncated(query)
            q = np.asarray(self.encoder.encode([query]), dtype=np.float32)[0]
            return self._top_k(q[None, :], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        checked = [check_query(q, k)[0] for q in queries]
        if not checked:
            return []
        for query in checked:
            self._warn_if_truncated(query)
        qs = np.asarray(self.encoder.encode(checked), dtype=np.float32)
        out = []
        for query, q in zip(checked, qs, strict=True):  # one traced call per query
            with TimedSearch(self.name, query, k):
                out.extend(self._top_k(q[None, :], k))
        return out

    def _top_k(self, qs: np.ndarray, k: int) -> list[list[Passage]]:
        if self._faiss is not None:
            kk = min(k, len(self.passages))
            scores, idx = self._faiss.search(np.ascontiguousarray(qs, dtype=np.float32), kk)
            return [[self.passages[int(i)].with_score(float(s))
                     for s, i in sorted(zip(row_s, row_i, strict=True),
                                        key=lambda t: (-float(t[0]), int(t[1]))) if i >= 0]
                    for row_s, row_i in zip(scores, idx, strict=True)]
        all_scores = qs @ self.embeddings.T
        return [self._top(row, k) for row in all_scores]

    def _warn_if_truncated(self, query: str) -> None:
        counter = getattr(self.encoder, "token_count", None)
        if counter is not None:  # the packaged encoder: counts under its encoding lock
            limit = getattr(self.encoder, "max_tokens", None)
            if not limit:
                return
            n = counter(query)
        else:  # a custom encoder exposing a sentence-transformers model
            model = getattr(self.encoder, "model", None)
            tok = getattr(model, "tokenizer", None)
            limit = getattr(model, "max_seq_length", None)
            if tok is None or not limit:
                return
            n = len(tok(query, add_special_tokens=True)["input_ids"])
        if n > limit:
            log.warning("query has %d tokens; the dense encoder reads only the first %d: %.80r",
                        n, limit, query)

    def get(self, pid: str) -> Passage | None:
        return self._by_id.get(pid)

    def _top(self, scores: np.ndarray, k: int) -> list[Passage]:
        k = min(k, len(self.passages))
        idx = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        # stable order: score descending, then corpus position (deterministic ties)
        idx = sorted(idx.tolist(), key=lambda i: (-float(scores[i]), i))
        return [self.passages[i].with_score(float(scores[i])) for i in idx]
