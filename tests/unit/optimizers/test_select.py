"""A compile that chooses: per-predictor demo plans, the validation-split choice against
zero-shot (refusing a worse candidate), cheap downstream candidates, the optimizer registry,
and the clarify / writer signals -- all with the scripted LM, so every call is counted."""

from __future__ import annotations

import dspy
import pytest

import ambiqa
from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.errors import ConfigError
from ambiqa.evaluation.registry import dspy_metric
from ambiqa.optimizers.artifact import load_artifact, read_artifact
from ambiqa.optimizers.compile import compile_program
from ambiqa.optimizers.demo_plan import DemoSource, apply_plan, match_predictor, parse_plan
from ambiqa.optimizers.export import provenance
from ambiqa.optimizers.recipes import check_teleprompter
from ambiqa.optimizers.registry import (
    Teleprompter,
    get_teleprompter,
    register_teleprompter,
    teleprompter_names,
)
from ambiqa.optimizers.signals import clarify_score, given_answers, restates, writer_score
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import ScriptedEngine, titles_as_answers


class TurnEngine(ScriptedEngine):
    """A scripted engine that also tells its handlers whether the prompt carried demos (a
    prompt with demos has more than one user turn)."""

    with_demos = False

    def complete(self, request):
        self.with_demos = len(request.messages) > 1
        return super().complete(request)


def writer_lm(use_lm, *, demos_help: bool):
    """VanillaRAG's LM: clarify by titles; the writer states the readings when it has demos
    (``demos_help``) or when it has none (not ``demos_help``), else writes nothing useful."""
    engine = TurnEngine({
        "ClarifyFromPassages": titles_as_answers,
        "WriteLongAnswer": lambda inp: {"long_answer": (
            "Answers: " + inp["interpretations"] if engine.with_demos == demos_help
            else "I cannot say.")},
    })
    use_lm(dspy.LM("scripted/fake", engine=engine, cache=False, num_retries=0))
    return engine


@pytest.fixture()
def rag():
    return VanillaRAG(InMemoryRetriever(load_corpus(demo_corpus_path())), k=2)


def _compile(program, **kw):
    kw.setdefault("optimizer", "labeled")
    return compile_program(program, load_dataset("demo:train"), metric=dspy_metric("str-em"),
                           k=2, metric_name="str-em", **kw)


def _rows(report):
    return {r["label"]: r for r in report.settings["selection"]["candidates"]}


# ---- the choice -------------------------------------------------------------------------------
def test_compile_refuses_a_worse_candidate_and_ships_zero_shot(use_lm, rag):
    writer_lm(use_lm, demos_help=False)  # gold writer demos make this writer worse
    lines: list[str] = []
    compiled, report = _compile(rag, select=True, say=lines.append)
    sel = report.settings["selection"]
    rows = _rows(report)
    assert sel["n_val"] == 3 and sel["shipped"] == "zero-shot"
    assert sel["reason"].startswith("no candidate beat zero-shot on 3 validation questions")
    assert rows["labeled"]["mean"] < rows["zero-shot"]["mean"]
    assert rows["labeled"]["interval_vs_zero_shot"][1] <= 0
    assert all(not p.demos for _, p in compiled.named_predictors())
    # a line as each candidate starts and ends, so a long choice does not look hung
    n = len(sel["candidates"])
    assert lines[0] == f"candidate 1/{n} zero-shot: scoring on 3 validation questions ..."
    assert lines[1].startswith(f"candidate 1/{n} zero-shot: str-em ") and "LM calls" in lines[1]
    assert f"candidate 2/{n} input: the same program as zero-shot, not scored again" in lines
    # forced, the teleprompter's result ships and the comparison is still recorded
    forced, report = _compile(rag, select=True, force=True)
    assert report.settings["selection"]["shipped"] == "labeled"
    assert report.settings["selection"]["forced"] is True
    assert dict(forced.named_predictors())["long_answer.write"].demos
    # or any candidate by its label; a label no candidate has is refused before any scoring
    named, report = _compile(rag, select=True, force="labeled+writer=none")
    assert report.settings["selection"]["shipped"] == "labeled+writer=none"
    assert not dict(named.named_predictors())["long_answer.write"].demos
    assert dict(named.named_predictors())["clarify.clarify"].demos
    with pytest.raises(ConfigError, match="no candidate has that label") as err:
        _compile(rag, select=True, force="labeled+writer=gold:7")
    assert "labeled+writer=gold:1" in err.value.hint


