"""ambiqa.api.asking.ask: the one-question path `ambiqa ask` takes, checked without an LM."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import LMError

from ambiqa.api.asking import ask, prediction_json
from ambiqa.errors import ConfigError, LMUnavailableError


class _Program:
    """Answers, or raises ``error`` from inside a step (as a dead endpoint would)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.asked, self.warmed = error, [], []

    def warm_up(self, say):
        self.warmed.append(True)
        say("encoder loaded (0.0 s)")

    def __call__(self, question: str):
        self.asked.append(question)
        if self.error is not None:
            raise RuntimeError("step failed") from self.error
        return dspy.Prediction(answer="Paris", trace={"lm_calls": 1})


def test_ask_warms_up_then_answers_and_says_so():
    said: list[str] = []
    prog = _Program()
    pred = ask(prog, "Where is the Louvre?", say=said.append)
    assert pred.answer == "Paris" and prog.warmed and said == ["encoder loaded (0.0 s)"]
    assert prediction_json(pred) == {"answer": "Paris", "trace": {"lm_calls": 1}}


def test_a_bad_question_fails_before_the_program_runs():
    prog = _Program()
    with pytest.raises(ConfigError, match="empty"):
        ask(prog, "   ", say=None)
    assert prog.asked == [] and prog.warmed == []


def test_an_lm_with_no_reply_is_one_error_naming_the_step_not_an_empty_answer():
    prog = _Program(LMError("connection refused"))
    with pytest.raises(LMUnavailableError, match="my-artifact: the LM gave no reply"):
        ask(prog, "Where is the Louvre?", label="my-artifact", say=None)
    other = _Program(ValueError("a bug"))  # not an LM failure: raised as it is
    with pytest.raises(RuntimeError, match="step failed"):
        ask(other, "Where is the Louvre?", say=None)
