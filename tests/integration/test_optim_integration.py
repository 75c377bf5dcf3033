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


def test_the_compile_chooses_with_the_embedded_lm(embedded_lm, use_lm):
    """The choice on the real 0.5B: every candidate scored on the held-out training
    questions, writer-only variants paying only their writer calls, and the shipped program
    is the one the selection names."""
    from ambiqa.evaluation.registry import dspy_metric

    use_lm(embedded_lm)
    retriever = InMemoryRetriever(load_corpus(demo_corpus_path()))
    compiled, report = compile_program(VanillaRAG(retriever, k=2), load_dataset("demo:train")[:6],
                                       optimizer="labeled", k=1, metric=dspy_metric("str-em"),
                                       select=True, select_val=2, metric_name="str-em")
    sel = report.settings["selection"]
    rows = {r["label"]: r for r in sel["candidates"]}
    assert sel["n_val"] == 2
    assert {"zero-shot", "input", "labeled", "labeled+writer=none"} <= set(rows)
    assert rows["zero-shot"]["lm_calls"] == rows["labeled"]["lm_calls"] == 4  # clarify+write
    assert rows["labeled+writer=none"]["lm_calls"] <= 2  # clarify answered from memory
    assert rows["labeled+writer=none"]["memo_hits"] >= 2
    writer = dict(compiled.named_predictors())["long_answer.write"]
    assert bool(writer.demos) == (sel["shipped"] in ("labeled", "labeled+writer=gold:1"))
    assert sel["reason"]
