"""Atomic file writes, used for everything ambiqa persists.

A write goes to a temporary file in the target's directory, is flushed to disk, and is then
renamed over the target, so a reader (or a run resumed after a kill) sees the old file or the
new one, never a half-written one. A failed write removes its temporary file. Directories
(indexes, checkpoints) are built beside their target and swapped in with
:func:`swap_dir_into_place`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError


def current_umask() -> int:
    """The process umask, read without changing it where Linux exposes it (``os.umask`` can
    only be read by setting it, a race with threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike[str], write: Callable[[Any], None],
                 mode: str = "w") -> None:
    """Write ``path`` by calling ``write(file)`` on a temp file, then rename it into place.

    The file ends up 0644 under the user's umask, as a plain ``open`` would leave it
    (``mkstemp`` creates 0600, which made reports unreadable to anyone else)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644 & ~current_umask())
        kwargs = {"encoding": "utf-8"} if "b" not in mode else {}
        with os.fdopen(fd, mode, **kwargs) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write(path, lambda fh: fh.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n"))


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (model weights do not fit a read())."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def swap_dir_into_place(tmp: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Rename the finished directory ``tmp`` to ``target``, replacing an older one only at the end.

    An existing ``target`` is first renamed aside (``<name>.old-<pid>-<random>``) and deleted
    once ``tmp`` is in place; if the final rename fails the old directory is put back.
    """
    tmp, target = Path(tmp), Path(target)
    old: Path | None = None
    if target.exists():
        old = target.with_name(f"{target.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def refuse_repo_output(out_dir: str | os.PathLike[str], what: str, hint: str) -> None:
    """Build products (checkpoints) never go inside a git checkout's tree: a
    :class:`ConfigError` "refusing to write ``what`` inside the git repository ...".

    A hidden directory at the top of a checkout (``.ambiqa-cache``, git-ignored, where the test
    suite keeps its cache) is allowed.
    """
    here = Path(out_dir).expanduser().resolve()
    for parent in (here, *here.parents):
        if (parent / ".git").exists():
            rel = here.relative_to(parent)
            if rel.parts and rel.parts[0].startswith("."):
                return
            raise ConfigError(f"refusing to write {what} inside the git repository {parent}",
                              hint=hint)