def test_compile_ships_a_better_candidate_with_its_paired_interval(use_lm, rag):
    writer_lm(use_lm, demos_help=True)
    compiled, report = _compile(rag, select=True)
    sel = report.settings["selection"]
    assert sel["shipped"] in ("labeled", "labeled+writer=gold:1")
    shipped = _rows(report)[sel["shipped"]]
    assert shipped["mean"] > _rows(report)["zero-shot"]["mean"]
    assert shipped["interval_vs_zero_shot"] is not None
    assert report.val_score == shipped["mean"]
    assert dict(compiled.named_predictors())["long_answer.write"].demos


class _Scored(dspy.Module):
    """A candidate whose per-question D-F1 and ROUGE-L are given: question i -> (d[i], r[i]).
    Its one predictor is never called; its instructions only make its state its own."""

    def __init__(self, label: str, d: list[float], r: list[float]) -> None:
        super().__init__()
        self.p = dspy.Predict(dspy.Signature("question -> answer", label))
        self.values = {f"q{i}": (d[i], r[i]) for i in range(len(d))}

    def forward(self, question: str) -> dspy.Prediction:
        d, r = self.values[question]
        return dspy.Prediction(answer=question, d=d, r=r)


def test_a_set_level_objective_ranks_candidates_by_its_statistic_over_the_set():
    """DR is sqrt(mean D-F1 × mean ROUGE-L) over the set. A candidate strong on D-F1 where
    it is weak on ROUGE-L and the other way round has per-question roots of 0 but set-level DR
    0.5: ranked by DR it beats a zero-shot program at 0.3 everywhere; ranked by the mean of
    per-question roots it loses. The choice ranks by the statistic the targets are stated in."""
    import math

    from ambiqa.optimizers.select import Candidate, choose

    valset = [dspy.Example(id=f"q{i}", question=f"q{i}").with_inputs("question")
              for i in range(6)]
    zero = _Scored("zero", [0.3] * 6, [0.3] * 6)
    split = _Scored("split", [1, 0] * 3, [0, 1] * 3)
    cands = [Candidate("zero-shot", zero), Candidate("split", split)]
    per_question = lambda ex, pred, trace=None: math.sqrt(pred.d * pred.r)  # noqa: E731
    parts = (lambda ex, pred, trace=None: pred.d, lambda ex, pred, trace=None: pred.r)
    shipped, sel = choose(cands, valset, per_question, metric_name="dr", preferred="split",
                          parts=parts)
    rows = {r["label"]: r for r in sel.rows}
    assert sel.shipped == "split" and shipped is split
    assert rows["split"]["mean"] == pytest.approx(0.5)
    assert rows["zero-shot"]["mean"] == pytest.approx(0.3)
    assert rows["split"]["scores"] == [0.0] * 6  # each question's own root, kept for reading
    assert sel.to_dict()["statistic"] == "dr over the set, from its parts"
    assert "parts" not in sel.to_dict()["candidates"][0]
    from ambiqa.optimizers.export import choice_lines

    assert choice_lines({"selection": sel.to_dict()})[0].startswith(
        "- chosen on the validation split (scored as dr over the set, from its parts): ")
    # without the parts the mean of per-question roots decides, and zero-shot ships
    _, by_mean = choose(cands, valset, per_question, metric_name="dr", preferred="split")
    assert by_mean.shipped == "zero-shot"
    assert by_mean.to_dict()["statistic"] == "mean over the questions"


