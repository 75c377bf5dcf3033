"""Telling an LM that could not answer from a reply that could not be parsed.

A step of a program may *degrade* (fall back to a default, recorded in the trace) when the LM
replied but the reply does not parse: the program can answer around a bad reply. It must not
degrade when the LM never replied -- connection refused, a timeout, an HTTP error, a body that
is not a chat completion -- because then every step of every question "degrades" and a dead
endpoint is scored as a run of empty answers (issue 33). Those failures survive
:class:`~ambiqa.lm.resilience.ResilientEngine`'s retries as DSPy :class:`LMError` s; this
module turns them into :class:`~ambiqa.errors.LMUnavailableError`, which fails the question
(an error row in an evaluation, a non-zero exit of ``ambiqa ask``).

DSPy's ChatAdapter retries a failed parse with the JSONAdapter; only an
:class:`AdapterParseError` triggers that fallback, so an LM error raised by either attempt
propagates as it came. Should a DSPy version wrap it (``raise AdapterParseError(...) from
exc``), :func:`lm_failure_in` still finds it in the exception's cause chain.
"""

from __future__ import annotations

from ambiqa.errors import LMUnavailableError
from ambiqa.lm.redact import redact
from ambiqa.lm.resilience import _transient

#: how far along ``__cause__`` / ``__context__`` an LM error is looked for
_CHAIN_DEPTH = 8

_HINT = ("check that the LM is reachable (--lm, --api-base, the API key variable) and "
         "rerun; an evaluation redoes the failed questions with --resume --retry-errors")


def _is_lm_error(exc: BaseException) -> bool:
    from dspy import lm15
    from dspy.utils.exceptions import LMError

    return isinstance(exc, (LMError, lm15.LM15Error))


def lm_failure_in(exc: BaseException | None) -> BaseException | None:
    """The LM error ``exc`` is or was raised from (its cause chain), else ``None``."""
    seen = 0
    while exc is not None and seen < _CHAIN_DEPTH:
        if _is_lm_error(exc):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def failure_kind(exc: BaseException) -> str:
    """A short class name for an LM failure: "connection", "timeout", "server_error", ..."""
    kind = _transient(exc)
    if kind:
        return kind
    code = getattr(exc, "code", None)
    return str(code) if code else type(exc).__name__


def lm_unavailable(step: str, exc: BaseException) -> LMUnavailableError:
    """The question-failing error for LM error ``exc`` raised inside ``step``."""
    kind = failure_kind(exc)
    # redacted before the message is cut: a key cut in two would no longer match its value
    return LMUnavailableError(
        redact(f"{step}: the LM gave no reply ({kind}): {type(exc).__name__}: "
               f"{redact(str(exc))[:300]}"), hint=_HINT, kind=kind)
