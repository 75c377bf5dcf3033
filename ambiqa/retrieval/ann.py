"""Approximate nearest-neighbour search for large dense indexes: faiss HNSW.

Below :data:`ANN_MIN_PASSAGES` passages a dense index is searched exactly (one numpy
matrix-vector product: ~13k passages answer in about a millisecond and need nothing built).
From that size on, an exact scan costs tens of milliseconds per query and grows linearly, so
:class:`HNSWIndex` (faiss ``IndexHNSWFlat``, inner product on unit vectors = cosine) answers
instead; ``benchmarks/ann_scale.py`` measures build seconds, memory, query milliseconds and
recall@10 against the exact scan at 100k and 1M vectors (``benchmarks/results/ann/``).

Why HNSW and not IVF-PQ:

* **recall without a re-rank**: HNSW keeps the float32 vectors, so the scores it returns are
  the exact cosines of the passages it finds, and recall@10 >= 0.95 needs only a larger
  ``efSearch``. PQ codes approximate the scores; reaching the same recall needs a second,
  exact re-scoring pass over the full vectors, which are then held in RAM anyway.
* **no training**: IVF needs k-means on a sample of the corpus and a retrain when the corpus
  drifts; HNSW is built by inserting the vectors, nothing to fit or to choose per corpus but
  ``M`` and ``efConstruction``.
* **memory**: the dense retriever already holds the (n, 384) float32 matrix for ``get`` and
  the exact path; HNSW adds ``M * 2 * 4`` bytes per vector (256 B at ``M = 32``: +17%), where
  IVF-PQ's savings would only come by dropping the exact matrix we keep.
* **cost**: HNSW builds more slowly than IVF (insertion is a graph search per vector), so it is
  built once at ``ambiqa index`` time and saved beside the embeddings (faiss's own binary
  format, not a pickle); an index built by an older ambiqa gets it built in memory on load.

Searches pass ``efSearch`` per call (``SearchParametersHNSW``), never by mutating the shared
index, so concurrent searches with different ``k`` are safe.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.fsutil import atomic_write
from ambiqa.jsonio import read_json

log = logging.getLogger(__name__)

#: dense indexes with at least this many passages are searched through HNSW
ANN_MIN_PASSAGES = 100_000
#: environment override of :data:`ANN_MIN_PASSAGES` (tests force ANN on a small corpus)
ANN_MIN_ENV = "AMBIQA_DENSE_ANN_MIN"
ANN_FILE = "ann-hnsw.faiss"
ANN_META = "ann-hnsw.json"

#: graph degree; 32 is faiss's recommended balance of recall, memory and build time at 384-d
HNSW_M = 32
#: candidate list while inserting (build time vs graph quality)
EF_CONSTRUCTION = 40
#: candidate list while searching (raised to k when k is larger). Measured
#: (benchmarks/results/ann/): recall@10 0.996 on the real 12.8k-passage corpus, 0.987 at 100k
#: clustered synthetic vectors, but only 0.76 at 1M of them -- a 1M corpus needs a larger
#: graph or efSearch than these defaults for recall@10 >= 0.95
EF_SEARCH = 64


def ann_min_passages() -> int:
    """The size from which dense search goes approximate (``$AMBIQA_DENSE_ANN_MIN`` wins)."""
    raw = os.environ.get(ANN_MIN_ENV)
    if raw is None or raw == "":
        return ANN_MIN_PASSAGES
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{ANN_MIN_ENV}={raw!r} is not an integer",
                          hint=f"unset it or give a passage count, e.g. {ANN_MIN_PASSAGES}"
                          ) from exc
    if value < 1:
        raise ConfigError(f"{ANN_MIN_ENV} must be at least 1, got {value}")
    return value


def wants_ann(n: int, threshold: int | None = None) -> bool:
    """Whether an index of ``n`` passages should be searched approximately."""
    return n >= (ann_min_passages() if threshold is None else threshold)


class HNSWIndex:
    """A faiss HNSW graph over unit vectors, searched with ``efSearch >= k``.

    ``search(qs, k) -> (scores, ids)`` has faiss's shape, so the dense retriever uses it where
    it would use an exact ``IndexFlatIP``.
    """

    kind = "hnsw"

    def __init__(self, index: Any, m: int, ef_construction: int, ef_search: int) -> None:
        self.index = index
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search

    @classmethod
    def build(cls, vecs: np.ndarray, m: int = HNSW_M, ef_construction: int = EF_CONSTRUCTION,
              ef_search: int = EF_SEARCH) -> HNSWIndex:
        """Insert every row of ``vecs`` (float32, unit rows) into a new graph."""
        import faiss

        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.ndim != 2 or not len(vecs):
            raise RetrievalIndexError(f"cannot build an HNSW index over vectors of shape "
                                      f"{vecs.shape}", hint="rebuild the dense index")
        index = faiss.IndexHNSWFlat(int(vecs.shape[1]), m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        t0 = time.perf_counter()
        index.add(vecs)
        log.info("HNSW over %d vectors built in %.1f s", len(vecs), time.perf_counter() - t0)
        return cls(index, m, ef_construction, ef_search)

    def extended(self, vecs: np.ndarray) -> HNSWIndex:
        """A copy of this graph with the rows of ``vecs`` inserted after its own (adding to an
        index: the graph the open retriever searches is left as it is)."""
        import faiss

        index = faiss.deserialize_index(faiss.serialize_index(self.index))
        index.add(np.ascontiguousarray(vecs, dtype=np.float32))
        return type(self)(index, self.m, self.ef_construction, self.ef_search)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def search(self, qs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (scores, row ids) per query row; ids of -1 pad a short answer."""
        import faiss

        params = faiss.SearchParametersHNSW()
        params.efSearch = max(self.ef_search, int(k))
        return self.index.search(np.ascontiguousarray(qs, dtype=np.float32), int(k),
                                 params=params)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "m": self.m, "ef_construction": self.ef_construction,
                "ef_search": self.ef_search, "n": self.ntotal, "dim": self.dim}

    def save(self, index_dir: Path) -> None:
        """Write the graph and its settings into ``index_dir`` (each file atomically)."""
        import faiss

        blob = faiss.serialize_index(self.index)
        atomic_write(Path(index_dir) / ANN_FILE, lambda fh: fh.write(blob.tobytes()),
                     mode="wb")
        atomic_write(Path(index_dir) / ANN_META,
                     lambda fh: json.dump(self.describe(), fh, indent=2))

    @classmethod
    def load(cls, index_dir: Path, n: int, dim: int) -> HNSWIndex | None:
        """The saved graph of ``index_dir`` (None when there is none); a graph that does not
        match the embeddings (other count or dimension) is a :class:`RetrievalIndexError`."""
        import faiss

        path, meta_path = Path(index_dir) / ANN_FILE, Path(index_dir) / ANN_META
        if not path.is_file() or not meta_path.is_file():
            return None
        try:
            meta = read_json(meta_path, error=RetrievalIndexError, hint="rebuild the dense index")
            index = faiss.deserialize_index(np.fromfile(path, dtype=np.uint8))
        except (OSError, ValueError, RuntimeError) as exc:
            raise RetrievalIndexError(f"cannot read the HNSW index {path}: {exc}",
                                      hint="rebuild the dense index") from exc
        if int(index.ntotal) != n or int(index.d) != dim:
            raise RetrievalIndexError(
                f"the HNSW index {path} holds {index.ntotal} vectors of dim {index.d}, the "
                f"embeddings {n} of dim {dim} (files changed after building)",
                hint="rebuild the dense index")
        return cls(index, int(meta.get("m", HNSW_M)),
                   int(meta.get("ef_construction", EF_CONSTRUCTION)),
                   int(meta.get("ef_search", EF_SEARCH)))


def build_for(vecs: np.ndarray, index_dir: Path | None = None,
              threshold: int | None = None) -> HNSWIndex | None:
    """At build time: an HNSW index for ``vecs`` if the index is large enough (saved into
    ``index_dir`` when given), else None (exact search)."""
    if not wants_ann(len(vecs), threshold):
        return None
    ann = HNSWIndex.build(vecs)
    if index_dir is not None:
        ann.save(Path(index_dir))
    return ann


def load_for(index_dir: Path, vecs: np.ndarray, threshold: int | None = None
             ) -> HNSWIndex | None:
    """At load time: the saved HNSW index, or one built now for a large index saved without
    it (an older ambiqa, or a lowered threshold), or None below the threshold."""
    if not wants_ann(len(vecs), threshold):
        return None
    ann = HNSWIndex.load(Path(index_dir), len(vecs), int(vecs.shape[1]))
    if ann is None:
        log.warning("dense index %s has %d passages but no saved HNSW index; building it in "
                    "memory (rebuild the index to save it)", index_dir, len(vecs))
        ann = HNSWIndex.build(vecs)
    return ann
