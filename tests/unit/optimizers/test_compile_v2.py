"""Issue 34: predictor signals, ambiguity feedback, GEPA and SIMBA, the coverage-aware metric.

All with the scripted fake LM and in-memory retrievers (no model)."""

from __future__ import annotations

import functools
import threading

import dspy
import pytest

from ambiqa.data import load_dataset
from ambiqa.evaluation.registry import dspy_metric, get_metric
from ambiqa.optimizers.artifact import load_artifact, read_artifact, save_artifact
from ambiqa.optimizers.budget import Budget
from ambiqa.optimizers.compile import compile_program
from ambiqa.optimizers.export import export_prompts, render
from ambiqa.optimizers.feedback import AmbiguityFeedback, diagnose
from ambiqa.optimizers.signals import (
    accuracy_from_rows,
    collect_traces,
    coverage,
    is_gold_answer,
    judge_call,
    relabel,
)
from ambiqa.programs.registry import build_program
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import HashEncoder as _HashEncoder
from ambiqa.testing import ScriptedEngine, answer_words, scripted_lm, titles_as_answers
from ambiqa.types import Passage

HashEncoder = functools.partial(_HashEncoder, 64, tokenize=answer_words)

EX = dspy.Example(question="When was Little Women released?",
                  qa_pairs=[{"question": "When was the Hepburn film released?",
                             "short_answers": ["1933"]},
                            {"question": "When was the Gerwig film released?",
                             "short_answers": ["2019"]}]).with_inputs("question")
PASSAGES = [Passage("p1", "Little Women (1933 film)", "Little Women is a 1933 film with "
                    "Katharine Hepburn."),
            Passage("p2", "Bananas", "Bananas are yellow fruit grown in the tropics.")]


# ---- signals --------------------------------------------------------------------------------
def test_each_signal_judges_its_predictor_from_gold_data():
    yes = judge_call("VerifyRetrieval", {"passages": "[1] a 1933 film", "interpretation": "q"},
                     {"verdict": "no"}, EX)
    assert (yes.expected, yes.predicted, yes.correct) == ("yes", "no", False)
    no = judge_call("VerifyRetrieval", {"passages": "[1] 19333 bananas"}, {"verdict": "No."}, EX)
    assert (no.expected, no.correct) == ("no", True)  # whole words: 19333 is not 1933
    node = judge_call("SelfVerify", {"answer": "the 2019 film"}, {"valid": False}, EX)
    assert (node.expected, node.predicted) == ("yes", "no")
    read = judge_call("InterpretFromPassage", {"passage": "Bananas are yellow."},
                      {"abstain": False, "interpretation": "q?", "answer": "x"}, EX)
    assert (read.expected, read.predicted) == ("abstain", "interpretation")
    pred = dspy.Prediction(interpretations=[{"question": "a", "answer": "1933"}])
    typed = judge_call("TypeAmbiguity", {"question": "q"}, {"ambiguity_type": "AmbSub"}, EX,
                       pred)
    assert typed.score == 0.5 and typed.correct and typed.predicted == "AmbSub"
    # clarify and the writer have signals now (issue 46); closed book still has none
    assert judge_call("ClarifyFromPassages", {}, {}, EX).score == 0.0
    assert judge_call("ClosedBookLongAnswer", {}, {}, EX) is None
    assert is_gold_answer("1933", EX) and not is_gold_answer("1934", EX)
    assert coverage(["2019", "1933", "x"], EX) == 1.0


def test_relabel_gives_the_class_the_signal_asks_for():
    inputs = {"passages": "[1] Little Women: a 1933 film.\n[2] other", "interpretation": "q"}
    fixed = relabel("VerifyRetrieval", inputs, {"evidence": "none", "verdict": "no"}, EX, "yes")
    assert fixed == {"evidence": "[1] Little Women: a 1933 film.", "verdict": "yes"}
    read = relabel("InterpretFromPassage", {"passage": "a 2019 film"},
                   {"abstain": True, "interpretation": "none", "answer": "none"}, EX,
                   "interpretation")
    assert read == {"abstain": False, "interpretation": "When was the Gerwig film released?",
                    "answer": "2019"}


