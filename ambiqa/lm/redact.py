"""Credentials out of every text ambiqa writes: logs, trace events, run.json, reports.

An ``--api-base`` may carry a key as URL user-info (``http://user:KEY@host/v1``) or as a query
parameter (``?api_key=KEY``); DSPy and LiteLLM echo the URL in their error messages, which
then reach trace events and ``results.jsonl``. And an endpoint may echo the API key itself in
a 401 or 500 body ("Incorrect API key provided: sk-..."), which the HTTP client puts in the
exception's message. :func:`redact` removes all three: URL passwords and key-like query
parameters by pattern, and every *known* secret by value -- the keys the LMs of this process
were built with (:func:`register_secret`, called by the LM factory and ``serve``) and the
values of the usual key variables in the environment (:data:`KEY_ENV_NAMES`, any
``*_API_KEY``). It is cheap and idempotent, so it is applied at the few choke points where
text leaves the process: error rows and trace events, the CLI's error line and tracebacks
(``AMBIQA_DEBUG=1`` included), serve's error bodies, and every log record
(:func:`install_log_redaction`).
"""

from __future__ import annotations

import os
import re
import threading

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"<>]+@")
#: ``user:secret@host`` without a scheme (clients echo the URL's netloc in their errors)
_NETLOC = re.compile(r"(?<![\w.%+\-])[\w.%+\-~]+:[^\s/@'\"<>]+@(?=[\w.\-\[])")
_QUERY_KEY = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|password|"
                        r"secret)=)[^&\s'\"<>]+")

#: what replaces a removed credential
MASK = "***"


#: environment variables whose values are keys wherever they are set (besides ``*_API_KEY``)
KEY_ENV_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_API_KEY", "GEMINI_API_KEY",
                 "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AMBIQA_SERVE_TOKEN")
#: shorter values are not treated as secrets: masking "1" or "test" everywhere would mangle
#: the text, and a key that short protects nothing anyway
MIN_SECRET_CHARS = 8
#: placeholders ambiqa itself passes as keys to servers without auth
_NOT_SECRETS = frozenset({"not-needed", "EMPTY", "dummy"})

_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember ``value`` (an API key or bearer token this process uses) so :func:`redact`
    removes it from every text, and make sure log records are redacted from now on."""
    if not isinstance(value, str):
        return
    value = value.strip()
    if len(value) < MIN_SECRET_CHARS or value in _NOT_SECRETS:
        return
    with _SECRETS_LOCK:
        _SECRETS.add(value)
    install_log_redaction()


def known_secrets() -> list[str]:
    """The secret values to remove, longest first (so a key containing another is masked
    whole): the registered ones and those of the usual key variables set now."""
    found = set(_SECRETS)
    for name, value in os.environ.items():
        if (name in KEY_ENV_NAMES or name.endswith("_API_KEY")) and value:
            value = value.strip()
            if len(value) >= MIN_SECRET_CHARS and value not in _NOT_SECRETS:
                found.add(value)
    return sorted(found, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every known secret value, URL user-info and key-like query parameters
    replaced by ``***``."""
    if not text or not isinstance(text, str):
        return text
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    if "@" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _NETLOC.sub(f"{MASK}@", text)
    return _QUERY_KEY.sub(lambda m: f"{m.group(1)}{MASK}", text)


def redacted_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it, redacted: what ``AMBIQA_DEBUG=1`` and an
    unexpected error show (the messages in a traceback carry URLs and echoed keys too)."""
    import traceback

    return redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def install_excepthook() -> None:
    """Print uncaught exceptions (the command line's bugs and ``AMBIQA_DEBUG=1``) redacted.
    Installed once by the CLI; Python's own hook would print an echoed key verbatim."""
    import sys

    if getattr(sys.excepthook, "_ambiqa_redacting", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        if value is None or not isinstance(value, BaseException):
            previous(kind, value, tb)
            return
        if value.__traceback__ is None:
            value = value.with_traceback(tb)
        sys.stderr.write(redacted_traceback(value))

    hook._ambiqa_redacting = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def endpoint_host(url: str | None) -> str | None:
    """``scheme://host[:port]/path`` of an endpoint URL without credentials or query: what a
    run records to prove a resume talks to the same endpoint."""
    if not url:
        return None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(str(url))
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return redact(str(url))
    if not parts.scheme or not host:
        return redact(str(url))
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


_INSTALLED = False


def install_log_redaction() -> None:
    """Redact every log record created from now on, in every library (DSPy and LiteLLM echo
    endpoint URLs in their warnings). Wraps the logging record factory once; a record whose
    text holds no credential is left untouched. A record carrying an exception gets its
    traceback text formatted and redacted here (formatters print ``exc_text`` when set), so
    ``log.exception`` cannot print an echoed key either."""
    global _INSTALLED
    if _INSTALLED:
        return
    import logging

    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            text = record.getMessage()
        except Exception:  # a malformed record is logging's business, not ours
            return record
        clean = redact(text)
        if clean != text:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = redacted_traceback(record.exc_info[1]).rstrip("\n")
        return record

    logging.setLogRecordFactory(factory)
    _INSTALLED = True
