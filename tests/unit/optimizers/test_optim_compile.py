"""Recipes and teleprompters (labeled, bootstrap, bootstrap-rs, knn, mipro) with fake LMs."""

from __future__ import annotations

import functools
import inspect
import json
import math

import pytest

from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.errors import ConfigError
from ambiqa.evaluation.registry import dspy_metric
from ambiqa.optimizers.artifact import load_artifact, save_artifact
from ambiqa.optimizers.budget import Budget
from ambiqa.optimizers.compile import SafeMetric, compile_program, score_program
from ambiqa.optimizers.knn import KNNPredict
from ambiqa.optimizers.recipes import RECIPES, get_recipe, split_train, usable_examples
from ambiqa.programs.registry import PROGRAMS, build_program, program_class
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import HashEncoder as _HashEncoder
from ambiqa.testing import answer_words, scripted_lm, titles_as_answers, vanilla_rag_lm

# Deterministic bag-of-words unit vectors over answer-normalised tokens (no model needed).
HashEncoder = functools.partial(_HashEncoder, 64, tokenize=answer_words)


@pytest.fixture()
def demo_retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))




# ---- recipes ----------------------------------------------------------------------------------
def test_every_program_has_a_recipe_whose_knobs_the_program_accepts():
    assert set(RECIPES) == set(PROGRAMS)
    for name, recipe in RECIPES.items():
        # a program's settings are its config class's fields (ambiqa/programs/config.py)
        params = program_class(name).config_class.names()
        for knob in recipe.knobs:
            assert knob.name in params, (name, knob.name)
            values = knob.choices or (knob.low, knob.high)
            for v in values:
                build_program(name, **{knob.name: v})
        assert recipe.metric in {"d-f1", "f1"}
        assert recipe.train.split(":")[1].startswith("train")
    assert get_recipe("eor").train == "webq:train"  # NQ has no training split here
    assert get_recipe("diva").knobs[0].name == "top_k"
    with pytest.raises(ConfigError, match="did you mean"):
        get_recipe("divva")


def test_training_split_without_multi_answer_questions_is_a_clear_error(tmp_path):
    rows = [{"id": str(i), "question": f"q{i}?",
             "annotations": [{"type": "singleAnswer", "answer": ["a"]}]} for i in range(3)]
    path = tmp_path / "train.json"
    path.write_text(json.dumps(rows))
    examples = load_dataset(f"ambignq:{path}")
    with pytest.raises(ConfigError, match="multi-answer questions"):
        usable_examples(examples, get_recipe("diva"), "d-f1", "ambignq:train")
    # a short-answer recipe can use them
    assert len(usable_examples(examples, get_recipe("resp"), "f1")) == 3
    assert len(usable_examples(load_dataset("demo:train"), get_recipe("diva"), "d-f1")) == 10


def test_split_train_is_seeded_and_disjoint():
    data = list(range(9))
    a, b = split_train(data, seed=3)
    assert sorted(a + b) == data and len(b) == 3 and split_train(data, seed=3) == (a, b)
    with pytest.raises(ConfigError):
        split_train([1])


