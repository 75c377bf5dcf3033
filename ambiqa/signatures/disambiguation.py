"""Disambiguation signatures: turning one ambiguous question into specific ones."""

from __future__ import annotations

from typing import ClassVar

import dspy

from ambiqa.signatures.common import QAPair


class ClarifyFromPassages(dspy.Signature):
    """Find the different specific questions an ambiguous question could be asking, using
    the passages, and answer each one from the passages.

    Each specific question must be a complete question that has exactly one answer. Give a
    short answer (a name, date, number or short phrase), copied from a passage, and the number
    of that passage. If the question is not ambiguous, return it once with its answer."""

    output_cap_tokens: ClassVar[int] = 384

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    pairs: list[QAPair] = dspy.OutputField(
        desc="disambiguated questions, each with its short answer and passage number")


class PseudoInterpretations(dspy.Signature):
    """Rewrite an ambiguous question into the specific questions it could stand for, guided
    by what is known to be ambiguous about it.

    Write one question per reading that the reason points to; if no kind of ambiguity was
    named, look for the readings yourself. Each rewrite keeps the rest of the original
    question, changes only what resolves the ambiguity (who, which one, what sense, when,
    where), is a complete question with a single answer, and differs from the other
    rewrites. Do not answer the questions."""

    output_cap_tokens: ClassVar[int] = 256

    question: str = dspy.InputField(desc="the original, ambiguous question")
    ambiguity_type: str = dspy.InputField(
        desc="the kind of ambiguity: AmbSub, AmbObj, AmbPred, AmbTime, AmbLoc, or None if "
             "none was named")
    reason: str = dspy.InputField(desc="why the question is ambiguous and which readings exist")
    interpretations: list[str] = dspy.OutputField(
        desc="the specific rewritten questions, one per reading")


class RelaxQuery(dspy.Signature):
    """Turn a possibly ambiguous question into one broad search query that would find
    passages about every way the question could be read.

    Keep the main entity and topic words. Leave out details that would narrow the search to a
    single reading (one year, one version, one person), and add no facts of your own."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    relaxed_query: str = dspy.OutputField(desc="a short keyword-style search query")


class InterpretFromPassage(dspy.Signature):
    """Read one passage and decide whether it answers some specific reading of a possibly
    ambiguous question.

    If it does, rewrite the question into the one specific reading this passage answers best
    (at most one reading per passage, the most relevant): a complete question that stands on
    its own, keeps the intent of the original, and names the person, thing, time or place
    that makes it unambiguous (never refer to "the passage" or "the text"). When the reading
    is tied to a moment, give the clearest time reference the passage allows (a year, a
    season, an edition), never "current" or "most recent". Answer it in a few words, using
    only what the passage states, not your own knowledge. If the passage is off topic or does
    not fully answer any reading on its own, set abstain to True and write "none" for the
    interpretation and the answer."""

    output_cap_tokens: ClassVar[int] = 128

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    passage: str = dspy.InputField(desc="one evidence passage")
    abstain: bool = dspy.OutputField(desc="True if the passage answers no reading of the question")
    interpretation: str = dspy.OutputField(
        desc="the specific question this passage answers, or none")
    answer: str = dspy.OutputField(desc="a short answer taken from the passage, or none")
