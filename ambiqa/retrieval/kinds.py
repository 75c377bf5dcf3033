"""The retriever-kind registry: every ``--kind`` of index is one :class:`RetrieverKind`.

A kind says, once, everything the rest of ambiqa asks about it: how an index of it is built
and opened, whether it can be sharded (and why not), whether ``ambiqa index add`` can add to
it, what ``ambiqa doctor`` checks, and a one-line summary for ``--help``. The factory
(:mod:`ambiqa.retrieval.factory`), sharding (:mod:`~ambiqa.retrieval.sharded`), adding
(:mod:`~ambiqa.retrieval.adding`), ``ambiqa.index`` / ``ambiqa.open_index``, the ``ambiqa
index`` command and the doctor all read it; none of them names a kind.

Adding a kind takes its retriever module plus one registration (and its tests)::

    register_retriever_kind(directory_kind(
        "mine", "what it is, in a few words", "my_package.mine:MineRetriever"))

:func:`directory_kind` fits a retriever class with ``build(passages, index_dir)`` and
``load(index_dir)`` whose ``manifest.json`` records ``"kind": NAME``; anything else passes its
own hooks to :class:`RetrieverKind`. A hook is a callable or a ``"module:attribute"`` string
imported the first time it is called: the built-in kinds below are declared that way, so
this module (and the CLI's fast ``--help``, which lists the kinds) loads no retrieval library.
"""

from __future__ import annotations

import importlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.fsutil import swap_dir_into_place
from ambiqa.jsonio import read_json

#: a hook: a callable, or ``"module:attribute"`` imported on first call
Hook = Callable[..., Any] | str

#: the kind ``ambiqa index`` builds without ``--kind``, and the kind of an index directory
#: that records none (a ColBERT build interrupted before its manifest was written)
DEFAULT_KIND = "colbert"
#: the manifest of a directory index: ``{"kind": NAME, ...}`` (BM25, dense)
DIRECTORY_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class BuildOptions:
    """Build settings every kind is given; a kind uses the ones it knows (the ColBERT ones
    are ignored by the others)."""

    checkpoint: Path | None = None
    progress: bool = False
    nranks: int = 1
    kmeans_share: float | None = None


