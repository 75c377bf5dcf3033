"""On-disk retrieval cache: one search per (retriever fingerprint, query, k), ever.

Why: EoR weight tuning replays the same questions through every pool member many times, and
repeated evaluations of programs over one split ask the same queries again; ColBERT costs
~25 ms and the dense retriever a sentence encoding per query. :class:`CachedRetriever` wraps
any retriever and answers repeated searches from disk.

Keying and invalidation: the key is sha256 of ``fingerprint \\0 query \\0 k``. The fingerprint
changes with the corpus, the checkpoint and the retriever's settings, so a rebuilt index never
sees stale results; nothing else needs invalidating. ``k`` is part of the key because ColBERT's
search parameters depend on it (top-5 is not always the prefix of top-20).

Layout: ``<root>/<fingerprint-hash[:16]>/<key[:2]>/<key>.json`` holding the query, k,
fingerprint and the passages (id, title, text, score), so an entry can be audited by hand.

Concurrency: entries are written with :func:`ambiqa.fsutil.atomic_write_json` (temp file +
rename), so readers in any thread or process see a complete entry or none. Two writers of
the same key write identical content; the last rename wins. An unreadable entry (a foreign or
truncated file) counts as a miss and is rewritten. A small in-memory layer serves hot keys
without touching the disk; it is guarded by a lock.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambiqa.errors import AmbiqaError
from ambiqa.fsutil import atomic_write_json
from ambiqa.jsonio import read_json
from ambiqa.paths import cache_root
from ambiqa.retrieval.base import check_query
from ambiqa.types import Passage, SharedResource

FORMAT = 1


def default_cache_root() -> Path:
    return cache_root() / "retrieval-cache"


class RetrievalCache:
    """A directory of cached search results, safe across threads and processes."""

    def __init__(self, root: str | Path | None = None, memory_items: int = 4096) -> None:
        self.root = Path(root).expanduser() if root else default_cache_root()
        self.memory_items = memory_items
        self._memory: OrderedDict[str, list[Passage]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(fingerprint: str, query: str, k: int) -> str:
        return hashlib.sha256(f"{fingerprint}\0{query}\0{k}".encode()).hexdigest()

    def path(self, fingerprint: str, key: str) -> Path:
        fp = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
        return self.root / fp / key[:2] / f"{key}.json"

    def get(self, fingerprint: str, query: str, k: int) -> list[Passage] | None:
        key = self.key(fingerprint, query, k)
        with self._lock:
            found = self._memory.get(key)
            if found is not None:
                self._memory.move_to_end(key)
                self.hits += 1
                return list(found)
        passages = self._read(self.path(fingerprint, key), fingerprint, query, k)
        with self._lock:
            if passages is None:
                self.misses += 1
                return None
            self.hits += 1
            self._remember(key, passages)
        return list(passages)

    def put(self, fingerprint: str, query: str, k: int, passages: Sequence[Passage]) -> None:
        key = self.key(fingerprint, query, k)
        passages = list(passages)
        atomic_write_json(self.path(fingerprint, key), {
            "format": FORMAT, "fingerprint": fingerprint, "query": query, "k": k,
            "passages": [[p.id, p.title, p.text, p.score] for p in passages]})
        with self._lock:
            self._remember(key, passages)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses}

    def _remember(self, key: str, passages: list[Passage]) -> None:
        self._memory[key] = passages
        self._memory.move_to_end(key)
        while len(self._memory) > self.memory_items:
            self._memory.popitem(last=False)

    @staticmethod
    def _read(path: Path, fingerprint: str, query: str, k: int) -> list[Passage] | None:
        try:
            data = read_json(path)
            if (data.get("format") != FORMAT or data.get("fingerprint") != fingerprint
                    or data.get("query") != query or data.get("k") != k):
                return None  # a hash collision or a foreign file: treat as a miss
            return [Passage(str(i), str(t), str(x), float(s)) for i, t, x, s in data["passages"]]
        except (AmbiqaError, ValueError, KeyError, TypeError, AttributeError):
            return None  # a damaged cache entry (too deep, not JSON) is a miss, not an error


class CachedRetriever(SharedResource):
    """Any retriever with its results cached on disk; the protocol and fingerprint are the
    wrapped retriever's, so artifacts do not change. A hit is not a retriever call and does
    not appear in cost traces; ``cache.stats()`` counts hits and misses."""

    def __init__(self, retriever: Any, cache: RetrievalCache | str | Path | None = None) -> None:
        self.retriever = retriever
        self.cache = cache if isinstance(cache, RetrievalCache) else RetrievalCache(cache)
        self.name = getattr(retriever, "name", type(retriever).__name__)

    @property
    def fingerprint(self) -> str:
        return str(self.retriever.fingerprint)

    def __getattr__(self, attr: str) -> Any:  # index_name, manifest, warm, ...
        if attr == "retriever":
            raise AttributeError(attr)
        return getattr(self.retriever, attr)

    def __len__(self) -> int:
        return len(self.retriever)

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        fp = self.fingerprint
        found = self.cache.get(fp, query, k)
        if found is not None:
            return found
        passages = list(self.retriever.search(query, k))
        self.cache.put(fp, query, k, passages)
        return passages

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        checked = [check_query(q, k)[0] for q in queries]
        fp = self.fingerprint
        out: list[list[Passage] | None] = [self.cache.get(fp, q, k) for q in checked]
        missing = [i for i, r in enumerate(out) if r is None]
        if missing:
            fresh = self.retriever.batch_search([checked[i] for i in missing], k)
            for i, passages in zip(missing, fresh, strict=True):
                self.cache.put(fp, checked[i], k, passages)
                out[i] = list(passages)
        return [r if r is not None else [] for r in out]

    def get(self, pid: str) -> Passage | None:
        return self.retriever.get(pid)


def cached(retriever: Any, cache: RetrievalCache | str | Path | None = None) -> CachedRetriever:
    """Wrap ``retriever`` (idempotent: an already cached retriever is returned as is)."""
    if isinstance(retriever, CachedRetriever):
        return retriever
    return CachedRetriever(retriever, cache)
