"""Who holds a lock file: what ``ambiqa doctor`` asks before it advises deleting one (issue 42).

Two kinds of lock file sit in ambiqa's cache:

* **build locks of the torch extensions** colbert-ai compiles on first use
  (``$TORCH_EXTENSIONS_DIR/NAME/lock``): torch's ``FileBaton`` creates the file, keeps it open
  while it compiles and deletes it when done. A lock whose process died stays behind and every
  later ColBERT load waits on it forever -- that one must be deleted; one whose process is still
  compiling must not (the compile would race a second one).
* **index locks** (``$AMBIQA_CACHE/index-locks/*.lock``,
  :func:`ambiqa.retrieval.adding.index_lock`): ``flock``-ed while an index is built or added
  to; the kernel drops the lock when its process ends, so such a file is never stale and is
  never to be deleted.

A lock is *held* when a live process has the file open (read from ``/proc/PID/fd``, which also
gives the pid) or, for a ``flock`` lock, when a non-blocking ``flock`` is refused (the holder
may belong to another user, whose ``/proc`` entries cannot be read: held, pid unknown).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ambiqa.paths import cache_root

#: where index locks live, under the cache (the index root holds indexes only)
INDEX_LOCKS = "index-locks"


@dataclass(frozen=True)
class LockState:
    """One lock file: ``held`` True (a live process holds it), False (stale: nobody does) or
    None (cannot tell: no ``/proc`` on this system); ``pids`` of the holders that can be seen."""

    path: Path
    held: bool | None
    pids: tuple[int, ...] = ()

    def holder(self) -> str:
        """``"pid 123"`` / ``"pids 1, 2"``, or ``"a running process"`` when none can be seen."""
        if not self.pids:
            return "a running process"
        return ("pid " if len(self.pids) == 1 else "pids ") + ", ".join(map(str, self.pids))


def index_lock_path(root: str | os.PathLike[str], name: str) -> Path:
    """The lock file of index ``name`` under ``root`` (named by a hash of the index's path)."""
    where = f"{Path(root).expanduser().resolve()}\0{name}"
    return cache_root() / INDEX_LOCKS / f"{hashlib.sha256(where.encode()).hexdigest()[:24]}.lock"


def pids_holding(path: str | os.PathLike[str]) -> tuple[int, ...] | None:
    """The pids of the live processes (other than this one) with ``path`` open; None when
    this system has no ``/proc`` to read."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    target = Path(path).resolve()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or another user's process
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if Path(os.readlink(fd)) == target:
                        found.append(int(entry.name))
                        break
    return tuple(sorted(found))


def flock_held(path: str | os.PathLike[str]) -> bool:
    """Whether another process holds an ``flock`` on ``path`` (tried without waiting; the
    probe's own lock is dropped at once)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def lock_state(path: str | os.PathLike[str], *, flock: bool = False) -> LockState:
    """Whether the lock file ``path`` is held (see the module docstring); ``flock``: the lock
    is taken with ``flock`` (an index lock), not by the file's existence (a build lock)."""
    path = Path(path)
    pids = pids_holding(path)
    if flock:
        return LockState(path, flock_held(path), pids or ())
    if pids is None:
        return LockState(path, None)
    return LockState(path, bool(pids), pids)
