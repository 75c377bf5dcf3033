"""Verification signatures: does evidence support an interpretation; does a node's answer
answer the original question (Diva retrieval verification, ToC self-verification)."""

from __future__ import annotations

import dspy  # noqa: F401


class JudgeEntailment(dspy.Signature):
    """Decide whether two short answers to the same question say the same thing, that is,
    whether each one, as an answer to this question, implies the other (different wording of
    the same name, date or number counts as the same)."""

    question: str = dspy.InputField(desc="the question both answers respond to")
    answer_a: str = dspy.InputField(desc="the first answer")
    answer_b: str = dspy.InputField(desc="the second answer")
    same: bool = dspy.OutputField(desc="True if the two answers agree, otherwise False")


class SelfVerify(dspy.Signature):
    """Check one candidate reading of an ambiguous question before it is kept (Tree of
    Clarifications pruning).

    You get the original question, a more specific rewrite of it with a short answer, and the
    passage the answer came from. Say True only if both hold: the rewrite still asks what the
    original question asks (it narrows it down, it does not switch to a different or unrelated
    fact), and the passage backs the answer to the rewrite. Otherwise say False."""

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    interpretation: str = dspy.InputField(desc="a specific rewrite of the original question")
    answer: str = dspy.InputField(desc="the short answer proposed for the rewrite")
    passage: str = dspy.InputField(desc="the evidence passage for that answer")
    valid: bool = dspy.OutputField(
        desc="True if the rewrite is a reading of the original question and the passage "
             "supports the answer, otherwise False")


class VerifyInterpretation(dspy.Signature):
    """Decide whether the numbered passages are enough to answer a specific question.

    Say True only when at least one passage states the answer itself; passages that are
    merely on the same topic, or that answer a different reading of the question, do not
    count."""

    interpretation: str = dspy.InputField(desc="one specific, unambiguous question")
    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    supported: bool = dspy.OutputField(
        desc="True if the passages contain the answer, otherwise False")
