"""Warm-up: load now what a program's first question would load, and say so with the time.

Why: a program, its retrievers and re-rankers load their heavy parts lazily, so building one
stays cheap (tests, ``--help``, a compile that never searches). The price is paid by the first
question: the shared sentence encoder (sentence-transformers, 8-15 s on 2 cores) or a ColBERT
searcher (model, compressed index and, the first time on a machine, colbert-ai's C++
extensions: 86 s were seen) -- after ``serve`` said ready, or in ``ask`` with no word about
the wait (issue 42). :func:`warm_up` walks what a program holds and loads those parts, each
step announced through ``say`` before it starts and again with its duration when it ends.

Only parts that are still cold are loaded, so a warm-up is free when there is nothing to do:
an encoder given explicitly (every test's fake encoder) is never touched, the shared encoder
is loaded once per process, a ColBERT retriever once per instance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ambiqa.retrieval.encoder import SharedEncoder, shared_encoder_loaded

#: attributes through which a program, a retriever or a re-ranker holds the next retriever,
#: re-ranker or source (``CachedRetriever.retriever``, ``RerankingRetriever.base`` /
#: ``.reranker``, ``ShardedRetriever.shards``, ``PoolRetriever.sources``, ...)
LINKS = ("retriever", "base", "reranker", "shards", "sources", "_retriever")

Say = Callable[[str], None]


@dataclass(frozen=True)
class WarmStep:
    """One thing a warm-up loaded (or tried to: ``error``), and the seconds it took."""

    what: str
    seconds: float
    error: str | None = None


def _children(obj: Any) -> Iterator[Any]:
    named = getattr(obj, "named_sub_modules", None)  # a DSPy module: predictors, sub-programs
    if callable(named):
        for _, module in named():
            if module is not obj:
                yield module
    for link in LINKS:
        value = obj.__dict__.get(link) if hasattr(obj, "__dict__") else None
        if isinstance(value, dict):
            yield from value.values()
        elif isinstance(value, (list, tuple)):
            yield from value
        elif value is not None:
            yield value


def _walk(roots: Iterable[Any]) -> Iterator[Any]:
    """Every object reachable from ``roots`` through sub-modules and :data:`LINKS`, once."""
    seen: set[int] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        obj = stack.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        stack.extend(c for c in _children(obj) if c is not None and id(c) not in seen)


def _cold_parts(obj: Any) -> Iterator[tuple[str, Callable[[], Any], bool]]:
    """``(what, load, costly)`` for each part of ``obj`` that would load on first use.

    Lazy, on purpose: ``costly`` is decided when the part is reached, so the shared encoder
    is costly only for the first object that binds it."""
    for klass in type(obj).__mro__:
        for name, attr in list(vars(klass).items()):
            if isinstance(attr, SharedEncoder) and attr.pending(obj):
                yield ("the sentence encoder all-MiniLM-L6-v2",
                       lambda obj=obj, name=name: getattr(obj, name),
                       not shared_encoder_loaded())
    warm = getattr(type(obj), "warm", None)  # defined by the class, not forwarded by a wrapper
    if callable(warm) and getattr(obj, "is_warm", True) is False:
        what = getattr(obj, "warm_up_label", None) or type(obj).__name__
        yield str(what), obj.warm, True


def warm_up(roots: Iterable[Any], say: Say | None = None) -> list[WarmStep]:
    """Load the cold parts of ``roots`` (programs, modules, retrievers) now.

    ``say`` gets ``"warming up: loading WHAT ..."`` before each step and
    ``"warming up: WHAT loaded (N s)"`` after it; returns the steps taken (none when all was
    warm already).

    A part that fails to load is reported (``"warming up: loading WHAT failed after N s:
    REASON; it is tried again on first use"``, the step's ``error``) and skipped, not raised:
    the program may never need it (an encoder some settings do not use), and where it does,
    the first question fails with the same error as it did before there was a warm-up.
    """
    steps: list[WarmStep] = []
    failed: set[str] = set()  # the shared encoder held by several objects: tried once
    for obj in _walk(roots):
        for what, load, costly in _cold_parts(obj):
            if what in failed:
                continue
            if say is not None and costly:
                say(f"warming up: loading {what} ...")
            start = time.perf_counter()
            try:
                load()
            except Exception as exc:  # noqa: BLE001  (reported; first use raises it again)
                seconds = time.perf_counter() - start
                reason = " ".join(str(exc).split())[:200] or type(exc).__name__
                steps.append(WarmStep(what, seconds, error=reason))
                failed.add(what)
                if say is not None:
                    say(f"warming up: loading {what} failed after {seconds:.1f} s: {reason}; "
                        "it is tried again on first use")
                continue
            if not costly:
                continue  # the shared encoder, loaded already: that only bound it
            seconds = time.perf_counter() - start
            steps.append(WarmStep(what, seconds))
            if say is not None:
                say(f"warming up: {what} loaded ({seconds:.1f} s)")
    return steps


__all__ = ["LINKS", "WarmStep", "shared_encoder_loaded", "warm_up"]
