"""The HTTP service around one compiled program (FastAPI): what ``ambiqa serve`` runs.

Routes:

* ``POST /v1/answer`` ``{"question": "..."}`` -> answer, interpretations (each with the ids
  of the passages it cites and, per citation, the passage's title, text and supporting
  sentence), the passages read and the cost trace;
* ``POST /v1/answer/stream`` (same body) -> server-sent events: ``evidence`` (the
  interpretations with their citations and the passages, when the program knows them),
  ``answer`` (``{"text": ...}``, the answer as the LM writes it), ``restart`` (the writer
  started over: drop the text so far), then ``done`` (the body ``/v1/answer`` returns, plus
  ``stream``: seconds to the first answer chunk, chunks, total) or ``error`` (``{"status",
  "detail"}``: the status ``/v1/answer`` would have answered). A request refused before it
  runs (401, 422, 503 busy or not ready) gets that status and a JSON body instead;
* ``GET /v1/program`` -> program, optimizer, demos per predictor, index, manifest;
* ``GET /healthz`` (the process answers) and ``GET /readyz`` (the LM and index are loaded, the
  program warmed up, and the server is not shutting down);
* ``GET /`` the page for people (:mod:`ambiqa.serve.page`); ``/openapi.json`` and ``/docs``.

Why it is shaped this way:

* Requests run through the program's async path (``await program.acall(...)`` when the
  program defines ``aforward``, else the synchronous call in a worker thread), inside a
  per-request ``dspy.context`` that carries the LM and ambiqa's tracing, so the server never
  changes DSPy's global settings and one process can hold several apps (tests do).
* Admission (:mod:`ambiqa.serve.admission`) bounds concurrent calls to the LM's slots and the
  queue behind them; a full queue is a 503 with ``Retry-After``, a missed deadline a 504. It is
  exact from the first request: at most ``slots + queue`` requests are in at any moment, also
  in a burst that reaches a server the moment it turns ready (issue 42).
* Before ready, requests are refused, not queued: ``/v1/*`` answers 503 with ``Retry-After``
  and a detail saying what start-up is doing (loading the LM and index, or warming up: the
  sentence encoder, the ColBERT model and extensions), the same text ``/readyz`` gives. A
  queue that filled during a load of minutes would only hand its requests 504s; a client (or
  a load balancer polling ``/readyz``) that retries after ``Retry-After`` gets a real answer.
* Start-up warms the program up before ``/readyz`` says ready
  (:meth:`ServedProgram.warm_up`): what the first question would otherwise load (the shared
  sentence encoder, a ColBERT searcher and its compiled extensions) loads then, each step
  logged with what it is doing and how long it took, so the first answer is not 10-90 s late.
* Worker threads: the event loop's default executor is replaced by one sized to the slots
  (plus room for abandoned calls), because ``asyncio.to_thread``'s stock pool has
  ``min(32, cores + 4)`` threads -- six on a 2-core machine, fewer than the slots a fast
  endpoint can have.
* A failed LM is never a 200: an LM error is a 502 (503 when it is transient), and an empty
  answer -- what a program returns after its steps degraded -- is a 502 naming the events.
* Every error body is ``{"detail": "<one line>"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ambiqa.api.loader import check_runnable
from ambiqa.errors import AmbiqaError, ConfigError
from ambiqa.lm.redact import redact
from ambiqa.programs.base import MAX_QUESTION_CHARS, check_question
from ambiqa.programs.streaming import AnswerChunk, AnswerRestart, Evidence
from ambiqa.serve.admission import Admission, DeadlineExceeded, QueueFull
from ambiqa.serve.evidence import answer_payload
from ambiqa.serve.loading import ServedProgram, has_aforward
from ambiqa.tracing import traced

log = logging.getLogger("ambiqa.serve")

#: request bodies larger than this are refused before they are parsed (a question is at most
#: MAX_QUESTION_CHARS characters; JSON escaping can at most sextuple that)
MAX_BODY_BYTES = 64 * 1024
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class AnswerRequest(BaseModel):
    """The body of ``POST /v1/answer``."""

    model_config = ConfigDict(extra="forbid")
    question: StrictStr = Field(description=f"the question, 1 to {MAX_QUESTION_CHARS} characters",
                                examples=["Who played the Weasley brothers?"])


class Citation(BaseModel):
    id: str
    title: str
    text: str
    supporting_sentence: str
    support: str = Field(description="which rule picked the sentence")


class InterpretationOut(BaseModel):
    question: str
    answer: str
    passages: list[str] = Field(description="ids of the passages this interpretation cites")
    citations: list[Citation]
    unknown_ids: list[str] = Field(description="cited ids that are not among the passages read")


class AnswerResponse(BaseModel):
    answer: str
    interpretations: list[InterpretationOut]
    passages: list[dict[str, Any]]
    trace: dict[str, Any] = Field(description="cost trace: LM calls, tokens, retriever calls, "
                                              "seconds (see ambiqa.tracing)")
    cached: bool = Field(description="some LM calls of this answer came from the response "
                                     "cache (trace.cached_calls says how many): the LM was "
                                     "not asked for them")


class ErrorBody(BaseModel):
    detail: str


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the service on this machine: one of the loopback names,
    or an IP address in a loopback range (parsed, so a host *name* such as
    ``127.evil.invalid`` is not taken for an address)."""
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """A server reachable from other machines must require a token."""
    if not is_loopback(host) and not token:
        raise ConfigError(f"binding {host} exposes the service beyond this machine without a "
                          "token", hint="set a token: export AMBIQA_SERVE_TOKEN=... and pass "
                                        "--token-env AMBIQA_SERVE_TOKEN (or bind 127.0.0.1)")


