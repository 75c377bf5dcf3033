"""The ColBERT retriever: open a built index, search it, get passages by id.

:class:`ColBERTRetriever` is the thin front (like colbert-ai's own ``Searcher``);
:meth:`ColBERTRetriever.build` hands the work to :mod:`ambiqa.retrieval.colbert.build` and
opens the result. ``ambiqa index``'s entry point, which also builds sharded indexes, is
:func:`ambiqa.retrieval.indexing.build_index` (above this module and
:mod:`ambiqa.retrieval.sharded`, so neither imports the other in a circle).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from ambiqa.errors import AmbiqaError, RetrievalIndexError
from ambiqa.retrieval.base import TimedSearch, check_query
from ambiqa.retrieval.checkpoint import checkpoint_info, identity_checkpoint
from ambiqa.retrieval.colbert.build import build
from ambiqa.retrieval.colbert.devices import run_config_kwargs
from ambiqa.retrieval.colbert.manifest import (
    LOG_FILE,
    check_colbert_files,
    check_corpus,
    check_name,
    read_collection,
    read_manifest,
    rebuild_hint,
)
from ambiqa.retrieval.colbert.patches import (
    QUERY_HARD_MAX,
    import_colbert,
    install_query_fit,
    query_token_count,
)
from ambiqa.retrieval.colbert.progress import extensions_built
from ambiqa.types import Passage, SharedResource

log = logging.getLogger(__name__)


# PLAID's candidate settings per k bucket: (largest k, settings); larger k gets a wide
# default. colbert-ai's own choice for these buckets:
COLBERT_AI_SETTINGS: tuple[tuple[int, dict[str, Any]], ...] = (
    (10, {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 256}),
    (100, {"ncells": 2, "centroid_score_threshold": 0.45, "ndocs": 1024}),
)
# ambiqa's, chosen on 150 ASQA *train* questions over the 12.8k-passage `wiki` index (128-d
# trained checkpoint; benchmarks/results/colbert_search_settings.md): recall@5 was 0.893 for
# every ncells / threshold / ndocs <= 256 and 0.900 at ndocs 1024 for 3-4x the rank time, and
# recall@20 0.927 at ndocs 256 against 0.933 at 1024 for ~3x; so the cheapest setting of
# equal recall per bucket.
SEARCH_SETTINGS: tuple[tuple[int, dict[str, Any]], ...] = (
    (10, {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 128}),
    (100, {"ncells": 2, "centroid_score_threshold": 0.45, "ndocs": 256}),
)


def _search_params(k: int, table: Sequence[tuple[int, dict[str, Any]]] | None = None
                   ) -> dict[str, Any]:
    """PLAID settings for a given k, set on every call.

    colbert-ai fills these in on the *first* search only and keeps them, so results would
    depend on the first call's k; setting them per call keeps every search reproducible.
    """
    for max_k, params in table or SEARCH_SETTINGS:
        if k <= max_k:
            return {**params, "ndocs": max(int(params["ndocs"]), 4 * k)}
    return {"ncells": 4, "centroid_score_threshold": 0.4, "ndocs": max(k * 4, 4096)}


class ColBERTRetriever(SharedResource):
    """A colbert-ai PLAID index opened for search (the Retriever protocol).

    The searcher (model + compressed index) loads on the first search, once, and every search
    runs under one lock: torch modules and colbert-ai's searcher config are not re-entrant.

    * ``search(query, k)`` returns the top ``k`` passages, best first, scored by ColBERT's
      MaxSim sum. If ``k`` is at least the number of indexed passages, every passage is scored
      exactly and all are returned (so ``len(result) == min(k, len(index))``).
    * A query is never cut below QUERY_HARD_MAX word pieces: the checkpoint's ``query_maxlen``
      (32) is the [MASK]-padded length of a short query and a longer one grows to fit (see
      :func:`fit_query_tensors`); only beyond QUERY_HARD_MAX is it cut, with a warning.
    * ``get(pid)`` takes a corpus passage id and returns the passage (score 0).
    """

    name = "colbert"

    def __init__(self, index_dir: Path, manifest: dict[str, Any],
                 passages: Sequence[Passage]) -> None:
        self.index_dir = Path(index_dir)
        self.index_name = self.index_dir.name
        self.manifest = manifest
        self._passages = list(passages)
        self._pid_of = {p.id: i for i, p in enumerate(self._passages)}
        self._lock = threading.Lock()
        self._searcher: Any = None
        self._min_query_len = int(manifest["query_maxlen"])
        self._max_query_tokens = QUERY_HARD_MAX - 3
        # PLAID settings per k bucket; None: SEARCH_SETTINGS (set_search_settings overrides)
        self.search_settings: tuple[tuple[int, dict[str, Any]], ...] | None = None

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def build(cls, passages: Iterable[Passage] | str | os.PathLike[str], index_root: Path,
              name: str, checkpoint: Path | None = None, nbits: int = 2, doc_maxlen: int = 180,
              nranks: int = 1, progress: bool = True, kmeans_share: float | None = None
              ) -> ColBERTRetriever:
        """Index ``passages`` (passage objects or a corpus JSONL path) as ``index_root/name``.

        An existing index of that name is replaced only once the new one is complete.
        ``checkpoint`` defaults to the MiniLM identity checkpoint. ``progress`` shows stage
        messages, a bar and elapsed time on stderr; colbert-ai's own output goes to
        ``colbert.log`` in the index either way. See :func:`ambiqa.retrieval.colbert.build.build`.
        """
        target = build(passages, index_root, name, checkpoint=checkpoint, nbits=nbits,
                       doc_maxlen=doc_maxlen, nranks=nranks, progress=progress,
                       kmeans_share=kmeans_share)
        return cls.load(target.parent, name)

    @classmethod
    def load(cls, index_root: Path, name: str,
             corpus: Iterable[Passage] | str | os.PathLike[str] | None = None
             ) -> ColBERTRetriever:
        """Open ``index_root/name``; the model loads on the first search.

        With ``corpus``, also check that the index was built from exactly that corpus (same
        ids, titles and texts in the same order) and raise :class:`RetrievalIndexError` if not.
        """
        check_name(name)
        index_dir = Path(index_root).expanduser() / name
        manifest = read_manifest(index_dir)
        check_colbert_files(index_dir, manifest["n_passages"])
        passages = read_collection(index_dir, manifest)
        if corpus is not None:
            check_corpus(manifest, corpus, index_dir)
        return cls(index_dir, manifest, passages)

    # ---- protocol ------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """Index name + corpus fingerprint + checkpoint id."""
        m = self.manifest
        return f"colbert:{self.index_name}:{m['corpus_sha256'][:16]}:{m['checkpoint']['id']}"

    def __len__(self) -> int:
        return len(self._passages)

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with TimedSearch(self.name, query, k), self._lock:
            searcher = self._ensure_searcher()
            self._warn_if_truncated(searcher, query)
            q = searcher.checkpoint.queryFromText([query], to_cpu=True)
            return self._rank(searcher, q, k)

    def batch_search(self, queries: Sequence[str], k: int = 5, bsize: int = 32
                     ) -> list[list[Passage]]:
        """Search several queries, encoding them ``bsize`` at a time (for evaluation).

        The ranking is ``search``'s for each query; only the query encoding is batched (a
        padded batch can differ from a lone encoding in the last float bits, so a score tie
        may break the other way). Each query is timed and traced as one retriever call.
        """
        checked = [check_query(q, k) for q in queries]
        out: list[list[Passage]] = []
        for start in range(0, len(checked), bsize):
            chunk = checked[start:start + bsize]
            with self._lock:
                searcher = self._ensure_searcher()
                for q, _ in chunk:
                    self._warn_if_truncated(searcher, q)
                qs = searcher.checkpoint.queryFromText([q for q, _ in chunk], to_cpu=True)
            for (q, k_), row in zip(chunk, qs, strict=True):
                # drop the [PAD] rows a batch adds (zero vectors) so candidate generation
                # sees exactly the query's own vectors
                keep = int(row.norm(dim=-1).gt(0).nonzero().max()) + 1
                with TimedSearch(self.name, q, k_), self._lock:
                    out.append(self._rank(searcher, row[:keep].unsqueeze(0), k_))
        return out

    def get(self, pid: str) -> Passage | None:
        i = self._pid_of.get(pid)
        return None if i is None else self._passages[i]

    def warm(self) -> ColBERTRetriever:
        """Load the model and the compressed index now instead of on the first search."""
        with self._lock:
            self._ensure_searcher()
        return self

    @property
    def is_warm(self) -> bool:
        """Whether the searcher is loaded already (by :meth:`warm` or a first search)."""
        return self._searcher is not None

    @property
    def warm_up_label(self) -> str:
        """What :meth:`warm` loads, for the warm-up's message (:mod:`ambiqa.retrieval.warmup`):
        the first load on a machine also compiles colbert-ai's C++ extensions (86 s seen),
        which a user should be told before the wait, not after."""
        extra = "" if extensions_built() else (
            " (first use on this machine: compiling colbert-ai's C++ extensions, ~30 s each, "
            "once)")
        return f"the ColBERT model and index {self.index_name!r}{extra}"

    # ---- internals -----------------------------------------------------------------------
    def _ensure_searcher(self) -> Any:
        if self._searcher is not None:
            return self._searcher
        import_colbert()
        ckpt = self.manifest["checkpoint"]
        path = Path(ckpt["path"])
        if not path.is_dir() and ckpt["kind"] == "identity":
            path = identity_checkpoint()  # the cache moved or was cleared: rebuild it
        try:
            info = checkpoint_info(path)
        except AmbiqaError as exc:
            raise RetrievalIndexError(
                f"index {self.index_dir} was built with checkpoint {path}, which "
                f"is unusable: {exc.message}",
                hint=f"restore the checkpoint or rebuild: "
                f"{rebuild_hint(self.index_name)}") from exc
        if info["id"] != ckpt.get("id"):
            raise RetrievalIndexError(
                f"index {self.index_dir} was built with checkpoint {ckpt.get('id')}"
                f" but {path} now holds {info['id']}",
                hint=f"rebuild the index: {rebuild_hint(self.index_name)}")
        # colbert-ai (and torch under it) loads only when an index is searched
        from colbert.data import Collection
        from colbert.infra import Run, RunConfig
        from colbert.searcher import Searcher
        from colbert.utils.amp import MixedPrecisionManager

        log_path = self.index_dir / LOG_FILE
        try:
            log_fh: IO[str] = open(log_path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError:  # a read-only shared index
            log_fh = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        run_config = RunConfig(**run_config_kwargs(nranks=1))  # the GPUs torch sees, else CPU
        with log_fh, contextlib.redirect_stdout(log_fh), contextlib.redirect_stderr(log_fh), \
                warnings.catch_warnings(), Run().context(run_config):
            warnings.simplefilter("ignore")
            searcher = Searcher(index=self.index_name, index_root=str(self.index_dir.parent),
                                checkpoint=str(path), collection=Collection(data=self._passages),
                                verbose=0)
            # Mixed precision is a CUDA feature; on CPU it only warns on every call.
            searcher.checkpoint.amp_manager = MixedPrecisionManager(False)
            # Queries grow to fit instead of being cut; candidate generation reads the first
            # ``config.query_maxlen`` query vectors, so let it read them all.
            install_query_fit(searcher.checkpoint.query_tokenizer, self._min_query_len)
            searcher.config.query_maxlen = QUERY_HARD_MAX
        self._searcher = searcher
        self.checkpoint_dir = path  # the one searched with (adding encodes with it too)
        return searcher

    def _warn_if_truncated(self, searcher: Any, query: str) -> None:
        tok = searcher.checkpoint.query_tokenizer.tok
        n = query_token_count(tok, query)
        if n > self._max_query_tokens:
            log.warning("query has %d tokens; ColBERT reads only the first %d: %.80r", n,
                        self._max_query_tokens, query)

    def _rank(self, searcher: Any, q: Any, k: int) -> list[Passage]:
        n = len(self._passages)
        if k >= n:
            pids, scores = self._score_all(searcher, q)
        else:
            searcher.configure(**_search_params(k, self.search_settings))
            pids, _, scores = searcher.dense_search(q, k)
            if len(pids) < k:  # too few candidates near the query's centroids: score all
                pids, scores = self._score_all(searcher, q)
        return [self._passages[pid].with_score(s) for pid, s in zip(pids[:k], scores[:k],
                                                                     strict=True)]

    def _score_all(self, searcher: Any, q: Any, chunk: int = 512) -> tuple[list[int], list[float]]:
        """Exact MaxSim scores for every passage, decompressed ``chunk`` passages at a time."""
        scored: list[tuple[float, int]] = []
        for start in range(0, len(self._passages), chunk):
            pids = list(range(start, min(start + chunk, len(self._passages))))
            got_pids, got_scores = searcher.ranker.rank(searcher.config, q, pids=pids)
            scored.extend(zip(got_scores, got_pids, strict=True))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return [p for _, p in scored], [s for s, _ in scored]

