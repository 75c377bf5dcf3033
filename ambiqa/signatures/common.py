"""Things shared by several signature files: types, token budgets and output caps.

Budgets live next to the signatures because they are part of what a prompt asks for: a
yes/no signature needs a few output tokens, a long answer a few sentences, and a passage
should be about the ~100 words the papers' retrievers returned. Each signature class states
its output cap (``output_cap_tokens``), which the LM layer (:mod:`ambiqa.lm`) applies to the
calls that signature makes; programs get the passage budget through :func:`budget_words`,
which the shared passage formatting calls. Every cut is counted in the cost trace, never silent.
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


# ---- output caps ------------------------------------------------------------------------
#: Each signature class states the most new tokens one of its calls may produce as a class
#: attribute, ``output_cap_tokens: ClassVar[int]`` (a ``ClassVar``, so DSPy does not read it
#: as a field and it never enters a prompt). The trace callback notes the calling
#: signature's cap (:func:`ambiqa.tracing.current_output_cap`) and the LM engine applies it
#: (:class:`ambiqa.lm.resilience.ResilientEngine`), so renaming a signature keeps its cap.
#: The figures are DSPy ChatAdapter replies (field headers included, ~8 tokens each) with
#: room to spare: a bool or a few-word answer fits in 48, a list of rewritten questions in
#: ~200, an ASQA long answer (references are a few sentences, ~65 words) in 256. A reply that
#: reaches its cap is marked ``finish_reason="length"`` and counted as truncated in the
#: trace. ``tests/unit/signatures`` checks that every signature has one.
CAP_ATTRIBUTE = "output_cap_tokens"


def output_cap(signature: type) -> int | None:
    """The output cap a signature class states, or ``None`` when it has none."""
    cap = getattr(signature, CAP_ATTRIBUTE, None)
    return cap if isinstance(cap, int) and cap > 0 else None


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