class _PromptedEngine(ScriptedEngine):
    """The scripted engine, keeping each call's system prompt where this thread's handler
    reads it: a handler can answer by the instructions it was actually given."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.local = threading.local()
        self.prompts: list[str] = []

    def complete(self, request):
        system = request.system if isinstance(request.system, str) else "".join(
            getattr(p, "text", "") or "" for p in (request.system or ()))
        self.local.prompt = " ".join((system + "\n" + (request.messages[0].text or "")).split())
        self.prompts.append(self.local.prompt)
        return super().complete(request)


#: the one instruction the scripted writer obeys: with it in its prompt, it names every reading
NAME_EVERY_READING = "Name every reading, one sentence each, each with its own answer."
#: what a proposal that changes nothing appends (the control)
BE_BRIEF = "Be brief: one short sentence."


def _diva_lm(verdict: str = "yes", instruction: str = NAME_EVERY_READING):
    """Diva's scripted LM. Its writer answers well ("Every reading named.") only when the
    prompt it is given holds ``instruction``, word for word: what a GEPA test adopts must be
    what changes the output, not the mere fact that a reflection happened."""
    def long_answer(inp):
        text = "Answers: " + inp["interpretations"]
        if instruction in engine.local.prompt:
            text += " Every reading named."
        return {"long_answer": text}

    engine = _PromptedEngine({
        "TypeAmbiguity": {"ambiguity_type": "AmbSub", "reason": "which film"},
        "PseudoInterpretations": lambda inp: {"interpretations": [inp["question"] + " (a)",
                                                                  inp["question"] + " (b)"]},
        "VerifyRetrieval": {"evidence": "none", "verdict": verdict},
        "ClarifyFromPassages": titles_as_answers,
        "WriteLongAnswer": long_answer,
        "ClosedBookLongAnswer": {"long_answer": "unknown"},
    })
    return dspy.LM("scripted/fake", engine=engine, cache=False, num_retries=0)


def _diva(passages=PASSAGES):
    return build_program("diva", retriever=InMemoryRetriever(passages), top_k=2, k_per_query=2,
                         encoder=HashEncoder())


def test_predictor_signal_gives_the_verifier_a_yes_and_a_no(use_lm):
    """The verifier always says yes (the bootstrap failure of issue 34); its signal demos
    still show one yes (a right call) and one no (a call relabelled by the signal)."""
    use_lm(_diva_lm("yes"))
    train = load_dataset("demo:train")[:4]
    compiled, report = compile_program(_diva(), train, optimizer="bootstrap",
                                       metric=dspy_metric("str-em"), k=2,
                                       predictor_signal=True)
    info = report.settings["predictor_signal"]
    verify = dict(compiled.named_predictors())["verify"]
    assert [d["verdict"] for d in verify.demos] == ["yes", "no"]
    assert info["demos"]["verify"]["classes"] == ["yes", "no"]
    assert info["demos"]["verify"]["relabeled"] == 1
    assert verify.demos[1]["evidence"] == "none"
    # only question 0 (Little Women) kept a passage holding a gold answer
    before = info["train_accuracy_before"]["verify"]
    assert before["by_expected"]["no"] == {"n": 6, "right": 0}
    assert info["runs"] == 4


def test_signal_pass_answers_training_questions_at_once_with_the_same_records(use_lm):
    """``threads=2`` runs the traced pass two questions at a time (the embedded LM has two
    slots): each question keeps its own trace, records come back in the questions' order, and
    the signal demos chosen from them are the one-thread ones. Diva verifies a question's
    readings at once, so those calls finish in any order: the record puts them in a fixed
    one, or the same pass could choose two different verifier demo sets."""
    use_lm(_diva_lm("yes"))
    train = load_dataset("demo:train")[:4]

    def steps(records):
        return [(r.example.question, r.score, [(s.predictor, s.inputs, s.outputs)
                                              for s in r.steps]) for r in records]

    said: list[str] = []
    one = collect_traces(_diva(), train, dspy_metric("str-em"))
    two = collect_traces(_diva(), train, dspy_metric("str-em"), threads=2, say=said.append)
    assert steps(two) == steps(one) and len(one) == 4
    # a line per traced question, counted across both threads
    assert sorted(line.split()[2] for line in said) == ["1/4", "2/4", "3/4", "4/4"]
    assert all(len({s.predictor for s in r.steps}) >= 4 for r in two)  # no trace mixed or lost
    demos = []
    for threads in (1, 2):
        compiled, _ = compile_program(_diva(), train, optimizer="none",
                                      metric=dspy_metric("str-em"), k=2, threads=threads,
                                      demos="verify=signal:2,writer=signal:1")
        demos.append({n: [dict(d) for d in p.demos] for n, p in compiled.named_predictors()})
    assert demos[0] == demos[1] and demos[0]["verify"]


def test_a_trace_orders_each_predictors_calls_however_they_interleave():
    """Two predictors called at once interleave in finishing order; each one's calls come out
    in one order, in the positions that predictor's calls held."""
    from ambiqa.optimizers.signals import Step, _canonical

    def step(name: str, x: str) -> Step:
        return Step(name, name.upper(), {"q": x}, {"a": x})

    one = [step("verify", "b"), step("read", "y"), step("verify", "a"), step("read", "x")]
    two = [step("verify", "a"), step("read", "x"), step("verify", "b"), step("read", "y")]
    assert _canonical(one) == _canonical(two)
    assert [(s.predictor, s.inputs["q"]) for s in _canonical(one)] == [
        ("verify", "a"), ("read", "x"), ("verify", "b"), ("read", "y")]


