"""DSPy's async habit: every ambiqa program answers ``await prog.acall(...)`` and works
under ``dspy.asyncify``, through the real ``dspy.LM`` path (scripted engine)."""

from __future__ import annotations

import asyncio

import dspy

from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import vanilla_rag_lm
from ambiqa.types import Passage

PASSAGES = [Passage("a", "Paris", "Paris is the capital of France."),
            Passage("b", "Lyon", "Lyon is a city in France.")]


def test_acall_runs_the_program_and_traces_it(use_lm):
    lm = use_lm(vanilla_rag_lm())
    prog = VanillaRAG(InMemoryRetriever(PASSAGES), k=2)
    out = asyncio.run(prog.acall(question="What is the capital of France?"))
    assert out.answer.startswith("Answers: ")
    assert out.trace["lm_calls"] == 2 and out.trace["retriever_calls"] == 1
    assert lm.engine.count("WriteLongAnswer") == 1


def test_asyncify_wraps_a_program(use_lm):
    use_lm(vanilla_rag_lm())
    prog = VanillaRAG(InMemoryRetriever(PASSAGES), k=2)
    out = asyncio.run(dspy.asyncify(prog)(question="What is the capital of France?"))
    assert out.answer.startswith("Answers: ")
    assert out.trace["lm_calls"] == 2


def test_acall_answers_concurrent_questions(use_lm):
    use_lm(vanilla_rag_lm())
    prog = VanillaRAG(InMemoryRetriever(PASSAGES), k=2)

    async def both():
        return await asyncio.gather(prog.acall(question="Capital of France?"),
                                    prog.acall(question="A city in France?"))

    a, b = asyncio.run(both())
    assert a.trace["lm_calls"] == 2 and b.trace["lm_calls"] == 2  # traces not mixed up
