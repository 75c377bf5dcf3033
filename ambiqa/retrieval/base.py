"""The retriever protocol every program depends on.

A program never opens files or builds indexes: it receives an object with ``search`` and
``batch_search`` and gets :class:`~ambiqa.types.Passage` lists back, best first. Every concrete
retriever wraps its searches in :class:`TimedSearch` so cost traces count retriever calls.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError, DataError
from ambiqa.tracing import record_retrieval
from ambiqa.types import Passage, SharedResource


@runtime_checkable
class Retriever(Protocol):
    """Search a passage collection. ``fingerprint`` identifies the index (for artifacts/caches)."""

    name: str

    @property
    def fingerprint(self) -> str: ...

    def search(self, query: str, k: int = 5) -> list[Passage]: ...

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]: ...

    def get(self, pid: str) -> Passage | None: ...


def check_query(query: object, k: object) -> tuple[str, int]:
    """Validate search arguments with errors a user can act on."""
    if not isinstance(query, str):
        raise ConfigError(f"a query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ConfigError("a query must not be empty or whitespace")
    check_int("k", k)
    return query, k


def check_passages(passages: Sequence[Passage], kind: str) -> list[Passage]:
    """The passages an index may be built from, or a :class:`DataError` naming the problem.

    Refused: an empty corpus, an empty or duplicate id, a passage with neither title nor text
    (it could never be found and would only dilute scores). A passage with a title but empty
    text is kept: the title alone is searchable.
    """
    passages = list(passages)
    if not passages:
        raise DataError(f"cannot build a {kind} index over zero passages",
                        hint="pass a JSONL corpus with one {id, title, text} object per line")
    check = PassageCheck()
    for n, p in enumerate(passages):
        check(n, p)
    return passages


class PassageCheck:
    """Checks passages one at a time, so a streamed corpus is validated without a list.

    Only the set of ids seen so far is kept (for duplicates).
    """

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, n: int, p: object) -> Passage:
        if not isinstance(p, Passage):
            raise DataError(f"corpus item {n} is a {type(p).__name__}, not a Passage")
        if not p.id:
            raise DataError(f"passage {n} has an empty id")
        if p.id in self.seen:
            raise DataError(f"duplicate passage id {p.id!r} in the corpus",
                            hint="passage ids must be unique; deduplicate the corpus")
        if not (p.title.strip() or p.text.strip()):
            raise DataError(f"passage {p.id!r} has neither title nor text")
        self.seen.add(p.id)
        return p


class TimedSearch:
    """Context manager recording one retriever call in the active cost traces."""

    def __init__(self, retriever: str, query: str, k: int) -> None:
        self.retriever, self.query, self.k = retriever, query, k

    def __enter__(self) -> TimedSearch:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        record_retrieval(self.retriever, self.query, self.k, self.start, time.perf_counter())


class InMemoryRetriever(SharedResource):
    """Exact token-overlap retriever over a list of passages.

    Real enough for unit tests of program control flow (deterministic, no model, no index) and
    for tiny corpora; the real retrievers are ColBERT (default), dense and BM25.
    """

    name = "memory"

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.passages = list(passages)
        self._by_id = {p.id: p for p in self.passages}
        self._tokens = [set(_tok(p.title + " " + p.text)) for p in self.passages]

    @property
    def fingerprint(self) -> str:
        import hashlib

        h = hashlib.sha256()
        for p in self.passages:
            h.update(p.id.encode() + b"\0")
        return "memory:" + h.hexdigest()[:16]

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with TimedSearch(self.name, query, k):
            q = set(_tok(query))
            scored = [(len(q & toks) / (len(q) or 1), -i) for i, toks in enumerate(self._tokens)]
            order = sorted(range(len(scored)), key=lambda i: scored[i], reverse=True)[:k]
            return [self.passages[i].with_score(scored[i][0]) for i in order]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Passage | None:
        return self._by_id.get(pid)


_STOP = frozenset("a an the of in on at to for by with and or is was were who what when where "
                  "which how did does do from as".split())


def _tok(text: str) -> list[str]:
    import re

    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOP]
