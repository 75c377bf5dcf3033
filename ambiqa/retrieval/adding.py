"""Adding passages to a built index: ``ambiqa index add NAME FILES...`` and
``ambiqa.open_index(NAME).add(...)`` (issue 43 item 2).

An add never edits an index in place. It opens the index (its file hashes checked, as every
open does), writes the whole new index into ``NAME.tmp-<pid>-<random>`` beside it and renames
that over ``NAME`` (:func:`ambiqa.fsutil.swap_dir_into_place`: the commit point a build uses).
A killed or failed add leaves the old index as it was, plus at most a ``.tmp-`` directory that
the next add (or ColBERT build) of that index removes once its process is gone. Two adds to
one index, or an add and a build through ``ambiqa.index`` / ``ambiqa index``, take turns
(:func:`index_lock`).

The new index's manifest is a complete one: new count, new fingerprint (the fingerprint covers
the passages, so an artifact compiled against the index before the add is told the index
changed when it is loaded, as after a rebuild), the size and sha256 of every file it now holds,
and an entry in ``"additions"`` (when, how many added, how many replaced, the count after, the
source).

Per kind:

* **bm25**: bm25s has no incremental add and every score depends on the corpus-wide idf, so
  the score matrix is recomputed over all passages (seconds for 13k), from the passages the
  index already holds: the original corpus is not needed.
* **dense**: only the new passages are encoded, with the encoder the index was built with
  (another one is refused: its vectors would not be comparable); the embedding matrix is
  extended, a replaced passage's row re-encoded in place. A large index's HNSW graph
  (:mod:`ambiqa.retrieval.ann`) gets the new vectors inserted into a copy; it is rebuilt when
  passages were replaced (faiss HNSW cannot remove a vector) or the index just crossed the
  size threshold.
* **colbert**: the new passages are encoded with the index's checkpoint and appended by
  colbert-ai's ``IndexUpdater`` (into a copy of the index: it writes in place), their tokens
  compressed with the existing centroids, which are not retrained
  (:mod:`ambiqa.retrieval.colbert.update` says what the updater needs around it). Replacing a
  passage is refused with the rebuild command: the updater can only append.
* a **sharded** index: refused with the rebuild command.

Ids: a passage whose id the index already holds is refused (one line naming it and how many
more), unless ``replace=True`` (``--replace``), which replaces that passage's title and text
where it stands.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ambiqa.errors import DataError, RetrievalIndexError
from ambiqa.fsutil import atomic_write_json, swap_dir_into_place
from ambiqa.jsonio import read_json
from ambiqa.retrieval import encoder as encoders
from ambiqa.retrieval.ann import HNSWIndex, wants_ann
from ambiqa.retrieval.base import PassageCheck
from ambiqa.retrieval.bm25 import BM25Retriever
from ambiqa.retrieval.colbert import manifest as colbert
from ambiqa.retrieval.colbert.build import remove_stale_builds
from ambiqa.retrieval.colbert.retriever import ColBERTRetriever
from ambiqa.retrieval.colbert.update import append_passages, copy_index
from ambiqa.retrieval.dense import MANIFEST, DenseRetriever
from ambiqa.retrieval.factory import check_index_name, index_kind
from ambiqa.retrieval.integrity import FILES_KEY, rebuild_command, record_files
from ambiqa.retrieval.kinds import retriever_kind
from ambiqa.retrieval.locks import index_lock_path
from ambiqa.types import Passage

#: the manifest's list of what was added, one entry per add
ADDITIONS = "additions"


@dataclass(frozen=True)
class Added:
    """What one add did: the retriever over the new index, the counts and both fingerprints."""

    retriever: Any
    added: int
    replaced: int
    fingerprint_before: str
    fingerprint_after: str

    @property
    def changed(self) -> bool:
        return self.fingerprint_before != self.fingerprint_after


def add_passages(name: str, passages: Iterable[Passage], *, root: str | os.PathLike[str],
                 replace: bool = False, encoder: Any = None,
                 source: str = "<passages>") -> Added:
    """Add ``passages`` to the index ``name`` under ``root``; see the module docstring.

    ``encoder``: a dense index's passage encoder (default: the one it was built with, MiniLM;
    tests pass a stand-in). Raises :class:`DataError` for bad or duplicate passages and
    :class:`RetrievalIndexError` for an index that cannot be added to (sharded, missing or
    damaged; a ColBERT passage replaced), both before anything is written.
    """
    root = Path(root).expanduser()
    kind = retriever_kind(addable(name, root))
    index_dir = root / name
    new = _checked(passages)
    with index_lock(root, name):
        remove_stale_builds(root, name)
        return kind.add(index_dir, new, replace, source, encoder)


def addable(name: str, root: str | os.PathLike[str]) -> str:
    """The kind of the index ``name`` under ``root`` if passages can be added to it; else a
    one-line :class:`RetrievalIndexError` naming the command that rebuilds it (a sharded
    index, or a kind that cannot add; nothing is opened or hashed)."""
    check_index_name(name)
    root = Path(root).expanduser()
    kind = index_kind(name, root)
    spec = retriever_kind(kind)
    if not spec.addable:
        raise RetrievalIndexError(f"passages cannot be added to a {kind} index ({name!r})",
                                  hint=f"rebuild it with the new passages: "
                                       f"{rebuild_command(kind, name)}")
    if not (root / name).is_dir():
        raise RetrievalIndexError(
            f"index {name!r} is sharded ({name}-0, {name}-1, ...): passages cannot be added "
            "to a sharded index", hint=f"rebuild it with the new passages: "
            f"{rebuild_command(kind, name)} --shards N")
    return kind


def _checked(passages: Iterable[Passage]) -> list[Passage]:
    check = PassageCheck()
    out = [check(n, p) for n, p in enumerate(passages)]
    if not out:
        raise DataError("no passages to add", hint="pass files or passages holding at least one")
    return out


@contextlib.contextmanager
def index_lock(root: str | os.PathLike[str], name: str) -> Iterator[None]:
    """Hold the lock of index ``name`` under ``root``: adds, and builds through
    ``ambiqa.index`` / ``ambiqa index``, take turns, so none is lost under another's rename.

    The lock file lives in ``$AMBIQA_CACHE/index-locks/`` (named by a hash of the index's
    path, :func:`~ambiqa.retrieval.locks.index_lock_path`), not in the index root, which holds
    indexes only; the kernel drops the lock when its process ends, so the file is never stale."""
    path = index_lock_path(root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class _Merge:
    passages: list[Passage]
    replaced_rows: list[int]
    appended: list[Passage]


def _merge(old: list[Passage], new: list[Passage], replace: bool, name: str) -> _Merge:
    """The index's passages with ``new`` appended (or, with ``replace``, put in place of the
    passages of the same id); a duplicate id without ``replace`` is a :class:`DataError`."""
    position = {p.id: i for i, p in enumerate(old)}
    dup = [p.id for p in new if p.id in position]
    if dup and not replace:
        more = f" (and {len(dup) - 1} more)" if len(dup) > 1 else ""
        raise DataError(f"passage id {dup[0]!r}{more} is already in index {name!r}; nothing "
                        "was added",
                        hint="give the new passages other ids, or replace those passages: "
                             "--replace (Python: replace=True)")
    merged, rows, appended = list(old), [], []
    for p in new:
        i = position.get(p.id)
        if i is None:
            appended.append(p)
        else:
            merged[i] = p
            rows.append(i)
    return _Merge(merged + appended, rows, appended)


def _extra(manifest: dict[str, Any] | None, merge: _Merge, source: str, before: str,
           after: str) -> dict[str, Any]:
    """The old manifest's own fields (not the ones the writer recomputes) plus this add."""
    kept = {k: v for k, v in (manifest or {}).items()
            if k not in ("count", "fingerprint", "ann", FILES_KEY, ADDITIONS)}
    history = list((manifest or {}).get(ADDITIONS) or [])
    history.append({"at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "added": len(merge.appended), "replaced": len(merge.replaced_rows),
                    "count": len(merge.passages), "source": source,
                    "fingerprint_before": before, "fingerprint": after})
    return {**kept, ADDITIONS: history}


