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
    ShortAnswerOrUnknown,
    WriteLongAnswer,
    word_limited_writer,
)
from ambiqa.signatures.disambiguation import ClarifyFromPassages
from ambiqa.text import normalize_answer
from ambiqa.tracing import record_event
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
    """Eq. 2: the long answer, given the DQ/DA pairs and the passages they came from.

    ``max_words`` (None: the papers' prompt) asks the writer to keep the answer under that
    many words (:func:`~ambiqa.signatures.answering.word_limited_writer`).
    """

    writes_answer = {"write": "long_answer"}

    def __init__(self, lm_config: Config = None, max_words: int | None = None) -> None:
        super().__init__()
        self.lm_config = dict(lm_config or {})
        self.write = dspy.Predict(WriteLongAnswer if max_words is None
                                  else word_limited_writer(max_words))

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

    writes_answer = {"answer": "long_answer"}

    def __init__(self, lm_config: Config = None) -> None:
        super().__init__()
        self.lm_config = dict(lm_config or {})
        self.answer = dspy.Predict(ClosedBookLongAnswer)

    def forward(self, question: str) -> str:
        pred = safe_step("closed_book", lambda: self.answer(
            question=question, config=self.lm_config), None)
        return "" if pred is None else str(pred.long_answer or "").strip()


#: replies that say the passages hold no answer
NO_ANSWER = frozenset({"", "unknown", "none", "not mentioned", "no answer", "not stated"})


def is_non_answer(answer: str, question: str) -> bool:
    """Is ``answer`` no answer at all: empty, "unknown", or only words the question already
    holds ("what language do they speak in australia?" → "Australia")? Compared on SQuAD-
    normalised words, so case, punctuation and articles do not matter."""
    a = normalize_answer(answer)
    if a in NO_ANSWER:
        return True
    return set(a.split()) <= set(normalize_answer(question).split())


class ShortAnswerStep(dspy.Module):
    """A short answer (a name, date or number) from ``passages``, or from memory when none.

    The data sets scored by EM/F1 against a few gold words (HotpotQA, NQ, WebQ) need this
    form: a long paragraph scored there measures the format, not the retrieval.

    ``recall_fallback`` (off by default): the passages are read with a prompt that may reply
    "unknown" (:class:`ShortAnswerOrUnknown`); when the reply is no answer -- "unknown", empty,
    or only words of the question (:func:`is_non_answer`) -- one closed-book call
    (:class:`ShortAnswer` with no passages) replaces it, and the trace records the switch.
    Why: where the corpus rarely holds the answer (WebQ: a gold answer is in the passages read
    for 8 of 60 dev questions), the 1.5B otherwise copies a distractor name or the question's
    own subject where closed-book it knew the answer; a prompt that only *allowed* answering
    from memory changed nothing on WebQ train (F1 0.057 vs 0.064, n = 40), this fallback
    lifted it to 0.161 (``benchmarks/results/webq-train-ab/``).
    """

    writes_answer = {"answer": "answer", "recall": "answer"}

    def __init__(self, lm_config: Config = None, recall_fallback: bool = False) -> None:
        super().__init__()
        self.lm_config = dict(lm_config or {})
        self.recall_fallback = recall_fallback
        self.answer = dspy.Predict(ShortAnswerOrUnknown if recall_fallback else ShortAnswer)
        if recall_fallback:
            self.recall = dspy.Predict(ShortAnswer)

    def _ask(self, predictor: dspy.Predict, question: str, passages: list[Passage]) -> str:
        pred = safe_step("short_answer", lambda: predictor(
            question=question, passages=format_passages(passages), config=self.lm_config),
            None)
        return "" if pred is None else _clean(pred.answer)

    def forward(self, question: str, passages: list[Passage]) -> str:
        answer = self._ask(self.answer, question, passages)
        if self.recall_fallback and passages and is_non_answer(answer, question):
            record_event("short_answer", f"recall fallback: the passages gave {answer!r}")
            answer = self._ask(self.recall, question, [])
        return answer
