"""Open retrievers by description (what artifacts and the CLI record), not by path.

An artifact records ``{"kind": "colbert", "index": "wiki", "fingerprint": ...}``; indexes
live under one root (``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``), so an artifact
compiled on one machine opens the same-named index on another.

An index is named once: ``open_retriever("wiki")`` reads the kind from the index's own
manifest (``manifest.json`` of a BM25 or dense index, ``ambiqa_manifest.json`` of a ColBERT
index, ``NAME.shards.json`` of a sharded one); ``"bm25:wiki"`` still names it explicitly.

:func:`as_retriever` turns what a DSPy user already has -- any callable ``query, k ->
passages`` or a ``dspy.Retrieve`` -- into the retriever protocol programs use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ambiqa.data.corpus import stable_id
from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.jsonio import read_json
from ambiqa.paths import index_root
from ambiqa.retrieval.base import TimedSearch, check_query
from ambiqa.retrieval.cache import CachedRetriever
from ambiqa.retrieval.kinds import (
    DEFAULT_KIND,
    DIRECTORY_MANIFEST,
    find_retriever_kind,
    kind_of_dir,
    names_text,
    retriever_kind_names,
)
from ambiqa.retrieval.sharded import ShardedRetriever, shards_file
from ambiqa.types import Passage, SharedResource

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


def index_kind(name: str, root: Path | None = None) -> str:
    """The kind of the index ``name`` under ``root``, read from the index's own files.

    Raises :class:`RetrievalIndexError` naming the directory when there is no index there,
    so ``--index NAME`` never has to repeat the kind the build recorded.
    """
    check_index_name(name)
    root = Path(root) if root else index_root()
    index_dir = root / name
    plain = index_dir / DIRECTORY_MANIFEST
    if plain.is_file():
        data = read_json(plain, error=RetrievalIndexError, what="index manifest",
                         hint=f"rebuild it: ambiqa index CORPUS --name {name}")
        kind = data.get("kind") if isinstance(data, dict) else None
        if find_retriever_kind(kind) is not None:
            return str(kind)
        raise RetrievalIndexError(f"{plain} names an unknown index kind {kind!r}",
                                  hint=f"rebuild it: ambiqa index CORPUS --name {name}")
    shards = shards_file(root, name)
    if not index_dir.exists() and shards.is_file():  # a shard set lists its kind
        data = read_json(shards, error=RetrievalIndexError, what="shard list",
                         hint=f"rebuild: ambiqa index CORPUS --name {name} --shards N")
        if not isinstance(data, dict):
            raise RetrievalIndexError(f"the shard list {shards} is not a JSON object",
                                      hint=f"rebuild: ambiqa index CORPUS --name {name} "
                                           "--shards N")
        return str(data.get("kind", DEFAULT_KIND))  # lists written before kinds: ColBERT
    marked = kind_of_dir(index_dir) if index_dir.is_dir() else None
    if marked is not None:
        return marked
    if index_dir.is_dir():  # a ColBERT build that never wrote its manifest says so on load
        return DEFAULT_KIND
    built = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(
        ".") and ".tmp-" not in p.name) if root.is_dir() else []
    raise RetrievalIndexError(
        f"no index named {name!r} under {root}",
        hint=(f"indexes there: {', '.join(built[:12])}" if built else
              f"build it: ambiqa index CORPUS --name {name}") + " (or set --index-root)")


def _open(info: dict[str, Any] | str, root: Path | None) -> Any:
    if isinstance(info, str):
        kind, _, name = info.rpartition(":")
        info = {"kind": kind or None, "index": name}
    name = info.get("index")
    if not name:
        raise ConfigError("no index named", hint="pass --index NAME (see `ambiqa index`)")
    check_index_name(name)
    root = Path(root) if root else index_root()
    kind = info.get("kind") or index_kind(name, root)
    spec = find_retriever_kind(kind)
    if spec is None:
        raise ConfigError(f"unknown retriever kind {kind!r} in {kind}:{name}",
                          hint=f"write [kind:]name with kind {names_text(retriever_kind_names())}, "
                               "e.g. bm25:wiki-bm25")
    if spec.shardable and not (root / name).exists() and shards_file(root, name).is_file():
        return ShardedRetriever.load(root, name, kind=spec.name)
    return spec.open(root, name)


def describe(retriever: Any) -> dict[str, Any]:
    """What an artifact records about a retriever (no paths, no secrets)."""
    if retriever is None:
        return {"kind": None, "index": None, "fingerprint": None}
    return {"kind": getattr(retriever, "name", type(retriever).__name__),
            "index": getattr(retriever, "index_name", None),
            "fingerprint": getattr(retriever, "fingerprint", None)}


# --- a DSPy user's retriever -----------------------------------------------------------------

def as_retriever(obj: Any) -> Any:
    """``obj`` as the retriever protocol (``search``, ``batch_search``, ``get``, ``fingerprint``).

    Accepted: an ambiqa retriever (returned as is), an index as ``ambiqa.index`` /
    ``ambiqa.open_index`` return it (its ``as_retriever()``), a ``dspy.Retrieve`` (searches
    through ``dspy.settings.rm`` as DSPy does), or any callable ``fn(query, k) -> passages``
    where passages are strings, dicts (``text``/``contents``/``long_text``, optional ``id`` and
    ``title``), :class:`~ambiqa.types.Passage` objects, or a ``dspy.Prediction`` with
    ``passages``. Anything else is a :class:`ConfigError` naming what was given.
    """
    unwrap = getattr(obj, "as_retriever", None)
    if callable(unwrap) and not isinstance(obj, type):
        return unwrap()
    if obj is None or hasattr(obj, "search"):
        return obj
    if callable(obj):
        return CallableRetriever(obj)
    raise ConfigError(f"a retriever must have .search(query, k) or be a callable "
                      f"query, k -> passages; got {type(obj).__name__}",
                      hint="pass ambiqa.open_index(NAME), a function, or a dspy.Retrieve")


class CallableRetriever(SharedResource):
    """A function (or ``dspy.Retrieve``) behind the retriever protocol.

    Passages without an id get ``h<12 hex digits of sha256(title, text)>``: the same passage
    gets the same id in every call, so citations and demos stay meaningful. Searches are
    traced like any other retriever's.
    """

    name = "callable"

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.index_name = None
        self.label = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        self._seen: dict[str, Passage] = {}

    @property
    def fingerprint(self) -> str:
        """Names the function, not its data: a callable cannot say what corpus it serves."""
        return "callable:" + str(self.label)

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with TimedSearch(self.name, query, k):
            try:
                raw = self.fn(query, k=k)
            except TypeError:  # a plain fn(query, k) without keyword support
                raw = self.fn(query, k)
        out = [self._passage(item) for item in _as_list(raw)][:k]
        for p in out:
            self._seen[p.id] = p
        return out

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Passage | None:
        return self._seen.get(pid)

    def _passage(self, item: Any) -> Passage:
        if isinstance(item, Passage):
            return item
        if isinstance(item, str):
            return Passage(stable_id("", item), "", item.strip())
        if isinstance(item, dict):
            text = item.get("text") or item.get("contents") or item.get("long_text")
            if not isinstance(text, str):
                raise ConfigError(f"retriever {self.label} returned a dict without text "
                                  f"(keys: {sorted(item)})",
                                  hint="return strings or dicts with 'text'")
            title = str(item.get("title") or "")
            pid = str(item.get("id") or item.get("pid") or stable_id(title, text))
            return Passage(pid, title, text.strip(), float(item.get("score") or 0.0))
        text = getattr(item, "long_text", None) or getattr(item, "text", None)
        if isinstance(text, str):
            return Passage(stable_id("", text), "", text.strip())
        raise ConfigError(f"retriever {self.label} returned a {type(item).__name__}, not a "
                          "passage", hint="return strings, dicts with 'text', or Passages")


def _as_list(raw: Any) -> list[Any]:
    passages = getattr(raw, "passages", raw)  # dspy.Prediction(passages=[...])
    if isinstance(passages, str | dict | Passage):
        return [passages]
    try:
        return list(passages)
    except TypeError as exc:
        raise ConfigError(f"a retriever returned {type(raw).__name__}, not a list of "
                          "passages") from exc
