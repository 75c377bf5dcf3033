"""Where ambiqa keeps what it builds: the cache root and the index root.

Everything under ``$AMBIQA_CACHE`` (default ``~/.cache/ambiqa``): assembled models
(``models/``), ColBERT checkpoints (``colbert/``), compiled torch extensions, readers, the
retrieval cache, DSPy's response cache, and indexes (``indexes/``, or ``$AMBIQA_INDEX_ROOT``).
This module imports nothing heavy, so anything may use it.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The user's ambiqa cache (``$AMBIQA_CACHE`` or ``~/.cache/ambiqa``)."""
    return Path(os.environ.get("AMBIQA_CACHE", Path.home() / ".cache" / "ambiqa")).expanduser()


def index_root() -> Path:
    """Where named indexes live: ``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``."""
    return Path(os.environ.get("AMBIQA_INDEX_ROOT", cache_root() / "indexes")).expanduser()
