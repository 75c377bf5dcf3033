"""Answering signatures: long-form, short, closed-book, and background documents.

The long-form answer is the ASQA target: a few sentences that name each reading of an
ambiguous question and answer it, so a reader can recover every disambiguated answer. ASQA's
reference answers are a few sentences; asking for "one paragraph that explains the
ambiguity" made the 1.5B write commentary up to its 512-token limit before any answer, so the
prompts ask for what the papers' prompts ask for -- each interpretation with its answer, and
nothing else -- and each signature's ``output_cap_tokens`` caps the reply.

Field order is part of the cost: llama.cpp reuses the longest prompt prefix it has already
computed, so an input that several calls of one question share comes before the inputs that
change between those calls (the LM reader reads one long answer for every disambiguated
question: context first; EoR's reader sees one question with each member's passages:
question first). ``tests/unit/test_lm.py`` pins the order.
"""

from __future__ import annotations

from typing import ClassVar

import dspy


class WriteLongAnswer(dspy.Signature):
    """Answer a question that can be read in several ways, in a few sentences.

    For each interpretation listed, write one sentence that names what sets it apart (the
    person, the time, the place, the version) and gives its answer. Use the facts in the
    interpretations and passages; when no passages are given, answer from your own knowledge.
    Start with the first answer: no remarks about the question, no introduction, no summary."""

    output_cap_tokens: ClassVar[int] = 256

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    interpretations: str = dspy.InputField(
        desc="disambiguated questions with their answers, one per line")
    passages: str = dspy.InputField(desc="numbered evidence passages, one per line")
    long_answer: str = dspy.OutputField(
        desc="a few sentences, one per interpretation, each naming it and giving its answer")


def word_limited_writer(words: int) -> type[WriteLongAnswer]:
    """:class:`WriteLongAnswer` with one more sentence: keep the answer under ``words`` words.

    A declared deviation for fewer output tokens (``answer_words`` of Diva, issue 45): the
    default 1.5B writes zero-shot long answers of a median ~100 words where ASQA's references
    run ~60, and about one reply in three runs into the 256-token cap, mostly on remarks about
    the passages rather than answers. The class keeps the name ``WriteLongAnswer``, its fields
    and its cap, so traces, demo plans (``writer=...``) and artifacts address it as the writer.
    """
    doc = (f"{WriteLongAnswer.__doc__.rstrip()}\n    Keep the whole answer under {words} "
           "words: one short sentence per interpretation.")
    return type("WriteLongAnswer", (WriteLongAnswer,), {"__doc__": doc,
                                                        "__module__": __name__})


class ClosedBookLongAnswer(dspy.Signature):
    """Answer a possibly ambiguous question from your own knowledge, without documents, in a
    few sentences.

    If the question can mean several things, write one sentence per meaning that names it and
    gives its answer. Start with the first answer: no remarks about the question, no
    introduction, no summary."""

    output_cap_tokens: ClassVar[int] = 256

    question: str = dspy.InputField(desc="the original, possibly ambiguous question")
    long_answer: str = dspy.OutputField(
        desc="a few sentences, one per meaning, each naming it and giving its answer")


# ---- short answers for multi-hop questions (ReSP's generator, IRCoT-style reader) -----------


class AnswerFromMemories(dspy.Signature):
    """Answer a multi-hop question in a few words from the notes gathered while searching.

    Use the evidence notes and the answered sub-questions together. Reply with the answer
    alone (a name, date, number, yes/no or short phrase): no full sentence, no explanation."""

    output_cap_tokens: ClassVar[int] = 48

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

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="the multi-hop question")
    passages: str = dspy.InputField(desc="numbered passages retrieved while reasoning")
    reasoning: str = dspy.InputField(desc="the reasoning sentences, one per line")
    answer: str = dspy.OutputField(desc="the short answer, a few words")


class ShortAnswer(dspy.Signature):
    """Answer the question with a short phrase of one to a few words (a name, date, number or
    place), not a sentence. Take the passages as true when they are given; when the passages
    field says there are none, answer from what you know."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="a factual question")
    passages: str = dspy.InputField(desc="numbered evidence passages, or '(no passages)'")
    answer: str = dspy.OutputField(desc="the answer in a few words, no explanation")


class ShortAnswerOrUnknown(dspy.Signature):
    """Answer the question with a short phrase of one to a few words (a name, date, number or
    place), not a sentence, taken from the passages. If no passage states the answer, reply
    unknown. The answer is never the person, place or thing the question itself names."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="a factual question")
    passages: str = dspy.InputField(desc="numbered passages that may or may not hold the answer")
    answer: str = dspy.OutputField(desc="the answer in a few words, or unknown")


class BackgroundDocument(dspy.Signature):
    """Write a short background paragraph, from your own knowledge, that contains the facts
    needed to answer the question. Do not ask for documents; state what you know."""

    output_cap_tokens: ClassVar[int] = 192

    question: str = dspy.InputField(desc="a factual question")
    background: str = dspy.OutputField(desc="one informative paragraph about the question's topic")


class ReadShortAnswer(dspy.Signature):
    """Answer the question with a short phrase taken from the context.

    Copy the few words of the context that answer the question (a name, date, number or
    place), without a full sentence. If the context does not answer it, reply "unknown"."""

    output_cap_tokens: ClassVar[int] = 48

    context: str = dspy.InputField(desc="the only text you may read to answer")
    question: str = dspy.InputField(desc="a specific, unambiguous question")
    answer: str = dspy.OutputField(
        desc="a few words copied from the context, or unknown")
