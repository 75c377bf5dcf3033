"""Vanilla RAG for ambiguous questions (the retrieval baseline of Diva, ToC and VerDICt).

1. retrieve the top-k passages for the question as asked;
2. clarify: extract disambiguated question / answer pairs from those passages, each citing
   the passage it came from;
3. write the long answer covering the pairs.

Two LM calls and one retriever call per question. Faithfulness table:
``docs/methods.md#baselines``.
"""

from __future__ import annotations

from typing import Any

from ambiqa.programs.base import AmbiqaProgram
from ambiqa.programs.steps import ClarifyStep, LongAnswerStep


class VanillaRAG(AmbiqaProgram):
    name = "vanilla_rag"
    # minimal dependent LM rounds per question: clarify -> long answer
    min_lm_rounds = 2

    def __init__(self, retriever=None, k: int = 5) -> None:
        super().__init__(retriever)
        self.k = k
        self.clarify = ClarifyStep()
        self.long_answer = LongAnswerStep()

    def config(self) -> dict[str, Any]:
        return {"k": self.k}

    def run(self, question: str) -> dict[str, Any]:
        passages = self.require_retriever().search(question, self.k)
        pairs = self.clarify(question=question, passages=passages)
        answer = self.long_answer(question=question, pairs=pairs, passages=passages)
        return {"interpretations": pairs, "answer": answer, "passages": passages}
