"""Index integrity: each index records the size and sha256 of its files in its manifest and
checks them when it is opened (issue 33 item 5; issue 42 closed its holes).

The fingerprint of an index covers its passages, not the arrays built from them: a BM25 index
whose score arrays were scrambled at the same size loaded and answered wrongly with exit 0.
Now a build lists every file it wrote (``"files": {relative path: {size, sha256}}``) and
opening checks each one.

Hashing is cheap but not free (a ColBERT index over the shared corpus is a few hundred MB),
so a large index keeps its verdicts in ``.verified.json`` beside the manifest. A verdict was
keyed by size and mtime, and a file scrambled with its mtime put back (``touch -r``,
``os.utime``) passed unhashed; it is now keyed by size, mtime, *ctime* and inode. The ctime
cannot be set back from user space -- any write or ``utime`` moves it -- so a file changed
in any way since it was hashed is hashed again. An index whose files total at most
:data:`ALWAYS_HASH_BYTES` is hashed on every open, cache or not: there, always checking
costs milliseconds. (Best effort: a read-only index is simply hashed on every open.)

A manifest without ``files`` (an index built before the record existed) cannot be checked
and is refused, naming the command that rebuilds it: accepting it left a damaged legacy index
answering wrongly with exit 0.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ambiqa.errors import RetrievalIndexError
from ambiqa.fsutil import atomic_write_json, sha256_file
from ambiqa.jsonio import read_json

FILES_KEY = "files"
VERIFIED = ".verified.json"
_LOCK = threading.Lock()


def rebuild_command(kind: str, name: str) -> str:
    """The command that rebuilds index ``name`` of ``kind``."""
    return f"ambiqa index CORPUS --name {name} --kind {kind}"


def index_files(index_dir: Path, exclude: set[str]) -> list[str]:
    """Every file under ``index_dir`` (relative, sorted), hidden ones and ``exclude`` left out."""
    out = []
    for path in sorted(Path(index_dir).rglob("*")):
        rel = path.relative_to(index_dir)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if rel.as_posix() in exclude:
            continue
        out.append(rel.as_posix())
    return out


def record_files(index_dir: Path, exclude: set[str]) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "sha256"}}`` of every file of a finished build."""
    index_dir = Path(index_dir)
    return {rel: {"size": (index_dir / rel).stat().st_size,
                  "sha256": sha256_file(index_dir / rel)}
            for rel in index_files(index_dir, exclude)}


def _load_verified(index_dir: Path) -> dict[str, list[Any]]:
    try:
        data = read_json(index_dir / VERIFIED, error=RetrievalIndexError)
    except RetrievalIndexError:  # a missing or damaged cache: hash again
        return {}
    return data if isinstance(data, dict) else {}


#: an index whose recorded files total at most this many bytes is hashed on every open
ALWAYS_HASH_BYTES = 64 * 1024 * 1024


def _stamp(st: os.stat_result, sha256: str) -> list[Any]:
    """What a cached verdict is keyed by: everything that moves when the file's bytes may
    have (ctime moves on any write or utime, and cannot be set back)."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256]


def verify_files(index_dir: Path, manifest: dict[str, Any], kind: str) -> None:
    """Check every file the manifest lists: present, same size, same sha256 (a large index
    skips a file hashed before whose size, mtime, ctime and inode are unchanged). Raises
    :class:`RetrievalIndexError` naming the file and the rebuild command; a manifest that
    lists no files is refused the same way."""
    index_dir = Path(index_dir)
    fix = f"rebuild it: {rebuild_command(kind, index_dir.name)}"
    records = manifest.get(FILES_KEY)
    if records is None:
        raise RetrievalIndexError(
            f"{kind} index at {index_dir} records no file hashes (its manifest has no "
            f"'{FILES_KEY}': built before ambiqa recorded them), so a damaged file could "
            "not be detected", hint=fix)
    if not isinstance(records, dict) or not records:
        raise RetrievalIndexError(f"{kind} index at {index_dir}: its manifest's file list is "
                                  "not a non-empty object", hint=fix)
    total = sum(r.get("size", 0) for r in records.values()
                if isinstance(r, dict) and isinstance(r.get("size"), int))
    use_cache = total > ALWAYS_HASH_BYTES
    with _LOCK:
        verified = _load_verified(index_dir) if use_cache else {}
        changed = False
        for rel, rec in records.items():
            path = index_dir / rel
            if (not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str)
                    or Path(rel).is_absolute() or ".." in Path(rel).parts):
                raise RetrievalIndexError(f"{kind} index at {index_dir}: no valid record for "
                                          f"{rel} in its manifest", hint=fix)
            try:
                st = path.stat()
            except OSError:
                raise RetrievalIndexError(f"{kind} index at {index_dir} lacks {rel}, a file "
                                          "its manifest lists", hint=fix) from None
            if st.st_size != rec.get("size"):
                raise RetrievalIndexError(
                    f"{kind} index at {index_dir}: {rel} does not match its manifest "
                    f"({st.st_size} bytes, {rec.get('size')} recorded); the index is damaged",
                    hint=fix)
            if use_cache and verified.get(rel) == _stamp(st, rec["sha256"]):
                continue
            if sha256_file(path) != rec["sha256"]:
                raise RetrievalIndexError(
                    f"{kind} index at {index_dir}: {rel} does not match its manifest (same "
                    "size, different sha256); the index is damaged", hint=fix)
            if use_cache:
                verified[rel] = _stamp(st, rec["sha256"])
                changed = True
        if changed:
            try:
                atomic_write_json(index_dir / VERIFIED, verified)
            except OSError:  # a read-only index: verified again on the next open
                pass


def clear_verified(index_dir: Path) -> None:
    """Forget the cached verdicts (tests; a build replaces the directory anyway)."""
    try:
        os.unlink(Path(index_dir) / VERIFIED)
    except OSError:
        pass