def test_a_dr_compile_records_dr_over_the_set_whatever_label_it_was_given(use_lm, rag):
    """compile_program takes the statistic from the metric it was given (``dspy_metric``'s
    parts and name), so a caller's label cannot make DR score as the mean of D-F1."""
    class Reader:
        name = "whole"

        def answer(self, question: str, context: str) -> str:
            return context

    writer_lm(use_lm, demos_help=True)
    _, report = compile_program(rag, load_dataset("demo:train"), optimizer="labeled",
                                metric=dspy_metric("dr", reader=Reader()), k=2, select=True,
                                metric_name="objective")
    sel = report.settings["selection"]
    assert sel["statistic"] == "dr over the set, from its parts"
    zero = next(r for r in sel["candidates"] if r["label"] == "zero-shot")
    assert 0.0 <= zero["mean"] <= 1.0 and len(zero["scores"]) == sel["n_val"]


def test_dspy_metric_carries_the_parts_of_a_set_level_metric():
    class Reader:
        name = "fixed"

        def answer(self, question: str, context: str) -> str:
            return context

    dr = dspy_metric("dr", reader=Reader())
    assert [p.metric_name for p in dr.parts] == ["d-f1", "rouge-l"]
    assert all(p.reader_name == "fixed" for p in dr.parts)
    assert dspy_metric("str-em").parts == ()


def test_validation_questions_are_never_trained_on(use_lm, rag):
    writer_lm(use_lm, demos_help=True)
    train = load_dataset("demo:train")
    compiled, report = compile_program(rag, train, optimizer="labeled",
                                       metric=dspy_metric("str-em"), k=10, select=True,
                                       select_val=2)
    assert report.settings["selection"]["n_val"] == 2
    shown = {d.question for _, p in compiled.named_predictors() for d in p.demos}
    # 10 training questions, 2 held out: at most 8 can be demos, and none is a held-out one
    assert 0 < len(shown) <= 8


def test_writer_only_candidates_reuse_the_upstream_calls(use_lm, rag):
    engine = writer_lm(use_lm, demos_help=True)
    before = len(engine.calls)
    _, report = _compile(rag, select=True)
    rows = _rows(report)
    n = report.settings["selection"]["n_val"]
    # a full candidate pays clarify + writer per question ...
    assert rows["zero-shot"]["lm_calls"] == 2 * n
    assert rows["labeled"]["lm_calls"] == 2 * n
    # ... the writer-only variants pay the writer alone: clarify comes from memory
    for label in ("labeled+writer=none", "labeled+writer=gold:1"):
        assert rows[label]["memo_hits"] >= n
        assert rows[label]["lm_calls"] <= n
    # the input program is the zero-shot one here: scored once, listed as the same
    assert rows["input"]["same_as"] == "zero-shot" and rows["input"]["lm_calls"] == 0
    assert len(engine.calls) - before == sum(r["lm_calls"] for r in rows.values())


def test_validation_questions_in_flight_at_once_give_the_same_table(use_lm, rag):
    """threads=2 answers two validation questions side by side (an LM with two slots):
    the same scores, in the questions' order, the same LM calls counted and memo hits."""
    writer_lm(use_lm, demos_help=True)
    _, serial = _compile(rag, select=True)
    writer_lm(use_lm, demos_help=True)
    _, parallel = _compile(rag, select=True, threads=2)
    for label, row in _rows(serial).items():
        other = _rows(parallel)[label]
        assert other["scores"] == row["scores"]
        assert (other["lm_calls"], other["memo_hits"]) == (row["lm_calls"], row["memo_hits"])
    assert parallel.selection_answers == serial.selection_answers


