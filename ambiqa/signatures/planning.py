"""Planning signatures: is the known information sufficient, and what to ask next (ReSP's
reasoner; the IRCoT-style baseline)."""

from __future__ import annotations

from typing import ClassVar

import dspy

# ---- ReSP's reasoner: judge, then plan ------------------------------------------------------


class JudgeSufficiency(dspy.Signature):
    """Decide whether the collected notes already answer the question completely and correctly.

    Rely only on what the notes state; do not fill gaps with guesses or outside knowledge.
    Say True only if every fact the question depends on is present, otherwise False."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="the main question")
    global_evidence: str = dspy.InputField(desc="evidence notes collected so far, one per round")
    local_pathway: str = dspy.InputField(
        desc="sub-questions already searched, each with the answer found")
    sufficient: bool = dspy.OutputField(desc="True if the notes are enough to answer")


class PlanNextQuestion(dspy.Signature):
    """Work out which fact is still missing to answer the main question and ask for it.

    Compare the main question with the notes, then write ONE short, self-contained question
    that a search engine could answer and that finds the next missing fact. Ask for a single
    step only, not the whole chain. Never ask a question that is already in the searched
    list, even reworded."""

    output_cap_tokens: ClassVar[int] = 64

    question: str = dspy.InputField(desc="the main question")
    global_evidence: str = dspy.InputField(desc="evidence notes collected so far, one per round")
    local_pathway: str = dspy.InputField(
        desc="sub-questions already searched, each with the answer found")
    searched: str = dspy.InputField(desc="questions already used for searching, one per line")
    feedback: str = dspy.InputField(desc='a remark about your previous attempt, or "none"')
    next_question: str = dspy.OutputField(desc="one new question for the next search")


# ---- IRCoT-style interleaved reasoning ------------------------------------------------------


class NextReasoningStep(dspy.Signature):
    """Continue a step-by-step chain of reasoning that answers a multi-hop question, one
    sentence at a time.

    Write only the next sentence, stating one fact taken from the passages that moves the
    chain forward. Once the chain reaches the answer, write a sentence of the form
    "So the answer is: <short answer>."."""

    output_cap_tokens: ClassVar[int] = 96

    question: str = dspy.InputField(desc="the multi-hop question")
    passages: str = dspy.InputField(desc="numbered passages retrieved so far")
    reasoning: str = dspy.InputField(desc="the sentences written so far, or (none yet)")
    next_sentence: str = dspy.OutputField(desc="exactly one new sentence")
