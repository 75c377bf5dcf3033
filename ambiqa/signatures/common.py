"""Things shared by several signature files: types, token budgets and output caps.

Budgets live next to the signatures because they are part of what a prompt asks for: a
yes/no signature needs a few output tokens, a long answer a few sentences, and a passage
should be about the ~100 words the papers' retrievers returned. The LM layer
(:mod:`ambiqa.lm`) applies :data:`OUTPUT_CAPS` by the name of the signature making the call;
programs get the passage budget through :func:`budget_words`, which the shared passage
formatting calls. Every cut is counted in the cost trace, never silent.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from pydantic import BaseModel, Field

from ambiqa.envutil import env_int
from ambiqa.errors import ConfigError


class QAPair(BaseModel):
    """A disambiguated question (DQ) with its answer (DA) and the passage that supports it."""

    question: str = Field(description="a specific, unambiguous rewrite of the question")
    answer: str = Field(description="a short answer (a few words) to that specific question")
    passage: int = Field(default=0, description="number of the passage that gives the answer, "
                                                "0 if none")


# ---- output caps -------------------------------------------------------------------------
#: Most new tokens a call of each signature may produce, by signature class name. The figures
#: are DSPy ChatAdapter replies (field headers included, ~8 tokens each) with room to spare:
#: a bool or a few-word answer fits in 48, a list of rewritten questions in ~200, an ASQA long
#: answer (references are a few sentences, ~65 words) in 256. A reply that reaches its cap is
#: marked ``finish_reason="length"`` and counted as truncated in the trace. Signatures not
#: listed keep the LM's own ``max_tokens``.
OUTPUT_CAPS: dict[str, int] = {
    # yes/no and labels
    "VerifyInterpretation": 48,
    "SelfVerify": 48,
    "SelfVerifyStrict": 48,
    "JudgeEntailment": 48,
    "JudgeSufficiency": 48,
    "MatchInterpretation": 48,
    "TypeAmbiguity": 128,
    # short answers and queries
    "ShortAnswer": 48,
    "ShortAnswerOrUnknown": 48,
    "ReadShortAnswer": 48,
    "AnswerFromMemories": 48,
    "AnswerFromReasoning": 48,
    "RelaxQuery": 48,
    "SummarizeLocalPathway": 48,
    "PlanNextQuestion": 64,
    "NextReasoningStep": 96,
    "InterpretFromPassage": 128,
    # a quoted evidence sentence, then yes/no (Diva's retrieval verifier, ToC's "evidence").
    # Diva's verifier keeps its paper's 300 (Diva calls with max 300 anyway): the 1.5B often
    # quotes a whole passage as "evidence" (up to ~105 words in benchmarks/verifier.py's rows),
    # and at 160 such a reply was cut before its yes/no -- 16 of 148 replies in the ASQA
    # evidence run, 12 of 42 in the throughput run -- and paid a full JSON-adapter retry.
    "VerifyRetrieval": 300,
    "SelfVerifyEvidence": 160,
    # lists and paragraphs
    "PseudoInterpretations": 256,
    "ClarifyFromPassages": 384,
    "SummarizeGlobalEvidence": 192,
    "CompressForQuery": 192,
    "BackgroundDocument": 192,
    "WriteLongAnswer": 256,
    "ClosedBookLongAnswer": 256,
}

#: Where the LM may stop: DSPy's ChatAdapter ends every reply with this marker line and its
#: parser does not need it, so generation stops there instead of spending tokens on it (or on
#: anything a small model writes after it). Only the ChatAdapter layout is cut this way; a
#: JSON-adapter reply never contains the marker.
STOP_SEQUENCES: tuple[str, ...] = ("[[ ## completed ## ]]",)


def output_cap(signature: str) -> int | None:
    """The cap for ``signature`` (a class name), or ``None`` when it has none."""
    return OUTPUT_CAPS.get(signature)


# ---- passage budget ----------------------------------------------------------------------
#: Words of one passage's text that programs put into a prompt. The papers read ~100-word
#: Wikipedia chunks; the shared corpus has a median of 71 words and a long tail (90th
#: percentile 178, max ~1,400), so 120 words leaves most passages whole and bounds the rest.
#: ``$AMBIQA_PASSAGE_WORDS`` overrides (0 = no budget).
DEFAULT_PASSAGE_WORDS = 120

_BUDGET: contextvars.ContextVar[int | None | str] = contextvars.ContextVar(
    "ambiqa_passage_words", default="env")


def _env_budget() -> int | None:
    value = env_int("AMBIQA_PASSAGE_WORDS", DEFAULT_PASSAGE_WORDS)
    return value if value > 0 else None


def passage_word_budget() -> int | None:
    """The budget in force: set by :func:`passage_budget`, else the environment/default."""
    value = _BUDGET.get()
    return _env_budget() if value == "env" else value  # type: ignore[return-value]


@contextlib.contextmanager
def passage_budget(words: int | None) -> Iterator[None]:
    """Use ``words`` per passage inside the block (``None``: no budget). Context-local, so
    worker threads started with :func:`ambiqa.parallel.run_parallel` see it too."""
    if words is not None and (not isinstance(words, int) or words < 1):
        raise ConfigError(f"passage budget must be a positive number of words or None, "
                          f"got {words!r}")
    token = _BUDGET.set(words)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def budget_words(text: str, words: int | None = None) -> tuple[str, bool]:
    """``text`` cut to the passage budget (or ``words``), and whether it was cut.

    The cut keeps whole words and marks the end with " ..." so the LM sees the passage goes
    on. Callers record cuts in the trace (:func:`ambiqa.tracing.record_budget_cut`).
    """
    limit = passage_word_budget() if words is None else words
    if limit is None:
        return text, False
    parts = text.split()
    if len(parts) <= limit:
        return text, False
    return " ".join(parts[:limit]) + " ...", True