def test_the_memo_answers_each_candidate_with_its_own_copy(use_lm, rag):
    """A candidate that edits a prediction it was given must not change what the next
    candidate is answered with from memory."""
    from ambiqa.optimizers.select import CallMemo

    writer_lm(use_lm, demos_help=False)
    memo = CallMemo()
    ex = load_dataset("demo:train")[0]
    with memo.installed(rag):
        first = rag.clarify.clarify(question=ex.question, passages="[1] A: alpha")
        first.pairs = "edited by the first candidate"
    with memo.installed(rag):
        second = rag.clarify.clarify(question=ex.question, passages="[1] A: alpha")
        second.pairs = "edited by the second"
    with memo.installed(rag):
        third = rag.clarify.clarify(question=ex.question, passages="[1] A: alpha")
    assert memo.misses == 1 and memo.hits == 2
    assert third.pairs not in ("edited by the first candidate", "edited by the second")


def test_under_three_training_questions_the_choice_is_skipped_and_said(use_lm, rag):
    writer_lm(use_lm, demos_help=True)
    _, report = compile_program(rag, load_dataset("demo:train")[:2], optimizer="labeled",
                                metric=dspy_metric("str-em"), k=1, select=True)
    assert "too few" in report.settings["selection"]["skipped"]


# ---- demo plans -------------------------------------------------------------------------------
def test_demo_plan_parses_and_names_predictors_every_way(rag):
    plan = parse_plan("writer=gold:1, clarify=none,long_answer.write=keep".replace(
        ",long_answer.write=keep", ""), default_k=2)
    assert plan == {"writer": DemoSource("gold", 1), "clarify": DemoSource("none")}
    assert parse_plan("write=signal") == {"write": DemoSource("signal", 2)}
    assert parse_plan("write=gold:0") == {"write": DemoSource("none")}
    for key in ("write", "long_answer.write", "WriteLongAnswer", "writer"):
        assert match_predictor(rag, key) == "long_answer.write"
    with pytest.raises(ConfigError, match="no predictor 'verifier'") as err:
        match_predictor(rag, "verifier")
    assert "clarify.clarify (ClarifyFromPassages)" in err.value.hint
    for bad in ("write=fancy", "write", "write=gold:x", "write=none:2", "write=gold:1,write=none"):
        with pytest.raises(ConfigError):
            parse_plan(bad)


def test_demo_plan_sources_compose(use_lm, rag):
    engine = writer_lm(use_lm, demos_help=False)  # the writer, demo-less, states the readings
    train = load_dataset("demo:train")
    program = rag.deepcopy()
    applied = apply_plan(program, parse_plan("clarify=gold:2,writer=none"), train)
    preds = dict(program.named_predictors())
    assert len(preds["clarify.clarify"].demos) == 2 and preds["long_answer.write"].demos == []
    assert applied["clarify.clarify"] == {"source": "gold:2", "demos": 2}
    assert not engine.calls  # gold and none cost no LM call
    # the writer's own signal: one traced pass, demos that state every reading given
    applied = apply_plan(program, parse_plan("writer=signal:1"), train[:4],
                         metric=dspy_metric("str-em"))
    assert applied["long_answer.write"]["demos"] == 1
    demo = preds["long_answer.write"].demos[0]
    assert demo.long_answer.startswith("Answers:")
    with pytest.raises(ConfigError, match="no gold demos"):
        apply_plan(program, parse_plan("writer=gold:1"), load_dataset("demo:train")[:0] or
                   [dspy.Example(question="q?").with_inputs("question")])


