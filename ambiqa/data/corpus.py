"""Retrieval corpora: JSON Lines passages ``{"id", "title", "text"}`` → :class:`Passage`.

A real corpus (a Wikipedia dump: ~21M passages) does not fit in memory as objects, so
:func:`iter_corpus` streams it; index builders consume the stream. ``.jsonl.gz`` files and
DPR's ``psgs_w100.tsv`` layout (``id<TAB>text<TAB>title`` with a header line) work the same.

Every malformed passage is a :class:`~ambiqa.errors.DataError` naming the file and line: broken
JSON, a missing field, an empty text (an empty passage can only be a retrieval false hit) and a
duplicate id (ids are how programs cite passages, so they must be unique).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator
from pathlib import Path

from ambiqa.data._io import Where, iter_jsonl, open_text
from ambiqa.errors import DataError
from ambiqa.types import Passage

_FIELDS = ("id", "title", "text")


def _check_file(path: Path) -> Path:
    if not path.exists():
        raise DataError(f"corpus file not found: {path}",
                        hint="pass a JSON Lines file of {id, title, text} passages")
    if path.is_dir():
        raise DataError(f"expected a corpus file but found a directory: {path}")
    return path


def _is_tsv(path: Path) -> bool:
    return path.name.lower().removesuffix(".gz").endswith(".tsv")


def _iter_tsv(path: Path) -> Iterator[tuple[Where, dict[str, object]]]:
    """DPR's passage file: a header ``id text title`` then one passage per row."""
    with open_text(path) as fh:
        reader = csv.reader(fh, delimiter="\t")
        try:
            header = [h.strip().lower() for h in next(reader)]
        except StopIteration:
            return
        missing = [f for f in _FIELDS if f not in header]
        if missing:
            raise Where(path, "line 1").error(
                f"the TSV header lacks column(s) {', '.join(missing)} (it has: {header})")
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise Where(path, f"line {lineno}").error(
                    f"expected {len(header)} tab-separated columns, got {len(row)}")
            yield Where(path, f"line {lineno}"), dict(zip(header, row, strict=True))


def _passage(where: Where, rec: dict[str, object]) -> Passage:
    for field in _FIELDS:
        if rec.get(field) is None:
            raise where.missing(field)
    pid, title, text = rec["id"], rec["title"], rec["text"]
    if isinstance(pid, bool) or not isinstance(pid, str | int):
        raise where.error(f"field 'id' must be a string, got {type(pid).__name__}")
    pid = str(pid).strip()
    if not pid:
        raise where.error("field 'id' is empty")
    for name, value in (("title", title), ("text", text)):
        if not isinstance(value, str):
            raise where.error(f"field '{name}' of passage '{pid}' must be a string, "
                              f"got {type(value).__name__}")
    assert isinstance(title, str) and isinstance(text, str)
    if not text.strip():
        raise where.error(f"passage '{pid}' has an empty text",
                          hint="drop the passage from the corpus")
    return Passage(pid, title.strip(), text.strip())


def iter_corpus(path: str | Path, *, check_duplicates: bool = True) -> Iterator[Passage]:
    """Stream the passages of a corpus file, validating each one.

    ``check_duplicates`` keeps a set of the ids seen (a few bytes per passage; turn it off
    only for a corpus already known to be clean and too big for that set). An empty corpus is
    an error when the stream ends. A missing file fails here, before the first passage.
    """
    path = _check_file(Path(path))
    return _stream(path, check_duplicates)


def _stream(path: Path, check_duplicates: bool) -> Iterator[Passage]:
    seen: dict[str, str] = {}
    rows = _iter_tsv(path) if _is_tsv(path) else iter_jsonl(path)
    count = 0
    for where, rec in rows:
        passage = _passage(where, rec)
        if check_duplicates:
            first = seen.get(passage.id)
            if first is not None:
                raise where.error(f"duplicate passage id '{passage.id}' (first seen at {first})",
                                  hint="passage ids must be unique; renumber the corpus")
            seen[passage.id] = where.label
        count += 1
        yield passage
    if count == 0:
        raise DataError(f"corpus {path} holds no passages")


def load_corpus(path: str | Path) -> list[Passage]:
    """The whole corpus in memory (fine for the shared 13k-passage corpus, not for a dump)."""
    return list(iter_corpus(path))


def corpus_fingerprint(path: str | Path) -> str:
    """First 16 hex digits of the sha256 of the file's bytes (read in 1 MiB chunks).

    Indexes and caches store it to notice that they were built from another corpus.
    """
    path = _check_file(Path(path))
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise DataError(f"cannot read corpus {path}: {exc.strerror or exc}") from exc
    return digest.hexdigest()[:16]
