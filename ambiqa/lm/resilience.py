"""Timeouts and retries around every engine, embedded or endpoint.

Each attempt has a deadline (a call never hangs; :func:`ambiqa.parallel.call_with_deadline`),
transient failures (timeouts, dropped connections, rate limits, 5xx) are retried a bounded
number of times with capped exponential backoff that honours a server's ``retry-after`` (also
capped), every retry is a trace event, and replies far longer than ``max_tokens`` could
produce are cut. DSPy's own retry loop is switched off (``num_retries=0``) so retries are
counted and bounded in one place.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ambiqa.envutil import env_seconds
from ambiqa.errors import ConfigError
from ambiqa.lm.endpoint import EndpointEngine
from ambiqa.lm.redact import redact, register_secret
from ambiqa.lm.streaming import TextPiece, current_sink, next_call_id, text_of_event
from ambiqa.parallel import call_with_deadline
from ambiqa.tracing import (
    current_output_cap,
    current_predictor,
    note_finish_reason,
    note_max_tokens,
    record_event,
)

log = logging.getLogger(__name__)

#: Where the LM may stop: DSPy's ChatAdapter ends every reply with this marker line and its
#: parser does not need it, so generation stops there instead of spending tokens on it (or on
#: anything a small model writes after it). Only the ChatAdapter layout is cut this way; a
#: JSON-adapter reply never contains the marker.
STOP_SEQUENCES: tuple[str, ...] = ("[[ ## completed ## ]]",)
#: The key under the LM's ``metadata`` keyword that names what answers a call (engine,
#: endpoint, model settings; :func:`ambiqa.lm.factory.answer_identity`). DSPy's response
#: cache keys on the LM's keywords, so it keys on this too; the request carries it as
#: ``config.extensions["metadata"]`` and :meth:`ResilientEngine.complete` strips it before
#: any engine or server sees it.
CACHE_IDENTITY_KEY = "ambiqa_cache_key"
#: The key under a Response's ``provider_data`` that marks a reply the loop guard stopped.
LOOP_CUT_KEY = "ambiqa_loop_cut"


def strip_cache_identity(request: Any) -> Any:
    """``request`` without ambiqa's cache identity (the rest of ``metadata`` is kept)."""
    import dataclasses

    cfg = getattr(request, "config", None)
    ext = getattr(cfg, "extensions", None)
    if not ext or not isinstance(ext.get("metadata"), Mapping) or \
            CACHE_IDENTITY_KEY not in ext["metadata"]:
        return request
    meta = {k: v for k, v in ext["metadata"].items() if k != CACHE_IDENTITY_KEY}
    rest = {k: v for k, v in ext.items() if k != "metadata"}
    if meta:
        rest["metadata"] = meta
    return dataclasses.replace(request, config=dataclasses.replace(cfg, extensions=rest or None))


