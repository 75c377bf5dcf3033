"""Closed-book baseline: the LM answers from its parameters alone (no retrieval).

Used by every paper as the floor (Diva Table 1 "No retrieval", ToC "Closed-book").
Faithfulness table: ``docs/methods.md#baselines``.
"""

from __future__ import annotations

from typing import Any

from ambiqa.programs.base import AmbiqaProgram
from ambiqa.programs.steps import ClosedBookStep


class ClosedBook(AmbiqaProgram):
    """One LM call: question → long answer. No passages, no interpretations."""

    name = "closed_book"
    # minimal dependent LM rounds per question: one closed-book answer
    min_lm_rounds = 1
    needs_retriever = False

    def __init__(self, retriever=None) -> None:
        super().__init__(retriever)
        self.answer_step = ClosedBookStep()

    def run(self, question: str) -> dict[str, Any]:
        return {"answer": self.answer_step(question=question), "interpretations": [],
                "passages": []}
