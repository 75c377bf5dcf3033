"""Exported prompts reproduce the compiled program's outputs with the real embedded 0.5B LM."""

from __future__ import annotations

import pytest

from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.optimizers.compile import compile_program
from ambiqa.optimizers.export import capture_inputs, verify_export
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever

pytestmark = pytest.mark.integration


def test_exported_jinja_prompts_reproduce_outputs_with_the_embedded_lm(embedded_lm, use_lm):
    use_lm(embedded_lm)
    retriever = InMemoryRetriever(load_corpus(demo_corpus_path()))
    compiled, report = compile_program(VanillaRAG(retriever, k=2), load_dataset("demo:train"),
                                       optimizer="labeled", k=1)
    assert report.cost["lm_calls"] == 0
    captured = capture_inputs(compiled, [load_dataset("demo:dev")[0].question])
    results = verify_export(compiled, captured, embedded_lm, via="jinja")
    assert [r["predictor"] for r in results] == ["clarify.clarify", "long_answer.write"]
    assert all(r["match"] for r in results), results