def test_accuracy_from_stored_rows_per_predictor():
    rows = [{"id": "1", "prediction": {
        "passages": [{"id": "p1", "text": "a 1933 film"}], "path": "rag", "verdict": "Useful",
        "votes": [{"supported": True}, {"supported": False}, {"supported": None}],
        "interpretations": [{"question": "q", "answer": "1933"}], "ambiguity_type": "AmbSub",
        "pseudo_interpretations": ["a"]}},
        {"id": "2", "prediction": {"tree": [
            {"id": 0, "parent": None}, {"id": 1, "parent": 0, "answer": "2019", "valid": True},
            {"id": 2, "parent": 0, "answer": "1999", "valid": True}],
            "passages": []}},
        {"id": "3", "error": "boom", "prediction": None}]
    acc = accuracy_from_rows(rows, {"1": EX, "2": EX, "3": EX})
    assert acc["verify"]["n"] == 3 and acc["verify"]["accuracy"] == pytest.approx(1 / 3, abs=1e-4)
    assert acc["verify.path"]["accuracy"] == 1.0
    assert acc["self_verify"]["by_expected"] == {"yes": {"n": 1, "right": 1},
                                                 "no": {"n": 1, "right": 0}}
    assert acc["infer.type_ambiguity"]["mean_coverage"] == 0.5
    assert acc["_rows"]["skipped"] == 1


# ---- feedback -------------------------------------------------------------------------------
def test_feedback_names_the_step_that_lost_each_reading():
    ex = dspy.Example(question="q", qa_pairs=[
        {"question": f"{q}?", "short_answers": [a]}
        for q, a in zip("ABCDE", ("alpha", "beta", "gamma", "delta", "epsilon"), strict=True)])
    pred = dspy.Prediction(
        answer="It is alpha.", path="rag",
        passages=[{"id": "1", "text": "alpha beta gamma"}, {"id": "2", "text": "delta here"}],
        interpretations=[{"question": "A?", "answer": "alpha"}, {"question": "B?",
                                                                 "answer": "beta"}],
        tree=[{"id": 0, "parent": None}, {"id": 1, "parent": 0, "answer": "gamma",
                                          "pruned": True}])
    lost = {d.answer: d.lost_at for d in diagnose(ex, pred)}
    assert lost == {"alpha": None, "beta": "generation", "gamma": "verification",
                    "delta": "clarification", "epsilon": "retrieval"}
    metric = AmbiguityFeedback(dspy_metric("str-em"))
    out = metric(ex, pred)
    assert out.score == pytest.approx(0.2)
    assert "lost at retrieval" in out.feedback and '"B?" -> "beta"' in out.feedback
    verifier = dspy.Predict("passages, interpretation -> evidence, verdict")
    verifier.signature.__name__ = "VerifyRetrieval"
    out = metric(ex, pred, None, "verify",
                 [(verifier, {"passages": "delta here", "interpretation": "D?"},
                   dspy.Prediction(evidence="none", verdict="no"))])
    assert "the verdict should be yes; it gave no (wrong)" in out.feedback
    assert metric(ex, None).score == 0.0


