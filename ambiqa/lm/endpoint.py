"""The endpoint engine: any LiteLLM / OpenAI-compatible model through an inner ``dspy.LM``.

The API key is read from an environment variable, never from the command line or an
artifact; retries and deadlines belong to :class:`ambiqa.lm.resilience.ResilientEngine`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

from ambiqa.lm.redact import redact


class EndpointEngine:
    """Sends a canonical request through an inner ``dspy.LM`` (LiteLLM or DSPy's native HTTP
    client) with DSPy's retries off, so :class:`ResilientEngine` owns retries and deadlines.

    The inner call runs with no callbacks and no usage tracker: the outer ``dspy.LM`` reports
    the call once to ambiqa's tracing. The key lives only in the inner LM; ``dump_state``
    records the environment variable's name, never its value.
    """

    def __init__(self, model: str, *, api_base: str | None, api_key_env: str | None,
                 api_key: str | None, timeout: float, max_tokens: int,
                 temperature: float) -> None:
        import dspy

        self.model = model
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens,
                                  "cache": False, "num_retries": 0, "timeout": timeout}
        if api_base:
            kwargs["api_base"] = api_base
        if api_key:
            kwargs["api_key"] = api_key
        self._lm = dspy.LM(model, **kwargs)

    @property
    def supports_response_schema(self) -> bool:
        return bool(self._lm.supports_response_schema)

    @property
    def supported_params(self) -> frozenset:
        return frozenset(self._lm.supported_params)

    def complete(self, request: Any) -> Any:
        import dspy

        with dspy.context(callbacks=[], usage_tracker=None):
            response = self._lm(request)
        check_completion(response, self.model)
        return response

    def stream(self, request: Any) -> Iterator[Any]:
        """The reply as the endpoint writes it (lm15 events), through the same inner LM.

        The inner ``dspy.LM`` streams when DSPy's ``send_stream`` is set, and sends each
        chunk with ``anyio.from_thread.run``, which needs an AnyIO worker thread: so the
        call runs in one, on a private event loop in a helper thread, and its chunks come
        back here through a queue. The end event carries the finished Response's finish
        reason and usage; a stream that wrote no text is refused as :func:`check_completion`
        refuses a completion without content.
        """
        import anyio
        import dspy
        from dspy.lm15 import StreamDeltaEvent, StreamEndEvent, StreamStartEvent, TextDelta

        items: queue.SimpleQueue = queue.SimpleQueue()
        done = object()

        class _Chunks:
            async def send(self, chunk: Any) -> None:
                items.put(chunk)

        def call() -> Any:
            with dspy.context(send_stream=_Chunks(), callbacks=[], usage_tracker=None):
                return self._lm(request)

        def run() -> None:
            try:
                async def main() -> Any:
                    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)

                items.put((done, anyio.run(main)))
            except BaseException as exc:  # handed to the reader
                items.put(exc)

        threading.Thread(target=run, daemon=True, name="ambiqa-endpoint-stream").start()
        started = False
        while True:
            item = items.get()
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, tuple) and item and item[0] is done:
                response = item[1]
                break
            choices = getattr(item, "choices", None) or []
            delta = getattr(choices[0], "delta", None) if choices else None
            text = getattr(delta, "content", None) if delta is not None else None
            if not started:
                started = True
                yield StreamStartEvent(model=self.model)
            if text:
                yield StreamDeltaEvent(delta=TextDelta(text=text))
        if not started:  # no chunk came (a non-streaming reply): the whole text, checked
            check_completion(response, self.model)
            yield StreamStartEvent(model=self.model)
            if response.text:
                yield StreamDeltaEvent(delta=TextDelta(text=response.text))
        elif not response.text and not getattr(response, "tool_calls", None):
            # the streamed form of a completion without content (see check_completion)
            from dspy import lm15

            raise lm15.ServerError(f"{self.model}: the streamed reply has no content")
        yield StreamEndEvent(finish_reason=response.finish_reason, usage=response.usage)

    def close(self) -> None:
        self._lm.close()

    def probe(self, timeout_s: float = 5.0) -> str | None:
        """Why the endpoint cannot answer (one phrase), or ``None`` when it can: one
        ``GET {api_base}/models`` with the key, as every OpenAI-compatible server offers.

        No reply at all (refused, unresolvable, timed out), a refused key (401/403), a
        gateway whose upstream is gone (502-504) or an HTML page where the API should be
        count as not answering; any other status means a server is there (a 404 from a server
        without the route is still a server). The key is sent as the calls send it, and
        never appears in the reason."""
        key = self._lm.kwargs.get("api_key")
        return probe_endpoint(str(self.api_base), None if key == "not-needed" else key,
                              timeout_s)

    def dump_state(self) -> dict[str, Any]:
        return {"model": self.model, "api_base": self.api_base, "api_key_env": self.api_key_env,
                "timeout": self.timeout, "max_tokens": self.max_tokens,
                "temperature": self.temperature}


def check_completion(response: Any, model: str) -> None:
    """Refuse a 200 reply that is not a completion: an OpenAI-style body with no ``choices``,
    or whose message has ``content: null`` and no tool calls.

    The HTTP client maps both to an empty text, which the adapter would report as a reply
    that does not parse, and the step would degrade -- an empty answer scored as answered
    (issue 42: rc 0, 4/4); but nothing was generated, so it is a transport failure (a gateway,
    a server fault or a filter that withheld the text), raised as a retryable server error
    and, after the retries, a failed question. A completion whose content is an empty
    *string* is the model's reply and stays a parse failure.
    """
    from dspy import lm15

    data = getattr(response, "provider_data", None)
    if not isinstance(data, dict) or "choices" not in data:
        return
    choices = data["choices"]
    if not choices:
        raise lm15.ServerError(f"{model}: the reply has no choices (an empty completion body)")
    first = choices[0] if isinstance(choices, list) else None
    message = first.get("message") if isinstance(first, dict) else None
    if isinstance(message, dict) and message.get("content") is None and \
            not message.get("tool_calls") and not message.get("function_call"):
        reason = first.get("finish_reason")
        raise lm15.ServerError(f"{model}: the reply's message has no content (content: null"
                               + (f", finish_reason {reason!r}" if reason else "") + ")")


def probe_endpoint(api_base: str, api_key: str | None, timeout_s: float = 5.0) -> str | None:
    """See :meth:`EndpointEngine.probe`: ``None`` when ``api_base`` answers like a server."""
    import base64
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(api_base)
        host = parts.hostname or ""
        netloc = host if ":" not in host else f"[{host}]"
        if parts.port:
            netloc += f":{parts.port}"
    except ValueError as exc:
        return redact(f"not a URL ({exc})")
    if parts.scheme not in ("http", "https") or not host:
        return "not an http(s) URL"
    url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/models", parts.query,
                      ""))
    headers = {"Accept": "application/json"}
    if api_key:  # the schemes of OpenAI-style servers, Azure and Anthropic: one will be read
        headers.update({"Authorization": f"Bearer {api_key}", "api-key": api_key,
                        "x-api-key": api_key})
    elif parts.username is not None:
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:  # noqa: S310
            kind = reply.headers.get("Content-Type", "")
            if "html" in kind.lower():
                return "it answers with an HTML page, not the API (is the URL's path right?)"
            return None
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return f"HTTP {exc.code}: the key was refused"
        if exc.code in (502, 503, 504):
            return f"HTTP {exc.code} from a gateway: the server behind it does not answer"
        return None  # a server answered, only not this route
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return redact(f"{type(reason).__name__}: {reason}" if not isinstance(reason, str)
                      else reason)
