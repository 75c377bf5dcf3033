"""What every ambiqa program shares: input checks, cost tracing and the Prediction shape.

Every program is a ``dspy.Module`` whose ``forward(question=...)`` returns a
``dspy.Prediction`` with at least:

* ``interpretations`` -- list of ``{"question", "answer", "passages"}`` (cited passage ids);
* ``answer`` -- the long-form (ASQA) or short (multi-hop, open-domain) answer;
* ``passages`` -- the passages the program read, as dicts (id, title, text, score);
* ``trace`` -- cost of this call: LM calls, tokens, retriever calls, latency, critical path,
  degradation events (see :mod:`ambiqa.tracing`).

Subclasses implement :meth:`AmbiqaProgram.run` and return a plain dict; the base class
validates the question and adds the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import dspy
from dspy.utils.exceptions import AdapterParseError
from pydantic import ValidationError

from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write_json
from ambiqa.lm.failures import lm_failure_in
from ambiqa.lm.streaming import TextPiece, text_sink
from ambiqa.programs.config import ProgramConfig
from ambiqa.programs.streaming import (
    AnswerChunk,
    AnswerCollector,
    answer_writers,
    program_events,
)
from ambiqa.retrieval.base import Retriever
from ambiqa.retrieval.encoder import SharedEncoder as SharedEncoder  # re-export for programs
from ambiqa.retrieval.factory import as_retriever, describe
from ambiqa.retrieval.warmup import Say, WarmStep, warm_up
from ambiqa.signatures.common import budget_words
from ambiqa.tracing import (
    ensure_tracing,
    record_budget_cut,
    record_event,
    track,
    untraced_lm_reason,
)
from ambiqa.types import Interpretation, Passage

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000
#: the event loop that awaits a streamed call (set by ``aforward``; see ``_dspy_stream``)
_LOOP_TOKEN: contextvars.ContextVar[Any] = contextvars.ContextVar("ambiqa_loop_token",
                                                                  default=None)
#: the entry :meth:`AmbiqaProgram.save` adds to DSPy's saved state (read by ``ambiqa.load``)
SAVED_KEY = "ambiqa"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def check_question(question: object) -> str:
    """Reject inputs no program can answer, with a message that says why."""
    if not isinstance(question, str):
        raise ConfigError(f"question must be a string, got {type(question).__name__}")
    # Control characters (NUL, escapes, a lone surrogate) mean nothing to an LM and break
    # encoders and JSON logs; a question needs at least one letter or digit.
    text = _CONTROL.sub("", question).strip()
    if not text:
        raise ConfigError("question is empty")
    if not any(ch.isalnum() for ch in text):
        raise ConfigError(f"question {text[:40]!r} has no words")
    if len(text) > MAX_QUESTION_CHARS:
        raise ConfigError(
            f"question is {len(text)} characters long; the limit is {MAX_QUESTION_CHARS}",
            hint="ask a question, not a document; put documents in the corpus")
    return text


#: DSPy's ChatAdapter delimits fields with ``[[ ## name ## ]]`` lines.
_FIELD_MARKER = re.compile(r"\[\[\s*##")


def as_data(text: str) -> str:
    """Passage text with anything that looks like an adapter field marker broken up.

    Passages are data. A passage that contains ``[[ ## answer ## ]]`` would otherwise start
    what looks like a new field inside the prompt (and could pre-fill an "answer"); breaking
    the marker keeps the whole passage inside the passages field. The words are kept.
    """
    return _FIELD_MARKER.sub("[ [ #", text)


def format_passages(passages: list[Passage]) -> str:
    """Number passages from 1, one per line, the way signatures cite them.

    Plain numbered text rather than a JSON list: small models read it more reliably, and an
    exported prompt stays readable. Field markers inside passages are defused (:func:`as_data`).
    Each text is held to the per-passage word budget
    (:func:`ambiqa.signatures.common.budget_words`); every cut is counted in the trace.
    """
    if not passages:
        return "(no passages)"
    lines = []
    for i, p in enumerate(passages, start=1):
        text, cut = budget_words(p.text)
        if cut:
            record_budget_cut("passages", f"passage {p.id} cut to the word budget")
        lines.append(as_data(f"[{i}] {p.title}: {text}" if p.title else f"[{i}] {text}"))
    return "\n".join(lines)


def format_pairs(pairs: list[Interpretation]) -> str:
    """One ``- question -> answer`` line per pair; a reading with no answer yet (the
    query-refinement baseline's) is listed as ``- question`` alone."""
    if not pairs:
        return "(none found)"
    return "\n".join(f"- {p.question} -> {p.answer}" if str(p.answer or "").strip()
                     else f"- {p.question}" for p in pairs)


class AmbiqaProgram(dspy.Module):
    """Base class: subclasses set ``name`` and implement ``run``."""

    name: ClassVar[str] = "program"
    #: "long" programs write ASQA-style paragraphs, "short" ones give a few words.
    answer_style: ClassVar[str] = "long"
    #: whether the program needs a retriever at all
    needs_retriever: ClassVar[bool] = True
    #: Each program sets this (``benchmarks/methods_cost.py`` holds measured rounds against
    #: it): the fewest *dependent* LM rounds (calls that run concurrently share a round) a
    #: question takes on the program's full path, that is when retrieval returns passages
    #: and every LM reply parses. A question whose retrieval finds nothing may take fewer
    #: (Diva makes no verification call then); each program's comment names such paths.
    min_lm_rounds: int  # a setting may change it on the instance (Diva, VerDICt, EoR, ReSP)
    #: predictor attribute -> the output field that is the program's answer (see
    #: :mod:`ambiqa.programs.streaming`); shared steps declare their own
    writes_answer: ClassVar[dict[str, str]] = {}

    def __init__(self, retriever: Retriever | Any = None) -> None:
        super().__init__()
        # an index, any callable ``query, k -> passages``, or a dspy.Retrieve
        self.retriever = as_retriever(retriever)

    def use_config(self, cfg: ProgramConfig) -> None:
        """Keep the validated settings ``cfg`` and expose each field as an attribute."""
        self.settings = cfg
        for name, value in cfg.to_dict().items():
            setattr(self, name, value)

    def config(self) -> dict[str, Any]:
        """Hyperparameters worth recording in an artifact manifest: the fields of the
        program's :class:`ProgramConfig` with their current values (override to extend)."""
        cfg = getattr(self, "settings", None)
        return {} if cfg is None else {name: getattr(self, name) for name in cfg.names()}

    def require_retriever(self) -> Retriever:
        if self.retriever is None:
            raise ConfigError(f"program {self.name!r} needs a retriever",
                              hint="pass retriever=... or build one with `ambiqa index`")
        return self.retriever

    def run(self, question: str) -> dict[str, Any]:
        raise NotImplementedError

    def warm_up(self, say: Say | None = None) -> list[WarmStep]:
        """Load now what the first question would load (the shared sentence encoder, a
        ColBERT searcher and its compiled extensions), each step announced through ``say``
        with its duration (:func:`ambiqa.retrieval.warmup.warm_up`); returns the steps.

        Why: building a program stays cheap because those parts load lazily, but then the
        first question pays 8-90 s in silence. ``serve`` calls this before ``/readyz`` says
        ready and ``ask`` before it asks; a program with parts of its own to load overrides
        it (and calls ``super().warm_up(say)``).
        """
        return warm_up([self], say)

    def answer_writers(self) -> list[tuple[str, Any, str]]:
        """``[(name, predictor, field)]``: the predictors that write this program's answer
        (from the ``writes_answer`` its modules declare; none for a voted answer)."""
        return answer_writers(self)

    def stream_listeners(self) -> list[Any]:
        r"""DSPy ``StreamListener``\ s on this program's answer writers, for
        ``dspy.streamify(prog, stream_listeners=prog.stream_listeners())`` beside listeners
        of your own. ``dspy.streamify(prog)`` alone streams the answer already."""
        from dspy.streaming import StreamListener

        return [StreamListener(out_field, predict=p, predict_name=name, allow_reuse=True)
                for name, p, out_field in self.answer_writers()]

    async def astream(self, question: str) -> AsyncIterator[Any]:
        """The answer as it is written: ``async for event in prog.astream(question=...)``.

        Yields :class:`~ambiqa.programs.streaming.Evidence` (the interpretations with the
        passages they cite, and the passages read) when the program knows them,
        :class:`~ambiqa.programs.streaming.AnswerChunk` (``str(chunk)``: new answer text) as
        the answer writer's LM call writes it, :class:`~ambiqa.programs.streaming.
        AnswerRestart` if a writer starts over, and last the ``dspy.Prediction``, whose
        ``trace["stream"]`` records the seconds to the first answer chunk
        (``first_chunk_s``, ``None`` when none came: a response-cache hit), the chunks and
        the total seconds. Exceptions of the program are raised here as from ``acall``.
        The program runs in a worker thread as with ``acall``; every LM engine of ambiqa
        streams (embedded, endpoint, the scripted and fake LMs).
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def emit(event: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        collector = AnswerCollector(self.answer_writers(), emit)
        started = time.perf_counter()
        first: float | None = None
        with text_sink(collector), program_events(emit):
            task = asyncio.ensure_future(self.acall(question=question))  # copies the context
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task},
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break
                event = getter.result()
                if isinstance(event, AnswerChunk) and first is None:
                    first = time.perf_counter() - started
                yield event
            while not queue.empty():  # sent before the call returned
                event = queue.get_nowait()
                if isinstance(event, AnswerChunk) and first is None:
                    first = time.perf_counter() - started
                yield event
            pred = task.result()
        finally:
            if not task.done():
                task.cancel()  # the consumer stopped: the worker finishes on its own
        trace = getattr(pred, "trace", None)
        if isinstance(trace, dict):
            trace["stream"] = {
                "first_chunk_s": None if first is None else round(first, 4),
                "answer_chunks": collector.chunks, "restarts": collector.restarts,
                "total_s": round(time.perf_counter() - started, 4)}
        yield pred

    @contextlib.contextmanager
    def _dspy_stream(self) -> Iterator[None]:
        """Under ``dspy.streamify(prog)``: stream the answer into DSPy's stream.

        DSPy would stream every LM call itself and send each chunk with
        ``anyio.from_thread.run``, which fails in the plain worker threads ambiqa's steps
        run in. Instead its stream is taken out of the inner calls and fed from ambiqa's
        text sink, through the event loop's token (from ``aforward``, or asked of AnyIO when
        ``streamify`` runs this in its worker thread): with no listeners, the answer as
        ``dspy.streaming.StreamResponse`` chunks; with listeners (``stream_listeners()``
        or yours), the raw chunks of the predictors they listen to, as DSPy does."""
        stream = dspy.settings.send_stream
        if stream is None:
            yield
            return
        token = _LOOP_TOKEN.get()
        if token is None:
            try:
                token = anyio.from_thread.run_sync(anyio.lowlevel.current_token)
            except Exception:  # noqa: BLE001  (not in an AnyIO worker: no way back)
                token = None
        if token is None:
            log.warning("dspy.streamify: no event loop to stream into; answering whole")
            with dspy.context(send_stream=None):
                yield
            return

        def send(item: Any) -> None:
            anyio.from_thread.run(stream.send, item, token=token)

        listeners = list(dspy.settings.get("stream_listeners") or [])
        if listeners:
            from dspy.clients.call_result import attributes
            from dspy.clients.engines.streaming import EngineChunk

            listened = {id(getattr(x, "predict", None)) for x in listeners}

            def sink(piece: TextPiece) -> None:
                if piece.text and id(piece.predictor) in listened:
                    send(EngineChunk(id=None, model="", predict_id=id(piece.predictor),
                                     choices=[attributes({"index": 0, "finish_reason": None,
                                                          "delta": {"content": piece.text}})]))
        else:
            from dspy.streaming import StreamResponse

            def to_dspy(event: Any) -> None:
                if isinstance(event, AnswerChunk):
                    send(StreamResponse(event.predictor, event.field, event.text,
                                        is_last_chunk=False))

            sink = AnswerCollector(self.answer_writers(), to_dspy)
        with dspy.context(send_stream=None), text_sink(sink):
            yield

    def forward(self, question: str) -> dspy.Prediction:
        question = check_question(question)
        # tracing is added beside the user's callbacks when they configured DSPy directly
        with ensure_tracing(), self._dspy_stream(), track() as trace:
            out = self.run(question)
        out.setdefault("interpretations", [])
        out.setdefault("passages", [])
        out["interpretations"] = [i.to_dict() if isinstance(i, Interpretation) else i
                                  for i in out["interpretations"]]
        out["passages"] = [p.to_dict() if isinstance(p, Passage) else p for p in out["passages"]]
        out["trace"] = trace.summary()
        reason = untraced_lm_reason()
        if reason:  # lm_calls 0 would read as "none made": say they were not seen
            out["trace"]["untraced"] = reason
        return dspy.Prediction(**out)

    def save(self, path: str, save_program: bool = False, modules_to_serialize=None) -> None:
        """DSPy's ``save``; the JSON form also records which program to rebuild.

        ``prog.save("p.json")`` writes DSPy's state plus an ``ambiqa`` entry (program name,
        settings, retriever description) that :func:`ambiqa.load` reads, so the file opens
        with ``ambiqa.load("p.json", retriever=...)``; plain ``dspy`` ignores the entry.
        ``save_program=True`` is refused: it pickles the whole module, retriever and encoder
        included, and ambiqa never loads pickles.
        """
        if save_program:
            raise ConfigError(
                "save_program=True is not supported for ambiqa programs: it would pickle the "
                "retriever and encoders, and ambiqa loads no pickles",
                hint=f"save the state: prog.save('{self.name}.json'), then "
                     f"ambiqa.load('{self.name}.json', retriever=...)")
        if Path(path).suffix != ".json":
            return super().save(path, save_program=False, modules_to_serialize=modules_to_serialize)
        from dspy.utils.saving import get_dependency_versions

        state = self.dump_state()
        state["metadata"] = {"dependency_versions": get_dependency_versions()}
        state[SAVED_KEY] = {"program": self.name, "program_config": self.config(),
                            "retriever": describe(self.retriever)}
        atomic_write_json(Path(path), state)
        return None

    async def aforward(self, question: str) -> dspy.Prediction:
        """``await prog.acall(question=...)`` and ``dspy.asyncify(prog)`` support.

        Every ambiqa program's steps are synchronous (small local models and retrievers are
        the common case, and the programs already fan out their independent calls through
        :func:`ambiqa.parallel.run_parallel`), so the async path runs :meth:`forward` in a
        worker thread instead of blocking the event loop. ``asyncio.to_thread`` copies the
        caller's context, so ``dspy.context(lm=...)`` overrides, the callbacks a user
        installed and an enclosing :func:`ambiqa.tracing.track` all apply inside it.
        """
        # ``type(self).forward``: acall has already run the callbacks; reading ``self.forward``
        # would make DSPy log "calling module.forward directly is discouraged" every call.
        if dspy.settings.send_stream is not None:  # dspy.streamify: the way back to the loop
            token = _LOOP_TOKEN.set(anyio.lowlevel.current_token())
            try:
                return await asyncio.to_thread(type(self).forward, self, question)
            finally:
                _LOOP_TOKEN.reset(token)
        return await asyncio.to_thread(type(self).forward, self, question)


def safe_step(step: str, fn, default):
    """Run one LM step; if its reply cannot be used, record the degradation in the trace and
    return ``default`` instead of failing the question.

    "Cannot be used" means exactly one thing: the LM replied but the reply could not be parsed
    even after DSPy's JSON fallback (:class:`AdapterParseError`, or a pydantic
    ``ValidationError`` of a typed output field): the program can answer around it. An LM that
    gave no reply through every retry of :class:`ambiqa.lm.ResilientEngine` (connection
    refused, timeout, HTTP error, a body that is no completion: a DSPy :class:`LMError`)
    propagates and fails the question (issue 33), as does a wrong key, an unknown model or a
    bad request; a parse error raised *from* such an LM error is re-raised as that LM error
    (:func:`ambiqa.lm.failures.lm_failure_in`). A ``ValueError``, ``TypeError`` or
    ``KeyError`` raised by our own code is a bug that must stop the run, not turn into a
    silently degraded answer.
    """
    try:
        return fn()
    except (AdapterParseError, ValidationError) as exc:
        cause = lm_failure_in(exc.__cause__ or exc.__context__)
        if cause is not None:  # no reply at all, reported as a parse failure
            raise cause from exc
        record_event(step, f"degraded: {type(exc).__name__}: {str(exc)[:200]}")
        return default