def test_coverage_aware_metric_is_the_mean_of_d_f1_and_str_em():
    class Reader:
        name = "fake"

        def answer(self, question, context):
            return "alpha"

    ex = {"qa_pairs": [{"question": "A?", "short_answers": ["alpha"]},
                       {"question": "B?", "short_answers": ["beta"]}]}
    pred = {"answer": "alpha and beta"}
    assert get_metric("d-f1-cov")(ex, pred, Reader()) == pytest.approx(0.5 * (0.5 + 1.0))
    # the reader-free objective: the mean of STR-EM and ROUGE-L, no reader asked
    ex["long_answers"] = ["The answers are alpha, for A, and gamma, for B."]
    str_em, rouge = get_metric("str-em")(ex, pred), get_metric("rouge-l")(ex, pred)
    assert str_em == 1.0 and 0 < rouge < 1
    assert get_metric("str-rouge")(ex, pred) == pytest.approx(0.5 * (str_em + rouge))


# ---- GEPA and SIMBA -------------------------------------------------------------------------
def _reflection_lm(state: dict, proposal: str = NAME_EVERY_READING):
    """A reflection LM that appends ``proposal`` to whatever instruction it is shown."""
    def propose(inputs):
        state["calls"] = state.get("calls", 0) + 1
        return {"new_instruction": inputs["current_instruction"] + " " + proposal}

    return scripted_lm({}, default=propose)


def _writer(program):
    return dict(program.named_predictors())["long_answer.write"]


def _adopt(program, instruction: str):
    """``program`` with ``instruction`` appended to its writer's, as an optimizer adopts it."""
    out = program.deepcopy()
    writer = _writer(out)
    writer.signature = writer.signature.with_instructions(
        writer.signature.instructions + " " + instruction)
    return out


def _check_artifact(tmp_path, compiled, name, retriever):
    manifest = {"program": "diva", "program_config": {"top_k": 2, "k_per_query": 2},
                "ambiqa_version": "0", "lm": "scripted/fake", "retriever": {},
                "metric": "str-em", "optimizer": {"name": name}, "created": "now"}
    path = save_artifact(tmp_path / f"{name}.json", compiled, manifest)
    assert read_artifact(path)["manifest"]["optimizer"]["name"] == name
    loaded = load_artifact(path, retriever=retriever, program_kwargs={"encoder": HashEncoder()})
    assert [p.signature.__name__ for _, p in loaded.named_predictors()] == [
        p.signature.__name__ for _, p in compiled.named_predictors()]
    assert [p.signature.instructions for _, p in loaded.named_predictors()] == [
        p.signature.instructions for _, p in compiled.named_predictors()]
    text = render(export_prompts(loaded), "md", manifest=manifest)
    assert "VerifyRetrieval" in text
    answer = loaded(question="When was the film Little Women released?").answer
    assert isinstance(answer, str) and answer
    return loaded, text


