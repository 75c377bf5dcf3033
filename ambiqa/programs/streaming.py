"""A program's answer as it is written: what ``prog.astream(...)``, ``dspy.streamify(prog)``
and ``serve``'s streaming endpoint are made of.

* **Which predictor writes the answer** is declared where the step is defined: a module's
  ``writes_answer`` maps its predictor attributes to the output field that is the program's
  answer (``LongAnswerStep``: ``{"write": "long_answer"}``; ReSP: ``{"generate":
  "answer"}``). :func:`answer_writers` collects them over a program's sub-modules by path,
  so they survive compiling and loading (which rebuild the signatures and drop their class
  attributes) and a program never names them by hand.
* **Its text** comes from the LM's stream (:mod:`ambiqa.lm.streaming`): an
  :class:`AnswerCollector` reads the answer field out of each streamed reply of a writer
  (:class:`FieldReader`: the ChatAdapter's ``[[ ## field ## ]]`` blocks, or the JSON
  adapter's object) and emits :class:`AnswerChunk` events; when a writer is called again
  after it wrote (a retry in JSON after a reply that did not parse, the short answer's
  closed-book fallback) it emits :class:`AnswerRestart` first: what came before is void.
* **What is known before the answer** -- the interpretations with the passages they cite,
  and the passages read -- a program announces with :func:`announce` right before it
  writes; it reaches the stream as an :class:`Evidence` event.

The final ``dspy.Prediction`` is the authority: the chunks are the writer's raw field text
(a program may clean it, and EoR picks its answer by vote after its readers wrote), and an
answer served from DSPy's response cache streams no chunk at all.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import dspy
import jiter

from ambiqa.lm.streaming import TextPiece
from ambiqa.types import Interpretation, Passage


@dataclass(frozen=True)
class AnswerChunk:
    """New text of the answer field, as the writer wrote it (``str(chunk)`` is the text)."""

    text: str
    field: str
    predictor: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class AnswerRestart:
    """The answer writer was called again: the chunks before this one are void."""

    predictor: str


@dataclass(frozen=True)
class Evidence:
    """What the program knows before it writes its answer: the interpretations (each with
    the ids of the passages it cites) and the passages read, as the Prediction has them."""

    interpretations: list[dict[str, Any]] = field(default_factory=list)
    passages: list[dict[str, Any]] = field(default_factory=list)


def answer_writers(program: dspy.Module) -> list[tuple[str, Any, str]]:
    """``[(name, predictor, field)]``: the predictors of ``program`` that write its answer,
    from the ``writes_answer`` of each of its modules (the program's own included)."""
    found: list[tuple[str, Any, str]] = []
    seen: set[int] = set()
    for path, module in program.named_sub_modules():
        for attr, out_field in (getattr(module, "writes_answer", None) or {}).items():
            predictor = getattr(module, attr, None)
            if not isinstance(predictor, dspy.Predict) or id(predictor) in seen:
                continue
            if out_field not in predictor.signature.output_fields:
                continue
            seen.add(id(predictor))
            name = f"{path}.{attr}".removeprefix("self.")
            found.append((name, predictor, out_field))
    return found


# ---- reading one field out of a streamed reply ------------------------------------------
_MARKER = re.compile(r"\[\[ ## (\w+) ## \]\]")
#: a reply's tail that may still become a field marker (held back until it is known)
_MARKER_PREFIX = re.compile(
    r"\[(?:\[(?: (?:#(?:#(?: (?:\w+(?: (?:#(?:#(?: (?:\])?)?)?)?)?)?)?)?)?)?)?$")


class FieldReader:
    """The text of output field ``name`` of one streamed reply, piece by piece.

    ChatAdapter replies: the text after ``[[ ## name ## ]]`` up to the next marker, without
    the whitespace around it (DSPy strips field values); a tail that could still become a
    marker, and trailing whitespace, are held back until the next piece says what they are.
    JSON replies (the adapter's fallback): the field's string value, read from the partial
    object. :meth:`feed` returns the new field text; :meth:`finish` what was held at the end.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.buffer = ""
        self.sent = ""  # the value as far as it was returned
        self.ended = False

    def _value(self, final: bool) -> str:
        text = self.buffer
        if text.lstrip().startswith("{"):
            return self._json_value(text)
        start = None
        for m in _MARKER.finditer(text):
            if start is None and m.group(1) == self.name:
                start = m.end()
            elif start is not None:
                self.ended = True
                return text[start:m.start()].strip()
        if start is None:
            return ""
        value = text[start:]
        if not final:
            held = _MARKER_PREFIX.search(value)
            if held is not None:
                value = value[:held.start()]
        return value.strip() if final else value.lstrip().rstrip()

    def _json_value(self, text: str) -> str:
        try:
            parsed = jiter.from_json(text.strip().encode(), partial_mode="trailing-strings")
        except ValueError:
            return ""
        value = parsed.get(self.name) if isinstance(parsed, dict) else None
        return value if isinstance(value, str) else ""

    def _new(self, final: bool) -> str:
        if self.ended:
            return ""
        value = self._value(final)
        if len(value) <= len(self.sent) or not value.startswith(self.sent):
            return ""
        out, self.sent = value[len(self.sent):], value
        return out

    def feed(self, text: str) -> str:
        self.buffer += text
        return self._new(final=False)

    def finish(self) -> str:
        return self._new(final=True)


class AnswerCollector:
    """A text sink (:func:`ambiqa.lm.streaming.text_sink`) that turns the streamed replies
    of a program's answer writers into :class:`AnswerChunk` / :class:`AnswerRestart` events
    for ``emit``, and ignores every other call. Thread-safe: calls stream from workers."""

    def __init__(self, writers: list[tuple[str, Any, str]],
                 emit: Callable[[Any], None]) -> None:
        self.writers = {id(p): (name, out_field) for name, p, out_field in writers}
        self.emit = emit
        self.chunks = 0
        self.restarts = 0
        self._readers: dict[int, FieldReader] = {}
        self._current: int | None = None
        self._lock = threading.Lock()

    def __call__(self, piece: TextPiece) -> None:
        writer = self.writers.get(id(piece.predictor)) if piece.predictor is not None else None
        if writer is None:
            return
        name, out_field = writer
        with self._lock:
            reader = self._readers.setdefault(piece.call, FieldReader(out_field))
            text = reader.finish() if piece.done else reader.feed(piece.text)
            if not text:
                return
            if self._current != piece.call:
                if self._current is not None:
                    self.restarts += 1
                    self.emit(AnswerRestart(name))
                self._current = piece.call
            self.chunks += 1
            self.emit(AnswerChunk(text, out_field, name))


# ---- what a program knows before it answers ------------------------------------------------
_EVENTS: contextvars.ContextVar[Callable[[Any], None] | None] = contextvars.ContextVar(
    "ambiqa_program_events", default=None)


@contextlib.contextmanager
def program_events(emit: Callable[[Any], None] | None) -> Iterator[None]:
    """Send the :class:`Evidence` programs announce inside the block to ``emit``."""
    token = _EVENTS.set(emit)
    try:
        yield
    finally:
        _EVENTS.reset(token)


def announce(interpretations: list[Interpretation | dict[str, Any]] | None = None,
             passages: list[Passage | dict[str, Any]] | None = None) -> None:
    """Tell a stream what is known before the answer (nothing happens when no one streams)."""
    emit = _EVENTS.get()
    if emit is None:
        return
    emit(Evidence(
        interpretations=[i.to_dict() if isinstance(i, Interpretation) else dict(i)
                         for i in interpretations or []],
        passages=[p.to_dict() if isinstance(p, Passage) else dict(p)
                  for p in passages or []]))