@dataclass(frozen=True)
class RetrieverKind:
    """One kind of index, as every caller sees it (see the module docstring).

    Hooks (callables or ``"module:attribute"``):

    * ``builder(passages, root, name, options) -> retriever``: build ``root/name`` and commit
      it (a killed build must never leave a half-written index under ``name``);
    * ``opener(root, name) -> retriever``: open ``root/name``, its ``index_name`` set;
    * ``checker(index_dir, corpus) -> str``: ``ambiqa doctor``'s check, a short detail, or an
      :class:`~ambiqa.errors.AmbiqaError` whose hint is the fix; ``corpus`` (or None) is the
      file the index must have been built from;
    * ``adder(index_dir, passages, replace, source, encoder) -> Added``: ``ambiqa index add``
      (:mod:`ambiqa.retrieval.adding` takes the lock and checks the passages first);
    * ``shard_check(index_name, shards)``: raise when the shards' scores are not comparable;
    * ``defaults(options) -> options``: fill in settings once per build (so every shard of
      one build uses the same, e.g. the default ColBERT checkpoint);
    * ``built(retriever) -> str``: what ``ambiqa index`` prints after ``indexed``.
    """

    name: str
    #: a few words for ``ambiqa index --help`` (``--kind``)
    summary: str
    builder: Hook
    opener: Hook
    checker: Hook | None = None
    adder: Hook | None = None
    #: the kind's scores are comparable across shards, so ``--shards N`` may split it
    shardable: bool = False
    #: why ``--shards N`` is refused, for a kind that is not shardable
    not_shardable: str = ""
    shard_check: Hook | None = None
    #: ``ambiqa index add --replace`` can replace a passage in place
    replaces: bool = True
    #: a file whose presence alone marks an index directory as this kind (kinds without one
    #: record ``"kind"`` in ``manifest.json``)
    marker: str | None = None
    #: Python modules the kind needs; ``ambiqa doctor`` imports each
    requires: tuple[str, ...] = ()
    defaults: Hook | None = None
    built: Hook | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.summary:
            raise TypeError("a retriever kind needs a name and a summary")
        if not self.shardable and not self.not_shardable:
            raise TypeError(f"retriever kind {self.name!r}: say why it cannot be sharded "
                            "(not_shardable=...), or make it shardable")

    # ---- the hooks, resolved on first call ---------------------------------------------------
    def build(self, passages: Iterable[Any], root: Path, name: str,
              options: BuildOptions | None = None) -> Any:
        """Build and commit ``root/name`` from ``passages`` (an iterable: a kind that streams,
        like ColBERT, never holds the corpus in memory)."""
        return _call(self.builder, passages, root, name, self.prepare(options))

    def prepare(self, options: BuildOptions | None = None) -> BuildOptions:
        """``options`` with this kind's defaults filled in (the same whenever called again)."""
        options = options or BuildOptions()
        return _call(self.defaults, options) if self.defaults else options

    def open(self, root: Path, name: str) -> Any:
        """The retriever over ``root/name`` (one index, not a shard set: the factory opens
        those through :class:`~ambiqa.retrieval.sharded.ShardedRetriever`)."""
        return _call(self.opener, Path(root), name)

    def check(self, index_dir: Path, corpus: str | os.PathLike[str] | None = None) -> str:
        """``ambiqa doctor``'s detail for ``index_dir``; a kind without a checker is checked by
        opening the index (which verifies what the kind's loader verifies)."""
        if self.checker is None:
            self.open(index_dir.parent, index_dir.name)
            return f"{self.name}, opens"
        return str(_call(self.checker, index_dir, corpus))

    @property
    def addable(self) -> bool:
        return self.adder is not None

    def add(self, index_dir: Path, passages: list[Any], replace: bool, source: str,
            encoder: Any = None) -> Any:
        """Add ``passages`` to ``index_dir`` (the caller holds the index's lock)."""
        if self.adder is None:
            raise RetrievalIndexError(f"passages cannot be added to a {self.name} index",
                                      hint=f"rebuild it with the new passages: ambiqa index "
                                           f"CORPUS --name {index_dir.name} --kind {self.name}")
        return _call(self.adder, index_dir, passages, replace, source, encoder)

    def check_shards(self, index_name: str, shards: list[Any]) -> None:
        """Refuse shards whose scores would not compare (a merge by score would be wrong)."""
        if self.shard_check is not None:
            _call(self.shard_check, index_name, shards)

    def describe_build(self, retriever: Any) -> str | None:
        """What ``ambiqa index`` prints after ``indexed`` (None: the kind says nothing more)."""
        return str(_call(self.built, retriever)) if self.built else None


def _call(hook: Hook, *args: Any) -> Any:
    if isinstance(hook, str):
        module, _, attr = hook.partition(":")
        hook = getattr(importlib.import_module(module), attr)
    return hook(*args)


# ---- the registry ----------------------------------------------------------------------------
_KINDS: dict[str, RetrieverKind] = {}


def register_retriever_kind(kind: RetrieverKind) -> RetrieverKind:
    """Make ``kind`` available everywhere a kind is named (``--kind``, ``KIND:NAME``, a
    manifest's ``"kind"``); registering a name again replaces it."""
    _KINDS[kind.name] = kind
    return kind


def find_retriever_kind(name: object) -> RetrieverKind | None:
    return _KINDS.get(name) if isinstance(name, str) else None


def retriever_kind(name: object) -> RetrieverKind:
    """The kind registered as ``name``; a one-line :class:`ConfigError` listing them if none."""
    kind = find_retriever_kind(name)
    if kind is None:
        raise ConfigError(f"unknown index kind {name!r}",
                          hint=f"choose one of {', '.join(retriever_kind_names())}")
    return kind


def retriever_kind_names() -> tuple[str, ...]:
    """Every kind, the built-in ones first (the order ``--help`` lists them)."""
    return tuple(_KINDS)


def names_text(names: Iterable[str], last: str = "or") -> str:
    """``"colbert, bm25 or dense"``: kind names for a message or ``--help``."""
    names = list(names)
    return f" {last} ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else (
        names[0] if names else "")


