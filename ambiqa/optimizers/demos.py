"""Labeled demonstrations built from training data, per signature.

DSPy's LabeledFewShot copies raw training examples into every predictor. That works when the
examples' fields are the predictor's fields; ambiqa's predictors read passages and write
DQ/DA pairs, which raw ASQA rows do not hold in that form. So each signature that can be
labeled from gold data gets a converter here, and :func:`labeled_demos` returns, per
signature name, a list of ``dspy.Example`` with exactly that signature's fields.

Gold sources: ASQA's qa_pairs (disambiguated questions with short answers), its annotators'
long answers and knowledge passages; HotpotQA's answers and supporting paragraphs (ReSP's
generator, the short-answer reader); any short-answer data set's answers (the reader, with
its gold passages when the data has them, else as the retrieval-free case). Train splits
only -- callers enforce that.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import Any

import dspy

from ambiqa.evaluation.metrics import answer_in_passages
from ambiqa.optimizers.signals import given_answers
from ambiqa.programs.base import format_pairs, format_passages
from ambiqa.programs.resp import format_global, format_local
from ambiqa.signatures.common import QAPair
from ambiqa.types import Interpretation, Passage


def gold_passages(ex: Any) -> list[Passage]:
    """An example's annotated passages (ASQA ``gold_passages``, HotpotQA supporting contexts),
    at most 5, as :class:`Passage` objects; empty texts dropped."""
    out = []
    supporting = [c for c in getattr(ex, "contexts", None) or []
                  if isinstance(c, dict) and c.get("is_supporting")]
    for i, p in enumerate((getattr(ex, "gold_passages", None) or []) + supporting):
        if isinstance(p, dict):
            out.append(Passage(str(p.get("id", f"g{i}")), str(p.get("title", "")),
                               str(p.get("text", ""))))
        elif isinstance(p, Passage):
            out.append(p)
        else:
            out.append(Passage(f"g{i}", "", str(p)))
    return [p for p in out if p.text.strip()][:5]


def _pairs(ex: Any, every_answer: bool = False) -> list[tuple[str, str]]:
    """(disambiguated question, short answer) per gold qa pair: its first answer, or with
    ``every_answer`` one pair per non-empty answer (a passage may state any of them)."""
    pairs = []
    for qa in getattr(ex, "qa_pairs", None) or []:
        answers = [str(a) for a in qa.get("short_answers") or qa.get("answers") or []
                   if str(a).strip()]
        if qa.get("question") and answers:
            pairs += [(str(qa["question"]), a) for a in (answers if every_answer
                                                         else answers[:1])]
    return pairs


def _cite(answer: str, passages: list[Passage]) -> int:
    low = answer.lower()
    for i, p in enumerate(passages, start=1):
        if low in p.text.lower():
            return i
    return 0


def clarify_demo(ex: Any) -> dspy.Example | None:
    passages, pairs = gold_passages(ex), _pairs(ex)
    if not passages or not pairs:
        return None
    return dspy.Example(
        question=ex.question, passages=format_passages(passages),
        pairs=[QAPair(question=q, answer=a, passage=_cite(a, passages)) for q, a in pairs],
    ).with_inputs("question", "passages")


def long_answer_demo(ex: Any) -> dspy.Example | None:
    pairs, longs = _pairs(ex), getattr(ex, "long_answers", None) or []
    if not pairs or not longs:
        return None
    interps = [Interpretation(q, a) for q, a in pairs]
    return dspy.Example(
        question=ex.question, interpretations=format_pairs(interps),
        passages=format_passages(gold_passages(ex)), long_answer=str(longs[0]),
    ).with_inputs("question", "interpretations", "passages")


def interpret_demo(ex: Any) -> dspy.Example | None:
    """VerDICt's per-passage read on the example's first gold passage: the gold reading whose
    short answer the passage states, or an abstention when it states none (the paper's
    "relevant but cannot answer" passage, Fig. 1b)."""
    passages, pairs = gold_passages(ex), _pairs(ex, every_answer=True)
    if not passages or not pairs:
        return None
    passage = passages[0]
    stated = [(q, a) for q, a in pairs if a.lower() in passage.text.lower()]
    interpretation, answer = stated[0] if stated else ("none", "none")
    return dspy.Example(question=ex.question, passage=format_passages([passage]),
                        abstain=not stated, interpretation=interpretation, answer=answer,
                        ).with_inputs("question", "passage")


def closed_book_demo(ex: Any) -> dspy.Example | None:
    longs = getattr(ex, "long_answers", None) or []
    if not longs:
        return None
    return dspy.Example(question=ex.question, long_answer=str(longs[0])).with_inputs("question")


def _short_answer(ex: Any) -> str | None:
    answers = getattr(ex, "answers", None) or []
    if isinstance(answers, str):
        answers = [answers]
    if getattr(ex, "qa_pairs", None) and len(ex.qa_pairs) > 1:
        return None  # an ambiguous question has no single short answer
    answers = [str(a).strip() for a in answers if str(a).strip()]
    return answers[0] if answers else None


def short_answer_demo(ex: Any) -> dspy.Example | None:
    answer = _short_answer(ex)
    if answer is None:
        return None
    return dspy.Example(question=ex.question, passages=format_passages(gold_passages(ex)),
                        answer=answer).with_inputs("question", "passages")


def memories_answer_demo(ex: Any) -> dspy.Example | None:
    answer, passages = _short_answer(ex), gold_passages(ex)
    if answer is None or not passages:
        return None
    notes = [f"{p.title}: {p.text}" if p.title else p.text for p in passages]
    return dspy.Example(question=ex.question, global_evidence=format_global(notes),
                        local_pathway=format_local([]), answer=answer,
                        ).with_inputs("question", "global_evidence", "local_pathway")


CONVERTERS: dict[str, Callable[[Any], dspy.Example | None]] = {
    "ClarifyFromPassages": clarify_demo,
    "InterpretFromPassage": interpret_demo,
    "WriteLongAnswer": long_answer_demo,
    "ClosedBookLongAnswer": closed_book_demo,
    "ShortAnswer": short_answer_demo,
    "ShortAnswerOrUnknown": short_answer_demo,
    "AnswerFromMemories": memories_answer_demo,
}


def labeled_demos(trainset: list[Any]) -> dict[str, list[dspy.Example]]:
    """Per signature name, the labeled demos the training examples support."""
    out: dict[str, list[dspy.Example]] = {}
    for name, convert in CONVERTERS.items():
        demos = [d for d in (convert(ex) for ex in trainset) if d is not None]
        if demos:
            out[name] = demos
    return out


def _writer_form(demo: Any, typical: float) -> float:
    """How much a gold long answer has the references' form: the share of the readings it
    lists that it states, times min/max of its length and the pool's typical length."""
    text = str(demo.long_answer or "")
    words = len(text.split())
    if not words:
        return 0.0
    given = given_answers(str(demo.interpretations or ""))
    stated = (sum(answer_in_passages([a], [text]) for a in given) / len(given)
              if given else 1.0)
    return stated * min(words, typical) / max(words, typical)


def pick_gold(pool: list[Any], k: int, rng: random.Random, signature: str) -> list[Any]:
    """``k`` gold demos for a predictor of ``signature`` from ``pool``.

    Most signatures: a seeded random sample. The long-answer writer: the ``k`` demos whose
    long answer best has the references' form -- it states every reading it lists, at a
    length near the pool's median -- in seeded order among equals. Why: a compiled writer
    copies its demos' length (``benchmarks/results/writer-length``), and ASQA's long answers
    vary from one sentence to a paragraph; a random gold demo of 19 words made the 1.5B answer
    in 13 and drop readings (``benchmarks/results/compile-v5``, the first table).
    """
    if signature != "WriteLongAnswer" or len(pool) <= k:
        return rng.sample(pool, min(k, len(pool)))
    shuffled = rng.sample(pool, len(pool))
    typical = statistics.median(len(str(d.long_answer or "").split()) for d in pool) or 1.0
    return sorted(shuffled, key=lambda d: -_writer_form(d, typical))[:k]
