"""Re-ranking a candidate set: SentenceBERT cosine and ColBERT MaxSim.

* :class:`SentenceReranker` -- cosine between unit MiniLM embeddings of the query (or the mean
  over several queries) and each passage. VerDICt's second stage re-ranks with it by default.
  Diva (eq. 5's pruning, the ``candidates`` mode), ToC's per-node re-ranking and EoR's ``@RR``
  (:class:`ambiqa.retrieval.pool.PoolRetriever`) compute the same cosine with their own
  encoder calls rather than through this class.
* :class:`ColBERTReranker` -- exact late-interaction scores (sum over query tokens of the best
  cosine among the passage's tokens) from a ColBERT checkpoint, for candidates from any other
  retriever (BM25, dense, a web source). Passages are encoded from their text, so candidates
  need not be in a ColBERT index.
* :class:`RerankingRetriever` -- any retriever's top ``depth`` re-ranked to top ``k``, itself a
  retriever (e.g. BM25 candidates, ColBERT order).

Ties keep the candidates' original order, so results are deterministic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError
from ambiqa.retrieval.base import TimedSearch, check_query
from ambiqa.retrieval.checkpoint import checkpoint_id, default_checkpoint, validate_checkpoint
from ambiqa.retrieval.colbert.patches import import_colbert, install_query_fit
from ambiqa.retrieval.encoder import SharedEncoder, unit_rows
from ambiqa.retrieval.triples import colbert_text
from ambiqa.tracing import record_compute
from ambiqa.types import Passage, SharedResource


def _order(scores: Sequence[float], candidates: Sequence[Passage], k: int | None
           ) -> list[Passage]:
    idx = sorted(range(len(candidates)), key=lambda i: (-float(scores[i]), i))
    if k is not None:
        idx = idx[:k]
    return [candidates[i].with_score(float(scores[i])) for i in idx]


def _check_k(k: int | None) -> None:
    check_int("k", k, none_ok=True)


class SentenceReranker(SharedResource):
    """Cosine re-ranking with a sentence encoder (default: the packaged MiniLM)."""

    name = "sbert"

    encoder = SharedEncoder()

    def __init__(self, encoder: Any = None) -> None:
        self.encoder = encoder

    @property
    def id(self) -> str:
        return f"sbert:{getattr(self.encoder, 'name', type(self.encoder).__name__)}"

    def scores(self, queries: Sequence[str], candidates: Sequence[Passage]) -> np.ndarray:
        """Mean cosine of each candidate to ``queries`` (shape ``(len(candidates),)``)."""
        if not candidates:
            return np.zeros(0, dtype=np.float32)
        if not queries:
            raise ConfigError("re-ranking needs at least one query")
        # rows scaled to unit length: a dot product is a cosine whatever encoder was injected
        vecs = unit_rows(self.encoder.encode(list(queries) + [p.render() for p in candidates])
                         ).astype(np.float32)
        q, d = vecs[: len(queries)], vecs[len(queries):]
        return (d @ q.T).mean(axis=1)

    def rerank(self, query: str | Sequence[str], candidates: Sequence[Passage],
               k: int | None = None) -> list[Passage]:
        """Candidates by cosine to ``query`` (or mean cosine to several queries), best first."""
        _check_k(k)
        queries = [query] if isinstance(query, str) else list(query)
        candidates = list(candidates)
        return _order(self.scores(queries, candidates), candidates, k)


class ColBERTReranker(SharedResource):
    """Exact ColBERT MaxSim over candidate passages, encoded from their text.

    Built from a :class:`~ambiqa.retrieval.colbert.ColBERTRetriever` (reuses its loaded model)
    or from a checkpoint directory (default: :func:`default_checkpoint`). Passages are encoded
    as ``"title | text"``, the form colbert-ai indexes.
    """

    name = "colbert-rerank"

    def __init__(self, retriever: Any = None, checkpoint: str | Path | None = None) -> None:
        self._retriever = retriever
        self._checkpoint_path = Path(checkpoint) if checkpoint else None
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        if self._retriever is not None:
            return f"colbert:{self._retriever.manifest['checkpoint']['id']}"
        return f"colbert:{checkpoint_id(self._checkpoint_path or default_checkpoint())}"

    def _ensure_model(self) -> Any:
        if self._model is not None:
            return self._model
        if self._retriever is not None:
            self._model = self._retriever._ensure_searcher().checkpoint
            return self._model
        import_colbert()
        # colbert-ai (and torch under it) loads only when a ColBERT re-ranker first scores
        from colbert.infra import ColBERTConfig
        from colbert.modeling.checkpoint import Checkpoint
        from colbert.utils.amp import MixedPrecisionManager

        path = validate_checkpoint(self._checkpoint_path or default_checkpoint())
        model = Checkpoint(str(path), colbert_config=ColBERTConfig(checkpoint=str(path)),
                           verbose=0)
        model.amp_manager = MixedPrecisionManager(False)
        # the same query handling as search: long queries grow to fit instead of being cut
        install_query_fit(model.query_tokenizer, int(model.colbert_config.query_maxlen))
        self._model = model
        return model

    def warm(self) -> ColBERTReranker:
        """Load the model now instead of on the first re-ranking (serve's start-up)."""
        with self._lock:
            self._ensure_model()
        return self

    @property
    def is_warm(self) -> bool:
        """Whether the model is loaded; one built from a retriever shares that retriever's
        searcher, which the warm-up loads through the retriever (``_retriever``)."""
        return self._model is not None or self._retriever is not None

    warm_up_label = "the ColBERT re-ranking model"

    def scores(self, query: str, candidates: Sequence[Passage]) -> np.ndarray:
        if not candidates:
            return np.zeros(0, dtype=np.float32)
        import torch  # heavy; loaded by _ensure_model's colbert-ai anyway

        start = time.perf_counter()
        with self._lock, torch.inference_mode():
            model = self._ensure_model()
            q = model.queryFromText([query])[0]  # (query length, dim), unit rows
            docs, mask = self._encode_docs(model, candidates)
            sims = torch.einsum("qd,ntd->nqt", q.float(), docs.float())
            sims = sims.masked_fill(~mask.unsqueeze(1), -1e4)
            out = sims.max(dim=2).values.sum(dim=1).numpy()
        record_compute("colbert-rerank", start, time.perf_counter(), f"{len(candidates)} docs")
        return out

    @staticmethod
    def _encode_docs(model: Any, candidates: Sequence[Passage]) -> tuple[Any, Any]:
        """Padded doc token embeddings (n, t, dim) and their mask (n, t)."""
        texts = [colbert_text(p.title, p.text) for p in candidates]
        ids, att = model.doc_tokenizer.tensorize(texts)
        docs, mask = model.doc(ids, att, keep_dims="return_mask")
        return docs, mask.squeeze(-1).bool()

    def rerank(self, query: str, candidates: Sequence[Passage], k: int | None = None
               ) -> list[Passage]:
        _check_k(k)
        candidates = list(candidates)
        return _order(self.scores(query, candidates), candidates, k)


class RerankingRetriever(SharedResource):
    """``base``'s top ``depth`` candidates re-ranked by ``reranker``; a Retriever itself."""

    def __init__(self, base: Any, reranker: Any, depth: int = 50) -> None:
        check_int("depth", depth)
        self.base, self.reranker, self.depth = base, reranker, depth
        self.name = f"{getattr(base, 'name', 'retriever')}+{getattr(reranker, 'name', 'rr')}"
        self.index_name = getattr(base, "index_name", None)

    @property
    def fingerprint(self) -> str:
        return f"rerank({self.reranker.id},{self.depth})[{self.base.fingerprint}]"

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        candidates = self.base.search(query, max(self.depth, k))
        with TimedSearch(self.name, query, k):
            return self.reranker.rerank(query, candidates, k)

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Passage | None:
        return self.base.get(pid)