def shardable_kinds() -> tuple[str, ...]:
    return tuple(n for n, k in _KINDS.items() if k.shardable)


def addable_kinds() -> tuple[str, ...]:
    return tuple(n for n, k in _KINDS.items() if k.addable)


def kind_of_dir(index_dir: Path) -> str | None:
    """The kind an index directory says it is, from its own files (no index is opened):
    a kind's marker file, else ``manifest.json``'s ``"kind"`` (returned even when no kind of
    that name is registered, so callers can name it); None when neither is there."""
    for kind in _KINDS.values():
        if kind.marker and (index_dir / kind.marker).is_file():
            return kind.name
    manifest = index_dir / DIRECTORY_MANIFEST
    if not manifest.is_file():
        return None
    data = read_json(manifest, error=RetrievalIndexError, what="index manifest",
                     hint=f"rebuild it: ambiqa index CORPUS --name {index_dir.name}")
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else str(kind)


# ---- kinds stored as one directory with manifest.json ---------------------------------------
def directory_kind(name: str, summary: str, retriever_class: type | str, *,
                   checker: Hook | None = None, adder: Hook | None = None,
                   shard_check: Hook | None = None, not_shardable: str = "",
                   requires: tuple[str, ...] = ()) -> RetrieverKind:
    """A kind whose retriever class builds into a directory (``cls.build(passages, dir)``)
    and opens from it (``cls.load(dir)``): built in a temporary directory beside the index
    and renamed into place (the rename is the commit point), opened with its name recorded.
    Shardable unless ``not_shardable`` says why not."""
    return RetrieverKind(
        name=name, summary=summary,
        builder=lambda passages, root, index, options: _build_directory(
            _resolve(retriever_class), passages, root, index),
        opener=lambda root, index: _open_directory(_resolve(retriever_class), root, index),
        checker=checker, adder=adder, shardable=not not_shardable,
        not_shardable=not_shardable, shard_check=shard_check, requires=requires)


def _resolve(ref: type | str) -> Any:
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)
    return ref


def _build_directory(cls: Any, passages: Iterable[Any], root: Path, name: str) -> Any:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        retriever = cls.build(list(passages), tmp)
        swap_dir_into_place(tmp, root / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return retriever


def _open_directory(cls: Any, root: Path, name: str) -> Any:
    retriever = cls.load(Path(root) / name)
    retriever.index_name = name  # BM25 and dense retrievers do not know their directory's name
    return retriever


# ---- the built-in kinds ----------------------------------------------------------------------
_HOOKS = "ambiqa.retrieval.builtin_kinds"

register_retriever_kind(RetrieverKind(
    name="colbert", summary="colbert-ai late interaction",
    builder=f"{_HOOKS}:colbert_build", opener=f"{_HOOKS}:colbert_open",
    checker=f"{_HOOKS}:colbert_check", adder="ambiqa.retrieval.adding:add_colbert",
    shardable=True, shard_check=f"{_HOOKS}:colbert_shards", replaces=False,
    marker="ambiqa_manifest.json",  # ambiqa.retrieval.colbert.manifest.MANIFEST (tested)
    requires=("colbert",), defaults=f"{_HOOKS}:colbert_defaults",
    built=f"{_HOOKS}:colbert_built"))
register_retriever_kind(directory_kind(
    "bm25", "bm25s, seconds", "ambiqa.retrieval.bm25:BM25Retriever",
    checker=f"{_HOOKS}:bm25_check", adder="ambiqa.retrieval.adding:add_bm25",
    not_shardable="BM25 scores depend on each shard's document frequencies and average "
                  "length, so scores of different shards are not comparable and a merged "
                  "top-k would not be BM25's ranking over the whole corpus",
    requires=("bm25s",)))
register_retriever_kind(directory_kind(
    "dense", "all-MiniLM-L6-v2, exact inner product", "ambiqa.retrieval.dense:DenseRetriever",
    checker=f"{_HOOKS}:dense_check", adder="ambiqa.retrieval.adding:add_dense",
    shard_check=f"{_HOOKS}:dense_shards", requires=("sentence_transformers",)))