def _err(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error response. The detail is redacted here, the one exit of every error body: an
    endpoint may echo its API key in the error a 502 repeats (issue 42)."""
    return JSONResponse({"detail": redact(detail)}, status_code=status, headers=headers)


class _HTTPError(Exception):
    """Raised inside handlers and dependencies; rendered as ``{"detail": ...}``."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


def _validation_reason(exc: RequestValidationError) -> str:
    """One line for a malformed body: what is wrong and what to send instead."""
    errors = exc.errors()
    if not errors:
        return 'send a JSON object {"question": "..."}'
    e = errors[0]
    kind = e.get("type", "")
    loc = [str(x) for x in e.get("loc", ()) if x != "body"]
    field = ".".join(loc) or "body"
    if kind == "json_invalid":
        return 'body is not valid JSON; send {"question": "..."}'
    if kind == "missing":
        return f'{field} is missing; send {{"question": "..."}}'
    if kind == "extra_forbidden":
        return f'unknown field {field!r}; send only {{"question": "..."}}'
    if kind in ("string_type", "model_attributes_type", "dict_type"):
        got = type(e.get("input")).__name__
        names = {"int": "a number", "float": "a number", "bool": "true/false",
                 "list": "a list", "dict": "an object", "NoneType": "null", "str": "text"}
        want = "text" if kind == "string_type" else 'a JSON object {"question": "..."}'
        return f"{field} must be {want}, got {names.get(got, got)}"
    return f"{field}: {e.get('msg', 'invalid')}"


class _BodyLimit:
    """ASGI middleware: refuse request bodies over ``limit`` bytes with 413 before the app
    sees them. The body is read here (at most ``limit`` bytes are held) and replayed to the
    app, so a missing or false Content-Length (a chunked upload) does not get past it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_big = _err(413, f"request body over {self.limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await too_big(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await too_big(scope, receive, send)
                return
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for a disconnect, as ASGI does

        await self.app(scope, replay, send)


def _lm_error_status(exc: BaseException) -> tuple[int, str] | None:
    """(status, reason) when ``exc`` is an LM failure, else ``None``."""
    from dspy import lm15
    from dspy.utils.exceptions import LMError, is_retryable_lm_error

    if isinstance(exc, LMError):
        retryable = is_retryable_lm_error(exc)
    elif isinstance(exc, lm15.LM15Error):
        retryable = isinstance(exc, (lm15.RateLimitError, lm15.TimeoutError, lm15.ServerError,
                                     lm15.TransportError))
    else:
        return None
    # redacted before it is cut: a cut key would no longer match its value
    text = redact(" ".join(str(exc).split()))[:200]
    if retryable:
        return 503, f"no answer: LM unavailable ({type(exc).__name__}: {text})"
    return 502, f"the LM failed ({type(exc).__name__}: {text})"


def _failure(exc: BaseException) -> tuple[int, str, dict[str, str] | None]:
    """``(status, detail, headers)`` for a program call that raised ``exc``."""
    if isinstance(exc, QueueFull):
        return 503, str(exc), {"Retry-After": str(exc.retry_after_s)}
    if isinstance(exc, DeadlineExceeded):
        return 504, str(exc), None
    if isinstance(exc, ConfigError):
        return 422, exc.message, None
    lm = _lm_error_status(exc)
    if lm is not None:
        log.warning("answer failed: %s", lm[1])
        return lm[0], lm[1], {"Retry-After": "5"} if lm[0] == 503 else None
    if isinstance(exc, AmbiqaError):
        log.error("answer failed: %s", exc)
        return 500, f"{type(exc).__name__}: {exc.message}", None
    log.error("answer failed", exc_info=exc)
    return 500, f"internal error ({type(exc).__name__}); see the server log", None


def _final_payload(pred: Any) -> tuple[dict[str, Any] | None,
                                       tuple[int, str, dict[str, str] | None] | None]:
    """``(payload, None)`` for an answer, ``(None, (status, detail, headers))`` for a
    prediction with no answer (what a program returns after its steps degraded)."""
    payload = answer_payload(pred)
    payload["cached"] = bool((payload.get("trace") or {}).get("cached_calls"))
    if payload["answer"].strip():
        return payload, None
    events = payload["trace"].get("events") or []
    unavailable = any("LM unavailable" in e for e in events)
    detail = ("the program produced no answer"
              + (f" (degraded steps: {'; '.join(events)[:300]})" if events else ""))
    return None, (503 if unavailable else 502, detail,
                  {"Retry-After": "5"} if unavailable else None)


def _sse(event: str, data: Any) -> bytes:
    """One server-sent event (its JSON on one line, credentials redacted)."""
    import json

    return f"event: {event}\ndata: {redact(json.dumps(data, ensure_ascii=False))}\n\n".encode()


async def _stream_program(served: ServedProgram, question: str,
                          events: asyncio.Queue) -> None:
    """One program call through ``astream`` (a program without it: its whole answer), each
    event put on ``events``, with the LM and tracing in this request's DSPy context."""
    import dspy

    with dspy.context(lm=served.lm, **traced()):
        if not callable(getattr(served.program, "astream", None)):
            await events.put(await _call_program(served, question))
            return
        async for event in served.program.astream(question=question):
            await events.put(event)


async def _call_program(served: ServedProgram, question: str) -> Any:
    """One program call through its async path, with the LM and tracing in this request's
    DSPy context (never DSPy's global settings)."""
    import dspy

    with dspy.context(lm=served.lm, **traced()):
        if has_aforward(served.program):
            return await served.program.acall(question=question)
        # a program without an async path: its synchronous call in a worker thread
        # (asyncio.to_thread copies this context, so the LM and tracing apply there)
        return await asyncio.to_thread(served.program, question=question)


class _Shown:
    """The parts of a prediction :func:`answer_payload` reads, from an Evidence event."""

    def __init__(self, interpretations: list[dict[str, Any]],
                 passages: list[dict[str, Any]]) -> None:
        self.interpretations, self.passages, self.answer, self.trace = (
            interpretations, passages, "", {})


def create_app(load: ServedProgram | Callable[[], ServedProgram], *, queue: int = 16,
               timeout_s: float = 120.0, token: str | None = None,
               slots: int | None = None, drain_s: float | None = None,
               on_load_failed: Callable[[BaseException], None] | None = None) -> FastAPI:
    """The app serving one program.

    ``load``: a :class:`ServedProgram`, or a function that builds one (run in a thread when
    the app starts, so ``/healthz`` answers and ``/readyz`` says "loading" meanwhile). A
    program that needs a retriever and has none is refused: here for a ServedProgram, as a
    load failure (``/readyz`` 503, ``on_load_failed``) for a function.
    ``slots``: concurrent program calls (default: ``ServedProgram.lm_slots``); ``queue``:
    requests that may wait for a slot; ``timeout_s``: deadline per request, queueing
    included; ``token``: if set, ``/v1/*`` requires ``Authorization: Bearer <token>``;
    ``drain_s``: on shutdown, how long to wait for calls still running (default
    ``timeout_s``); ``on_load_failed``: called with the error when loading fails (the CLI
    stops the server there).
    """
    if isinstance(load, ServedProgram):
        check_runnable(load.program)  # refused here, never a ready server that cannot answer
    if slots is not None and slots < 1:
        raise ConfigError(f"slots must be >= 1, got {slots}")
    if queue < 0:
        raise ConfigError(f"--queue must be >= 0, got {queue}")
    if not timeout_s > 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {timeout_s}")
    state: dict[str, Any] = {"served": None, "admission": None, "error": None,
                             "stopping": False, "executor": None,
                             "phase": "loading the LM and the index", "since": time.monotonic()}

    def say(message: str) -> None:
        """A warm-up step: logged, and shown by /readyz until the next one."""
        log.log(logging.WARNING if " failed after " in message else logging.INFO,
                "ambiqa serve: %s", message)
        state["phase"] = message if message.endswith("...") else "warming up"
        state["since"] = time.monotonic()

    async def _load() -> None:
        try:
            served = load if isinstance(load, ServedProgram) else await asyncio.to_thread(load)
            check_runnable(served.program)
            # before ready: what the first question would load, loads now (issue 42)
            state["phase"], state["since"] = "warming up", time.monotonic()
            warm_start = time.perf_counter()
            await asyncio.to_thread(served.warm_up, say)
            warm_s = time.perf_counter() - warm_start
            n = slots or served.lm_slots
            # slot threads + as many again for calls abandoned after a 504 + nested fan-out
            executor = ThreadPoolExecutor(max_workers=2 * n + 4,
                                          thread_name_prefix="ambiqa-serve")
            asyncio.get_running_loop().set_default_executor(executor)
            state["executor"] = executor
            state["admission"] = Admission(slots=n, queue=queue, timeout_s=timeout_s)
            state["served"] = served
            log.info("ambiqa serve: ready (%s, %d slots, queue %d, timeout %g s; warm-up "
                     "%.1f s)", served.describe()["program"], n, queue, timeout_s, warm_s)
        except asyncio.CancelledError:  # shut down while loading: not a load failure
            raise
        except Exception as exc:  # noqa: BLE001  (reported by /readyz and the CLI)
            state["error"] = exc
            log.error("ambiqa serve: loading failed: %s", exc)
            if on_load_failed is not None:
                on_load_failed(exc)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loader = asyncio.create_task(_load())
        try:
            yield
        finally:
            state["stopping"] = True
            if not loader.done():
                loader.cancel()
            admission: Admission | None = state["admission"]
            if admission is not None:
                left = await admission.drain(timeout_s if drain_s is None else drain_s)
                if left:
                    log.warning("ambiqa serve: %d call(s) still running at shutdown", left)
            if state["executor"] is not None:
                state["executor"].shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="ambiqa serve", version="0.1.0", lifespan=lifespan,
                  description="Answers questions with one compiled ambiqa program.")
    app.state.ambiqa = state

    def require_token(request: Request) -> None:
        if not token:
            return
        got = request.headers.get("authorization", "")
        scheme, _, value = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                                  token.encode()):
            raise _HTTPError(401, "missing or wrong bearer token; send Authorization: Bearer "
                                  "<token>", {"WWW-Authenticate": "Bearer"})

    def require_ready() -> tuple[ServedProgram, Admission]:
        if state["stopping"]:
            raise _HTTPError(503, "shutting down", {"Retry-After": "5", "Connection": "close"})
        if state["error"] is not None:
            raise _HTTPError(503, f"loading failed: {state['error']}")
        if state["served"] is None:
            waited = time.monotonic() - state["since"]
            raise _HTTPError(503, f"still starting up: {state['phase']} ({waited:.0f} s so far)",
                             {"Retry-After": "5"})
        return state["served"], state["admission"]

    @app.exception_handler(_HTTPError)
    async def _http_error(request: Request, exc: _HTTPError) -> JSONResponse:
        return _err(exc.status, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _err(422, _validation_reason(exc))

    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorBody, "description": what} for code, what in (
            (401, "bearer token missing or wrong"), (413, "body too large"),
            (422, "invalid question (one-line reason)"),
            (502, "the LM failed or the program produced no answer"),
            (503, "busy (Retry-After), loading, shutting down or LM unavailable"),
            (504, "no answer within the timeout"))}

    @app.post("/v1/answer", response_model=AnswerResponse, responses=errors,
              dependencies=[Depends(require_token)])
    async def answer(body: AnswerRequest) -> Any:
        """Answer one question with the served program."""
        served, admission = require_ready()
        try:
            question = check_question(body.question)
        except ConfigError as exc:
            return _err(422, exc.message)
        try:
            pred = await admission.run(lambda: _call_program(served, question))
        except Exception as exc:  # noqa: BLE001  (mapped to a status by _failure)
            return _err(*_failure(exc))
        payload, failed = _final_payload(pred)
        if failed is not None:
            return _err(*failed)
        # a Response is sent as is: the payload is already plain JSON types, and FastAPI's
        # response_model round trip (validate, then serialize) cost ~1 ms per request
        return JSONResponse(payload)

    stream_responses: dict[int | str, dict[str, Any]] = {
        **errors, 200: {"content": {"text/event-stream": {}},
                        "description": "server-sent events: evidence, answer, restart, then "
                                       "done (the /v1/answer body plus stream timings) or "
                                       "error ({status, detail})"}}

    @app.post("/v1/answer/stream", responses=stream_responses,
              dependencies=[Depends(require_token)], response_class=StreamingResponse)
    async def answer_stream(body: AnswerRequest) -> Any:
        """Answer one question as server-sent events, the answer as it is written."""
        started = time.perf_counter()
        served, admission = require_ready()
        try:
            question = check_question(body.question)
        except ConfigError as exc:
            return _err(422, exc.message)
        try:  # refused here, as a plain 503, before the stream's 200 is sent
            place = admission.reserve()
        except QueueFull as exc:
            return _err(*_failure(exc))
        events: asyncio.Queue = asyncio.Queue()
        task = asyncio.ensure_future(
            admission.run(lambda: _stream_program(served, question, events), place=place))
        task.add_done_callback(lambda _: place.release())  # if it never started

        async def sse() -> AsyncIterator[bytes]:
            first: float | None = None
            chunks = 0
            final = None
            while True:
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({getter, task},
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    event = getter.result()
                elif not events.empty():
                    getter.cancel()
                    event = events.get_nowait()
                else:
                    getter.cancel()
                    break
                if isinstance(event, AnswerChunk):
                    if first is None:
                        first = time.perf_counter() - started
                    chunks += 1
                    yield _sse("answer", {"text": event.text})
                elif isinstance(event, AnswerRestart):
                    yield _sse("restart", {"predictor": event.predictor})
                elif isinstance(event, Evidence):
                    shown = answer_payload(_Shown(event.interpretations, event.passages))
                    yield _sse("evidence", {"interpretations": shown["interpretations"],
                                            "passages": shown["passages"]})
                else:
                    final = event
            exc = task.exception()
            if exc is not None:
                status, detail, _ = _failure(exc)
                yield _sse("error", {"status": status, "detail": detail})
                return
            payload, failed = _final_payload(final)
            if failed is not None:
                yield _sse("error", {"status": failed[0], "detail": failed[1]})
                return
            payload["stream"] = {"first_chunk_s": None if first is None else round(first, 4),
                                 "answer_chunks": chunks,
                                 "total_s": round(time.perf_counter() - started, 4)}
            yield _sse("done", payload)

        return StreamingResponse(sse(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

    @app.get("/v1/program", dependencies=[Depends(require_token)], responses=errors)
    async def program() -> dict[str, Any]:
        """The served program: name, optimizer, demos per predictor, index, manifest."""
        served, admission = require_ready()
        return {**served.describe(), "slots": admission.slots, "queue": admission.queue,
                "timeout_s": admission.timeout_s}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        """The process is up and its event loop answers (says nothing about the LM)."""
        return {"ok": True}

    @app.get("/readyz", responses={503: {"model": ErrorBody}})
    async def readyz() -> Any:
        """Ready once the LM and the index are loaded, until shutdown begins."""
        try:
            _, admission = require_ready()
        except _HTTPError as exc:
            return _err(503, exc.detail, exc.headers)
        return {"ready": True, "slots": admission.slots, "running": admission.running,
                "waiting": admission.waiting, "queue": admission.queue,
                "served": admission.served, "refused": admission.refused,
                "timed_out": admission.timed_out}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        from ambiqa.serve.page import PAGE_HTML

        # the page needs nothing from elsewhere: forbid it, so a change that adds a CDN fails
        csp = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'")
        return HTMLResponse(PAGE_HTML, headers={"Content-Security-Policy": csp,
                                                "X-Content-Type-Options": "nosniff",
                                                "Referrer-Policy": "no-referrer"})

    app.add_middleware(_BodyLimit, limit=MAX_BODY_BYTES)
    return app
