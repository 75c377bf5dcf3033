"""``ambiqa.index`` and ``ambiqa.open_index``: build a named index from a corpus as the user
has it, and open it again by name.

The corpus is a path (JSONL, CSV/TSV, a folder of .txt/.md files, Parquet -- see
:mod:`ambiqa.data.corpus`), a list of strings, or a list of dicts / Passages. The index is
written under the index root with its kind in its own manifest, so afterwards the name
alone opens it (``ambiqa.open_index(NAME)``, ``--index NAME``). Both return an
:class:`IndexResult`: the same object whether the index was just built or opened.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ambiqa.data.corpus import corpus_format, iter_corpora, iter_corpus, passages_from
from ambiqa.errors import ConfigError
from ambiqa.paths import index_root as default_index_root
from ambiqa.retrieval.adding import add_passages, index_lock
from ambiqa.retrieval.cache import CachedRetriever
from ambiqa.retrieval.factory import check_index_name, index_kind, open_retriever
from ambiqa.retrieval.kinds import (
    DEFAULT_KIND,
    BuildOptions,
    RetrieverKind,
    find_retriever_kind,
    retriever_kind,
)
from ambiqa.retrieval.sharded import build_sharded, check_shardable


@dataclass(frozen=True)
class IndexSettings:
    """How to build an index. ``name`` is how every later command refers to it."""

    name: str
    #: a registered kind (:mod:`ambiqa.retrieval.kinds`): colbert (late interaction, the
    #: default), bm25 (bm25s, seconds), dense (MiniLM) or one registered since
    kind: str = DEFAULT_KIND
    #: directory holding indexes (default ``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``)
    index_root: str | Path | None = None
    #: a folder's files cut into passages of this many words (default: one per file)
    split_words: int | None = None
    #: the CSV/TSV/JSONL field holding the text when it is not text/contents/passage/body
    text_column: str | None = None
    #: ColBERT only: checkpoint directory (default: the trained one if built, else identity)
    checkpoint: str | Path | None = None
    #: ColBERT only: indexing processes, centroid sample share, shards (a JSONL file only)
    nranks: int = 1
    kmeans_share: float | None = None
    shards: int = 1
    #: show ColBERT's build progress on stderr
    progress: bool = False

    def __post_init__(self) -> None:
        check_index_name(self.name)
        retriever_kind(self.kind)  # an unknown kind fails here, naming the registered ones


@dataclass
class IndexResult:
    """A named index, just built (:func:`index`) or opened (:func:`open_index`): its name,
    kind, fingerprint and size, and ``retriever``, ready to search.

    It searches too (``search``, ``batch_search``, ``get`` go to ``retriever``), and wherever
    ambiqa takes a retriever (``ambiqa.Diva(retriever=...)``, ``ambiqa.load(path,
    retriever=...)``) it stands for ``retriever``. ``seconds``: the time the build, or the
    opening, took.
    """

    name: str
    kind: str
    fingerprint: str
    n_passages: int
    root: Path
    seconds: float
    retriever: Any
    #: after :meth:`add`: ``{"added", "replaced", "fingerprint_before"}`` of the last add
    added: dict[str, Any] | None = None

    @property
    def spec(self) -> str:
        """``kind:name`` (the name alone works too: the kind is in the index's manifest)."""
        return f"{self.kind}:{self.name}"

    @property
    def index_name(self) -> str:
        """The index's name, as every retriever that knows it spells it."""
        return self.name

    def search(self, query: str, k: int = 5) -> list[Any]:
        """The ``k`` best passages for ``query`` (:class:`ambiqa.Passage` objects)."""
        return self.retriever.search(query, k)

    def batch_search(self, queries: Any, k: int = 5) -> list[list[Any]]:
        return self.retriever.batch_search(queries, k)

    def get(self, pid: str) -> Any:
        """The passage with id ``pid``, or None."""
        return self.retriever.get(pid)

    def as_retriever(self) -> Any:
        """What a program searches through (:func:`ambiqa.as_retriever` asks for it)."""
        return self.retriever

    def add(self, corpus: str | os.PathLike[str] | Iterable[Any], *, replace: bool = False,
            split_words: int | None = None, text_column: str | None = None,
            base: str | os.PathLike[str] | None = None, encoder: Any = None) -> IndexResult:
        """Add passages to this index (BM25, dense and ColBERT; a sharded index is refused
        with the command that rebuilds it) and return this result, updated.

        ``corpus``: what :func:`index` takes -- a path (or a list of ``Path`` objects; single
        ``.txt`` / ``.md`` files too, their ids their paths relative to ``base``, default
        their folder), a list of strings (passage texts) or of dicts / Passages. An id the
        index already holds is refused unless ``replace=True``, which replaces that passage
        (not in a ColBERT index: colbert-ai's updater can only append).
        The index on disk is replaced only once the new one is complete
        (:mod:`ambiqa.retrieval.adding`); its fingerprint changes, so an artifact compiled
        against it before is told the index changed when loaded. ``added``: the counts of
        this add.
        """
        t0 = time.perf_counter()
        passages, source = _passages_to_add(corpus, split_words, text_column, base)
        done = add_passages(self.name, passages, root=self.root, replace=replace,
                            encoder=encoder, source=source)
        retriever = done.retriever
        if not getattr(retriever, "index_name", None):
            retriever.index_name = self.name
        if isinstance(self.retriever, CachedRetriever):  # opened with a retrieval cache: kept
            retriever = CachedRetriever(retriever, self.retriever.cache)
        self.retriever = retriever
        self.fingerprint = str(done.fingerprint_after)
        self.n_passages = _count(retriever)
        self.seconds = time.perf_counter() - t0
        self.added = {"added": done.added, "replaced": done.replaced,
                      "fingerprint_before": done.fingerprint_before}
        return self


def settings_from(settings: Any, cls: type, kwargs: dict[str, Any]) -> Any:
    """``settings`` (a dataclass or None) updated by keyword overrides; unknown keys fail."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise ConfigError(f"unknown setting(s) for {cls.__name__}: {', '.join(unknown)}",
                          hint=f"known: {', '.join(sorted(names))}")
    if settings is None:
        return cls(**kwargs)
    if not isinstance(settings, cls):
        raise ConfigError(f"settings must be a {cls.__name__}, got {type(settings).__name__}")
    return replace(settings, **kwargs) if kwargs else settings


def index(corpus: str | os.PathLike[str] | Iterable[Any], settings: IndexSettings | None = None,
          **overrides: Any) -> IndexResult:
    """Build (or rebuild) the index ``name`` over ``corpus``; see the module docstring.

    ``ambiqa.index("notes/", name="notes", kind="bm25", split_words=100)``. A rebuild
    replaces the old index only once the new one is complete.
    """
    cfg = settings_from(settings, IndexSettings, overrides)
    kind = retriever_kind(cfg.kind)
    root = Path(cfg.index_root).expanduser() if cfg.index_root else default_index_root()
    t0 = time.perf_counter()
    is_path = isinstance(corpus, str | os.PathLike)
    if is_path:
        path = Path(corpus).expanduser()
        passages: Any = iter_corpus(path, split_words=cfg.split_words,
                                    text_column=cfg.text_column)
    else:
        if isinstance(corpus, dict):
            raise ConfigError("a corpus is a path or a list of passages, not one dict")
        passages = passages_from(corpus)
    options = BuildOptions(checkpoint=Path(cfg.checkpoint) if cfg.checkpoint else None,
                           progress=cfg.progress, nranks=cfg.nranks,
                           kmeans_share=cfg.kmeans_share)  # the kind fills in its defaults
    with index_lock(root, cfg.name):  # an add to the same index waits (and vice versa)
        if cfg.shards > 1:
            retriever = _sharded(cfg, kind, options, root, Path(corpus) if is_path else None)
        else:  # the kind commits the build itself (a killed build leaves no half index)
            retriever = kind.build(passages, root, cfg.name, options)
    if not getattr(retriever, "index_name", None):
        retriever.index_name = cfg.name
    n = _count(retriever)
    return IndexResult(cfg.name, cfg.kind, str(retriever.fingerprint), n, root,
                       time.perf_counter() - t0, retriever)


def open_index(index: str | dict[str, Any], root: str | Path | None = None) -> IndexResult:
    """Open an index by name (``"wiki"`` or ``"bm25:wiki"``; the kind comes from its
    manifest): the same :class:`IndexResult` :func:`index` returned when it was built."""
    t0 = time.perf_counter()
    base = Path(root).expanduser() if root else default_index_root()
    retriever = open_retriever(index, root=base)
    spec = index if isinstance(index, dict) else {"index": index.rpartition(":")[2]}
    name = str(getattr(retriever, "index_name", None) or spec.get("index"))
    kind = getattr(retriever, "name", None)
    if find_retriever_kind(kind) is None:  # a wrapper without the kind's name
        kind = index_kind(name, base)
    return IndexResult(name, str(kind), str(retriever.fingerprint), _count(retriever), base,
                       time.perf_counter() - t0, retriever)


def _passages_to_add(corpus: Any, split_words: int | None, text_column: str | None,
                     base: Any) -> tuple[Any, str]:
    """The passages :meth:`IndexResult.add` reads, and how the manifest names their source."""
    if isinstance(corpus, str | os.PathLike):
        corpus = [corpus]
    elif isinstance(corpus, dict):
        raise ConfigError("passages to add are a path or a list of passages, not one dict")
    items = list(corpus)
    if items and all(isinstance(p, os.PathLike) for p in items):  # strings are passages
        return (iter_corpora(items, split_words=split_words, text_column=text_column,
                             base=base), ", ".join(str(p) for p in items))
    return passages_from(items), "<passages>"


def _count(retriever: Any) -> int:
    manifest = getattr(retriever, "manifest", None)
    if isinstance(manifest, dict) and "n_passages" in manifest:
        return int(manifest["n_passages"])
    passages = getattr(retriever, "passages", None)
    if passages is not None:
        return len(passages)
    try:
        return len(retriever)  # a shard set counts its shards' passages
    except TypeError:
        return 0


def _sharded(cfg: IndexSettings, kind: RetrieverKind, options: BuildOptions, root: Path,
             path: Path | None) -> Any:
    """``NAME-0..NAME-{n-1}`` streamed from a JSONL file (a kind that cannot be sharded is
    refused, with the reason)."""
    check_shardable(kind.name, cfg.shards)
    if path is None or corpus_format(path) != "jsonl":
        raise ConfigError("shards need a JSONL corpus file (each part is streamed from it)",
                          hint="convert the corpus to JSONL, or index it unsharded")
    return build_sharded(path, cfg.name, root, cfg.shards, checkpoint=options.checkpoint,
                         progress=options.progress, nranks=options.nranks,
                         kmeans_share=options.kmeans_share, kind=kind.name)
