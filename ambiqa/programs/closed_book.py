"""Closed-book baseline: the LM answers from its parameters alone (no retrieval).

Used by every paper as the floor (Diva Table 1 "No retrieval", ToC "Closed-book").
``answer_form="short"`` answers in a few words instead of a paragraph, the form HotpotQA, NQ
and WebQ are scored in. Faithfulness table: ``docs/methods.md#baselines``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ambiqa.programs.base import AmbiqaProgram
from ambiqa.programs.config import ProgramConfig, answer_form_field, resolve_config
from ambiqa.programs.steps import ClosedBookStep, ShortAnswerStep


@dataclass(frozen=True)
class ClosedBookConfig(ProgramConfig):
    """``answer_form``: "long" (an ASQA paragraph, the default) or "short" (a few words)."""

    label = "closed_book: "
    answer_form: str = answer_form_field()


class ClosedBook(AmbiqaProgram):
    """One LM call: question → answer (a long paragraph, or a few words in short form).

    No passages, no interpretations.
    """

    name = "closed_book"
    # minimal dependent LM rounds per question: one closed-book answer
    min_lm_rounds = 1
    needs_retriever = False

    config_class = ClosedBookConfig

    def __init__(self, retriever=None, config: ClosedBookConfig | dict[str, Any] | None = None,
                 **settings: Any) -> None:
        super().__init__(retriever)
        self.use_config(resolve_config(ClosedBookConfig, config, settings, owner="ClosedBook"))
        self.answer_style = self.answer_form
        # Only the predictor the form uses exists, so a compiled artifact's state names
        # exactly the prompts it tuned (and artifacts from before short form still load).
        if self.answer_form == "short":
            self.short_answer = ShortAnswerStep()
        else:
            self.answer_step = ClosedBookStep()

    def run(self, question: str) -> dict[str, Any]:
        if self.answer_form == "short":
            answer = self.short_answer(question=question, passages=[])
        else:
            answer = self.answer_step(question=question)
        return {"answer": answer, "interpretations": [], "passages": []}
