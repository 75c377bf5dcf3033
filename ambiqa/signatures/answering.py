"""Answering signatures: long-form, short, closed-book, and background documents.

The long-form answer is the ASQA target: one paragraph that names each reading of an
ambiguous question and answers it, so a reader can recover every disambiguated answer.
"""

from __future__ import annotations

import dspy


class WriteLongAnswer(dspy.Signature):
    """Write one paragraph that answers an ambiguous question completely.

    The question can be read in several ways. Explain that it is ambiguous, then answer each
    interpretation listed, in its own sentence, naming what makes it different (the person,
    the time, the place, the version). Use only facts from the interpretations and passages."""

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    interpretations: str = dspy.InputField(
        desc="disambiguated questions with their answers, one per line")
    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    long_answer: str = dspy.OutputField(desc="a single paragraph covering every interpretation")


class ClosedBookLongAnswer(dspy.Signature):
    """Answer an ambiguous question from your own knowledge, without documents.

    If the question can mean several things, say so and answer each meaning in its own
    sentence. Write one paragraph."""

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    long_answer: str = dspy.OutputField(desc="a single paragraph covering each meaning")