def test_plan_and_choice_are_recorded_reloaded_and_exported(use_lm, rag, tmp_path):
    writer_lm(use_lm, demos_help=True)
    out = tmp_path / "rag.json"
    result = ambiqa.compile(rag, load_dataset("demo:train"), optimizer="labeled", k=2,
                            metric="str-em", demos="clarify=gold:1", out=out)
    opt = read_artifact(out)["manifest"]["optimizer"]
    assert opt["demo_plan"]["clarify.clarify"] == {"source": "gold:1", "demos": 1}
    assert opt["selection"]["shipped"] == result.report.settings["selection"]["shipped"]
    reloaded = load_artifact(out, retriever=rag.retriever)
    assert {n: len(p.demos) for n, p in reloaded.named_predictors()} == \
        {n: len(p.demos) for n, p in result.program.named_predictors()}
    text = "\n".join(provenance(read_artifact(out)["manifest"]))
    assert "demos per predictor: clarify.clarify=gold:1 (1)" in text
    assert "chosen on the validation split" in text and "zero-shot" in text
    # every candidate's answer to every validation question, beside the artifact (the
    # manifest keeps only the scores); duplicates of a scored candidate add no rows
    import json
    side = [json.loads(line) for line in
            (tmp_path / "rag.selection.jsonl").read_text().splitlines()]
    sel = opt["selection"]
    scored = [r for r in sel["candidates"] if not r.get("same_as")]
    assert len(side) == sel["n_val"] * len(scored)
    assert {r["candidate"] for r in side} == {r["label"] for r in scored}
    assert all("answers" not in r for r in sel["candidates"])
    zero = [r for r in side if r["candidate"] == "zero-shot"]
    assert [r["score"] for r in zero] == next(
        r["scores"] for r in sel["candidates"] if r["label"] == "zero-shot")
    assert all(isinstance(r["answer"], str) and r["question"] for r in zero)


# ---- the registry -----------------------------------------------------------------------------
def test_a_setting_no_teleprompter_reads_is_refused(use_lm, rag):
    """compile_program hands its teleprompter settings to the teleprompter's class; a name
    none of them reads is a typo, refused before any LM call."""
    engine = writer_lm(use_lm, demos_help=True)
    with pytest.raises(ConfigError, match="no teleprompter reads the setting") as err:
        _compile(rag, num_candiates=3)
    assert "num_candidates" in err.value.hint and engine.calls == []
    # a setting another teleprompter reads passes (the CLI passes every flag to every one)
    _compile(rag, knn_pool=4, gepa_rollouts=2)


def test_a_registered_teleprompter_is_found_by_compile_and_the_cli_names():
    @register_teleprompter
    class FirstTrainingQuestion(Teleprompter):
        name = "first-question"
        summary = "every predictor shows the first training question's gold demo"

        def compile(self, student, job):
            from ambiqa.optimizers.demos import labeled_demos
            from ambiqa.optimizers.teleprompters import apply_labeled

            compiled = student.deepcopy()
            apply_labeled(compiled, labeled_demos(job.trainset[:1]), 1, job.seed)
            return compiled

    assert "first-question" in teleprompter_names()
    assert check_teleprompter("first-question") == "first-question"
    assert get_teleprompter("first-question") is FirstTrainingQuestion
    program = VanillaRAG(InMemoryRetriever(load_corpus(demo_corpus_path())), k=2)
    compiled, report = compile_program(program, load_dataset("demo:train"),
                                       optimizer="first-question")
    assert report.optimizer == "first-question"
    assert dict(compiled.named_predictors())["clarify.clarify"].demos
    with pytest.raises(ConfigError, match="unknown teleprompter"):
        get_teleprompter("no-such")


def test_builtin_teleprompters_load_lazily_with_their_summaries():
    from ambiqa.optimizers.registry import BUILTIN, teleprompter_summaries

    assert tuple(BUILTIN) == teleprompter_names()[:len(BUILTIN)]
    for name in BUILTIN:
        cls = get_teleprompter(name)
        assert cls.name == name and cls.summary == teleprompter_summaries()[name]


# ---- signals for clarify and the writer -------------------------------------------------------
GOLD = {"qa_pairs": [{"question": "a?", "short_answers": ["Paris"]},
                     {"question": "b?", "short_answers": ["Lyon"]}],
        "long_answers": ["In one sense Paris; in another sense Lyon, which is the answer too."]}


def test_clarify_signal_rewards_coverage_and_penalises_duplicates():
    both = [{"question": "x", "answer": "Paris"}, {"question": "y", "answer": "Lyon"}]
    dup = [{"question": "x", "answer": "Paris"}, {"question": "y", "answer": "paris"}]
    assert clarify_score(both, GOLD) == 1.0
    assert clarify_score(dup, GOLD) == 0.25  # half covered x half distinct
    assert clarify_score([], GOLD) == 0.0