def test_nan_metric_scores_zero_and_is_counted(use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    metric = SafeMetric(lambda ex, pred, trace=None: float("nan"))
    result = score_program(VanillaRAG(demo_retriever, k=2), load_dataset("demo:dev")[:2], metric)
    assert result["score"] == 0.0 and result["nan_scores"] == 2
    assert not math.isnan(result["score"])


# ---- teleprompters ----------------------------------------------------------------------------
def test_bootstrap_rs_scores_candidates_on_held_out_part(use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    train = load_dataset("demo:train")[:6]
    compiled, report = compile_program(VanillaRAG(demo_retriever, k=2), train,
                                       optimizer="bootstrap-rs", metric=dspy_metric("str-em"),
                                       k=2, num_candidates=2)
    kinds = [c["kind"] for c in report.candidates]
    assert kinds == ["zero-shot", "labeled", "bootstrap", "bootstrap"]
    assert report.val_score == pytest.approx(max(c["score"] for c in report.candidates), abs=1e-6)
    assert report.settings["n_val"] == 2 and report.settings["n_train"] == 4
    assert all(n >= 0 for n in report.demos_per_predictor.values())


def test_budget_stops_bootstrap_cleanly(use_lm, demo_retriever):
    lm = use_lm(vanilla_rag_lm())
    budget = Budget(3)
    compiled, report = compile_program(VanillaRAG(demo_retriever, k=2),
                                       load_dataset("demo:train"), optimizer="bootstrap",
                                       metric=dspy_metric("str-em"), k=4, budget=budget)
    assert report.stopped_by_budget
    # one training question (2 LM calls) in flight when the limit was hit, no more
    assert 3 <= len(lm.engine.calls) <= 4
    assert report.demos_per_predictor["clarify.clarify"] >= 1


def test_budget_stops_random_search_keeping_best_so_far(use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    compiled, report = compile_program(VanillaRAG(demo_retriever, k=2),
                                       load_dataset("demo:train")[:6], optimizer="bootstrap-rs",
                                       metric=dspy_metric("str-em"), k=2, num_candidates=4,
                                       budget=Budget(6))
    assert report.stopped_by_budget
    assert 1 <= len(report.candidates) < 6
    assert report.cost["lm_calls"] <= 6 + 2


def test_knn_picks_nearest_demos_per_question_and_survives_an_artifact(
        tmp_path, use_lm, demo_retriever):
    lm = use_lm(vanilla_rag_lm())
    enc = HashEncoder()
    train = load_dataset("demo:train")
    compiled, report = compile_program(VanillaRAG(demo_retriever, k=2), train, optimizer="knn",
                                       metric=dspy_metric("str-em"), k=1, knn_pool=4,
                                       knn_encoder=enc)
    clarify = dict(compiled.named_predictors())["clarify.clarify"]
    assert isinstance(clarify, KNNPredict) and len(clarify.demos) > 1
    lm.engine.calls.clear()
    lm.history.clear()
    question = train[0].question
    compiled(question=question)
    sent = lm.history[0]["messages"]
    # one demo shown (k=1): system, demo user, demo assistant, request
    assert len(sent) == 4
    assert question in sent[1]["content"]  # the nearest demo is the question itself
    manifest = {"program": "vanilla_rag", "program_config": {"k": 2}, "ambiqa_version": "0",
                "lm": "scripted/fake", "retriever": {}, "metric": "str-em",
                "optimizer": {"name": "knn", "k": 1}, "created": "now"}
    path = save_artifact(tmp_path / "knn.json", compiled, manifest)
    loaded = load_artifact(path, retriever=demo_retriever, knn_encoder=enc)
    p = dict(loaded.named_predictors())["clarify.clarify"]
    assert isinstance(p, KNNPredict) and p.knn_k == 1 and len(p.demos) == len(clarify.demos)
    # the export shows the whole pool and says that a call shows only the nearest k
    from ambiqa.optimizers.export import export_prompts, render

    text = render(export_prompts(loaded), "md", manifest=manifest)
    assert (f"`ClarifyFromPassages` ({len(p.demos)} demos; each call shows the 1 nearest to "
            "its input)") in text


def test_knn_bootstrap_teacher_shows_k_gold_demos_not_the_whole_pool(use_lm, demo_retriever):
    """The pool size is how many traces to collect; the teacher that makes them shows k gold
    demos per call like any bootstrap. Showing the whole pool (8 long ASQA demos) overflowed
    the 1.5B's 4k context on every training question."""
    lm = use_lm(vanilla_rag_lm())
    compile_program(VanillaRAG(demo_retriever, k=2), load_dataset("demo:train"),
                    optimizer="knn", metric=dspy_metric("str-em"), k=1, knn_pool=4,
                    knn_encoder=HashEncoder())
    first = lm.history[0]["messages"]
    # system, one demo (user + assistant), the request
    assert len(first) == 4


def test_bootstrap_that_fails_on_every_example_is_a_clear_error(use_lm, demo_retriever):
    """DSPy's BootstrapFewShot re-raises after too many failed examples; the user gets an
    AmbiqaError naming the cause and what to change, not a traceback from inside DSPy."""
    from ambiqa.errors import ModelError

    overflow = RuntimeError("request (6115 tokens) exceeds the available context size (4096 "
                            "tokens)")
    use_lm(scripted_lm({"ClarifyFromPassages": overflow, "WriteLongAnswer": overflow}))
    with pytest.raises(ModelError, match="context") as info:
        compile_program(VanillaRAG(demo_retriever, k=2), load_dataset("demo:train"),
                        optimizer="bootstrap", metric=dspy_metric("str-em"), k=2)
    assert "--k" in (info.value.hint or "")


def test_knn_gold_only_pools_the_labelled_demos_without_an_lm_call(use_lm, demo_retriever):
    """ToC's set-up: exemplars are labelled training questions, picked by similarity; no
    bootstrap, so compiling costs no LM call even when a metric is given."""
    lm = use_lm(vanilla_rag_lm())
    train = load_dataset("demo:train")
    compiled, report = compile_program(VanillaRAG(demo_retriever, k=2), train, optimizer="knn",
                                       metric=dspy_metric("str-em"), k=1, knn_pool=50,
                                       knn_gold_only=True, knn_encoder=HashEncoder())
    assert lm.engine.calls == []
    assert report.settings["gold_only"] is True
    clarify = dict(compiled.named_predictors())["clarify.clarify"]
    assert isinstance(clarify, KNNPredict)
    gold_questions = {ex.question for ex in train if len(ex.qa_pairs) > 0}
    pooled = {d["question"] for d in clarify.demos}
    assert pooled and pooled <= gold_questions
    assert all(d.get("augmented") is not True for d in clarify.demos)  # no bootstrapped trace


def test_multi_predictor_program_gets_demos_per_predictor(use_lm):
    """Diva: typing, rewriting, verification, clarify and long answer each get their own."""
    from ambiqa.types import Passage

    passages = [Passage("p1", "Ron", "Rupert Grint played Ron."),
                Passage("p2", "Percy", "Chris Rankin played Percy.")]
    use_lm(scripted_lm({
        "TypeAmbiguity": {"ambiguity_type": "AmbSub", "reason": "which brother"},
        "PseudoInterpretations": lambda inp: {"interpretations": [inp["question"] + " (a)",
                                                                  inp["question"] + " (b)"]},
        "VerifyRetrieval": {"evidence": "none", "verdict": "yes"},
        "ClarifyFromPassages": titles_as_answers,
        "WriteLongAnswer": lambda inp: {"long_answer": "Ron Percy " + inp["interpretations"]},
        "ClosedBookLongAnswer": {"long_answer": "unknown"},
    }))
    program = build_program("diva", retriever=InMemoryRetriever(passages), top_k=2,
                            encoder=HashEncoder())
    train = load_dataset("demo:train")[:3]
    compiled, report = compile_program(program, train, optimizer="bootstrap",
                                       metric=lambda ex, pred, trace=None: 1.0, k=1)
    demos = report.demos_per_predictor
    for name in ("infer.type_ambiguity", "infer.pseudo_interpretations", "verify",
                 "clarify.clarify", "long_answer.write"):
        assert demos[name] >= 1, (name, demos)


def test_mipro_runs_with_small_settings_on_a_fake_endpoint(use_lm, demo_retriever):
    import dspy

    from ambiqa.testing_server import serve

    url, shutdown = serve(delay=0.0)
    try:
        lm = dspy.LM("openai/fake", api_base=url, api_key="not-needed", cache=False,
                     num_retries=0)
        use_lm(lm)
        compiled, report = compile_program(
            VanillaRAG(demo_retriever, k=2), load_dataset("demo:train")[:4], optimizer="mipro",
            metric=lambda ex, pred, trace=None: 1.0, k=1, num_candidates=2, mipro_trials=2)
    finally:
        shutdown()
    assert report.settings["num_trials"] == 2 and report.cost["lm_calls"] > 0
    assert [p.signature.__name__ for _, p in compiled.named_predictors()] == [
        "ClarifyFromPassages", "WriteLongAnswer"]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_program_compiles_with_bootstrap_on_a_fake_endpoint(name, use_lm, demo_retriever):
    """Each program compiles (demos for every predictor that ran) and still answers."""
    import dspy

    from ambiqa.testing_server import serve

    cls = program_class(name)
    kwargs = {"encoder": HashEncoder()} if "encoder" in inspect.signature(
        cls.__init__).parameters else {}
    program = build_program(name, retriever=demo_retriever if cls.needs_retriever else None,
                            **kwargs)
    url, shutdown = serve(delay=0.0)
    try:
        use_lm(dspy.LM("openai/fake", api_base=url, api_key="x", cache=False, num_retries=0))
        compiled, report = compile_program(program, load_dataset("demo:train")[:2],
                                           optimizer="bootstrap", k=1,
                                           metric=lambda ex, pred, trace=None: 1.0)
        pred = compiled(question="Who wrote Little Women?")
    finally:
        shutdown()
    assert report.cost["lm_calls"] > 0 and any(report.demos_per_predictor.values())
    assert isinstance(pred.answer, str)


def test_verdict_reads_get_labeled_demos_that_answer_or_abstain():
    import dspy

    from ambiqa.optimizers.demos import interpret_demo, labeled_demos

    def example(text: str) -> dspy.Example:
        return dspy.Example(
            question="Who played Fred Weasley?",
            qa_pairs=[{"question": "Who played Fred in the films?",
                       "short_answers": ["James Phelps"]},
                      {"question": "Who voiced Fred in the games?", "short_answers": ["X Y"]}],
            gold_passages=[{"title": "Fred Weasley", "text": text}]).with_inputs("question")

    states = interpret_demo(example("Fred was played by James Phelps in all eight films."))
    assert (states.abstain, states.interpretation, states.answer) == (
        False, "Who played Fred in the films?", "James Phelps")
    assert "James Phelps in all eight films" in states.passage
    assert set(states.inputs().keys()) == {"question", "passage"}
    # on topic, but it answers no reading: the paper's "cannot answer" passage
    silent = interpret_demo(example("Fred Weasley is a wizard and a twin."))
    assert (silent.abstain, silent.interpretation, silent.answer) == (True, "none", "none")
    assert interpret_demo(dspy.Example(question="q?", qa_pairs=[], gold_passages=[])) is None
    assert "InterpretFromPassage" in labeled_demos([example("James Phelps")])
