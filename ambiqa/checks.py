"""One check for integer settings, so every bad value gets the same one-line error.

Programs, retrievers and optimizers take counts (``k``, depths, budgets) from code, the CLI
and JSON configs; each used to spell its own ``isinstance`` test and message. This module sits
at the bottom of the import order (it needs only :mod:`ambiqa.errors`), so any layer may use it.
"""

from __future__ import annotations

from ambiqa.errors import ConfigError


def check_int(name: str, value: object, minimum: int = 1, *, maximum: int | None = None,
              none_ok: bool = False, hint: str | None = None) -> int | None:
    """``value`` if it is an integer >= ``minimum`` (and <= ``maximum`` where given; or None
    where ``none_ok``), else a :class:`ConfigError` naming ``name``. A bool is not an integer
    here: ``True`` as a count is a typo, not 1."""
    if value is None and none_ok:
        return None
    if (isinstance(value, int) and not isinstance(value, bool) and value >= minimum
            and (maximum is None or value <= maximum)):
        return value
    if maximum is not None:
        what = f"an integer in {minimum}..{maximum}"
    else:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if none_ok:
        what += " or None"
    raise ConfigError(f"{name} must be {what}, got {value!r}", hint=hint)
