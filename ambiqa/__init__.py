"""ambiqa: declarative, optimizable DSPy programs for ambiguous and multi-hop question answering.

Importing ambiqa is cheap and offline: heavy libraries (DSPy, torch, colbert-ai) load on first
use. Environment defaults are set here, before anything imports LiteLLM or DSPy:
``LITELLM_LOCAL_MODEL_COST_MAP`` (otherwise LiteLLM fetches a price list over the network at
import) and ``DSPY_CACHEDIR`` (DSPy's response cache goes under ambiqa's cache directory).
"""

from __future__ import annotations

import os
from typing import Any

from ambiqa.paths import cache_root  # light: os and pathlib only

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Busy-waiting OpenMP threads make small torch ops ~100x slower on a shared 2-core machine
# (measured: a ColBERT searcher took 248 s to load instead of 9 s; a 32x384 @ 384x384 matmul
# 18 ms instead of 0.2 ms). Passive waiting costs nothing otherwise. Must precede torch's
# import; this is the one place ambiqa sets it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DSPY_CACHEDIR", str(cache_root() / "dspy"))

__version__ = "0.1.0"
__all__ = ["__version__", "load", "make_lm", "configure"]


def load(path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """Load a compiled program artifact (JSON) and return a callable DSPy module."""
    from ambiqa.optimizers.artifact import load_artifact

    return load_artifact(path, **kwargs)


def make_lm(spec: str | None = None, **kwargs: Any) -> Any:
    from ambiqa.lm import make_lm as _make_lm

    return _make_lm(spec, **kwargs)


def configure(lm: Any, **settings: Any) -> Any:
    from ambiqa.lm import configure as _configure

    return _configure(lm, **settings)
