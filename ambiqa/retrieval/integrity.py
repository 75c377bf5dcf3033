"""Index integrity: each index records the size and sha256 of its files in its manifest and
checks them when it is opened (issue 33 item 5).

The fingerprint of an index covers its passages, not the arrays built from them: a BM25 index
whose score arrays were scrambled at the same size loaded and answered wrongly with exit 0.
Now a build lists every file it wrote (``"files": {relative path: {size, sha256}}``) and
opening checks each one. Hashing is cheap but not free (a ColBERT index over the shared
corpus is a few hundred MB), so a file already verified at the same size and modification
time is not hashed again: the verdicts are kept in ``.verified.json`` beside the manifest
(best effort: a read-only index is simply hashed on every open). A manifest without
``files`` (an index built before this check) is accepted as it always was.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from ambiqa.errors import RetrievalIndexError
from ambiqa.fsutil import atomic_write_json, sha256_file

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
        data = json.loads((index_dir / VERIFIED).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def verify_files(index_dir: Path, manifest: dict[str, Any], kind: str) -> None:
    """Check every file the manifest lists: present, same size, same sha256 (skipped for a
    file verified before at the same size and mtime). Raises :class:`RetrievalIndexError`
    naming the file and the rebuild command."""
    records = manifest.get(FILES_KEY)
    if records is None:
        return
    index_dir = Path(index_dir)
    fix = f"rebuild it: {rebuild_command(kind, index_dir.name)}"
    if not isinstance(records, dict):
        raise RetrievalIndexError(f"{kind} index at {index_dir}: its manifest's file list is "
                                  "not an object", hint=fix)
    with _LOCK:
        verified = _load_verified(index_dir)
        changed = False
        for rel, rec in records.items():
            path = index_dir / rel
            if not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str):
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
            seen = verified.get(rel)
            if seen == [st.st_size, st.st_mtime_ns, rec["sha256"]]:
                continue
            if sha256_file(path) != rec["sha256"]:
                raise RetrievalIndexError(
                    f"{kind} index at {index_dir}: {rel} does not match its manifest (same "
                    "size, different sha256); the index is damaged", hint=fix)
            verified[rel] = [st.st_size, st.st_mtime_ns, rec["sha256"]]
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