@dataclass(frozen=True)
class RetryPolicy:
    """How long one LM attempt may take and how transient failures are retried.

    * ``timeout_s`` bounds one attempt (``None``: no deadline -- only for tests). The attempt
      runs on a daemon thread and the caller stops waiting at the deadline, so a wedged
      socket or a stuck generation cannot hang a run.
    * ``max_retries`` transient failures are retried, waiting ``base_delay_s * 2**n`` (with
      ±``jitter`` spread so parallel callers do not retry in lockstep) or the server's
      ``retry-after``, both capped at ``max_delay_s``: a server asking for an hour must not
      park an evaluation for an hour; after the retries the error propagates and the question
      fails (:mod:`ambiqa.lm.failures`): only a reply that does not parse degrades a step.
    * ``deadline_s`` bounds the whole call, waits included (default: enough for every
      attempt to time out once plus the waits).
    * ``retry_timeouts``: whether a timed-out attempt is retried. Off for the embedded model:
      its generation is deterministic and the abandoned attempt still holds the one slot, so
      a retry would only wait for it and time out again.
    """

    timeout_s: float | None = 120.0
    max_retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 10.0
    deadline_s: float | None = None
    retry_timeouts: bool = True
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ConfigError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        for name in ("timeout_s", "deadline_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name} must be a positive number of seconds or None")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ConfigError("retry delays must be >= 0")

    def total_deadline(self) -> float | None:
        if self.deadline_s is not None:
            return self.deadline_s
        if self.timeout_s is None:
            return None
        return (self.timeout_s + self.max_delay_s) * (self.max_retries + 1)

    def attempt_timeout(self, start: float, deadline: float | None) -> float | None:
        """The next attempt's deadline: ``timeout_s``, cut to what is left of the whole
        call's ``deadline`` (seconds since ``start``, a ``time.monotonic()`` reading)."""
        timeout = self.timeout_s
        if deadline is not None:
            left = deadline - (time.monotonic() - start)
            timeout = left if timeout is None else min(timeout, left)
            timeout = max(timeout, 0.001)
        return timeout

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after is not None and retry_after >= 0:
            return min(float(retry_after), self.max_delay_s)
        base = self.base_delay_s * (2 ** min(attempt, 16))
        spread = 1.0 + self.jitter * (2 * random.random() - 1)
        return min(base * spread, self.max_delay_s)

    @classmethod
    def from_env(cls, **defaults: Any) -> RetryPolicy:
        """Defaults overridden by ``$AMBIQA_LM_TIMEOUT`` (seconds per attempt, 0 = none) and
        ``$AMBIQA_LM_RETRIES``."""
        kwargs = dict(defaults)
        if os.environ.get("AMBIQA_LM_TIMEOUT"):
            kwargs["timeout_s"] = env_seconds("AMBIQA_LM_TIMEOUT", None)
        raw = os.environ.get("AMBIQA_LM_RETRIES")
        if raw:
            try:
                kwargs["max_retries"] = int(raw)
            except ValueError as exc:
                raise ConfigError(f"$AMBIQA_LM_RETRIES must be an integer, got {raw!r}") from exc
        return cls(**kwargs)


