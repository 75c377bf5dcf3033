"""BM25 retrieval with bm25s: the lexical baseline of DESIGN.md (lowercase, English stopwords,
no stemming, title + text as one document).

bm25s persists its sparse score matrix as ``.npy`` arrays (saved and loaded with
``allow_pickle=False``) and its vocabulary and parameters as JSON, so its own ``save``/``load``
are used; the passages go into a JSONL beside them. bm25s writes straight into its target
directory, so the index is first saved into a temporary directory and each file is then
renamed into ``index_dir``, the manifest last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambiqa.errors import RetrievalIndexError
from ambiqa.retrieval.base import TimedSearch, check_passages, check_query
from ambiqa.retrieval.dense import (
    PASSAGES,
    passages_fingerprint,
    read_manifest,
    read_passages,
    write_manifest,
    write_passages,
)
from ambiqa.types import Passage, SharedResource

STOPWORDS = "en"
BM25_DIR = "bm25s"


def _tokenize(texts: list[str], return_ids: bool):
    import bm25s

    return bm25s.tokenize(texts, lower=True, stopwords=STOPWORDS, return_ids=return_ids,
                          show_progress=False)


class BM25Retriever(SharedResource):
    """Okapi BM25 (bm25s defaults: k1=1.5, b=0.75, Lucene idf) over ``title + text``.

    Passages that share no term with the query score 0 and are not returned, so a query made
    only of stopwords or unknown words yields fewer than ``k`` (possibly no) passages.
    """

    name = "bm25"

    def __init__(self, model, passages: Sequence[Passage]) -> None:
        self.model = model
        self.passages = list(passages)
        self._by_id = {p.id: p for p in self.passages}
        self._fingerprint = passages_fingerprint("bm25", self.passages, f"stopwords={STOPWORDS}")
        #: the manifest it was opened with (None when built in this process)
        self.manifest: dict[str, Any] | None = None

    # ---- building and loading -----------------------------------------------------------
    @classmethod
    def in_memory(cls, passages: Sequence[Passage]) -> BM25Retriever:
        """Index ``passages`` in memory only (2-3 s for 13k passages; nothing is written)."""
        import bm25s

        model = bm25s.BM25()
        model.index(_tokenize([f"{p.title} {p.text}" for p in passages], return_ids=True),
                    show_progress=False)
        return cls(model, passages)

    @classmethod
    def build(cls, passages: Sequence[Passage], index_dir: str | Path) -> BM25Retriever:
        """Index ``passages`` and persist the index under ``index_dir``."""
        passages = check_passages(passages, "BM25")
        retriever = cls.in_memory(passages)
        retriever.save(index_dir)
        return retriever

    def save(self, index_dir: str | Path, extra: dict[str, Any] | None = None) -> None:
        """Write this index under ``index_dir``: the arrays, the passages, the manifest last
        (``extra``: more manifest fields, e.g. the record of what was added)."""
        index_dir = Path(index_dir)
        target = index_dir / BM25_DIR
        target.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=index_dir, prefix=".bm25s-"))
        try:
            self.model.save(str(tmp), allow_pickle=False, show_progress=False)
            for f in tmp.iterdir():
                os.replace(f, target / f.name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        write_passages(index_dir / PASSAGES, self.passages)
        write_manifest(index_dir, {"kind": "bm25", "stopwords": STOPWORDS, "lower": True,
                                   "count": len(self.passages),
                                   "fingerprint": self.fingerprint, **(extra or {})})

    @classmethod
    def load(cls, index_dir: str | Path) -> BM25Retriever:
        """Load an index written by :meth:`build` (arrays read with ``allow_pickle=False``)."""
        import bm25s

        index_dir = Path(index_dir)
        manifest = read_manifest(index_dir, "bm25")
        try:
            model = bm25s.BM25.load(str(index_dir / BM25_DIR), allow_pickle=False, mmap=False,
                                    show_progress=False)
        except (OSError, ValueError, RecursionError) as exc:
            raise RetrievalIndexError(f"cannot read the BM25 index under {index_dir}: {exc}",
                              hint="rebuild the index") from exc
        passages = read_passages(index_dir / PASSAGES, "bm25")
        retriever = cls(model, passages)
        retriever.manifest = manifest
        n_docs = int(model.scores.get("num_docs", len(passages)))
        if n_docs != len(passages) or manifest.get("fingerprint") not in (
                None, retriever.fingerprint):
            raise RetrievalIndexError(f"BM25 index at {index_dir} does not match its passages "
                              f"({n_docs} indexed, {len(passages)} listed)",
                              hint="rebuild the index")
        return retriever

    # ---- Retriever protocol -------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with TimedSearch(self.name, query, k):
            return self._search_tokens(_tokenize([query], return_ids=False), k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        checked = [check_query(q, k)[0] for q in queries]
        if not checked:
            return []
        tokens = _tokenize(checked, return_ids=False)
        out: list[list[Passage]] = []
        for query, toks in zip(checked, tokens, strict=True):
            with TimedSearch(self.name, query, k):
                out.extend(self._search_tokens([toks], k))
        return out

    def get(self, pid: str) -> Passage | None:
        return self._by_id.get(pid)

    def _search_tokens(self, tokens: list[list[str]], k: int) -> list[list[Passage]]:
        k = min(k, len(self.passages))
        docs, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        out = []
        for row_docs, row_scores in zip(docs, scores, strict=True):
            hits = [(int(d), float(s)) for d, s in zip(row_docs, row_scores, strict=True)
                    if float(s) > 0.0]
            hits.sort(key=lambda h: (-h[1], h[0]))  # deterministic order for equal scores
            out.append([self.passages[d].with_score(s) for d, s in hits])
        return out
