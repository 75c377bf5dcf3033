"""IRCoT-style baseline: interleave chain-of-thought sentences with retrieval (after Trivedi et
al., 2023, "Interleaving Retrieval with Chain-of-Thought Reasoning").

ReSP's paper compares against IRCoT as the strongest iterative baseline; this module gives the
same comparison inside ambiqa with the same retrievers, LMs and cost traces. It is
*IRCoT-style*, not a reproduction of the paper's code: see :class:`IRCoT` for the differences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import dspy

from ambiqa.programs.base import AmbiqaProgram, format_passages, safe_step
from ambiqa.programs.config import ProgramConfig, int_field, resolve_config
from ambiqa.programs.streaming import announce
from ambiqa.signatures.answering import AnswerFromReasoning
from ambiqa.signatures.planning import NextReasoningStep
from ambiqa.tracing import record_event
from ambiqa.types import Interpretation, Passage

NONE_YET = "(none yet)"

STOP_ANSWER_FOUND = "answer_found"
STOP_MAX_STEPS = "max_steps"
STOP_REASONER_UNPARSEABLE = "reasoner_unparseable"

_ANSWER_IS = re.compile(r"\banswer\s+is\b", re.IGNORECASE)
# A sentence ends at . ! or ? after a lower-case letter, digit or closing bracket/quote and
# before an upper-case letter, so abbreviations such as "U.S. Army" are not cut.
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\"'][.!?])\s+(?=[A-Z])")


def first_sentence(text: object) -> str:
    """The first sentence of the first non-empty line: IRCoT keeps one sentence per step."""
    for line in str(text or "").splitlines():
        line = " ".join(line.split()).strip(" -*•")
        if line:
            return _SENTENCE_END.split(line, maxsplit=1)[0].strip()
    return ""


def says_answer(sentence: str) -> bool:
    """IRCoT's termination test: the chain has stated its answer."""
    return bool(_ANSWER_IS.search(sentence))


@dataclass(frozen=True)
class IRCoTConfig(ProgramConfig):
    """IRCoT's settings, the single source of their defaults.

    Attributes:
        k: passages retrieved per query (the question, then each reasoning sentence).
        max_steps: most reasoning sentences.
        max_passages: most passages collected in all (IRCoT's cap: 15).
    """

    label = "IRCoT "
    k: int = int_field(5)
    max_steps: int = int_field(4)
    max_passages: int = int_field(15)


class IRCoT(AmbiqaProgram):
    """IRCoT-style interleaved retrieval and reasoning for multi-hop questions.

    Steps (as in IRCoT):

    1. retrieve the top ``k`` passages for the question;
    2. reason: write the *next single sentence* of a chain of thought from the question, every
       passage collected so far and the sentences written so far;
    3. if the sentence says "answer is", or ``max_steps`` sentences are written, stop;
    4. otherwise retrieve the top ``k`` passages with that sentence as the query, add the ones
       not seen yet (by id; at most ``max_passages`` in all, IRCoT's cap of 15) and go to 2;
    5. read: answer the question in a few words from the passages and the chain.

    Differences from the paper's system (hence "IRCoT-style") are listed in
    ``docs/methods.md#baselines``.

    Retriever calls = number of reasoning sentences (one for the question, one after each
    sentence except the last); LM calls = sentences + 1.
    """

    name = "ircot"
    writes_answer = {"read": "answer"}  # the final answer (streamed)
    # minimal dependent LM rounds: one reasoning step that states the answer -> read
    min_lm_rounds = 2
    answer_style = "short"

    config_class = IRCoTConfig

    def __init__(self, retriever=None, config: IRCoTConfig | dict[str, Any] | None = None,
                 **settings: Any) -> None:
        super().__init__(retriever)
        self.use_config(resolve_config(IRCoTConfig, config, settings, owner="IRCoT"))
        self.reason = dspy.Predict(NextReasoningStep)
        self.read = dspy.Predict(AnswerFromReasoning)

    def run(self, question: str) -> dict[str, Any]:
        retriever = self.require_retriever()
        collected: dict[str, Passage] = {}

        def add(found: list[Passage]) -> list[str]:
            """Add unseen passages (up to the cap); return the ids actually added."""
            new: list[str] = []
            for p in found:
                if len(collected) >= self.max_passages:
                    break
                if p.id not in collected:
                    collected[p.id] = p
                    new.append(p.id)
            return new

        add(retriever.search(question, self.k))
        reasoning: list[str] = []
        steps: list[dict[str, Any]] = []
        stop_reason = STOP_MAX_STEPS
        for step_no in range(1, self.max_steps + 1):
            pred = safe_step("ircot.reason", lambda: self.reason(
                question=question, passages=format_passages(list(collected.values())),
                reasoning="\n".join(reasoning) or NONE_YET), None)
            sentence = first_sentence(pred.next_sentence) if pred is not None else ""
            if not sentence:
                if pred is not None:
                    record_event("ircot.reason", "degraded: empty reasoning sentence")
                stop_reason = STOP_REASONER_UNPARSEABLE
                break
            reasoning.append(sentence)
            step: dict[str, Any] = {"step": step_no, "sentence": sentence,
                                    "new_passage_ids": []}
            steps.append(step)
            if says_answer(sentence):
                stop_reason = STOP_ANSWER_FOUND
                break
            if step_no == self.max_steps:
                break  # no reasoning step follows, so a retrieval here would go unread
            step["new_passage_ids"] = add(retriever.search(sentence, self.k))

        passages = list(collected.values())
        announce([], passages)
        pred = safe_step("ircot.read", lambda: self.read(
            question=question, passages=format_passages(passages),
            reasoning="\n".join(reasoning) or NONE_YET), None)
        answer = "" if pred is None else " ".join(str(pred.answer or "").split())
        return {
            "answer": answer,
            "interpretations": [Interpretation(question=question, answer=answer,
                                               passages=[p.id for p in passages])],
            "passages": passages,
            "reasoning": reasoning,
            "steps": steps,
            "iterations": len(steps),
            "stop_reason": stop_reason,
        }
