"""``ambiqa doctor`` and build locks (issue 42): a lock a running process holds is to be waited
for, never deleted; only a stale one (its process gone) is reported with the advice to delete
it. The locks here are really held by another process, taken the way their owners take them:
torch's ``FileBaton`` (the file created and kept open while an extension compiles) and
ambiqa's index lock (``flock``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from ambiqa import doctor
from ambiqa.retrieval.bm25 import BM25Retriever
from ambiqa.retrieval.locks import index_lock_path, lock_state
from ambiqa.types import Passage

#: what a compiling process does to its extension's lock (torch.utils.file_baton.FileBaton)
BATON = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL)
print("held", flush=True)
time.sleep(120)
"""
#: what ambiqa.retrieval.adding.index_lock does while an index is built or added to
FLOCK = """
import fcntl, sys, time
fh = open(sys.argv[1], "a")
fcntl.flock(fh, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def hold(script: str, path: Path) -> subprocess.Popen:
    """A process holding the lock at ``path`` (returned once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(path)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def end(proc: subprocess.Popen) -> None:
    """Kill the holder (as a crash would: a baton's file stays behind) and reap it."""
    proc.kill()
    proc.wait(timeout=30)


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Iterator[Path]:
    monkeypatch.setenv("AMBIQA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache" / "ext"))
    monkeypatch.setattr(doctor, "_model", lambda name: (lambda: "skipped in tests"))
    for name in ("_torch", "_faiss", "_encoder"):
        monkeypatch.setattr(doctor, name, lambda: "skipped in tests")
    monkeypatch.setattr(doctor, "importlib", types.SimpleNamespace(
        import_module=lambda m: types.SimpleNamespace(__version__="stub")))
    yield tmp_path / "cache"


def _doctor(**kw) -> tuple[bool, str]:
    out: list[str] = []
    ok = doctor.run_checks(print_fn=out.append, **kw)
    return ok, "\n".join(out)


def test_an_extension_lock_held_by_a_compile_is_waited_for_and_a_stale_one_deleted(cache):
    lock = cache / "ext" / "segmented_maxsim_cpp" / "lock"
    lock.parent.mkdir(parents=True)
    proc = hold(BATON, lock)
    try:
        state = lock_state(lock)
        assert state.held and state.pids == (proc.pid,)
        ok, text = _doctor()
        assert ok, text  # a compile in progress breaks nothing
        assert "[note] extension cache" in text and f"held by pid {proc.pid}" in text
        assert "wait for it" in text and "do not delete" in text
        assert "stale" not in text and "delete the listed lock files" not in text
    finally:
        end(proc)
    assert lock.is_file()  # the killed compile left its lock behind: now it is stale
    assert lock_state(lock).held is False
    ok, text = _doctor()
    assert not ok
    assert "[FAIL] extension cache" in text and "stale build lock" in text
    assert "delete the listed lock files" in text and str(lock) in text


def test_an_index_lock_held_by_a_build_is_noted_and_never_called_stale(cache, tmp_path):
    root = tmp_path / "indexes"
    BM25Retriever.build([Passage("a", "A", "alpha beta"), Passage("b", "B", "gamma delta")],
                        root / "notes")
    lock = index_lock_path(root, "notes")
    lock.parent.mkdir(parents=True, exist_ok=True)
    proc = hold(FLOCK, lock)
    try:
        state = lock_state(lock, flock=True)
        assert state.held and proc.pid in state.pids
        ok, text = _doctor(index_root=root)
        assert ok, text
        assert "[note] index notes: bm25, 2 passages" in text
        assert f"held by pid {proc.pid}" in text and "wait for it" in text
        assert "do not delete the lock" in text and "stale" not in text
    finally:
        end(proc)
    # the kernel dropped the lock with its process: the file left behind is not a problem
    assert lock.is_file() and lock_state(lock, flock=True).held is False
    ok, text = _doctor(index_root=root)
    assert ok and "[ok] index notes: bm25, 2 passages" in text and str(lock) not in text
