"""Bootstrapping with several training questions in flight (``compile --threads``)."""

from __future__ import annotations

import threading

import pytest

from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.errors import ConfigError
from ambiqa.evaluation.registry import dspy_metric
from ambiqa.optimizers.budget import Budget
from ambiqa.optimizers.compile import compile_program
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import parse_fields, scripted_lm, titles_as_answers


@pytest.fixture()
def demo_retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


def _lm(failing: set[str] = frozenset(), **kwargs):
    """vanilla_rag's scripted LM; the long answer of a question in ``failing`` names no answer
    (the metric fails it), so the bootstrap loop has to walk past some questions."""
    def write(inp):
        if inp["question"] in failing:
            return {"long_answer": "no idea"}
        return {"long_answer": "Answers: " + inp["interpretations"]}

    return scripted_lm({"ClarifyFromPassages": titles_as_answers, "WriteLongAnswer": write},
                       **kwargs)


def _compile(retriever, train, threads, **kwargs):
    return compile_program(VanillaRAG(retriever, k=2), train, optimizer="bootstrap",
                           metric=dspy_metric("str-em"), k=2, threads=threads, **kwargs)


def _demos(program):
    return {name: [dict(d) for d in p.demos] for name, p in program.named_predictors()}


def _asked(lm) -> list[str]:
    """The question of each long-answer call, in the order the LM saw them."""
    return [inputs["question"] for key, inputs in lm.engine.calls if key == "WriteLongAnswer"]


def test_two_in_flight_keep_the_serial_traces_and_stop_at_the_same_question(
        use_lm, demo_retriever):
    train = load_dataset("demo:train")
    failing = {train[0].question, train[3].question, train[5].question}
    serial_lm = use_lm(_lm(failing))
    serial, serial_report = _compile(demo_retriever, train, threads=1)
    serial_asked = _asked(serial_lm)
    assert set(serial_asked) & failing  # the loop did walk past a failing question

    ahead_lm = use_lm(_lm(failing))
    ahead, ahead_report = _compile(demo_retriever, train, threads=2)
    assert _demos(ahead) == _demos(serial)
    # the demos are the bootstrapped traces (not the gold demos a trace-less run falls back to)
    kept = [d for demos in _demos(serial).values() for d in demos]
    assert kept and all(d.get("augmented") for d in kept)
    assert ahead_report.demos_per_predictor == serial_report.demos_per_predictor
    # every question the serial loop asked, plus at most one answered past where it stopped
    asked = _asked(ahead_lm)
    assert set(serial_asked) <= set(asked) and len(asked) == len(set(asked))
    assert len(asked) - len(serial_asked) <= 1
    assert ahead_report.cost["lm_calls"] <= serial_report.cost["lm_calls"] + 2


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_is_how_many_training_questions_are_in_flight(threads, use_lm, demo_retriever):
    lm = use_lm(_lm(delay_s=0.05))
    original = lm.engine.complete
    active, peak, lock = [0], [0], threading.Lock()

    def complete(request):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return original(request)
        finally:
            with lock:
                active[0] -= 1

    lm.engine.complete = complete
    _compile(demo_retriever, load_dataset("demo:train"), threads=threads)
    assert peak[0] == threads


@pytest.mark.parametrize("threads", [1, 2])
def test_the_teacher_never_shows_the_question_it_is_answering_as_a_demo(
        threads, use_lm, demo_retriever):
    """DSPy leaves out a demo equal to the training example, which a gold demo built from it
    never is; the teacher must still not see the gold answer of its own question."""
    lm = use_lm(_lm())
    # three training questions, two of them the teacher's gold demos: both get asked
    _compile(demo_retriever, load_dataset("demo:train")[:3], threads=threads)
    assert len(lm.history) >= 4
    for entry in lm.history:
        messages = entry["messages"]
        asked = parse_fields(messages[-1]["content"]).get("question", "")
        shown = [parse_fields(m["content"]).get("question", "") for m in messages[1:-1]
                 if m["role"] == "user"]
        assert asked and asked not in shown


def test_budget_stops_with_two_in_flight(use_lm, demo_retriever):
    lm = use_lm(_lm())
    _, report = _compile(demo_retriever, load_dataset("demo:train"), threads=2, budget=Budget(3))
    assert report.stopped_by_budget
    # two training questions (2 LM calls each) were in flight when the limit was reached
    assert 3 <= len(lm.engine.calls) <= 6


def test_threads_below_one_is_a_clear_error(use_lm, demo_retriever):
    use_lm(_lm())
    with pytest.raises(ConfigError, match="threads"):
        _compile(demo_retriever, load_dataset("demo:train"), threads=0)
