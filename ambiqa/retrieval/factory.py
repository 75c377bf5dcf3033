"""Open retrievers by description (what artifacts and the CLI record), not by path.

An artifact records ``{"kind": "colbert", "index": "wiki", "fingerprint": ...}``; indexes
live under one root (``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``), so an artifact
compiled on one machine opens the same-named index on another.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.paths import index_root

_INDEX_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


CACHE_ENV = "AMBIQA_RETRIEVAL_CACHE"


def open_retriever(info: dict[str, Any] | str, root: Path | None = None,
                   cache: bool | str | Path | None = None) -> Any:
    """Open the retriever an artifact or a CLI flag names.

    ``info`` is a dict (``kind``, ``index``) or a string ``"[kind:]index"`` (kind defaults to
    colbert). ``cache`` wraps the retriever in the on-disk
    :class:`~ambiqa.retrieval.cache.CachedRetriever` (``True``: ``$AMBIQA_CACHE/
    retrieval-cache``; a path: that directory). Unset, ``$AMBIQA_RETRIEVAL_CACHE`` decides
    (``1`` or a directory), so evaluation and tuning commands can share one cache without a
    flag.
    """
    if cache is None:
        env = os.environ.get(CACHE_ENV, "").strip()
        cache = None if env in ("", "0") else (True if env == "1" else env)
    retriever = _open(info, root)
    if cache:
        from ambiqa.retrieval.cache import CachedRetriever

        return CachedRetriever(retriever, None if cache is True else cache)
    return retriever


def check_index_name(name: object) -> str:
    """Refuse index names that are paths.

    An artifact supplies the name: "../x" or "/etc" must never open or build anything outside
    the index root.
    """
    if not isinstance(name, str) or not _INDEX_NAME.fullmatch(name) or name.strip(".") == "":
        raise ConfigError(f"invalid index name {name!r}",
                          hint="an index is named, not located: letters, digits, '.', '_' "
                               "and '-' (use --index-root for the directory)")
    return name


def _open(info: dict[str, Any] | str, root: Path | None) -> Any:
    if isinstance(info, str):
        kind, _, name = info.rpartition(":")
        info = {"kind": kind or "colbert", "index": name}
    kind, name = info.get("kind", "colbert"), info.get("index")
    if not name:
        raise ConfigError("no index named", hint="pass --index NAME (see `ambiqa index`)")
    check_index_name(name)
    root = Path(root) if root else index_root()
    if kind == "colbert":
        from ambiqa.retrieval.colbert import ColBERTRetriever
        from ambiqa.retrieval.sharded import ShardedRetriever, shards_file

        if not (root / name).exists() and shards_file(root, name).is_file():
            return ShardedRetriever.load(root, name)
        return ColBERTRetriever.load(root, name)
    if kind == "bm25":
        from ambiqa.retrieval.bm25 import BM25Retriever

        return BM25Retriever.load(root / name)
    if kind == "dense":
        from ambiqa.retrieval.dense import DenseRetriever

        return DenseRetriever.load(root / name)
    raise ConfigError(f"unknown retriever kind {kind!r} in {kind}:{name}",
                      hint="write [kind:]name with kind colbert, bm25 or dense, e.g. "
                           "bm25:wiki-bm25")


def describe(retriever: Any) -> dict[str, Any]:
    """What an artifact records about a retriever (no paths, no secrets)."""
    if retriever is None:
        return {"kind": None, "index": None, "fingerprint": None}
    return {"kind": getattr(retriever, "name", type(retriever).__name__),
            "index": getattr(retriever, "index_name", None),
            "fingerprint": getattr(retriever, "fingerprint", None)}
