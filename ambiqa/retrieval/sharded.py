"""Corpora that outgrow one index: shards built one after another, searched side by side.

The path for a corpus the size of a Wikipedia dump (tens of millions of passages) on machines
like this one:

1. ``ambiqa index dump.jsonl --name wiki --shards N [--kind colbert|dense]`` streams the file
   once to count it, then builds ``wiki-0`` ... ``wiki-{N-1}`` from consecutive slices, each
   streamed from the file (only the current shard is in memory while it is built). Shards can
   also be built on different machines with the same checkpoint or encoder and copied under
   one index root; ``wiki.shards.json`` lists them and their kind.
2. ``--nranks R`` runs each ColBERT shard's indexing in R processes (colbert-ai's launcher with
   ambiqa's gloo shim); useful with spare cores or several machines' worth of memory per shard.
3. :class:`ShardedRetriever` searches every shard for the top ``k`` at the same time (a thread
   pool: ColBERT's and faiss's work runs in torch / BLAS with the GIL released) and merges by
   score. The merge is exact for top-k -- each shard returns its own top-k, and the global
   top-k is among them -- when scores of different shards are comparable:

   * **colbert**: MaxSim scores of one checkpoint do not depend on the collection; shards must
     share one checkpoint (checked on open);
   * **dense**: cosine similarities of one encoder do not either; the query is encoded once
     and each shard's matrix (or HNSW graph, :mod:`ambiqa.retrieval.ann`) is searched with it;
     shards must share one encoder and dimension (checked on open);
   * **bm25** is refused (:func:`check_shardable`): a BM25 score depends on its shard's
     document frequencies and average length, so the same passage scores differently in
     different shards and a merge by score would not be BM25's ranking over the corpus.
     One bm25s index holds a corpus of millions of passages in a sparse matrix; shard a
     corpus beyond that with ``--kind dense`` or ``colbert``.

Each search through a :class:`ShardedRetriever` is one retriever call in the cost trace (the
shards' own calls run in pool threads, outside the caller's trace).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.fsutil import atomic_write_json
from ambiqa.jsonio import read_json
from ambiqa.paths import index_root as default_root
from ambiqa.retrieval.base import TimedSearch, check_query
from ambiqa.retrieval.colbert.manifest import iter_corpus
from ambiqa.retrieval.kinds import (
    DEFAULT_KIND,
    BuildOptions,
    find_retriever_kind,
    names_text,
    retriever_kind,
    shardable_kinds,
)
from ambiqa.tracing import record_retrieval
from ambiqa.types import Passage, SharedResource

SHARDS_SUFFIX = ".shards.json"


def shards_file(index_root: Path, name: str) -> Path:
    return Path(index_root) / f"{name}{SHARDS_SUFFIX}"


def check_shardable(kind: str, shards: int) -> None:
    """Refuse ``--shards N`` for a kind whose shards could not be merged (before any work)."""
    check_int("shards", shards)
    spec = find_retriever_kind(kind)
    others = names_text([f"--kind {n}" for n in reversed(shardable_kinds())])
    if shards > 1 and spec is not None and not spec.shardable:
        raise ConfigError(f"--shards {shards} is not supported for --kind {kind}: "
                          f"{spec.not_shardable}",
                          hint=f"build one {kind} index (drop --shards), or shard with {others}")
    if shards > 1 and spec is None:
        raise ConfigError(f"unknown index kind {kind!r}",
                          hint=f"use one of {', '.join(shardable_kinds())}")


def _count_passages(path: str | os.PathLike[str]) -> int:
    with open(path, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def build_sharded(corpus_path: str | os.PathLike[str], name: str, index_root: Path | None,
                  shards: int, checkpoint: Path | None = None, progress: bool = True,
                  nranks: int = 1, kmeans_share: float | None = None,
                  kind: str = DEFAULT_KIND) -> ShardedRetriever:
    """Build ``name-0..name-{shards-1}`` of ``kind`` from consecutive slices of a corpus file.

    Each shard is committed on its own (a killed build keeps the finished shards; the shard
    list is written last, so a half-built set never opens as complete). The kind's build
    settings are resolved once, so every shard gets the same (one ColBERT checkpoint).
    """
    check_shardable(kind, shards)
    spec = retriever_kind(kind)
    options = spec.prepare(BuildOptions(checkpoint=checkpoint, progress=progress,
                                        nranks=nranks, kmeans_share=kmeans_share))
    root = Path(index_root).expanduser() if index_root else default_root()
    total = _count_passages(corpus_path)
    if total < shards:
        raise RetrievalIndexError(f"cannot split {total} passages into {shards} shards")
    per = -(-total // shards)
    names = []
    for i in range(shards):
        part = itertools.islice(iter_corpus(corpus_path), i * per, min(total, (i + 1) * per))
        shard_name = f"{name}-{i}"
        spec.build(part, root, shard_name, options)
        names.append(shard_name)
    atomic_write_json(shards_file(root, name),
                      {"name": name, "kind": kind, "shards": names, "n_passages": total,
                       "source": str(Path(corpus_path).resolve())})
    return ShardedRetriever.load(root, name)


def default_workers(n_shards: int) -> int:
    """Threads searching shards at once: one per shard, at most two per CPU core."""
    return max(1, min(n_shards, 2 * (os.cpu_count() or 1)))


class ShardedRetriever(SharedResource):
    """Search several indexes of one kind (shards of one corpus) at once; merge by score."""

    def __init__(self, index_name: str, shards: Sequence[Any], kind: str = DEFAULT_KIND,
                 max_workers: int | None = None) -> None:
        if not shards:
            raise RetrievalIndexError(f"sharded index {index_name!r} lists no shards")
        spec = find_retriever_kind(kind)
        if spec is not None and not spec.shardable:
            raise RetrievalIndexError(f"sharded index {index_name!r} is of kind {kind}, which "
                                      f"cannot be sharded: {spec.not_shardable}",
                                      hint="rebuild it as one index")
        if spec is not None:  # the kind's own check that its shards' scores compare
            spec.check_shards(index_name, list(shards))
        self.index_name = index_name
        self.name = kind
        self.kind = kind
        self.shards = list(shards)
        self.max_workers = max_workers or default_workers(len(self.shards))
        self._pool: ThreadPoolExecutor | None = None
        self._ready = False
        self._lock = threading.Lock()

    @classmethod
    def load(cls, index_root: Path, name: str, kind: str | None = None) -> ShardedRetriever:
        """Open the shard set ``name`` (its kind is read from ``NAME.shards.json``; ``kind``,
        when given, must match it)."""
        path = shards_file(index_root, name)
        fix = f"rebuild: ambiqa index CORPUS --name {name} --shards N"
        spec = read_json(path, error=RetrievalIndexError, what="shard list", hint=fix)
        try:
            names = [str(n) for n in spec["shards"]]
            stored = str(spec.get("kind", DEFAULT_KIND))  # sets written before kinds: ColBERT
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RetrievalIndexError(f"cannot read the shard list {path}: {exc}",
                              hint=f"rebuild: ambiqa index CORPUS --name {name} --shards N"
                              ) from exc
        if kind is not None and kind != stored:
            raise RetrievalIndexError(f"{name!r} is a sharded {stored} index, not {kind}",
                                      hint=f"open it as {stored}:{name} (or just {name})")
        kind_spec = find_retriever_kind(stored)
        if kind_spec is None or not kind_spec.shardable:
            raise RetrievalIndexError(f"{path} names kind {stored!r}, which cannot be sharded",
                                      hint=f"rebuild: ambiqa index CORPUS --name {name}")
        return cls(name, [kind_spec.open(Path(index_root), n) for n in names], kind=stored)

    @property
    def fingerprint(self) -> str:
        return "sharded:" + "+".join(s.fingerprint for s in self.shards)

    def __len__(self) -> int:
        return sum(len(getattr(s, "passages", None) or s) for s in self.shards)

    # ---- concurrency -------------------------------------------------------------------------
    def _fan_out(self, fn: Callable[[Any], Any]) -> list[Any]:
        """``fn(shard)`` for every shard at once, results in shard order.

        The first call loads every shard's model one after another first (colbert-ai keeps
        its run configuration on a process-wide stack that concurrent loads would interleave).
        """
        with self._lock:
            if not self._ready:
                for shard in self.shards:
                    warm = getattr(shard, "warm", None)
                    if callable(warm):
                        warm()
                self._ready = True
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers,
                                                thread_name_prefix=f"ambiqa-shard-{self.index_name}")
            pool = self._pool
        return list(pool.map(fn, self.shards))

    def close(self) -> None:
        """Stop the search threads (a later search starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # ---- Retriever protocol -----------------------------------------------------------------
    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with TimedSearch(self.name, query, k):
            if self.kind == "dense":
                return self._dense_search([query], k)[0]
            return _merge(self._fan_out(lambda s: s.search(query, k)), k)

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        """Every query against every shard (each shard batches its own query encoding).

        Each query is traced as one retriever call carrying an equal share of the batch's
        time, so the trace's total equals the time spent."""
        checked = [check_query(q, k)[0] for q in queries]
        if not checked:
            return []
        t0 = time.perf_counter()
        if self.kind == "dense":
            out = self._dense_search(checked, k)
        else:
            per_shard = self._fan_out(lambda s: _shard_batch(s, checked, k))
            out = [_merge([rows[i] for rows in per_shard], k) for i in range(len(checked))]
        step = (time.perf_counter() - t0) / len(checked)
        for i, q in enumerate(checked):
            record_retrieval(self.name, q, k, t0 + i * step, t0 + (i + 1) * step)
        return out

    def _dense_search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Encode the queries once, search every shard's vectors with them, merge."""
        import numpy as np

        first = self.shards[0]
        for q in queries:
            first._warn_if_truncated(q)
        qs = np.asarray(first.encoder.encode(queries), dtype=np.float32)
        per_shard = self._fan_out(lambda s: s._top_k(qs, k))
        return [_merge([rows[i] for rows in per_shard], k) for i in range(len(queries))]

    def get(self, pid: str) -> Passage | None:
        for s in self.shards:
            found = s.get(pid)
            if found is not None:
                return found
        return None


def _shard_batch(shard: Any, queries: list[str], k: int) -> list[list[Passage]]:
    """A shard's batch search; one ``search`` per query for a shard object that implements
    only ``search`` (a user's own retriever wrapped as a shard)."""
    batch = getattr(shard, "batch_search", None)
    if batch is not None:
        return batch(queries, k)
    return [shard.search(q, k) for q in queries]


def _merge(lists: Sequence[Sequence[Passage]], k: int) -> list[Passage]:
    """The top ``k`` of several shards' ranked lists: score descending, ties by shard order
    then rank, so the merge is deterministic."""
    ranked = [(-(p.score or 0.0), si, r, p) for si, hits in enumerate(lists)
              for r, p in enumerate(hits)]
    ranked.sort(key=lambda t: t[:3])
    return [p for *_, p in ranked[:k]]