def test_gepa_compiles_diva_with_feedback_then_loads_exports_and_answers(tmp_path, use_lm):
    state: dict = {}
    lm = use_lm(_diva_lm("yes"))
    retriever = InMemoryRetriever(PASSAGES)
    train = load_dataset("demo:train")[:6]
    budget = Budget(None)
    question = "When was the film Little Women released?"

    def named(example, pred, trace=None):  # the scripted writer obeys NAME_EVERY_READING
        return float("Every reading named." in pred.answer)

    assert "Every reading named." not in _diva()(question=question).answer  # before: no
    compiled, report = compile_program(_diva(), train, optimizer="gepa",
                                       metric=named, budget=budget,
                                       reflection_lm=_reflection_lm(state), gepa_rollouts=30,
                                       reflection_minibatch=2)
    assert state.get("calls", 0) >= 1  # the reflection LM proposed instructions
    # the writer adopted the proposed instruction, and that is what changed its output
    assert _writer(compiled).signature.instructions.endswith(NAME_EVERY_READING)
    assert report.settings["n_val"] == 2 and report.settings["rollouts"] == 30
    assert report.settings["best_val_score"] > report.settings["seed_val_score"]
    assert report.cost["lm_calls"] > 0 and budget.spent > 0
    assert "Every reading named." in compiled(question=question).answer
    assert NAME_EVERY_READING in lm.engine.prompts[-1]  # the writer's prompt carried it
    loaded, text = _check_artifact(tmp_path, compiled, "gepa", retriever)
    assert NAME_EVERY_READING in text
    assert "Every reading named." in loaded(question=question).answer


def test_gepa_adopts_nothing_when_the_proposed_instruction_changes_nothing(use_lm):
    """The control: the reflection proposes a different instruction. The scripted writer
    ignores it, so no candidate scores better and GEPA keeps the seed instructions; and the
    different instruction, adopted by hand, leaves the output as it was, while the right one,
    adopted the same way, improves it."""
    state: dict = {}
    lm = use_lm(_diva_lm("yes"))
    question = "When was the film Little Women released?"

    def named(example, pred, trace=None):
        return float("Every reading named." in pred.answer)

    seed = _diva()
    compiled, report = compile_program(seed, load_dataset("demo:train")[:6], optimizer="gepa",
                                       metric=named, budget=Budget(None),
                                       reflection_lm=_reflection_lm(state, BE_BRIEF),
                                       gepa_rollouts=30, reflection_minibatch=2)
    assert state.get("calls", 0) >= 1  # reflection happened ...
    assert any(BE_BRIEF in p for p in lm.engine.prompts)  # ... and its proposal was tried
    assert report.settings["best_val_score"] == report.settings["seed_val_score"] == 0
    assert [p.signature.instructions for _, p in compiled.named_predictors()] == [
        p.signature.instructions for _, p in seed.named_predictors()]
    assert "Every reading named." not in compiled(question=question).answer

    brief = _adopt(_diva(), BE_BRIEF)
    answer = brief(question=question).answer
    assert BE_BRIEF in lm.engine.prompts[-1] and "Every reading named." not in answer
    assert "Every reading named." in _adopt(_diva(), NAME_EVERY_READING)(question=question).answer


def test_gepa_stops_at_the_lm_call_budget(use_lm):
    state: dict = {}
    lm = use_lm(_diva_lm("yes"))
    budget = Budget(25)
    compiled, report = compile_program(_diva(), load_dataset("demo:train")[:6],
                                       optimizer="gepa", metric=dspy_metric("str-em"),
                                       budget=budget, reflection_lm=_reflection_lm(state),
                                       gepa_rollouts=200, gepa_selector="all")
    assert report.stopped_by_budget
    # one Diva run is up to 7 calls; the guard stops every call after the budget
    assert len(lm.engine.calls) + state.get("calls", 0) <= 25 + 7
    assert isinstance(compiled(question="Who sang I Will Always Love You?").answer, str)


def test_simba_compiles_diva_then_loads_exports_and_answers(tmp_path, use_lm):
    use_lm(_diva_lm("yes"))
    retriever = InMemoryRetriever(PASSAGES)
    train = load_dataset("demo:train")[:4]
    budget = Budget(None)
    compiled, report = compile_program(_diva(), train, optimizer="simba",
                                       metric=dspy_metric("str-em"), budget=budget, k=1,
                                       num_candidates=2, simba_steps=1, simba_bsize=2)
    assert report.settings["bsize"] == 2 and report.settings["max_steps"] == 1
    assert budget.spent > 0 and report.cost["lm_calls"] == budget.spent
    assert all(p.lm is None for _, p in compiled.named_predictors())
    _check_artifact(tmp_path, compiled, "simba", retriever)


