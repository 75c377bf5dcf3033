"""Vanilla RAG for ambiguous questions (the retrieval baseline of Diva, ToC and VerDICt).

Long form (default, ASQA):

1. retrieve the top-k passages for the question as asked;
2. clarify: extract disambiguated question / answer pairs from those passages, each citing
   the passage it came from;
3. write the long answer covering the pairs.

Two LM calls and one retriever call per question.

Short form (``answer_form="short"``; HotpotQA, NQ, WebQ): retrieve the top-k passages, then
one LM call answers in a few words from them -- the standard retrieve-then-read baseline
(EoR's single-retriever setting, IRCoT's "one-step retrieval"). ``recall_fallback=True``
(short form only): when the passages give no answer, one closed-book call answers instead
(see ``ShortAnswerStep``) -- the fix the error analysis of WebQ dev proposed, tried on WebQ
train; off by default, as the baseline's papers read the passages as given. Faithfulness table:
``docs/methods.md#baselines``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.programs.base import AmbiqaProgram
from ambiqa.programs.config import (
    ProgramConfig,
    answer_form_field,
    bool_field,
    int_field,
    resolve_config,
)
from ambiqa.programs.steps import ClarifyStep, LongAnswerStep, ShortAnswerStep
from ambiqa.programs.streaming import announce


@dataclass(frozen=True)
class VanillaRAGConfig(ProgramConfig):
    """``k`` passages; ``answer_form`` "long" (default) or "short"; ``recall_fallback``
    (short form only): answer closed-book when the passages give no answer."""

    label = "vanilla_rag: "
    k: int = int_field(5)
    answer_form: str = answer_form_field()
    recall_fallback: bool = bool_field(False)

    def check(self) -> None:
        if self.recall_fallback and self.answer_form != "short":
            raise ConfigError(f"{self.label}recall_fallback applies to answer_form='short' "
                              "only (the long form has no short-answer call)")


class VanillaRAG(AmbiqaProgram):
    name = "vanilla_rag"
    # minimal dependent LM rounds per question: clarify -> long answer (short form: 1)
    min_lm_rounds = 2

    config_class = VanillaRAGConfig

    def __init__(self, retriever=None, config: VanillaRAGConfig | dict[str, Any] | None = None,
                 **settings: Any) -> None:
        super().__init__(retriever)
        self.use_config(resolve_config(VanillaRAGConfig, config, settings, owner="VanillaRAG"))
        self.answer_style = self.answer_form
        # Only the predictors the form uses exist (see ClosedBook).
        if self.answer_form == "short":
            self.min_lm_rounds = 1
            self.short_answer = ShortAnswerStep(recall_fallback=self.recall_fallback)
        else:
            self.clarify = ClarifyStep()
            self.long_answer = LongAnswerStep()

    def run(self, question: str) -> dict[str, Any]:
        passages = self.require_retriever().search(question, self.k)
        if self.answer_form == "short":
            announce(passages=passages)
            return {"interpretations": [], "passages": passages,
                    "answer": self.short_answer(question=question, passages=passages)}
        pairs = self.clarify(question=question, passages=passages)
        announce(pairs, passages)
        answer = self.long_answer(question=question, pairs=pairs, passages=passages)
        return {"interpretations": pairs, "answer": answer, "passages": passages}
