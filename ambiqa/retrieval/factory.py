"""Open retrievers by description (what artifacts and the CLI record), not by path.

An artifact records ``{"kind": "colbert", "index": "wiki", "fingerprint": ...}``; indexes
live under one root (``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``), so an artifact
compiled on one machine opens the same-named index on another.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError, IndexError_


def index_root() -> Path:
    from ambiqa.lm import cache_root

    return Path(os.environ.get("AMBIQA_INDEX_ROOT", cache_root() / "indexes")).expanduser()


def open_retriever(info: dict[str, Any] | str, root: Path | None = None) -> Any:
    """Open the retriever an artifact or a CLI flag names.

    ``info`` is a dict (``kind``, ``index``) or a string ``"[kind:]index"`` (kind defaults to
    colbert).
    """
    if isinstance(info, str):
        kind, _, name = info.rpartition(":")
        info = {"kind": kind or "colbert", "index": name}
    kind, name = info.get("kind", "colbert"), info.get("index")
    if not name:
        raise ConfigError("no index named", hint="pass --index NAME (see `ambiqa index`)")
    root = Path(root) if root else index_root()
    if kind == "colbert":
        from ambiqa.retrieval.colbert import ColBERTRetriever

        return ColBERTRetriever.load(root, name)
    if kind == "bm25":
        from ambiqa.retrieval.bm25 import BM25Retriever

        return BM25Retriever.load(root / name)
    if kind == "dense":
        from ambiqa.retrieval.dense import DenseRetriever

        return DenseRetriever.load(root / name)
    raise IndexError_(f"cannot open a retriever of kind {kind!r}",
                      hint="kinds: colbert, bm25, dense")


def describe(retriever: Any) -> dict[str, Any]:
    """What an artifact records about a retriever (no paths, no secrets)."""
    if retriever is None:
        return {"kind": None, "index": None, "fingerprint": None}
    return {"kind": getattr(retriever, "name", type(retriever).__name__),
            "index": getattr(retriever, "index_name", None),
            "fingerprint": getattr(retriever, "fingerprint", None)}
