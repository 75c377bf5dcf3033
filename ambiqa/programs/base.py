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

from typing import Any, ClassVar

import dspy
from dspy.utils.exceptions import AdapterParseError

from ambiqa.errors import ConfigError
from ambiqa.retrieval.base import Retriever
from ambiqa.tracing import record_event, track
from ambiqa.types import Interpretation, Passage

MAX_QUESTION_CHARS = 2000


def check_question(question: object) -> str:
    """Reject inputs no program can answer, with a message that says why."""
    if not isinstance(question, str):
        raise ConfigError(f"question must be a string, got {type(question).__name__}")
    text = question.strip()
    if not text:
        raise ConfigError("question is empty")
    if len(text) > MAX_QUESTION_CHARS:
        raise ConfigError(
            f"question is {len(text)} characters long; the limit is {MAX_QUESTION_CHARS}",
            hint="ask a question, not a document; put documents in the corpus")
    return text


def format_passages(passages: list[Passage]) -> str:
    """Number passages from 1, one per line, the way signatures cite them.

    Plain numbered text rather than a JSON list: small models read it more reliably, and an
    exported prompt stays readable.
    """
    if not passages:
        return "(no passages)"
    return "\n".join(f"[{i}] {p.title}: {p.text}" if p.title else f"[{i}] {p.text}"
                     for i, p in enumerate(passages, start=1))


def format_pairs(pairs: list[Interpretation]) -> str:
    if not pairs:
        return "(none found)"
    return "\n".join(f"- {p.question} -> {p.answer}" for p in pairs)


class AmbiqaProgram(dspy.Module):
    """Base class: subclasses set ``name`` and implement ``run``."""

    name: ClassVar[str] = "program"
    #: "long" programs write ASQA-style paragraphs, "short" ones give a few words.
    answer_style: ClassVar[str] = "long"
    #: whether the program needs a retriever at all
    needs_retriever: ClassVar[bool] = True

    def __init__(self, retriever: Retriever | None = None) -> None:
        super().__init__()
        self.retriever = retriever

    def config(self) -> dict[str, Any]:
        """Hyperparameters worth recording in an artifact manifest (override to extend)."""
        return {}

    def require_retriever(self) -> Retriever:
        if self.retriever is None:
            raise ConfigError(f"program {self.name!r} needs a retriever",
                              hint="pass retriever=... or build one with `ambiqa index`")
        return self.retriever

    def run(self, question: str) -> dict[str, Any]:
        raise NotImplementedError

    def forward(self, question: str) -> dspy.Prediction:
        question = check_question(question)
        with track() as trace:
            out = self.run(question)
        out.setdefault("interpretations", [])
        out.setdefault("passages", [])
        out["interpretations"] = [i.to_dict() if isinstance(i, Interpretation) else i
                                  for i in out["interpretations"]]
        out["passages"] = [p.to_dict() if isinstance(p, Passage) else p for p in out["passages"]]
        out["trace"] = trace.summary()
        return dspy.Prediction(**out)


def safe_step(step: str, fn, default):
    """Run one LM step; if its output cannot be parsed even after DSPy's JSON fallback, record
    the degradation in the trace and return ``default`` instead of failing the question."""
    try:
        return fn()
    except (AdapterParseError, ValueError) as exc:
        record_event(step, f"degraded: {type(exc).__name__}: {str(exc)[:200]}")
        return default
