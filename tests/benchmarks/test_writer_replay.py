"""benchmarks/writer_replay.py: only the writer reaches the LM, with the stored pairs and
passages; a closed-book question keeps its answer; the demos are the compile's own draw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.steps import LongAnswerStep
from ambiqa.testing import scripted_lm
from benchmarks import writer_replay

RAG = {"path": "rag", "answer": "old answer", "verdict": "Useful",
       "interpretations": [{"question": "Who played Fred?", "answer": "James Phelps",
                            "passages": ["p1"]}],
       "passages": [{"id": "p1", "title": "Phelps twins", "text": "James played Fred.",
                     "score": 0.7}]}
CLOSED = {"path": "closed_book", "answer": "From memory.", "interpretations": [],
          "passages": []}


def _run_dir(tmp_path: Path, rows: list[tuple[str, dict]]) -> Path:
    lines = [json.dumps({"id": f"q{i}", "question": q, "prediction": p, "error": None})
             for i, (q, p) in enumerate(rows)]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def test_only_the_writer_is_called_with_the_stored_pairs_and_passages(tmp_path, use_lm):
    up = writer_replay.load_upstream(_run_dir(tmp_path, [("Who played the twins?", RAG),
                                                         ("Capital of France?", CLOSED)]))
    lm = use_lm(scripted_lm({"WriteLongAnswer": {"long_answer": "James Phelps played Fred."}}))
    prog = writer_replay.WriterReplay(LongAnswerStep(), up)
    out = prog(question="Who played the twins?")
    assert out.answer == "James Phelps played Fred." and out.verdict == "Useful"
    assert lm.engine.count("WriteLongAnswer") == 1 == len(lm.engine.calls)
    assert out.trace["lm_calls"] == 1
    prompt = json.dumps(lm.engine.calls[0], default=str)
    assert "Who played Fred? -> James Phelps" in prompt and "James played Fred." in prompt
    closed = prog(question="Capital of France?")
    assert closed.answer == "From memory." and len(lm.engine.calls) == 1  # no call on that path


def test_a_copy_without_passages_or_a_question_twice_is_refused(tmp_path):
    bare = {**RAG, "passages": []}
    with pytest.raises(ConfigError, match="no stored passages"):
        writer_replay.load_upstream(_run_dir(tmp_path, [("Q?", bare)]))
    with pytest.raises(ConfigError, match="appears twice"):
        writer_replay.load_upstream(_run_dir(tmp_path, [("Q?", RAG), ("Q?", RAG)]))


def test_a_plan_for_another_predictor_is_refused_before_any_data_loads():
    with pytest.raises(ConfigError, match="writer only"):
        writer_replay.writer_with_plan("clarify=gold:1", "asqa:train:36", 12)
    with pytest.raises(ConfigError, match="traced pass"):
        writer_replay.writer_with_plan("writer=signal:1", "asqa:train:36", 12)


def test_writer_length_reads_a_replayed_writers_demos_from_the_training_data():
    from benchmarks.writer_length import writer_demos

    spec = {"program": "writer_replay", "writer_replay": {
        "plan": "writer=gold:1", "train": "asqa:train:36", "select_val": 12, "seed": 0}}
    w = writer_demos(spec, Path("."))
    assert w["status"] == "compiled" and w["predictor"] == "long_answer.write"
    assert len(w["demos"]) == 1 and w["words"] == [w["demos"][0]["words"]] and w["words"][0] > 20
    none = writer_demos({**spec, "writer_replay": {**spec["writer_replay"],
                                                   "plan": "writer=none"}}, Path("."))
    assert none["words"] == [] and none["artifact"] == "writer replay: writer=none"


def test_answer_form_counts_the_writers_questions_only(tmp_path):
    def row(i, path, answer, cut):
        cost = {"by_signature": {"WriteLongAnswer": {"calls": 1, "output_tokens": 90,
                                                     "truncated": cut}}}
        pred = {**RAG, "path": path, "answer": answer}
        return json.dumps({"id": f"q{i}", "question": f"Q{i}?", "prediction": pred,
                           "error": None, "cost": cost})

    (tmp_path / "results.jsonl").write_text("\n".join([
        row(0, "rag", "James Phelps played Fred. The passage says so.", 1),
        row(1, "rag", "James Phelps played Fred.", 0),
        row(2, "closed_book", "From memory, one two three four five six.", 0)]) + "\n")
    form = writer_replay.answer_form(tmp_path)
    assert form["n_rag"] == 2 and form["meta"] == 1 and form["median_words"] == 6
    assert (form["writer_calls"], form["writer_cut"]) == (2, 1)
    text = writer_replay.render_form([form], "python -m benchmarks.writer_replay --report x")
    assert "| 2 | 6 |" in text and "| 1 of 2 |" in text


def test_an_artifact_whose_writer_shows_other_demos_is_refused(tmp_path):
    import dspy

    step = LongAnswerStep()
    step.write.demos = [dspy.Example(question="Q?", interpretations="- Q? -> A",
                                     passages="", long_answer="A is the answer.")]
    same = {"state": {"long_answer.write": {"demos": [dict(step.write.demos[0])]},
                      "clarify.clarify": {"demos": [{"question": "x"}]}, "verify": {}}}
    (tmp_path / "same.json").write_text(json.dumps(same))
    assert writer_replay.check_artifact(tmp_path / "same.json", step) == ["clarify.clarify"]
    other = {"state": {"long_answer.write": {"demos": []}}}
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(ConfigError, match="not the plan's 1"):
        writer_replay.check_artifact(tmp_path / "other.json", step)


def test_a_toc_row_records_no_path_and_its_writer_runs_on_it(tmp_path, use_lm):
    toc_row = {k: v for k, v in RAG.items() if k not in ("path", "verdict")}
    toc_row["tree"] = [{"id": 0, "question": "Who played the twins?"}]
    up = writer_replay.load_upstream(_run_dir(tmp_path, [("Who played the twins?", toc_row)]))
    lm = use_lm(scripted_lm({"WriteLongAnswer": {"long_answer": "James Phelps played Fred."}}))
    out = writer_replay.WriterReplay(LongAnswerStep(), up)(question="Who played the twins?")
    assert out.answer == "James Phelps played Fred." and out.tree == toc_row["tree"]
    assert lm.engine.count("WriteLongAnswer") == 1
    form = writer_replay.answer_form(tmp_path)  # counted as a writer question
    assert form["n_rag"] == 1


def test_tocs_writer_keeps_its_own_decoding_and_the_compiles_demo_draw():
    step, applied = writer_replay.writer_with_plan("writer=gold:1", "asqa:train:36", 12,
                                                   program_name="toc")
    diva, _ = writer_replay.writer_with_plan("writer=gold:1", "asqa:train:36", 12)
    assert applied["program"] == "toc" and len(step.write.demos) == 1
    assert step.lm_config == {} and diva.lm_config["temperature"] == 0.3  # ToC decodes at 0
    with pytest.raises(ConfigError, match="knows diva, toc"):
        writer_replay.writer_with_plan("writer=gold:1", "asqa:train:36", 12, program_name="eor")
