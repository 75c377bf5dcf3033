"""``ask``: one question to a loaded program, as ``ambiqa ask`` asks it.

What a caller of one question needs around the program call, once: the question checked
before anything slow loads (:func:`check_question`), what the first question would load in
silence loaded first and said (:func:`~ambiqa.api.jobs.warm_up`), and an LM that gave no reply
turned into one clear error naming the step (never an empty answer, issue 33).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ambiqa.api.jobs import say_on_stderr, warm_up
from ambiqa.evaluation.runs.runner import prediction_dict
from ambiqa.lm.failures import lm_failure_in, lm_unavailable
from ambiqa.programs.base import check_question

__all__ = ["ask", "check_question", "prediction_json"]


def ask(program: Any, question: str, *, label: str = "ask",
        say: Callable[[str], None] | None = say_on_stderr) -> Any:
    """``program``'s prediction for ``question``; ``label`` names the step in the error an
    unreachable LM raises (:class:`~ambiqa.errors.LMUnavailableError`); ``say`` hears the
    warm-up lines (None: silent)."""
    check_question(question)
    if say is not None:
        warm_up(program, say)
    try:
        return program(question=question)
    except Exception as exc:
        cause = lm_failure_in(exc)
        if cause is None:
            raise
        raise lm_unavailable(label, cause) from exc


def prediction_json(pred: Any) -> dict[str, Any]:
    """A prediction as JSON values, its cost trace included (``ambiqa ask --json``)."""
    return {**prediction_dict(pred), "trace": pred.trace}
