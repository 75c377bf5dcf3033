"""What every loader shares: one ``dspy.Example`` per record, ids, limits and passages.

The steps are the same whatever the layout: take at most ``limit`` records, give each an id
(its own, else a stable ``<file stem>-<n>``), make repeated ids unique, and keep a record's
passages once each. Reading the files themselves is :mod:`ambiqa.data._io`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy

from ambiqa.data._io import Unwrap, Where, iter_records
from ambiqa.errors import ConfigError


def make_example(fields: dict[str, Any]) -> dspy.Example:
    """An example whose only input is ``question`` (every other field is a label)."""
    return dspy.Example(**fields).with_inputs("question")


def unique_ids(examples: list[dspy.Example]) -> list[dspy.Example]:
    """Make ids unique: a repeated id (SituatedQA and NQ repeat rows) gets ``#2``, ``#3``..."""
    taken = {ex.id for ex in examples}
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            n = 2
            while f"{ex.id}#{n}" in taken:
                n += 1
            ex.id = f"{ex.id}#{n}"
            taken.add(ex.id)
        seen.add(ex.id)
    return examples


def single_split(section: str | None, path: str | Path) -> None:
    """Only ASQA files hold several splits; a ``#PART`` on any other file is a mistake."""
    if section is not None:
        raise ConfigError(f"{path} holds a single split; '#{section}' selects nothing here",
                          hint="drop the #PART from the spec")


def record_id(rec: dict[str, Any], keys: tuple[str, ...], where: Where, key: str | None) -> str:
    """The first non-blank of ``rec[keys...]``, else the record's mapping ``key``, else
    :func:`fallback_id`."""
    for name in keys:
        value = rec.get(name)
        if value is not None and str(value).strip():
            return str(value).strip()
    return key or fallback_id(where)


def fallback_id(where: Where) -> str:
    """``<file stem>-<n>`` from the record position: stable for a given file."""
    stem = where.path.name.split(".")[0] or "record"
    return f"{stem}-{where.label.split()[1]}"


def take(records: Iterator[tuple[Where, dict[str, Any], str | None]], limit: int | None
         ) -> Iterator[tuple[Where, dict[str, Any], str | None]]:
    """The first ``limit`` records (all when None), read lazily."""
    for n, item in enumerate(records):
        if limit is not None and n >= limit:
            return
        yield item


def single_split_records(path: str | Path, section: str | None, limit: int | None,
                         unwrap: Unwrap | None = None
                         ) -> Iterator[tuple[Where, dict[str, Any], str | None]]:
    """The first ``limit`` records of a file that holds one split (a ``#PART`` is refused
    at once, before anything is read)."""
    single_split(section, path)
    return take(iter_records(Path(path), unwrap), limit)


def passage(title: Any, text: Any) -> dict[str, str] | None:
    """``{"title", "text"}`` stripped, or None for a passage without text."""
    title = str(title or "").strip()
    text = str(text or "").strip()
    return {"title": title, "text": text} if text else None


def dedupe_passages(passages: list[dict[str, str] | None]) -> list[dict[str, str]]:
    """Each (title, text) once, first occurrence first; None entries dropped."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for p in passages:
        if p is not None:
            out.setdefault((p["title"], p["text"]), p)
    return list(out.values())
