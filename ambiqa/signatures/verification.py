"""Verification signatures: does evidence support an interpretation; does a node's answer
answer the original question (Diva retrieval verification, ToC self-verification)."""

from __future__ import annotations

from typing import ClassVar

import dspy  # noqa: F401


class JudgeEntailment(dspy.Signature):
    """Decide whether two short answers to the same question say the same thing, that is,
    whether each one, as an answer to this question, implies the other (different wording of
    the same name, date or number counts as the same)."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="the question both answers respond to")
    answer_a: str = dspy.InputField(desc="the first answer")
    answer_b: str = dspy.InputField(desc="the second answer")
    same: bool = dspy.OutputField(desc="True if the two answers agree, otherwise False")


class SelfVerify(dspy.Signature):
    """Check one candidate reading of an ambiguous question before it is kept (Tree of
    Clarifications pruning, as the paper and its release do it).

    You get the original question, the passage a proposed answer came from, and the answer.
    Say True if, reading the passage, the answer could be a correct answer to the original
    question under some reading of it; say False if it answers something else or the passage
    does not back it."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    passage: str = dspy.InputField(desc="the evidence passage the answer came from")
    answer: str = dspy.InputField(desc="the short answer proposed")
    valid: bool = dspy.OutputField(
        desc="True if the answer could be correct for the question, otherwise False")


class SelfVerifyEvidence(dspy.Signature):
    """Check one candidate reading of an ambiguous question before it is kept (the Tree of
    Clarifications check, answered as evidence then a word).

    You get the original question, the passage a proposed answer came from, and the answer.
    First copy the sentence of the passage that mentions the answer, or write "none". Then
    reply yes if, going by that sentence, the answer could be a correct answer to the original
    question under some reading of it, and no if it answers something else or the passage
    does not mention it."""

    # a quoted evidence sentence, then yes/no (ToC's "evidence" check)
    output_cap_tokens: ClassVar[int] = 160

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    passage: str = dspy.InputField(desc="the evidence passage the answer came from")
    answer: str = dspy.InputField(desc="the short answer proposed")
    evidence: str = dspy.OutputField(
        desc="the passage sentence that mentions the answer, or none")
    verdict: str = dspy.OutputField(desc='one word: "yes" or "no"')


class SelfVerifyStrict(dspy.Signature):
    """Check one candidate reading of an ambiguous question before it is kept (a stricter
    check than the Tree of Clarifications paper's).

    You get the original question, the passage the answer came from, a more specific rewrite
    of the question and a short answer. Say True only if both hold: the rewrite still asks what
    the original question asks (it narrows it down, it does not switch to a different or
    unrelated fact), and the passage backs the answer to the rewrite. Otherwise say False."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    passage: str = dspy.InputField(desc="the evidence passage for that answer")
    interpretation: str = dspy.InputField(desc="a specific rewrite of the original question")
    answer: str = dspy.InputField(desc="the short answer proposed for the rewrite")
    valid: bool = dspy.OutputField(
        desc="True if the rewrite is a reading of the original question and the passage "
             "supports the answer, otherwise False")


#: Words a verifier may reply with, read by :func:`parse_verdict`.
YES_WORDS = frozenset({"yes", "true", "supported", "y"})
NO_WORDS = frozenset({"no", "false", "unsupported", "n"})


def parse_verdict(text: object) -> bool | None:
    """Map a verifier's ``verdict`` text to True (yes), False (no) or None (unreadable).

    Reads the first word only, ignoring case, brackets and punctuation, so "Yes.", "**No**"
    and "yes, passage 2" all count; anything else is None and the caller abstains.
    """
    words = str(text or "").strip().lower().split()
    if not words:
        return None
    first = words[0].strip("*[]().,:;!\"'`")
    if first in YES_WORDS:
        return True
    if first in NO_WORDS:
        return False
    return None


class VerifyInterpretation(dspy.Signature):
    """Decide whether the numbered passages are enough to answer a specific question.

    Say True only when at least one passage states the answer itself; passages that are
    merely on the same topic, or that answer a different reading of the question, do not
    count."""

    output_cap_tokens: ClassVar[int] = 48

    interpretation: str = dspy.InputField(desc="one specific, unambiguous question")
    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    supported: bool = dspy.OutputField(
        desc="True if the passages contain the answer, otherwise False")


# VerifyInterpretation above is the evaluation judge's grounding check (VerDICt App. A, in
# ambiqa.evaluation.judge). Diva's retrieval verifier is the one below: a bare bool was what
# the default 1.5B answered False to every time (docs/methods.md#diva).


class VerifyRetrieval(dspy.Signature):
    """Decide whether the numbered passages answer a specific question.

    First copy the sentence from the passages that states the answer, with its passage
    number, or write "none" if no passage states it. Then reply yes if a passage states the
    answer, even in other words, and no if the passages are only on the same topic, answer a
    different question, or say nothing about it."""

    # a quoted evidence sentence, then yes/no. Diva's paper uses 300 (Diva calls with max 300
    # anyway): the 1.5B often quotes a whole passage as "evidence" (up to ~105 words in
    # benchmarks/verifier.py's rows), and at 160 such a reply was cut before its yes/no -- 16
    # of 148 replies in the ASQA evidence run, 12 of 42 in the throughput run -- and paid a
    # full JSON-adapter retry.
    output_cap_tokens: ClassVar[int] = 300

    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    interpretation: str = dspy.InputField(desc="one specific, unambiguous question")
    evidence: str = dspy.OutputField(
        desc="the passage sentence that answers the question, with its number, or none")
    verdict: str = dspy.OutputField(desc='one word: "yes" or "no"')


class VerifyRetrievalBrief(dspy.Signature):
    """Decide whether the numbered passages answer a specific question.

    First write the number of the passage that states the answer and the few words of it that
    are the answer, or write "none" if no passage states it. Then reply yes if a passage states
    the answer, even in other words, and no if the passages are only on the same topic, answer
    a different question, or say nothing about it."""

    # Diva's verifier with ``verify_evidence="brief"`` (issue 45, a declared deviation in
    # docs/methods.md): the same look-before-you-decide order as VerifyRetrieval, but the
    # evidence is the answer's few words, not a copied sentence -- the sentence cost ~69
    # output tokens a vote on the default 1.5B (compile-v4's zero-shot rows), a third of
    # Diva's output. 64 leaves room for a short answer, its number and the verdict.
    output_cap_tokens: ClassVar[int] = 64

    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    interpretation: str = dspy.InputField(desc="one specific, unambiguous question")
    evidence: str = dspy.OutputField(
        desc="the passage number and the few words that answer the question, or none")
    verdict: str = dspy.OutputField(desc='one word: "yes" or "no"')
