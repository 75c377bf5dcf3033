"""Retriever-pool specs for Ensemble of Retrievers (EoR, Li et al. 2024, Sec. 2.1 and App. C.1).

A pool member is a *retriever* in the paper's sense: a knowledge source plus processing. Specs
are written the paper's way:

====================  ============================================================================
``Wiki@10``           top-10 passages of source ``Wiki`` (truncation, "@k")
``Wiki@RR@5``         retrieve a deeper list, re-rank it with the sentence encoder, keep 5 ("@RR")
``BM25@5&Wiki@5``     concatenate the two lists ("&"; a passage already present is not repeated)
``Wiki@10@CP``        compress every passage for the question with the LM ("@CP", always last)
``PK``                one background document written by the LM (GenRead-style parametric
                      knowledge); may also be a part of a concatenation: ``PK&Wiki@5``
``ReFree``            retrieval-free: no passages at all (stands alone)
``(BM25@20&PK&Wiki@20)@RR@10``
                      merge the parts (PK included), re-rank the merged list against the
                      question, keep 10: the paper's hybrid ``HB@RR@10`` (search-engine chunks
                      and DPR's top 20 re-ranked together)
====================  ============================================================================

Operation order (paper: @RR > @k > & > @CP): a source is re-ranked first, then truncated, the
truncated lists are concatenated, and compression applies to the concatenation, so
``BM25@RR@5&Wiki@5@CP`` reads ``((BM25@RR)@5 & Wiki@5)@CP``. Writing the operations in another
order (``Wiki@5@RR``, ``Wiki@5@CP&BM25@5``) is an error rather than a silent reinterpretation.
A parenthesised group is a concatenation re-ranked as one list; it must be followed by
``@RR@k`` and is itself a part that can be concatenated or compressed:
``(SE@10&Wiki@20)@RR@5&PK@CP`` is not valid (PK takes no operations) but
``(SE@10&Wiki@20)@RR@5&Wiki@5@CP`` is.

Sources are names the caller maps to retrievers, e.g. ``{"Wiki": colbert, "BM25": bm25,
"Dense": dense}``; ``Wiki`` is, by convention, the default retriever over the corpus. The
paper's search-engine source (SE, Google via an API) and its web pages cannot be reached
offline: local retrievers stand in for it, and a user with a web-search retriever can pass it
as ``"SE"``. Keywords (RR, CP, PK, ReFree) and source names are matched case-insensitively.

This module runs no LM itself: the LM-backed steps (PK's background writer, @CP's compressor)
and the re-ranking encoder are supplied by the caller (the EoR program owns the predictors,
so they are optimized and saved with it). The parser lives in :mod:`ambiqa.retrieval.pool_spec`
and is re-exported here; this module runs parsed specs.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import numpy as np

from ambiqa.errors import ConfigError
from ambiqa.parallel import run_parallel
from ambiqa.retrieval.encoder import SharedEncoder, unit_rows
from ambiqa.retrieval.pool_spec import (
    KEYWORDS,
    MAX_K,
    Background,
    Compress,
    Concat,
    GroupRerank,
    NoRetrieval,
    Source,
    SpecNode,
    parse_spec,
)
from ambiqa.types import Passage

__all__ = [
    "KEYWORDS", "MAX_K", "Background", "BackgroundFn", "Compress", "CompressFn", "Concat",
    "GroupRerank", "NoRetrieval", "PoolMemo", "PoolRetriever", "Source", "SpecNode",
    "parse_spec", "run_spec",
]


# ---- running a spec ------------------------------------------------------------------------
class PoolMemo:
    """Per-question memo so pool members share work (``Wiki@10`` and ``Wiki@10@CP`` search
    once; ``PK`` is written once). Thread-safe; each key is computed at most once, and a
    computation that raised raises again for every later caller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[Hashable, threading.Lock] = {}
        self._values: dict[Hashable, Any] = {}

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._values:
                try:
                    self._values[key] = (True, compute())
                except Exception as exc:  # a failed step fails every member that needs it,
                    self._values[key] = (False, exc)  # without being retried per member
            ok, value = self._values[key]
        if not ok:
            raise value
        return value


BackgroundFn = Callable[[str], str]
CompressFn = Callable[[str, Passage], str]


