"""benchmarks/readings.py: readings per question over the questions both runs answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import readings


def _run(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _row(qid: str, question: str, readings: list[str], error: str | None = None) -> dict:
    return {"id": qid, "question": question, "error": error,
            "prediction": {"interpretations": [{"question": q, "answer": "x"}
                                                for q in readings]}}


def test_counts_readings_on_paired_questions_and_those_that_restate(tmp_path, capsys):
    a = _run(tmp_path, "a", [_row("1", "Who won the cup?", ["Who won the cup?"]),
                             _row("2", "Who sang it?", ["Who sang it first?", "Who sang it?"]),
                             _row("3", "When?", ["When?"])])
    b = _run(tmp_path, "b", [_row("1", "Who won the cup?", ["Who won the 2018 cup?",
                                                            "Who won the 2014 cup?"]),
                             _row("2", "Who sang it?", [], error="timeout")])
    table = readings.measure([a, b])
    assert [r["questions"] for r in table] == [1, 1]  # only question 1 is paired
    assert table[0] == {**table[0], "readings_mean": 1.0, "one_or_none": 1, "restating": 1}
    assert table[1] == {**table[1], "readings_mean": 2.0, "one_or_none": 0, "restating": 0}
    assert readings.main([str(a), str(b)]) == 0
    assert "| 1 | 2.00 | 0 | 0 of 2 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no results.jsonl"):
        readings.main([str(tmp_path / "none")])


def test_gold_coverage_counts_readings_whose_answer_is_a_gold_one(tmp_path):
    import dspy

    ex = dspy.Example(id="1", question="Who won the cup?",
                      qa_pairs=[{"question": "2018?", "short_answers": ["France"]},
                                {"question": "2014?", "short_answers": ["Germany"]}])
    row = {"id": "1", "question": "Who won the cup?", "prediction": {"interpretations": [
        {"question": "Who won the 2018 cup?", "answer": "France"},
        {"question": "Who won the 2014 cup?", "answer": "Brazil"}]}}
    run = _run(tmp_path, "a", [row])
    table = readings.measure([run], {"1": ex})
    assert table[0]["gold_covered"] == 0.5
    assert "| 0.500 |" in readings.render(table, "c")
    with pytest.raises(SystemExit, match="not in --data"):
        readings.measure([run], {})