def test_simba_stops_at_the_lm_call_budget(use_lm):
    lm = use_lm(_diva_lm("yes"))
    original = dspy.Predict.__dict__["__call__"]
    compiled, report = compile_program(_diva(), load_dataset("demo:train")[:4],
                                       optimizer="simba", metric=dspy_metric("str-em"),
                                       budget=Budget(10), k=1, num_candidates=2,
                                       simba_steps=3, simba_bsize=2)
    assert report.stopped_by_budget
    assert len(lm.engine.calls) <= 10 + 7
    assert dspy.Predict.__dict__["__call__"] is original  # the budget guard is gone


# ---- Optuna: ambiguity knobs jointly with signal demos --------------------------------------
def test_tune_searches_ambiguity_knobs_with_signal_demos(tmp_path, use_lm):
    from ambiqa.optimizers.tune import TuneConfig, tune

    use_lm(_diva_lm("yes"))
    out = tmp_path / "best.json"
    cfg = TuneConfig(program="diva", study="sig", storage=f"sqlite:///{tmp_path}/t.db",
                     trials=3, train="demo:train", metric="str-em", max_demos=2, n_sets=2,
                     pool_size=4, teleprompters=("signal", "bootstrap"), cost_penalty=0.01)
    res = tune(cfg, load_dataset("demo:train")[:6], dspy_metric("str-em"),
               retriever=InMemoryRetriever(PASSAGES), out=out)
    import optuna

    study = optuna.load_study(study_name="sig", storage=f"sqlite:///{tmp_path}/t.db")
    pools = study.user_attrs["pools"]
    assert [d["verdict"] for d in pools["signal"]["verify"]][:2] == ["yes", "no"]
    assert "clarify.clarify" not in pools["signal"]  # no signal of its own
    params = [t.params for t in study.trials]
    assert all({"program.top_k", "program.k_per_query", "program.max_interpretations"}
               <= set(p) for p in params)
    assert res.n_complete == 3 and res.artifact == str(out)
    m = read_artifact(out)["manifest"]
    assert m["optimizer"]["name"] in {"signal", "bootstrap"}
    # the objective is the held-out score minus the cost penalty per LM call
    best = study.best_trial
    assert best.value == pytest.approx(best.user_attrs["score"]
                                       - 0.01 * best.user_attrs["lm_calls_per_q"])


@pytest.mark.parametrize("optimizer, extra", [
    ("gepa", ["--gepa-rollouts", "8", "--reflection-minibatch", "1"]),
    ("simba", ["--simba-steps", "1", "--simba-bsize", "2", "--num-candidates", "2"]),
])
def test_cli_compiles_diva_with_gepa_and_simba_on_a_fake_endpoint(optimizer, extra, tmp_path,
                                                                  capsys, monkeypatch):
    """``ambiqa compile diva --optimizer gepa|simba`` end to end over an OpenAI-compatible
    endpoint (the fake server writes well-formed replies for any signature), then export and
    answer from the artifact."""
    from ambiqa.cli import main
    from ambiqa.data import demo_corpus_path
    from ambiqa.testing_server import serve

    root = str(tmp_path / "idx")
    monkeypatch.setenv("AMBIQA_INDEX_ROOT", root)  # where the artifact's index is opened
    assert main(["index", str(demo_corpus_path()), "--name", "demo", "--kind", "bm25",
                 "--index-root", root]) == 0
    url, shutdown = serve(delay=0.0)
    lm = ["--lm", "openai/fake", "--api-base", url, "--no-cache"]
    out = tmp_path / f"diva-{optimizer}.json"
    try:
        rc = main(["compile", "diva", "--optimizer", optimizer, "--train", "demo:train:4",
                   "--metric", "str-em", "--index", "bm25:demo", "--index-root", root,
                   "--max-lm-calls", "200", "--out", str(out), *extra, *lm])
        assert rc == 0, capsys.readouterr().err
        doc = read_artifact(out)
        assert doc["manifest"]["optimizer"]["name"] == optimizer
        assert main(["export", str(out), "--format", "md"]) == 0
        assert "VerifyRetrieval" in capsys.readouterr().out
        assert main(["ask", "Who sang Hallelujah?", "--artifact", str(out), *lm]) == 0
    finally:
        shutdown()