def test_clarify_signal_penalises_readings_that_restate_the_question():
    asked = "Who won the World Cup?"
    specific = [{"question": "Who won the 2018 World Cup?", "answer": "Paris"},
                {"question": "Who won the women's World Cup in 2019?", "answer": "Lyon"}]
    echo = [{"question": "Who won the world cup", "answer": "Paris"},
            {"question": "Who won the 2019 World Cup?", "answer": "Lyon"}]
    assert clarify_score(specific, GOLD, asked) == 1.0
    assert clarify_score(echo, GOLD, asked) == 0.5  # one of two pairs only restates
    assert clarify_score(echo, GOLD) == 1.0  # without the asked question nothing is judged
    assert restates("Won the World Cup?", asked) and not restates("Who won in 2018?", asked)


def test_writer_signal_wants_every_reading_given_in_the_references_length():
    given = given_answers("- a? -> Paris\n- b? -> Lyon\n- c? -> paris")
    assert given == ["Paris", "Lyon"]
    ref_len = len(GOLD["long_answers"][0].split())
    full = "Paris is one answer and Lyon is the other answer to this question."
    assert len(full.split()) == ref_len
    assert writer_score(full, given, GOLD) == 1.0
    longer = full + " " + " ".join(["more"] * ref_len)
    assert writer_score(longer, given, GOLD) == pytest.approx(0.5)
    # one reading of two given, one gold pair of two, 1 word of ref_len
    assert writer_score("Paris.", given, GOLD) == pytest.approx(0.5 * 0.5 * 1 / ref_len)
    assert writer_score("", given, GOLD) == 0.0
    # given one reading, stating it whole in the references' length is not enough: the
    # answer must state the gold readings (compile-v5's demo: one wrong reading, "a
    # well-known fact")
    one = given_answers("- a? -> Marseille")
    sure = "Marseille is the answer, a well-known fact that is widely recognized by all."
    assert len(sure.split()) == ref_len and writer_score(sure, one, GOLD) == 0.0
    assert writer_score(full, given_answers("- a? -> Paris"), GOLD) == 1.0


def test_dry_run_states_the_cost_of_the_choice(capsys, tmp_path):
    import json

    from ambiqa.cli import main
    from ambiqa.testing_server import serve

    ambiqa.index(str(demo_corpus_path()), name="demo", kind="bm25", index_root=tmp_path)
    url, shutdown = serve(delay=0.0)
    try:
        assert main(["compile", "vanilla_rag", "--train", "demo:train", "--metric", "str-em",
                     "--index", "demo", "--index-root", str(tmp_path), "--optimizer", "labeled",
                     "--dry-run", "--lm", "openai/fake", "--api-base", url, "--no-cache"]) == 0
    finally:
        shutdown()
    est = json.loads(capsys.readouterr().out)
    per_q = est["per_question"]
    assert per_q["writer_lm_calls"] == 1 and est["n_select"] == 3 and est["n_variants"] == 3
    assert per_q["clarify_lm_calls"] == 1
    # zero-shot and the compiled program in full, the two writer variants at one call each,
    # the clarify-and-writer variant at two
    assert est["selection_lm_calls"] == round(3 * (2 * per_q["lm_calls"] + 1 + 1 + 2))


def test_each_variant_pays_the_calls_of_the_predictors_it_changes() -> None:
    from ambiqa.optimizers.compile import DEFAULT_VARIANTS
    from ambiqa.optimizers.estimate import variant_lm_calls

    per_q = {"lm_calls": 6.0, "writer_lm_calls": 1.0, "clarify_lm_calls": 1.5}
    # writer=none, writer=gold:1 (one writer call each), clarify=none+writer=none (both)
    assert variant_lm_calls(per_q, DEFAULT_VARIANTS) == 1.0 + 1.0 + (1.5 + 1.0)
    # a plan that changes an upstream step re-runs what follows it: priced as the program
    assert variant_lm_calls(per_q, [{"verify": "signal:2", "writer": "none"}]) == 6.0
    # a sample that measured no writer call (it went closed book) still prices the writer
    assert variant_lm_calls({"lm_calls": 4.0}, [{"writer": "signal:1"}]) == 1.0


