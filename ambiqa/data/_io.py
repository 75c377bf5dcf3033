"""Reading JSON / JSON Lines files with errors that point at the exact place.

Every loader in :mod:`ambiqa.data` reads through these helpers so that a broken file always
fails the same way: a :class:`~ambiqa.errors.DataError` naming the file, the line (JSON Lines)
or record number (a JSON array or mapping), and the field at fault. Files ending in ``.gz`` are
decompressed on the fly, because full-size releases often ship compressed. Parsing goes through
the one guarded reader (:func:`ambiqa.jsonio.loads`): a line or file nested deeper than
:data:`ambiqa.jsonio.MAX_DEPTH` is a DataError, not a RecursionError traceback.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ambiqa.errors import DataError
from ambiqa.jsonio import loads


@dataclass(frozen=True)
class Where:
    """The position of one record: the file and ``line N`` or ``record N`` (1-based)."""

    path: Path
    label: str

    def error(self, message: str, *, hint: str | None = None) -> DataError:
        return DataError(f"{self.path}, {self.label}: {message}", hint=hint)

    def missing(self, field: str) -> DataError:
        return self.error(f"missing field '{field}'")


def open_text(path: Path) -> IO[str]:
    """Open a (possibly gzipped) UTF-8 text file; a missing path is a DataError naming it."""
    if not path.exists():
        raise DataError(f"data file not found: {path}",
                        hint="check the path, or set AMBIQA_DATA to the data folder")
    if path.is_dir():
        raise DataError(f"expected a data file but found a directory: {path}")
    try:
        if path.name.endswith(".gz"):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc


def is_jsonl(path: Path) -> bool:
    name = path.name.lower().removesuffix(".gz")
    return name.endswith(".jsonl") or name.endswith(".ndjson")


def iter_jsonl(path: Path, *, start: int = 1) -> Iterator[tuple[Where, dict[str, Any]]]:
    """Yield ``(where, object)`` for each non-blank line, streaming (never the whole file)."""
    with open_text(path) as fh:
        try:
            for lineno, line in enumerate(fh, start=start):
                if not line.strip():
                    continue
                where = Where(path, f"line {lineno}")
                obj = loads(line, source=f"{path}, line {lineno}")
                if not isinstance(obj, dict):
                    raise where.error(f"expected a JSON object, got {type(obj).__name__}")
                yield where, obj
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from exc
        except (OSError, EOFError) as exc:  # truncated gzip, I/O error mid-stream
            raise DataError(f"{path}: read failed: {exc}") from exc


def read_json(path: Path) -> Any:
    """Parse a whole JSON file; a syntax error names the file and line."""
    with open_text(path) as fh:
        try:
            text = fh.read()
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from exc
        except (OSError, EOFError) as exc:
            raise DataError(f"{path}: read failed: {exc}") from exc
    return loads(text, source=str(path))


Unwrap = Callable[[Any, Path], Any]


def iter_records(path: Path, unwrap: Unwrap | None = None
                 ) -> Iterator[tuple[Where, dict[str, Any], str | None]]:
    """Yield ``(where, record, key)`` from a JSON Lines file or a JSON array / mapping.

    ``key`` is the mapping key when the top level is an object keyed by id (the original
    ASQA layout), else ``None``. ``unwrap(data, path)`` lets a format dig its records out of a
    wrapper object (TriviaQA's ``{"Data": [...]}``). A ``.json`` file that is really JSON Lines
    (one object per line) is read as such.
    """
    if is_jsonl(path):
        for where, obj in iter_jsonl(path):
            yield where, obj, None
        return
    try:
        data = read_json(path)
    except DataError as exc:
        if _looks_like_jsonl(path, exc):
            for where, obj in iter_jsonl(path):
                yield where, obj, None
            return
        raise
    if unwrap is not None:
        data = unwrap(data, path)
    if isinstance(data, list):
        items: list[tuple[str | None, Any]] = [(None, v) for v in data]
    elif isinstance(data, dict):
        items = [(str(k), v) for k, v in data.items()]
    else:
        raise DataError(f"{path}: expected a JSON array or object of records, "
                        f"got {type(data).__name__}")
    for n, (key, obj) in enumerate(items, start=1):
        where = Where(path, f"record {n}" if key is None else f"record {n} ('{key}')")
        if not isinstance(obj, dict):
            raise where.error(f"expected a JSON object, got {type(obj).__name__}")
        yield where, obj, key


def _looks_like_jsonl(path: Path, exc: DataError) -> bool:
    """A JSON parse that fails with 'Extra data' on line 2+ is a JSON Lines file."""
    return ("Extra data" in exc.message and ", line " in exc.message
            and ", line 1:" not in exc.message)


# ---------------------------------------------------------------------------------------------
# field access


def require(rec: dict[str, Any], key: str, where: Where, *, field: str | None = None) -> Any:
    """``rec[key]``, or a DataError naming ``field`` (default ``key``) when absent or null."""
    value = rec.get(key)
    if value is None:
        raise where.missing(field or key)
    return value


def require_text(rec: dict[str, Any], key: str, where: Where, *, field: str | None = None) -> str:
    """A non-empty string field (numbers are accepted and turned into text)."""
    value = require(rec, key, where, field=field)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise where.error(f"field '{field or key}' must be a string, got {type(value).__name__}")
    text = str(value).strip()
    if not text:
        raise where.error(f"field '{field or key}' is empty")
    return text


def require_list(rec: dict[str, Any], key: str, where: Where, *,
                 field: str | None = None) -> list[Any]:
    value = require(rec, key, where, field=field)
    if not isinstance(value, list):
        raise where.error(f"field '{field or key}' must be a list, got {type(value).__name__}")
    return value


def text_list(value: Any, where: Where, field: str) -> list[str]:
    """Normalize an answer field to a list of distinct non-empty strings (order kept).

    Releases disagree on whether a single answer is a string or a one-element list, and some
    store numbers; both are accepted. Anything else (objects, nested lists) is malformed.
    """
    if value is None:
        raise where.missing(field)
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise where.error(f"field '{field}' item {i} must be a string, "
                              f"got {type(item).__name__}")
        text = str(item).strip()
        if text and text not in out:
            out.append(text)
    return out


def dedupe(items: list[str]) -> list[str]:
    """Distinct items, first occurrence kept."""
    return list(dict.fromkeys(items))
