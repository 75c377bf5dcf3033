"""Disambiguation signatures: turning one ambiguous question into specific ones."""

from __future__ import annotations

import dspy

from ambiqa.signatures.common import QAPair


class ClarifyFromPassages(dspy.Signature):
    """Find the different specific questions an ambiguous question could be asking, using
    the passages, and answer each one from the passages.

    Each specific question must be a complete question that has exactly one answer. Give a
    short answer (a name, date, number or short phrase), copied from a passage, and the number
    of that passage. If the question is not ambiguous, return it once with its answer."""

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    pairs: list[QAPair] = dspy.OutputField(
        desc="disambiguated questions, each with its short answer and passage number")