def _transient(exc: BaseException) -> str | None:
    """The kind of a failure worth retrying ("timeout", "rate_limit", ...), else ``None``.

    Recognizes lm15's canonical errors (what engines raise), DSPy's public LM errors (what an
    inner ``dspy.LM`` raises) and plain ``TimeoutError`` / ``ConnectionError`` (what a
    hand-written engine or a socket raises). Auth, bad-request and parse failures are not
    transient: retrying them only burns time and money.
    """
    from dspy import lm15
    from dspy.utils.exceptions import (
        LMLockTimeoutError,
        LMProviderError,
        LMRateLimitError,
        LMServerError,
        LMTimeoutError,
        LMTransportError,
    )

    if isinstance(exc, (lm15.RateLimitError, LMRateLimitError)):
        return "rate_limit"
    if isinstance(exc, (lm15.TimeoutError, LMTimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(exc, (lm15.ServerError, LMServerError)):
        return "server_error"
    if isinstance(exc, (lm15.TransportError, LMTransportError, ConnectionError)):
        return "connection"
    if isinstance(exc, (lm15.LockTimeoutError, LMLockTimeoutError)):
        return "lock_timeout"
    if isinstance(exc, (lm15.ProviderError, LMProviderError)) and "is not JSON" in str(exc):
        # a 200 whose body is HTML or empty: a gateway or proxy fault, usually passing
        return "malformed"
    return None


def _canonical_error(exc: BaseException, kind: str | None, model: str) -> BaseException:
    """Plain ``TimeoutError`` / ``ConnectionError`` become lm15 errors, which DSPy maps to its
    retryable LM errors (the question then fails); everything else is raised as it came."""
    from dspy import lm15

    if kind == "timeout" and not isinstance(exc, lm15.LM15Error) and \
            type(exc).__module__ == "builtins":
        return lm15.TimeoutError(f"{model}: {exc or 'timed out'}")
    if kind == "connection" and isinstance(exc, ConnectionError):
        return lm15.TransportError(f"{model}: {type(exc).__name__}: {exc}")
    return exc


class ResilientEngine:
    """A DSPy custom engine that adds a per-attempt deadline and bounded retries to another.

    ``inner`` is any engine with ``complete(Request) -> Response`` (the embedded model, an
    endpoint, a test fake). Each retry is recorded as a trace event (``lm.retry``) so a cost
    report shows how often the LM misbehaved; a reply longer than ``max_output_chars`` is cut
    there and marked ``finish_reason="length"`` (an endpoint that ignores ``max_tokens`` must
    not fill memory or the results file). Unknown attributes are looked up on ``inner``.
    """

    def __init__(self, inner: Any, policy: RetryPolicy | None = None, *, model: str = "",
                 max_output_chars: int | None = 200_000,
                 sleep: Callable[[float], None] = time.sleep,
                 output_caps: bool = False, stop_at_marker: bool = False) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self.model = model or getattr(inner, "model", "") or type(inner).__name__
        self.max_output_chars = max_output_chars
        self._sleep = sleep
        self.output_caps = output_caps
        self.stop_at_marker = stop_at_marker
        self.retries = 0  # retries made by this engine (all calls), for tests and reports

    def _budgeted(self, request: Any) -> tuple[Any, int]:
        """The request with the calling signature's output cap and the stop marker applied
        (when switched on), and the cap (0: none). The signature is the one the trace
        callback is running; its cap is its ``output_cap_tokens``
        (:func:`ambiqa.tracing.current_output_cap`)."""
        import dataclasses

        cfg = getattr(request, "config", None)
        if cfg is None or not (self.output_caps or self.stop_at_marker):
            return request, 0
        changes: dict[str, Any] = {}
        cap = 0
        if self.output_caps:
            limit = current_output_cap()  # the calling signature's output_cap_tokens
            if limit and (cfg.max_tokens is None or cfg.max_tokens > limit):
                changes["max_tokens"] = cap = limit
            elif limit:
                cap = cfg.max_tokens
        if self.stop_at_marker and not cfg.response_format:
            stops = tuple(cfg.stop or ())
            extra = tuple(s for s in STOP_SEQUENCES if s not in stops)
            if extra:
                changes["stop"] = stops + extra
        if not changes:
            return request, cap
        return dataclasses.replace(request, config=dataclasses.replace(cfg, **changes)), cap

    # capability hints DSPy reads from a custom engine
    @property
    def supports_response_schema(self) -> bool:
        return bool(getattr(self.inner, "supports_response_schema", False))

    @property
    def supported_params(self) -> frozenset:
        return frozenset(getattr(self.inner, "supported_params", ()) or ())

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (copying): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _attempt(self, request: Any, timeout: float | None) -> Any:
        return call_with_deadline(functools.partial(self.inner.complete, request), timeout,
                                  error=lambda t: TimeoutError(f"no reply within {t:.0f} s"),
                                  thread_name="ambiqa-lm-call")

    def _cap(self, response: Any) -> Any:
        from dspy.lm15 import Message, TextPart

        limit = self.max_output_chars
        text = getattr(response, "text", None)
        if limit is None or not isinstance(text, str) or len(text) <= limit:
            return response
        record_event("lm", f"reply of {len(text):,} characters cut to {limit:,}")
        import dataclasses

        return dataclasses.replace(response, message=Message.assistant(TextPart(text[:limit])),
                                   finish_reason="length")

    def _streams(self) -> bool:
        return callable(getattr(self.inner, "stream", None))

    def _stream_attempt(self, request: Any, timeout: float | None) -> Iterator[Any]:
        """One attempt's lm15 events, read from ``inner.stream`` on a worker thread, each
        within what is left of ``timeout`` (the whole attempt's deadline, as for
        :meth:`_attempt`). Closing this generator early (a deadline, the consumer stopping)
        tells the worker to close the inner stream at its next event, which stops the
        embedded model's generation."""
        items: queue.SimpleQueue = queue.SimpleQueue()
        stop = threading.Event()
        done = object()
        ctx = contextvars.copy_context()

        def produce() -> None:
            try:
                events = self.inner.stream(request)
                try:
                    for event in events:
                        items.put(event)
                        if stop.is_set():
                            break
                finally:
                    close = getattr(events, "close", None)
                    if callable(close):
                        close()
                items.put(done)
            except BaseException as exc:  # handed to the consumer
                items.put(exc)

        threading.Thread(target=ctx.run, args=(produce,), daemon=True,
                         name="ambiqa-lm-stream").start()
        end = None if not timeout else time.monotonic() + timeout
        try:
            while True:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no reply within {timeout:.0f} s")
                try:
                    item = items.get(timeout=left)
                except queue.Empty:
                    raise TimeoutError(f"no reply within {timeout:.0f} s") from None
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()

    def _events(self, request: Any) -> Iterator[tuple[int, Any]]:
        """``(attempt id, event)`` across attempts, with the retry policy of
        :meth:`complete`: a transient failure is retried while the attempt has written no
        text (after that the text is out, and the failure is the call's). An attempt's
        start event is held back until it writes text or ends, so a consumer sees exactly
        one start per call."""
        policy = self.policy
        start = time.monotonic()
        deadline = policy.total_deadline()
        attempt = 0
        while True:
            timeout = policy.attempt_timeout(start, deadline)
            call = next_call_id()
            held: list[Any] = []
            wrote = False
            try:
                for event in self._stream_attempt(request, timeout):
                    if not wrote and getattr(event, "type", "") == "start":
                        held.append(event)
                        continue
                    if not wrote:
                        wrote = True
                        for h in held:
                            yield call, h
                    yield call, event
                return
            except Exception as exc:
                kind = _transient(exc)
                if wrote or not self._retry_or_raise(exc, kind, attempt, start, deadline):
                    if kind is not None and wrote:
                        record_event("lm", f"failed after it began writing: {kind}: "
                                           f"{redact(str(exc))[:160]}")
                    raise _canonical_error(exc, kind, self.model) from exc
                attempt += 1

    def _retry_or_raise(self, exc: Exception, kind: str | None, attempt: int, start: float,
                        deadline: float | None) -> bool:
        """Whether to retry after ``exc`` (having waited the backoff), per the policy;
        ``False`` after recording the give-up (the caller raises)."""
        policy = self.policy
        retry = (kind is not None and attempt < policy.max_retries
                 and (kind != "timeout" or policy.retry_timeouts))
        wait = policy.delay(attempt, getattr(exc, "retry_after", None)) if retry else 0.0
        if retry and deadline is not None and time.monotonic() - start + wait >= deadline:
            retry = False
        if not retry:
            if kind is not None:
                # redacted before it is cut (a cut key no longer matches)
                record_event("lm", f"gave up after {attempt + 1} attempt(s): {kind}: "
                                   f"{redact(str(exc))[:160]}")
            return False
        self.retries += 1
        hint = getattr(exc, "retry_after", None)
        record_event("lm.retry", f"{kind} ({type(exc).__name__}); retry {attempt + 1}/"
                                 f"{policy.max_retries} in {wait:.2f} s"
                                 + (f" (server asked {hint} s)" if hint is not None else ""))
        log.info("LM %s: %s; retrying in %.1f s", self.model, kind, wait)
        self._sleep(wait)
        return True

    def complete(self, request: Any) -> Any:
        request, cap = self._budgeted(strip_cache_identity(request))
        sink = current_sink()
        if sink is not None and self._streams():
            response = self._complete_streamed(request, sink)
        else:
            response = self._complete(request)
        response = self._cap(response)
        # Engines note the finish reason in their own thread; the trace reads it here. A
        # reply the loop guard stopped (ambiqa.lm.loop_guard) ends as "stop" for DSPy and as
        # "loop" for the trace.
        looped = (getattr(response, "provider_data", None) or {}).get(LOOP_CUT_KEY)
        note_finish_reason("loop" if looped else
                           getattr(response, "finish_reason", "") or "stop")
        note_max_tokens(cap)
        return response

    def _complete_streamed(self, request: Any, sink: Any) -> Any:
        """The whole Response, streamed: each text piece goes to ``sink`` as it arrives,
        tagged with the predictor that asked; the events make the Response."""
        from dspy.lm15 import materialize_response

        predictor = current_predictor()
        events: list[Any] = []
        call = 0
        for call, event in self._events(request):
            text = text_of_event(event)
            if text:
                sink(TextPiece(call, predictor, text))
            events.append(event)
        if call:
            sink(TextPiece(call, predictor, "", done=True))
        return materialize_response(iter(events), request)

    def _complete(self, request: Any) -> Any:
        policy = self.policy
        start = time.monotonic()
        deadline = policy.total_deadline()
        attempt = 0
        while True:
            timeout = policy.attempt_timeout(start, deadline)
            try:
                return self._attempt(request, timeout)
            except Exception as exc:
                kind = _transient(exc)
                if not self._retry_or_raise(exc, kind, attempt, start, deadline):
                    raise _canonical_error(exc, kind, self.model) from exc
                attempt += 1

    def stream(self, request: Any) -> Iterator[Any]:
        """lm15 events of the reply as the inner engine writes them (DSPy's streaming
        engine API), with the deadlines, retries (before the first text), output caps and
        stop marker of :meth:`complete`. An inner engine without ``stream`` gives the whole
        reply as one piece. A reply past ``max_output_chars`` ends there, marked
        ``length``."""
        from dspy.lm15 import StreamDeltaEvent, StreamEndEvent, TextDelta, response_to_events

        request, cap = self._budgeted(strip_cache_identity(request))
        if not self._streams():
            response = self._cap(self._complete(request))
            note_finish_reason(getattr(response, "finish_reason", "") or "stop")
            note_max_tokens(cap)
            yield from response_to_events(response)
            return
        limit = self.max_output_chars
        written = 0
        for _, event in self._events(request):
            kind = getattr(event, "type", "")
            if kind == "delta" and limit is not None and text_of_event(event):
                text = text_of_event(event)
                if written + len(text) > limit:
                    record_event("lm", f"streamed reply cut at {limit:,} characters")
                    cut = text[:limit - written]
                    if cut:
                        yield StreamDeltaEvent(delta=TextDelta(text=cut))
                    note_finish_reason("length")
                    note_max_tokens(cap)
                    yield StreamEndEvent(finish_reason="length")
                    return
                written += len(text)
            if kind == "end":
                note_finish_reason(getattr(event, "finish_reason", "") or "stop")
                note_max_tokens(cap)
            yield event

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def dump_state(self) -> dict[str, Any]:
        """Saved only for endpoint engines (no secrets: the key's variable name at most)."""
        if not isinstance(self.inner, EndpointEngine):
            raise TypeError(f"an LM over {type(self.inner).__name__} cannot be saved; "
                            "save the program without its LM and configure one after loading")
        return {"policy": asdict(self.policy), "endpoint": self.inner.dump_state(),
                "max_output_chars": self.max_output_chars}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> ResilientEngine:
        ep = dict(state["endpoint"])
        key_env = ep.get("api_key_env")
        key = os.environ.get(key_env) if key_env else ("not-needed" if ep.get("api_base")
                                                        else None)
        if key_env:
            register_secret(key)  # an endpoint may echo it in an error body (issue 42)
        inner = EndpointEngine(ep["model"], api_base=ep.get("api_base"), api_key_env=key_env,
                               api_key=key, timeout=float(ep.get("timeout") or 120.0),
                               max_tokens=int(ep.get("max_tokens") or 512),
                               temperature=float(ep.get("temperature") or 0.0))
        return cls(inner, RetryPolicy(**state.get("policy", {})), model=ep["model"],
                   max_output_chars=state.get("max_output_chars", 200_000))
