"""Credentials out of every text ambiqa writes: logs, trace events, run.json, reports.

An ``--api-base`` may carry a key as URL user-info (``http://user:KEY@host/v1``) or as a query
parameter (``?api_key=KEY``); DSPy and LiteLLM echo the URL in their error messages, which
then reach trace events and ``results.jsonl``. :func:`redact` removes both; it is cheap and
idempotent, so it is applied wherever text leaves the process.
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"<>]+@")
#: ``user:secret@host`` without a scheme (clients echo the URL's netloc in their errors)
_NETLOC = re.compile(r"(?<![\w.%+\-])[\w.%+\-~]+:[^\s/@'\"<>]+@(?=[\w.\-\[])")
_QUERY_KEY = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|password|"
                        r"secret)=)[^&\s'\"<>]+")

#: what replaces a removed credential
MASK = "***"


def redact(text: str) -> str:
    """``text`` with URL user-info and key-like query parameters replaced by ``***``."""
    if not text or "@" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _NETLOC.sub(f"{MASK}@", text)
    return _QUERY_KEY.sub(lambda m: f"{m.group(1)}{MASK}", text)


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
    text holds no credential is left untouched."""
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
        return record

    logging.setLogRecordFactory(factory)
    _INSTALLED = True
