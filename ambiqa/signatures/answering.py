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
    the time, the place, the version). Use the facts in the interpretations and passages; when
    no passages are given, answer from your own knowledge."""

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


# ---- short answers for multi-hop questions (ReSP's generator, IRCoT-style reader) -----------


class AnswerFromMemories(dspy.Signature):
    """Answer a multi-hop question in a few words from the notes gathered while searching.

    Use the evidence notes and the answered sub-questions together. Reply with the answer
    alone (a name, date, number, yes/no or short phrase): no full sentence, no explanation."""

    question: str = dspy.InputField(desc="the main question")
    global_evidence: str = dspy.InputField(desc="evidence notes collected, one per round")
    local_pathway: str = dspy.InputField(
        desc="sub-questions that were searched, each with the answer found")
    answer: str = dspy.OutputField(desc="the short answer, a few words")


class AnswerFromReasoning(dspy.Signature):
    """Answer a multi-hop question in a few words, reading the passages and the chain of
    reasoning written for it.

    Reply with the answer alone (a name, date, number, yes/no or short phrase): no full
    sentence, no explanation."""

    question: str = dspy.InputField(desc="the multi-hop question")
    passages: str = dspy.InputField(desc="numbered passages retrieved while reasoning")
    reasoning: str = dspy.InputField(desc="the reasoning sentences, one per line")
    answer: str = dspy.OutputField(desc="the short answer, a few words")


class ShortAnswer(dspy.Signature):
    """Answer the question with a short phrase of one to a few words (a name, date, number or
    place), not a sentence. Take the passages as true when they are given; when the passages
    field says there are none, answer from what you know."""

    question: str = dspy.InputField(desc="a factual question")
    passages: str = dspy.InputField(desc="numbered evidence passages, or '(no passages)'")
    answer: str = dspy.OutputField(desc="the answer in a few words, no explanation")


class BackgroundDocument(dspy.Signature):
    """Write a short background paragraph, from your own knowledge, that contains the facts
    needed to answer the question. Do not ask for documents; state what you know."""

    question: str = dspy.InputField(desc="a factual question")
    background: str = dspy.OutputField(desc="one informative paragraph about the question's topic")


class ReadShortAnswer(dspy.Signature):
    """Answer the question with a short phrase taken from the context.

    Copy the few words of the context that answer the question (a name, date, number or
    place), without a full sentence. If the context does not answer it, reply "unknown"."""

    question: str = dspy.InputField(desc="a specific, unambiguous question")
    context: str = dspy.InputField(desc="the only text you may read to answer")
    answer: str = dspy.OutputField(
        desc="a few words copied from the context, or unknown")
