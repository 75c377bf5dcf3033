"""Numeric settings read from environment variables, with one clear error for a bad value.

Several knobs (``$AMBIQA_SLOTS``, ``$AMBIQA_PASSAGE_WORDS``, ``$AMBIQA_THREADS``,
``$AMBIQA_PARALLEL``, ``$AMBIQA_LM_TIMEOUT``) are read at run time; a typo in one should name
the variable, not surface as a ``ValueError`` from deep inside a worker.
"""

from __future__ import annotations

import os

from ambiqa.errors import ConfigError


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """``$name`` as an integer (``default`` when unset or blank); ConfigError if malformed or
    below ``minimum``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"${name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ConfigError(f"${name} must be >= {minimum}, got {value}")
    return value


def env_seconds(name: str, default: float | None) -> float | None:
    """``$name`` as a positive number of seconds (``default`` when unset or blank; ``None``
    for zero or less, meaning no limit); ConfigError if malformed."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"${name} must be a number of seconds, got {raw!r}") from exc
    return value if value > 0 else None
