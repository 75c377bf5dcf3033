"""The extractive D-F1 reader: span location, examples, striding, training, manifest, refusal.

The training tests run the real all-MiniLM-L6-v2 for a few steps on a few ASQA training
questions (tens of seconds on 2 cores), so CI exercises the whole ``ambiqa reader train`` path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ambiqa.errors import ConfigError, ModelError
from ambiqa.evaluation.extractive import (
    MANIFEST_NAME,
    WEIGHTS_NAME,
    Window,
    _chunks,
    best_span,
    locate_answer,
    windows,
)
from ambiqa.reader_training import (
    ReaderExample,
    TrainConfig,
    build_examples,
    build_hotpot_examples,
    build_passage_examples,
    featurize,
    holdout_examples,
    holdout_long_answer_examples,
    refuse_repo_output,
    remove_sentence,
    train_reader,
    training_examples,
)

# --------------------------------------------------------------------------------------------
# span location
# --------------------------------------------------------------------------------------------


def _span(context: str, aliases: list[str]) -> str | None:
    span = locate_answer(context, aliases)
    return None if span is None else context[span[0]:span[1]]


def test_locate_exact_and_offsets() -> None:
    ctx = "Episode 41 came out on April 28, 2017, and episode 42 on May 24, 2017."
    span = locate_answer(ctx, ["May 24, 2017"])
    assert span == (ctx.index("May 24"), ctx.index("May 24") + len("May 24, 2017"))


def test_locate_normalises_case_punctuation_articles() -> None:
    ctx = "It was recorded by the Beatles' producer, George Martin."
    # article and case differ, trailing possessive punctuation is trimmed off the span
    assert _span(ctx, ["The beatles"]) == "Beatles"
    # punctuation inside the alias is ignored: "U.S." matches "US"
    assert _span("He moved to the US in 1990.", ["U.S."]) == "US"
    # a span never carries the sentence's punctuation
    assert _span("The winner was (Smith).", ["smith"]) == "Smith"


def test_locate_aliases_earliest_wins_and_absent() -> None:
    ctx = "Cammie King played Bonnie; Eleanore Cammack King was her full name."
    assert _span(ctx, ["Eleanore Cammack King", "Cammie King"]) == "Cammie King"
    assert locate_answer(ctx, ["Leilah de Meza"]) is None
    assert locate_answer(ctx, ["", "the"]) is None  # aliases that normalise to nothing
    # whole tokens only: "King" is not found inside "Kingdom"
    assert locate_answer("The United Kingdom.", ["King"]) is None


def test_remove_sentence() -> None:
    ctx = "First one. The answer is 42. Last one."
    s = ctx.index("42")
    assert remove_sentence(ctx, s, s + 2) == "First one. Last one."


# --------------------------------------------------------------------------------------------
# examples
# --------------------------------------------------------------------------------------------

RECORDS = [
    {"id": "q1", "qa_pairs": [
        {"question": "When did episode 41 air?", "short_answers": ["April 28, 2017"]},
        {"question": "When did episode 43 air?", "short_answers": ["June 2, 2017"]},
    ], "long_answers": ["Episode 41 aired on April 28, 2017. It was popular."]},
    {"id": "q2", "qa_pairs": [
        {"question": "Who sang it first?", "short_answers": ["Bob Dylan", "Dylan"]},
    ], "long_answers": ["It was first sung by dylan in 1963.", "Bob Dylan sang it first."]},
]


def test_build_examples_counts_and_no_answer() -> None:
    examples, counts = build_examples(RECORDS)
    assert counts == {"questions": 2, "long_answers": 3, "answerable": 3, "no_answer": 1,
                      "no_answer_removed": 0}
    noans = [e for e in examples if e.answer_start is None]
    assert [e.question for e in noans] == ["When did episode 43 air?"]
    assert noans[0].answer == ""
    for e in examples:
        if e.answer_start is not None:
            assert e.context[e.answer_start:e.answer_start + len(e.answer)] == e.answer
    assert {e.answer for e in examples if e.answer} == {"April 28, 2017", "dylan", "Bob Dylan"}


def test_build_examples_removed_negatives() -> None:
    examples, counts = build_examples(RECORDS, removed_negatives=1.0)
    removed = [e for e in examples if e.qid.endswith("/removed")]
    # q1's answer sentence goes ("It was popular." is left); q2's contexts are one sentence
    assert counts["no_answer_removed"] == len(removed) == 1
    assert removed[0].context == "It was popular." and removed[0].answer_start is None


PASSAGE_RECORDS = [
    {"id": "q1", "qa_pairs": [
        {"question": "When did episode 41 air?", "short_answers": ["April 28, 2017"]},
        {"question": "When did episode 42 air?", "short_answers": ["May 24, 2017", "May 24"]},
        {"question": "Who directed it?", "short_answers": ["Nobody Known"]}],
     "gold_passages": [
        {"title": "Bunk'd", "text": "Episode 41 aired on April 28, 2017 on Disney."},
        {"title": "Bunk'd (season 2)", "text": "The season ended in May. Episode 42: May 24."},
        {"title": "Camp", "text": "A summer camp is a supervised program."},
        {"title": "Empty", "text": "   "}]},
]


def _check_spans(examples: list[ReaderExample]) -> None:
    for e in examples:
        if e.answer_start is not None:
            assert e.context[e.answer_start:e.answer_start + len(e.answer)] == e.answer
        else:
            assert e.answer == "" and locate_answer(e.context, e.aliases) is None


def test_build_passage_examples_spans_counts_and_negatives() -> None:
    examples, counts = build_passage_examples(PASSAGE_RECORDS, negatives_per_pair=1)
    _check_spans(examples)
    ans = [e for e in examples if e.answer_start is not None]
    assert [(e.question, e.answer) for e in ans] == [
        ("When did episode 41 air?", "April 28, 2017"), ("When did episode 42 air?", "May 24")]
    # one same-question negative per pair (3 pairs), never a passage holding that pair's answer
    noans = [e for e in examples if e.answer_start is None]
    assert len(noans) == 3
    assert counts == {"questions": 1, "passages": 3, "pairs": 3, "answerable": 2,
                      "no_answer": 3}
    # more negatives asked for than passages without the answer: capped
    _, c2 = build_passage_examples(PASSAGE_RECORDS, negatives_per_pair=5)
    assert c2["no_answer"] == 2 + 2 + 3


def test_build_hotpot_examples_supporting_and_distractor() -> None:
    records = [
        {"id": "h1", "question": "Which band sang it?", "answer": "The Beatles", "contexts": [
            {"title": "Song", "text": "It was recorded by the Beatles in 1965.",
             "is_supporting": True},
            {"title": "Studio", "text": "Abbey Road is a studio in London.",
             "is_supporting": True},
            {"title": "Other", "text": "The Rolling Stones were a band.",
             "is_supporting": False},
            {"title": "Leak", "text": "The Beatles also appear here.", "is_supporting": False}]},
        {"id": "h2", "question": "Are both American?", "answer": "yes", "contexts": [
            {"title": "A", "text": "yes, it is", "is_supporting": True}]},
    ]
    examples, counts = build_hotpot_examples(records)
    _check_spans(examples)
    assert counts == {"questions": 2, "answerable": 1, "no_answer": 1, "skipped_yes_no": 1}
    assert [e.answer for e in examples] == ["Beatles", ""]
    # the distractor is the one without the answer, never the supporting or the leaking one
    assert examples[1].context == "The Rolling Stones were a band."


def test_training_sources_are_counted_and_hold_no_evaluation_data(shared_data) -> None:
    from ambiqa.data.specs import load_dataset

    cfg = TrainConfig(asqa_passages=True, hotpotqa="hotpotqa:train", holdout=5)
    examples, counts = training_examples(cfg, limit=20)
    assert set(counts) >= {"long_answers_source", "asqa_passages", "hotpotqa"}
    total = sum(counts[s]["answerable"] + counts[s]["no_answer"]
                for s in ("asqa_passages", "hotpotqa"))
    base = counts["answerable"] + counts["no_answer"] + counts["no_answer_removed"]
    assert len(examples) == base + total and counts["asqa_passages"]["answerable"] > 0
    _check_spans(examples)
    # the held-out questions (last 5 of the 20) are in no source; they are the validation set
    train_ids = [str(r["id"]) for r in load_dataset("asqa:train")]
    held_ids = set(train_ids[-5:])
    assert not {e.qid.split("/")[0] for e in examples} & held_ids
    held = holdout_examples(cfg)
    assert held and {e.qid.split("/")[0] for e in held} <= held_ids
    held_long = holdout_long_answer_examples(cfg)
    assert held_long and {e.qid.split("/")[0] for e in held_long} <= held_ids
    assert holdout_examples(TrainConfig()) == holdout_long_answer_examples(TrainConfig()) == []
    # no evaluation split's question appears among the training examples
    dev_questions = {p["question"] for r in load_dataset("asqa:dev") for p in r["qa_pairs"]}
    dev_questions |= {str(r["question"]) for r in load_dataset("hotpotqa:dev")}
    assert not {e.question for e in examples} & dev_questions
    for bad in (dict(train="asqa:dev"), dict(hotpotqa="hotpotqa:dev")):
        with pytest.raises(ConfigError, match="evaluation data"):
            training_examples(TrainConfig(**bad), limit=2)


# --------------------------------------------------------------------------------------------
# striding
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from ambiqa.retrieval.encoder import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)


def test_chunks_cover_with_overlap() -> None:
    assert _chunks(5, 10, 3) == [(0, 5)]
    parts = _chunks(25, 10, 4)
    assert parts[0] == (0, 10) and parts[-1][1] == 25
    for (_a0, a1), (b0, _b1) in zip(parts, parts[1:], strict=False):
        assert a1 - b0 == 4  # consecutive windows share exactly `stride` items


def test_long_context_is_read_in_strides(tokenizer) -> None:
    context = " ".join(f"Sentence {i} mentions the town of Place{i}." for i in range(120))
    wins = windows(tokenizer, "Which town is mentioned?", context, max_length=64,
                   doc_stride=16)
    assert len(wins) > 10
    covered = set()
    for w in wins:
        assert len(w.input_ids) <= 64
        covered.update(w.offsets[w.context_start:w.context_end])
    n_tokens = len(tokenizer(context, add_special_tokens=False)["input_ids"])
    assert len(covered) == n_tokens  # every context token is in some window: nothing cut
    assert max(o[1] for o in covered) == len(context)  # up to the last character


def test_long_question_is_read_in_parts(tokenizer) -> None:
    question = "Which of these " + " ".join(f"word{i}" for i in range(100)) + " is it?"
    wins = windows(tokenizer, question, "Short context.", max_length=64, doc_stride=16,
                   max_question_tokens=32)
    q_tokens = tokenizer(question, add_special_tokens=False)["input_ids"]
    assert len(wins) > 1
    seen: list[int] = []
    for w in wins:
        seen += w.input_ids[1:w.context_start - 1]
        assert len(w.input_ids) <= 64
    assert set(q_tokens) <= set(seen)


def test_best_span_picks_answer_from_last_window(tokenizer) -> None:
    context = (" ".join(f"Filler sentence number {i}." for i in range(60))
               + " The answer is Zanzibar.")
    wins = windows(tokenizer, "What is the answer?", context, max_length=48, doc_stride=12)
    assert len(wins) > 3
    target = context.index("Zanzibar")
    starts, ends = [], []
    for w in wins:
        s = [0.0] * len(w.input_ids)
        e = [0.0] * len(w.input_ids)
        s[0] = e[0] = 1.0  # null score 2.0 in every window
        for i in range(w.context_start, w.context_end):
            off = w.offsets[i]
            if off[0] == target:
                s[i] = 5.0
            if off[1] == target + len("Zanzibar"):
                e[i] = 5.0
        starts.append(s)
        ends.append(e)
    answer, score, null = best_span(wins, starts, ends, context)
    assert answer == "Zanzibar" and score == 10.0 and null == 2.0
    # when the null span wins everywhere, the reader abstains
    flat = [[3.0] + [0.0] * (len(w.input_ids) - 1) for w in wins]
    assert best_span(wins, flat, flat, context)[0] == ""


def test_featurize_labels_point_at_the_answer(tokenizer) -> None:
    context = " ".join(f"Filler sentence number {i}." for i in range(40)) + " It aired in 1999."
    ex = ReaderExample("x", "When did it air?", context, "1999", context.index("1999"),
                       ["1999"])
    feats = featurize(tokenizer, [ex], max_length=48, doc_stride=12, max_question_tokens=16)
    labelled = [w for w in feats if w.meta["start"]]
    assert len(feats) > 3 and labelled  # windows without the answer point at [CLS]
    for w in labelled:
        a, b = w.offsets[w.meta["start"]], w.offsets[w.meta["end"]]
        assert context[a[0]:b[1]] == "1999"
    assert isinstance(feats[0], Window)


# --------------------------------------------------------------------------------------------
# training, manifest, loading, refusal (real MiniLM, a few steps)
# --------------------------------------------------------------------------------------------

TINY = dict(train="asqa:train", max_steps=3, batch_size=4, max_length=128, doc_stride=32,
            removed_negatives=0.5)


@pytest.fixture(scope="module")
def tiny_reader(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("readers") / "tiny"
    manifest = train_reader(out, config=TrainConfig(**TINY), dev="asqa:dev:3", limit=4,
                            save_every=2, log=lambda m: None)
    return out, manifest


def test_tiny_training_writes_a_manifest(tiny_reader) -> None:
    from ambiqa.fsutil import sha256_file

    out, manifest = tiny_reader
    on_disk = json.loads((out / MANIFEST_NAME).read_text())
    assert on_disk == manifest
    assert manifest["name"] == "extractive:tiny"
    assert manifest["steps"] == 3 and manifest["seed"] == 0
    assert manifest["data"]["train"] == "asqa:train" and manifest["data"]["limit"] == 4
    ex = manifest["examples"]
    assert ex["questions"] == 4 and ex["answerable"] > 0
    assert ex["answerable"] + ex["no_answer"] + ex["no_answer_removed"] <= ex["windows"]
    assert manifest["weights"]["sha256"] == sha256_file(out / WEIGHTS_NAME)
    val = manifest["validation"]
    assert val["data"] == "asqa:dev:3" and val["n_questions"] == 3
    assert 0.0 <= val["d_f1_human"] <= 1.0 and val["ms_per_question"] > 0
    assert not (out / "work").exists()  # the resumable state is dropped once finished
    assert not list(out.glob("*.bin")) and not list(out.glob("*.pt"))  # no pickles


def test_trained_reader_loads_and_reads_long_contexts(tiny_reader) -> None:
    from ambiqa.evaluation.extractive import ExtractiveReader
    from ambiqa.evaluation.reader import make_reader

    out, _ = tiny_reader
    reader = make_reader(str(out))
    assert isinstance(reader, ExtractiveReader) and reader.name == "extractive:tiny"
    long_context = "Filler text here. " * 400 + "The bridge opened in 1937."
    ans, score, null = reader.answer_with_scores("When did the bridge open?", long_context)
    assert isinstance(ans, str)
    assert ans == "" or ans in long_context
    assert reader.answer("q?", "") == ""


class _Killed(Exception):
    """Stands for the process being killed: raised from the training log."""


def _train_killed_after_step_2(out: Path, cfg: dict) -> dict:
    """Train a 4-step schedule saving every 2 steps, killed right after the step-2 save;
    returns the resumable progress record it left."""

    def kill_after_first_save(msg: str) -> None:
        if msg.startswith("step 2/4"):
            raise _Killed

    with pytest.raises(_Killed):
        train_reader(out, config=TrainConfig(**cfg), dev=None, limit=3, save_every=2,
                     log=kill_after_first_save)
    return json.loads((out / "work" / "progress.json").read_text())


def test_resume_after_a_kill_matches_an_unbroken_run(tmp_path, shared_data) -> None:
    cfg = dict(TINY, max_steps=4)
    unbroken = train_reader(tmp_path / "a", config=TrainConfig(**cfg), dev=None, limit=3,
                            save_every=2, log=lambda m: None)
    assert _train_killed_after_step_2(tmp_path / "b", cfg)["step"] == 2
    assert not (tmp_path / "b" / MANIFEST_NAME).exists()
    logs: list[str] = []
    resumed = train_reader(tmp_path / "b", config=TrainConfig(**cfg), dev=None, limit=3,
                           save_every=2, log=logs.append)
    assert any(m.startswith("resuming at step 2/4") for m in logs)
    assert resumed["weights"]["sha256"] == unbroken["weights"]["sha256"]


def test_corrupt_or_missing_checkpoint_is_refused(tiny_reader, tmp_path) -> None:
    from ambiqa.evaluation.reader import make_reader

    out, _ = tiny_reader
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    data = bytearray((bad / WEIGHTS_NAME).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / WEIGHTS_NAME).write_bytes(bytes(data))
    with pytest.raises(ModelError) as err:
        make_reader(str(bad))
    assert str(bad) in str(err.value) and "ambiqa reader train" in str(err.value)
    assert "sha256" in str(err.value)

    (bad / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(ModelError, match="corrupt reader manifest"):
        make_reader(str(bad))

    with pytest.raises(ModelError) as err:
        make_reader(str(tmp_path / "nowhere"))
    assert str(tmp_path / "nowhere") in str(err.value)
    assert "ambiqa reader train" in str(err.value)

    with pytest.raises(ModelError) as err:
        make_reader("extractive:not-built")
    assert "not-built" in str(err.value) and "ambiqa reader train" in str(err.value)


def test_default_reader_is_the_shipped_one_and_never_the_lm(tiny_reader, tmp_path,
                                                          monkeypatch) -> None:
    from ambiqa.evaluation.extractive import ExtractiveReader
    from ambiqa.evaluation.reader import LMReader, make_reader

    out, _ = tiny_reader
    monkeypatch.setenv("AMBIQA_CACHE", str(tmp_path))
    reader = make_reader(None)  # nothing in the cache: installed from the package
    assert isinstance(reader, ExtractiveReader) and reader.name == "extractive:minilm-asqa-v4"
    assert (tmp_path / "readers" / "minilm-asqa-v4" / MANIFEST_NAME).is_file()
    assert make_reader("extractive").name == "extractive:minilm-asqa-v4"
    assert isinstance(make_reader("lm"), LMReader)  # the LM grades only when asked
    shutil.copytree(out, tmp_path / "readers" / "minilm-asqa")
    assert make_reader("extractive:minilm-asqa").name == "extractive:minilm-asqa"
    # a damaged default is an error naming the repair, not a silent switch to another reader
    (tmp_path / "readers" / "minilm-asqa-v4" / WEIGHTS_NAME).write_bytes(b"broken")
    with pytest.raises(ModelError, match="corrupt reader checkpoint") as err:
        make_reader(None)
    assert "ambiqa reader install --force" in (err.value.hint or "")


def test_d_f1_with_the_extractive_reader_makes_no_lm_call(tiny_reader) -> None:
    import dspy

    from ambiqa.evaluation.reader import make_reader
    from ambiqa.evaluation.registry import dspy_metric
    from ambiqa.tracing import track

    out, _ = tiny_reader
    metric = dspy_metric("d-f1", reader=make_reader(str(out)))
    assert metric.reader_name == "extractive:tiny"
    example = dspy.Example(question="q", qa_pairs=[
        {"question": "When did episode 41 air?", "short_answers": ["April 28, 2017"]}],
        long_answers=["x"]).with_inputs("question")
    pred = dspy.Prediction(answer="Episode 41 aired on April 28, 2017.")
    with dspy.context(lm=None), track() as trace:
        score = metric(example, pred)
    assert 0.0 <= score <= 1.0
    assert trace.lm_calls == 0


def test_training_refuses_dev_data_and_repo_output(tmp_path) -> None:
    with pytest.raises(ConfigError, match="evaluation data"):
        train_reader(tmp_path / "x", config=TrainConfig(train="asqa:dev"), log=lambda m: None)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with pytest.raises(ConfigError, match="git repository"):
        refuse_repo_output(repo / "readers" / "r")
    refuse_repo_output(repo / ".ambiqa-cache" / "readers" / "r")  # the ignored test cache
    refuse_repo_output(Path(tmp_path / "elsewhere"))


def test_rerun_of_a_finished_reader_does_not_retrain(tiny_reader) -> None:
    out, manifest = tiny_reader
    logs: list[str] = []
    again = train_reader(out, config=TrainConfig(**TINY), dev="asqa:dev:3", limit=4,
                         log=logs.append)
    assert again == manifest and "already holds this reader" in logs[0]
    with pytest.raises(ConfigError, match="other options"):
        train_reader(out, config=TrainConfig(**dict(TINY, max_steps=5)), limit=4,
                     log=lambda m: None)


def test_null_threshold_calibration_maximises_squad2_f1() -> None:
    from ambiqa.reader_training import calibrate_null_threshold

    ans = ReaderExample("a", "q", "c", "x", 0, ["Paris"])
    noans = ReaderExample("b", "q", "c", "", None, ["Rome"])
    # two right answers with low margins, one no-answer example with a higher margin:
    # abstaining below -1 loses nothing, abstaining on the no-answer one would cost both
    margins = [-1.0, -0.5, 2.0]
    texts = ["Paris", "Paris", "Berlin"]
    cal = calibrate_null_threshold(margins, texts, [ans, ans, noans])
    assert cal["null_threshold"] < -1.0
    assert cal["f1_at_threshold"] == round(2 / 3, 4) and cal["f1_at_zero"] == 0.0
    # a confident wrong answer on a no-answer example and an unsure one: abstain on the latter
    cal = calibrate_null_threshold([3.0, -2.0], ["Paris", "Madrid"], [ans, noans])
    assert -2.0 <= cal["null_threshold"] < 3.0 and cal["f1_at_threshold"] == 1.0
    assert cal["abstain_share"] == 0.5


def test_tiny_reader_manifest_records_calibration(tiny_reader) -> None:
    from ambiqa.evaluation.reader import make_reader

    out, manifest = tiny_reader
    cal = manifest["calibration"]
    assert cal["data"] == "asqa:train" and cal["n"] > 0
    assert make_reader(str(out)).null_threshold == cal["null_threshold"]


def test_stop_at_step_rebuilds_a_clock_cut_reader_exactly(tmp_path, shared_data) -> None:
    """A reader once cut by --max-minutes records its steps; --stop-at-step N with the same
    schedule must give the very weights the cut run had at step N (sha256 equal)."""
    cfg = dict(TINY, max_steps=4)
    at_step_2 = _train_killed_after_step_2(tmp_path / "clock", cfg)
    logs: list[str] = []
    cut = train_reader(tmp_path / "cut", config=TrainConfig(**cfg), dev=None, limit=3,
                       save_every=1, stop_at_step=2, log=logs.append)
    assert cut["steps"] == 2 and cut["planned_steps"] == 4 and cut["schedule_cut"] is True
    assert cut["weights"]["sha256"] == at_step_2["weights_sha256"]
    assert any("step 2 reached at step 2/4" in m for m in logs)
    with pytest.raises(ConfigError, match="stop-at-step"):
        train_reader(tmp_path / "zero", config=TrainConfig(**cfg), stop_at_step=0,
                     log=lambda m: None)


def test_runs_record_which_weights_read_d_f1_and_the_lm_reads_only_when_asked(
        tiny_reader, tmp_path, use_lm, caplog, monkeypatch) -> None:
    import logging

    import ambiqa
    from ambiqa.data import load_dataset
    from ambiqa.evaluation.shipped_reader import shipped_spec
    from ambiqa.fsutil import sha256_file
    from ambiqa.testing import scripted_lm

    out, _ = tiny_reader
    use_lm(scripted_lm({"ClosedBookLongAnswer": {"long_answer": "It was 1933."},
                        "ReadShortAnswer": {"answer": "1933"}}))
    data = load_dataset("asqa:dev:2")
    run = ambiqa.evaluate("closed_book", data, metrics="d-f1", out=tmp_path / "x",
                          reader=str(out))
    identity = json.loads((tmp_path / "x" / "run.json").read_text())["reader_identity"]
    assert identity == {"name": "extractive:tiny", "kind": "extractive",
                        "weights_sha256": sha256_file(out / WEIGHTS_NAME)}
    assert identity["weights_sha256"] in (tmp_path / "x" / "report.md").read_text()
    assert run.spec.reader == "extractive:tiny"
    # the LM reads only when asked for (and then quietly: it was asked for) ...
    with caplog.at_level(logging.WARNING, logger="ambiqa.api.jobs"):
        ambiqa.evaluate("closed_book", data, metrics="d-f1", out=tmp_path / "y",
                        reader="lm")
    assert not [r for r in caplog.records if "LM stand-in" in r.getMessage()]
    lm_identity = json.loads((tmp_path / "y" / "run.json").read_text())["reader_identity"]
    assert lm_identity["kind"] == "lm" and "not comparable" in lm_identity["note"]
    # ... and on a machine that has no reader yet, none asked for, the shipped one reads
    monkeypatch.setenv("AMBIQA_CACHE", str(tmp_path / "empty-cache"))
    ambiqa.evaluate("closed_book", data, metrics="d-f1", out=tmp_path / "z")
    shipped = json.loads((tmp_path / "z" / "run.json").read_text())["reader_identity"]
    assert shipped == {"name": "extractive:minilm-asqa-v4", "kind": "extractive",
                       "weights_sha256": shipped_spec()["weights_sha256"]}
