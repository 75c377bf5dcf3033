"""Token streaming below the programs: where an LM call's text goes while it is written.

Two consumers read an LM's stream:

* DSPy (``dspy.streamify`` of a plain predictor): it asks the engine's ``stream(request)``
  for lm15 events and sends them to its listeners; every ambiqa engine implements it
  (:meth:`ambiqa.lm.resilience.ResilientEngine.stream`).
* ambiqa's own streaming (``prog.astream``, ``serve``'s SSE endpoint, and ``dspy.streamify``
  of an ambiqa program, which the program turns into this): a *text sink* is set for the
  block with :func:`text_sink`, and every LM call made inside it -- in any thread that
  carries the context: ``run_parallel`` workers, ``asyncio.to_thread``, the deadline thread
  -- streams its reply and hands each text piece to the sink as a :class:`TextPiece`,
  tagged with the predictor that asked (:func:`ambiqa.tracing.current_predictor`). The call
  still returns its whole Response, so DSPy parses, caches and traces it as always.

Why a sink and not DSPy's ``send_stream``: DSPy sends each chunk with
``anyio.from_thread.run``, which works only in an AnyIO worker thread; ambiqa's programs
make their LM calls in plain worker threads, where that raises (and a program could not tell
its answer writer's chunks from the rest).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TextPiece:
    """Text an LM call wrote, as it arrives.

    ``call`` numbers the attempt (a retried call is a new one: what an earlier attempt
    wrote is void); ``predictor`` is the ``dspy.Predict`` that made the call (``None``
    outside one); ``text`` is the new text ("" with ``done`` at the end of the attempt).
    """

    call: int
    predictor: Any
    text: str
    done: bool = False


TextSink = Callable[[TextPiece], None]

_SINK: contextvars.ContextVar[TextSink | None] = contextvars.ContextVar("ambiqa_text_sink",
                                                                        default=None)
_CALLS = itertools.count(1)


def current_sink() -> TextSink | None:
    """The sink LM calls in this context stream into, or ``None`` (no one is listening)."""
    return _SINK.get()


@contextlib.contextmanager
def text_sink(sink: TextSink | None) -> Iterator[None]:
    """Stream every LM call made inside the block into ``sink`` (``None``: stop streaming).

    The sink is called from the thread that made the call, so it must be thread-safe; an
    exception it raises is the call's failure."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def next_call_id() -> int:
    return next(_CALLS)


def text_of_event(event: Any) -> str:
    """The text an lm15 stream event adds to the reply ("" for any other event)."""
    if getattr(event, "type", "") != "delta":
        return ""
    delta = event.delta
    return (delta.text or "") if getattr(delta, "type", "") == "text" else ""
