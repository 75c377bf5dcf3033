"""Steps shared by several programs (one module each, never copied into a program).

* :class:`ClarifyStep` -- retrieval-augmented clarification: passages → DQ/DA pairs with a
  cited passage (vanilla RAG, Diva's RAG path, ToC's tree nodes).
* :class:`LongAnswerStep` -- the final ASQA paragraph from the interpretations and passages.
* :class:`ClosedBookStep` -- the long answer with no passages (closed-book baseline, Diva's
  Useless path).
* :class:`ShortAnswerStep` -- a few words, from passages or from memory (the short-answer mode
  of the closed-book and vanilla RAG baselines on HotpotQA, NQ and WebQ).
"""

from __future__ import annotations

from typing import Any

import dspy

from ambiqa.programs.base import format_pairs, format_passages, safe_step
from ambiqa.signatures.answering import (
    ClosedBookLongAnswer,
    ShortAnswer,
    ShortAnswerOrRecall,
    WriteLongAnswer,
)
from ambiqa.signatures.disambiguation import ClarifyFromPassages
from ambiqa.types import Interpretation, Passage

Config = dict[str, Any] | None


def _clean(text: object) -> str:
    return " ".join(str(text or "").split()).strip(" -*•")


class ClarifyStep(dspy.Module):
    """Ask the LM for DQ/DA pairs grounded in ``passages``; map cited numbers to passage ids."""

    def __init__(self, lm_config: Config = None) -> None:
        super().__init__()
        self.lm_config = dict(lm_config or {})
        self.clarify = dspy.Predict(ClarifyFromPassages)

    def forward(self, question: str, passages: list[Passage]) -> list[Interpretation]:
        pred = safe_step("clarify", lambda: self.clarify(
            question=question, passages=format_passages(passages), config=self.lm_config),
            None)
        if pred is None:
            return []
        pairs: list[Interpretation] = []
        seen: set[tuple[str, str]] = set()
        for item in pred.pairs or []:
            q, a = _clean(getattr(item, "question", "")), _clean(getattr(item, "answer", ""))
            if not q or not a:
                continue
            key = (q.lower(), a.lower())
            if key in seen:
                continue
            seen.add(key)
            n = getattr(item, "passage", 0) or 0
            cited = [passages[n - 1].id] if isinstance(n, int) and 1 <= n <= len(passages) else []
            pairs.append(Interpretation(question=q, answer=a, passages=cited))
        return pairs


class LongAnswerStep(dspy.Module):
    """Eq. 2: the long answer, given the DQ/DA pairs and the passages they came from."""

    def __init__(self, lm_config: Config = None) -> None:
        super().__init__()
        self.lm_config = dict(lm_config or {})
        self.write = dspy.Predict(WriteLongAnswer)

    def forward(self, question: str, pairs: list[Interpretation],
                passages: list[Passage]) -> str:
        pred = safe_step("long_answer", lambda: self.write(
            question=question, interpretations=format_pairs(pairs),
            passages=format_passages(passages), config=self.lm_config), None)
        if pred is None:  # degrade to the pairs themselves, which still carry the answers
            return " ".join(f"{p.question} {p.answer}." for p in pairs)
        return str(pred.long_answer or "").strip()


class ClosedBookStep(dspy.Module):
    """The paper's I_l: a long answer from the LM's own knowledge, no passages."""

    def __init__(self, lm_config: Config = None) -> None:
        super().__init__()
        self.lm_config = dict(lm_config or {})
        self.answer = dspy.Predict(ClosedBookLongAnswer)

    def forward(self, question: str) -> str:
        pred = safe_step("closed_book", lambda: self.answer(
            question=question, config=self.lm_config), None)
        return "" if pred is None else str(pred.long_answer or "").strip()


class ShortAnswerStep(dspy.Module):
    """A short answer (a name, date or number) from ``passages``, or from memory when none.

    The data sets scored by EM/F1 against a few gold words (HotpotQA, NQ, WebQ) need this
    form: a long paragraph scored there measures the format, not the retrieval.

    ``recall_fallback`` picks the prompt. Off (the default), the passages are taken as true
    (:class:`ShortAnswer`). On, the model answers from memory when no passage states the
    answer (:class:`ShortAnswerOrRecall`): where the corpus rarely holds the answer (WebQ,
    gold in the passages read for 8 of 60 dev questions), the 1.5B otherwise copies a
    distractor name or the question's own subject where closed-book it knew the answer.
    """

    def __init__(self, lm_config: Config = None, recall_fallback: bool = False) -> None:
        super().__init__()
        self.lm_config = dict(lm_config or {})
        self.answer = dspy.Predict(ShortAnswerOrRecall if recall_fallback else ShortAnswer)

    def forward(self, question: str, passages: list[Passage]) -> str:
        pred = safe_step("short_answer", lambda: self.answer(
            question=question, passages=format_passages(passages), config=self.lm_config),
            None)
        return "" if pred is None else _clean(pred.answer)
