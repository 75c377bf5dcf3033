"""The one guarded JSON reader: every JSON file or line ambiqa reads from a user or from disk
goes through :func:`read_json` (a file), :func:`loads` (text already in memory) or
:func:`read_capped` then :func:`loads` (a caller that also needs the bytes).

Why one reader: Python's ``json`` parser recurses once per nesting level, so a 10,000-deep
document (a damaged file, or an attack) ended in a ``RecursionError`` traceback in nine places
(data files, artifacts through ``ask``/``export``/``evaluate``, index manifests, corpora, a
part's ``run.json``), and each place that had learnt to check depth or size did it its own
way. Here the depth is counted on the text *before* parsing (:func:`depth_ok`), the size on
the file before it is read, and every failure -- too big, too deep, not UTF-8, not JSON --
becomes the caller's one-line :class:`~ambiqa.errors.AmbiqaError` (the CLI prints it and exits
2), never a traceback.

The limits: :data:`MAX_DEPTH` levels (everything ambiqa writes is under ten deep), and a size
cap the caller chooses for what it reads: :data:`MAX_META_BYTES` for manifests, ``run.json``,
summaries and caches; the artifact cap (16 MiB, ``$AMBIQA_MAX_ARTIFACT_MB``) for compiled and
saved programs; none for data files and corpora, which are as large as the data (their
depth is still checked).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from pathlib import Path
from typing import Any

from ambiqa.errors import AmbiqaError, DataError

__all__ = ["MAX_DEPTH", "MAX_META_BYTES", "depth_ok", "loads", "read_capped", "read_json"]

#: deepest JSON nesting read anywhere (what ambiqa writes is under ten levels deep; data rows
#: with passages a few more); a deeper document is damage or an attack
MAX_DEPTH = 64
#: largest bookkeeping file read (manifests, run.json, summary.json, caches of verdicts):
#: the largest real one, a run.json with 100,000 part ids, is a few MiB
MAX_META_BYTES = 64 * 1024 * 1024

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def depth_ok(raw: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``raw`` nests at most ``limit`` deep.

    Counted on the text, before parsing, so a 100,000-deep document never reaches the
    recursive parser. Strings are removed first (brackets inside them do not nest), then only
    brackets are kept; both steps run in C (``re``, ``itertools.accumulate``), so a 16 MiB
    artifact is checked in well under a second.
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if "[" not in text and "{" not in text:
        return True
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= limit


def loads(text: bytes | str, *, source: str, error: type[AmbiqaError] = DataError,
          max_depth: int = MAX_DEPTH, hint: str | None = None) -> Any:
    """Parse ``text`` (one JSON document or one JSON Lines line) from ``source`` (a path, or
    ``path, line N``), raising ``error`` with ``hint`` when it nests deeper than
    ``max_depth``, is not UTF-8 or is not JSON."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start}; is it a "
                        "binary file?)", hint=hint) from exc
    if not depth_ok(text, max_depth):
        raise error(f"{source}: JSON nests deeper than {max_depth} levels (damaged, or not "
                    "a file ambiqa reads)", hint=hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # a one-line text (a JSON Lines line: the source names it) gets no "line 1"
        where = f", line {exc.lineno}" if "\n" in text.strip() else ""
        raise error(f"{source}{where}: invalid JSON ({exc.msg} at column {exc.colno})",
                    hint=hint) from exc
    except (RecursionError, ValueError) as exc:  # a deep value past the text check; lone \ud800
        raise error(f"{source}: unreadable JSON ({str(exc)[:80]})", hint=hint) from exc


def read_capped(path: str | Path, *, error: type[AmbiqaError] = DataError,
                max_bytes: int | None = MAX_META_BYTES, what: str = "file",
                hint: str | None = None, size_hint: str | None = None) -> bytes:
    """The bytes of the file ``path``, read once, after its size is checked against
    ``max_bytes`` (see :func:`read_json` for the arguments). For a caller that needs the bytes
    as well as the document (the program loader hashes what it parsed)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}", hint=hint) from exc
    if max_bytes is not None and size > max_bytes:
        raise error(f"{path} is {size / 2**20:.1f} MiB, over the {max_bytes / 2**20:g} MiB "
                    f"cap for a {what}", hint=size_hint or hint)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}", hint=hint) from exc


def read_json(path: str | Path, *, error: type[AmbiqaError] = DataError,
              max_bytes: int | None = MAX_META_BYTES, max_depth: int = MAX_DEPTH,
              what: str = "file", hint: str | None = None, size_hint: str | None = None) -> Any:
    """Read and parse the JSON file ``path`` within the limits.

    ``what`` names the file in the size message (``"artifact"``, ``"index manifest"``);
    ``max_bytes=None`` reads a file of any size (data, corpora); ``size_hint`` replaces
    ``hint`` for a file over the cap (how to raise it). A missing or unreadable file is an
    ``error`` too.
    """
    raw = read_capped(path, error=error, max_bytes=max_bytes, what=what, hint=hint,
                      size_hint=size_hint)
    return loads(raw, source=str(path), error=error, max_depth=max_depth, hint=hint)