def test_a_variant_is_priced_by_the_predictor_its_key_matches_in_the_program() -> None:
    from ambiqa.optimizers.estimate import variant_lm_calls
    from ambiqa.signatures.answering import WriteLongAnswer
    from ambiqa.signatures.disambiguation import ClarifyFromPassages
    from ambiqa.signatures.verification import VerifyRetrieval

    class Prog(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.clarify = dspy.Predict(ClarifyFromPassages)
            self.check = dspy.Predict(VerifyRetrieval)
            self.compose = dspy.Predict(WriteLongAnswer)

    per_q = {"lm_calls": 6.0, "writer_lm_calls": 1.0, "clarify_lm_calls": 1.5}
    # "compose" and "clarify" name downstream predictors by path, whatever the role words
    assert variant_lm_calls(per_q, [{"compose": "none", "clarify": "none"}], Prog()) == 2.5
    assert variant_lm_calls(per_q, [{"check": "signal:2"}], Prog()) == 6.0
    with pytest.raises(ConfigError, match="no predictor"):
        variant_lm_calls(per_q, [{"typing": "none"}], Prog())


def test_signal_and_bootstrap_sources_cost_a_pass_over_the_training_questions() -> None:
    from ambiqa.optimizers.demo_plan import parse_plan
    from ambiqa.optimizers.estimate import estimate, training_passes

    plans = [parse_plan(t) for t in ("writer=signal:1", "writer=signal:2",
                                     "typing=signal:2,writer=signal:1",
                                     "clarify=none,writer=signal:1", "writer=gold:1")]
    # the first three trace the same program (the second pass replays from the response
    # cache); clarify=none traces another; gold runs nothing
    assert training_passes(plans) == 2
    assert training_passes([], parse_plan("verify=bootstrap:2"), predictor_signal=True) == 2
    per_q = {"lm_calls": 6.0, "input_tokens": 3000.0, "output_tokens": 200.0,
             "writer_lm_calls": 1.0}
    est = estimate(per_q, optimizer="none", n_train=24, n_select=12, variants=plans[:2],
                   passes=training_passes(plans[:2]))
    assert est["training_pass_lm_calls"] == 24 * 6
    assert est["lm_calls"] == 24 * 6 + 12 * 6 * 2 + 12 * 2


def test_gold_writer_demos_are_those_in_the_references_form():
    """A compiled writer copies its demos' length: the gold demos picked for it are the ones
    stating every reading they list at the pool's typical length, not a random one-liner;
    other predictors keep the seeded random sample."""
    import random

    from ambiqa.optimizers.demos import pick_gold

    def demo(answer: str, pairs: str) -> dspy.Example:
        return dspy.Example(question="q?", interpretations=pairs, passages="",
                            long_answer=answer)

    two = "- A? -> alpha\n- B? -> beta"
    typical = ("The first reading is answered by alpha, as the passage on it says, while "
               "the second reading is answered by beta, which a later passage gives, so the "
               "question has two answers.")
    pool = [demo("Alpha.", two),                                      # one of two, too short
            demo(typical, two),                                        # both, typical length
            demo(typical.replace("beta", "gamma"), two),               # drops beta
            demo(" ".join([typical] * 4), two)] + [demo(typical, two)] * 3
    picked = pick_gold(pool, 1, random.Random(0), "WriteLongAnswer")
    assert picked[0].long_answer == typical
    assert all(d.long_answer == typical for d in pick_gold(pool, 3, random.Random(0),
                                                            "WriteLongAnswer"))
    # any other signature: the same seeded sample as before
    assert pick_gold(pool, 2, random.Random(5), "ClarifyFromPassages") == \
        random.Random(5).sample(pool, 2)
