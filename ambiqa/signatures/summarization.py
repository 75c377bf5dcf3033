"""Summarization signatures: global evidence and local pathway memories (ReSP), document
compression for a query (EoR's @CP processing)."""

from __future__ import annotations

from typing import ClassVar

import dspy

# ---- ReSP's dual-function summarizer --------------------------------------------------------
# One retrieval round feeds two memories: evidence for the main question (global) and the
# answer to the sub-question that triggered the round (local). Keeping them apart lets the
# reasoner see both what is known and which questions were already asked.


class SummarizeGlobalEvidence(dspy.Signature):
    """Write a short evidence note for the main question, using only the passages.

    Keep every fact from the passages that helps answer the main question (names, dates,
    places, how things are related) in a few plain sentences. Add nothing that the passages
    do not say and do not guess the final answer. If no passage is relevant, say that."""

    output_cap_tokens: ClassVar[int] = 192

    question: str = dspy.InputField(desc="the main question the whole search is for")
    passages: str = dspy.InputField(desc="numbered passages from this search round")
    evidence: str = dspy.OutputField(desc="a few sentences of facts from the passages")


class SummarizeLocalPathway(dspy.Signature):
    """Answer one intermediate sub-question using only the passages.

    Reply with the answer itself: a name, date, number or short phrase. If the passages do not
    contain it, reply with the single word "unknown"."""

    output_cap_tokens: ClassVar[int] = 48

    sub_question: str = dspy.InputField(desc="the intermediate question searched this round")
    passages: str = dspy.InputField(desc="numbered passages retrieved for the sub-question")
    answer: str = dspy.OutputField(desc='a short answer, or "unknown"')


class CompressForQuery(dspy.Signature):
    """Shorten a document for a query: keep only the sentences of the document that help
    answer the query, copied faithfully, and drop everything else. If nothing in the document
    helps, return an empty string."""

    output_cap_tokens: ClassVar[int] = 192

    query: str = dspy.InputField(desc="the question the document is being read for")
    document: str = dspy.InputField(desc="the document to shorten")
    relevant: str = dspy.OutputField(desc="the document's sentences that bear on the query")