def changes_since(retriever: Any, fingerprint: str) -> str | None:
    """What ``ambiqa index add`` changed in ``retriever``'s index since it had ``fingerprint``
    ("2 passage(s) added, 1 replaced by `ambiqa index add` since, the last at 2026-..."), or
    None when its manifest records no add from that fingerprint on (a rebuild, another
    index)."""
    manifest = getattr(retriever, "manifest", None)
    history = manifest.get(ADDITIONS) if isinstance(manifest, dict) else None
    if not isinstance(history, list):
        return None
    starts = [i for i, e in enumerate(history)
              if isinstance(e, dict) and e.get("fingerprint_before") == fingerprint]
    if not starts:
        return None
    since = [e for e in history[starts[-1]:] if isinstance(e, dict)]
    added = sum(e["added"] for e in since if isinstance(e.get("added"), int))
    replaced = sum(e["replaced"] for e in since if isinstance(e.get("replaced"), int))
    return (f"{added} passage(s) added" + (f", {replaced} replaced" if replaced else "")
            + f" by `ambiqa index add` since, the last at {since[-1].get('at')}")


def _commit(index_dir: Path, write: Any) -> None:
    """``write(tmp)`` the new index beside ``index_dir``, then rename it into place."""
    tmp = index_dir.with_name(f"{index_dir.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    tmp.mkdir()
    try:
        write(tmp)
        swap_dir_into_place(tmp, index_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _written(index_dir: Path) -> dict[str, Any] | None:
    """The manifest just committed (what the retriever would have been opened with)."""
    try:
        data = read_json(index_dir / MANIFEST, error=RetrievalIndexError)
    except RetrievalIndexError:
        return None
    return data if isinstance(data, dict) else None


def add_bm25(index_dir: Path, new: list[Passage], replace: bool, source: str,
             encoder: Any = None) -> Added:
    """The bm25 kind's add: the score matrix recomputed over all passages (``encoder`` is
    not used)."""
    old = BM25Retriever.load(index_dir)
    merge = _merge(old.passages, new, replace, index_dir.name)
    if merge.passages == old.passages:  # only identical replacements: nothing to write
        return Added(old, 0, len(merge.replaced_rows), old.fingerprint, old.fingerprint)
    retriever = BM25Retriever.in_memory(merge.passages)
    extra = _extra(old.manifest, merge, source, old.fingerprint, retriever.fingerprint)
    _commit(index_dir, lambda tmp: retriever.save(tmp, extra))
    retriever.manifest = _written(index_dir)
    return Added(retriever, len(merge.appended), len(merge.replaced_rows), old.fingerprint,
                 retriever.fingerprint)


def add_dense(index_dir: Path, new: list[Passage], replace: bool, source: str,
              encoder: Any = None) -> Added:
    """The dense kind's add: only the new passages encoded, with the index's encoder."""
    old = DenseRetriever.load(index_dir, encoder=encoder)
    merge = _merge(old.passages, new, replace, index_dir.name)
    if merge.passages == old.passages:
        return Added(old, 0, len(merge.replaced_rows), old.fingerprint, old.fingerprint)
    encoder = encoder or encoders.get_encoder()
    enc_name = str(getattr(encoder, "name", type(encoder).__name__))
    if enc_name != old.encoder_name:
        raise RetrievalIndexError(
            f"dense index {index_dir.name!r} was built with encoder {old.encoder_name!r}; "
            f"passages encoded by {enc_name!r} would not be comparable",
            hint=f"add with the same encoder, or rebuild: "
                 f"{rebuild_command('dense', index_dir.name)}")
    changed = [merge.passages[i] for i in merge.replaced_rows] + merge.appended
    vecs = np.asarray(encoder.encode([p.render() for p in changed]), dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape[1] != old.embeddings.shape[1]:
        raise RetrievalIndexError(
            f"the encoder gave vectors of shape {vecs.shape}; index {index_dir.name!r} holds "
            f"{old.embeddings.shape[1]}-dimensional ones",
            hint=f"rebuild: {rebuild_command('dense', index_dir.name)}")
    emb = old.embeddings.copy()
    n_rep = len(merge.replaced_rows)
    if n_rep:
        emb[merge.replaced_rows] = vecs[:n_rep]
    emb = np.concatenate([emb, vecs[n_rep:]]) if merge.appended else emb
    ann = None
    if wants_ann(len(emb)):
        ann = (old.ann.extended(vecs[n_rep:]) if old.ann is not None and not n_rep
               else HNSWIndex.build(emb))
    retriever = DenseRetriever(merge.passages, emb, encoder=encoder, encoder_name=enc_name,
                               ann=ann)
    extra = _extra(old.manifest, merge, source, old.fingerprint, retriever.fingerprint)
    _commit(index_dir, lambda tmp: retriever.save(tmp, extra))
    retriever.manifest = _written(index_dir)
    return Added(retriever, len(merge.appended), n_rep, old.fingerprint, retriever.fingerprint)


def add_colbert(index_dir: Path, new: list[Passage], replace: bool, source: str,
                encoder: Any = None) -> Added:
    """The colbert kind's add: appended by colbert-ai's updater (``encoder`` is not used: the
    index's checkpoint encodes)."""
    name = index_dir.name
    old = ColBERTRetriever.load(index_dir.parent, name)
    passages = list(old._passages)
    merge = _merge(passages, new, replace, name)
    if merge.passages == passages:
        return Added(old, 0, len(merge.replaced_rows), old.fingerprint, old.fingerprint)
    if merge.replaced_rows:
        raise RetrievalIndexError(
            f"cannot replace passages of the ColBERT index {name!r} (colbert-ai's updater "
            f"can only append; {len(merge.replaced_rows)} of the ids are in it already); "
            "nothing was added",
            hint=f"add them under new ids, or rebuild over the whole corpus: "
                 f"{rebuild_command('colbert', name)}")
    fp = colbert.CorpusFingerprint()
    for p in merge.passages:
        fp.update(p)
    manifest = {**old.manifest, "n_passages": len(merge.passages), "corpus_sha256": fp.hexdigest()}
    after = ColBERTRetriever(index_dir, manifest, merge.passages).fingerprint
    manifest[ADDITIONS] = _extra(old.manifest, merge, source, old.fingerprint,
                                 after)[ADDITIONS]

    def write(tmp: Path) -> None:
        copy_index(index_dir, tmp)  # the updater writes in place: into a copy
        append_passages(tmp, old.manifest, passages, merge.appended)
        manifest[FILES_KEY] = record_files(tmp, {colbert.MANIFEST, colbert.LOG_FILE})
        atomic_write_json(tmp / colbert.MANIFEST, manifest)

    _commit(index_dir, write)
    retriever = ColBERTRetriever.load(index_dir.parent, name)
    return Added(retriever, len(merge.appended), 0, old.fingerprint, retriever.fingerprint)