class PoolRetriever:
    """Runs parsed specs against named sources.

    ``background(question) -> str`` writes the PK document, kept whole as one passage (the
    paper chunks it; docs/methods.md#eor); ``compress(question, passage) -> str`` returns the
    part of one passage relevant to the question ("" = nothing relevant, the passage is
    dropped); ``encoder.encode(texts)`` embeds for @RR, its rows scaled to unit length here
    (:meth:`_rerank`), so any encoder ranks by cosine.
    ``rerank_depth`` is how many candidates @RR re-ranks (at least ``k``): the paper re-ranks
    every chunk of every search-engine result page; a local source offers a deeper list.
    """

    encoder = SharedEncoder()

    def __init__(self, sources: Mapping[str, Any], *, background: BackgroundFn | None = None,
                 compress: CompressFn | None = None, encoder: Any = None,
                 rerank_depth: int = 20) -> None:
        self.sources = dict(sources)
        self._lower = {name.lower(): name for name in self.sources}
        self.background = background
        self.compress = compress
        self.encoder = encoder
        self.rerank_depth = rerank_depth

    def check(self, node: SpecNode) -> None:
        """Raise :class:`ConfigError` if ``node`` names a source this pool does not have."""
        for name in node.source_names():
            if name.lower() not in self._lower:
                known = ", ".join(self.sources) or "(none)"
                raise ConfigError(
                    f"retriever spec {str(node)!r} uses source {name!r}, which was not supplied",
                    hint=f"supplied sources: {known}. 'Wiki' is the program's retriever= "
                         "argument; others go in sources={...}")

    def run(self, spec: str | SpecNode, question: str, memo: PoolMemo | None = None,
            ) -> list[Passage]:
        node = parse_spec(spec) if isinstance(spec, str) else spec
        self.check(node)
        return self._run(node, question, memo or PoolMemo())

    def prefetch(self, node: SpecNode, question: str, memo: PoolMemo) -> None:
        """Run ``node``'s searches and re-ranking (no LM steps) into ``memo`` now.

        Called in the caller's thread before members run concurrently, so retrievers and the
        encoder are never first loaded from several threads at once (lazy imports of torch /
        transformers are not thread-safe) and searches happen in a fixed order.
        """
        if isinstance(node, Source):
            self._source(node, question, memo)
        elif isinstance(node, Concat):
            for part in node.parts:
                self.prefetch(part, question, memo)
        elif isinstance(node, Compress):
            self.prefetch(node.child, question, memo)
        elif isinstance(node, GroupRerank):
            self.prefetch(node.child, question, memo)
            if node.has_background():  # PK is an LM step: re-rank later, load the encoder now
                self.encoder.encode([question])
            else:
                self._group(node, question, memo)

    def _run(self, node: SpecNode, question: str, memo: PoolMemo) -> list[Passage]:
        if isinstance(node, NoRetrieval):
            return []
        if isinstance(node, Background):
            return memo.get(("pk",), lambda: self._background(question))
        if isinstance(node, Source):
            return self._source(node, question, memo)
        if isinstance(node, Concat):
            out: list[Passage] = []
            seen: set[str] = set()
            for part in node.parts:
                for p in self._run(part, question, memo):
                    if p.id not in seen:
                        seen.add(p.id)
                        out.append(p)
            return out
        if isinstance(node, Compress):
            return self._compress(self._run(node.child, question, memo), question, memo)
        if isinstance(node, GroupRerank):
            return self._group(node, question, memo)
        raise TypeError(f"not a spec node: {node!r}")

    def _group(self, node: GroupRerank, question: str, memo: PoolMemo) -> list[Passage]:
        """Merge the group's parts (deduplicated by id), re-rank them together, keep ``k``."""
        merged = self._run(node.child, question, memo)
        ranked = memo.get(("group", str(node.child).lower()),
                          lambda: self._rerank(question, merged))
        return ranked[: node.k]

    def _search(self, name: str, question: str, n: int, memo: PoolMemo) -> list[Passage]:
        name = self._lower[name.lower()]
        return memo.get(("search", name, n), lambda: list(self.sources[name].search(question, n)))

    def _source(self, node: Source, question: str, memo: PoolMemo) -> list[Passage]:
        if not node.rerank:
            return self._search(node.name, question, node.k, memo)[: node.k]
        depth = max(self.rerank_depth, node.k)
        ranked = memo.get(("rerank", node.name.lower(), depth), lambda: self._rerank(
            question, self._search(node.name, question, depth, memo)))
        return ranked[: node.k]

    def _rerank(self, question: str, candidates: list[Passage]) -> list[Passage]:
        if not candidates:
            return []
        # unit rows: cosine whatever encoder was injected (the default MiniLM is unit already)
        vecs = unit_rows(self.encoder.encode([question] + [p.render() for p in candidates])
                         ).astype(np.float32)
        sims = vecs[1:] @ vecs[0]
        order = sorted(range(len(candidates)), key=lambda i: (-float(sims[i]), i))
        return [candidates[i].with_score(float(sims[i])) for i in order]

    def _background(self, question: str) -> list[Passage]:
        if self.background is None:
            raise ConfigError("spec 'PK' needs a background-document writer (an LM step)",
                              hint="run PK specs through the EoR program, which supplies one")
        text = " ".join(str(self.background(question) or "").split())
        if not text:
            return []
        pid = "pk:" + hashlib.sha256(f"{question}\0{text}".encode()).hexdigest()[:12]
        return [Passage(pid, "Background (model knowledge)", text)]

    def _compress(self, passages: list[Passage], question: str, memo: PoolMemo,
                  ) -> list[Passage]:
        if not passages:
            return []
        if self.compress is None:
            raise ConfigError("spec '@CP' needs a compressor (an LM step)",
                              hint="run @CP specs through the EoR program, which supplies one")
        compress = self.compress

        def one(p: Passage) -> Passage | None:
            key = ("cp", p.id, hashlib.sha256(p.text.encode()).hexdigest()[:16])
            text = memo.get(key, lambda: " ".join(str(compress(question, p) or "").split()))
            return Passage(p.id, p.title, text, p.score) if text else None

        return [p for p in run_parallel(one, passages) if p is not None]


def run_spec(node: str | SpecNode, question: str, sources: Mapping[str, Any],
             **options: Any) -> list[Passage]:
    """Passages for ``question`` from one spec (see :class:`PoolRetriever` for ``options``)."""
    return PoolRetriever(sources, **options).run(node, question)
