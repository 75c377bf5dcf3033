"""benchmarks/throughput_dr.py: a throughput run's stored answers read for D-F1, old side
paired with new on the questions both answered, and the issue's "same answers" reading."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ambiqa.errors import ConfigError
from benchmarks import throughput_dr


class WordReader:
    """Answers every question with the paragraph's first word: D-F1 is then 1 for a pair
    whose short answer opens the paragraph, 0 otherwise."""

    name = "first-word"

    def answer(self, question: str, context: str) -> str:
        return context.split()[0] if context.split() else ""


def _question(qid: str) -> SimpleNamespace:
    pair = SimpleNamespace(question=f"which {qid}?", short_answers=["Paris"])
    return SimpleNamespace(id=qid, qa_pairs=[pair], long_answers=["Paris is the answer."])


def _rows(tmp_path: Path) -> Path:
    rows = []
    for i in range(6):
        for side, answer in (("old", "Paris is the answer."), ("new", "Lyon is the answer.")):
            rows.append({"kind": "question", "program": "toc", "block": i // 2, "side": side,
                         "qid": f"q{i}", "answer": answer})
    rows.append({"kind": "question", "program": "toc", "block": 3, "side": "old",
                 "qid": "only-old", "answer": "Paris"})
    rows.append({"kind": "question", "program": "toc", "block": 3, "side": "new",
                 "qid": "q-failed", "answer": "", "error": "RuntimeError: boom"})
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                         encoding="utf-8")
    return tmp_path


def test_pairs_sides_on_shared_questions_and_reads_d_f1(tmp_path):
    run = _rows(tmp_path)
    questions = {q: _question(q) for q in [f"q{i}" for i in range(6)] + ["only-old",
                                                                        "q-failed"]}
    by_side = throughput_dr.as_eval_rows(throughput_dr.read_question_rows(run), questions,
                                         WordReader())
    got = throughput_dr.compare(by_side)["toc"]
    assert got["n"] == 6  # only-old and the new-only failure are not shared
    assert got["d-f1"]["old"] == pytest.approx(1.0)
    assert got["d-f1"]["new"] == pytest.approx(0.0)
    assert got["d-f1"]["diff"] == pytest.approx(-1.0)
    assert got["median_words"] == {"old": 4, "new": 4}
    assert throughput_dr.same_answers(got, "d-f1", "toc") == "missed"  # missed at any n
    assert throughput_dr.same_answers(got, "rouge-l", "toc") == "missed"
    text = throughput_dr.render({"toc": got}, "python -m benchmarks.throughput_dr RUN")
    assert "| toc | 6 |" in text and "+0%, within 20%" in text


def test_undecided_and_met_are_read_from_the_interval_and_the_issue_n():
    entry = {"n": 30, "dr": {"ci95": [-0.08, 0.05]}, "str-em": {"ci95": [-0.03, 0.10]}}
    assert throughput_dr.same_answers(entry, "dr", "toc") == "undecided at n = 30"
    assert throughput_dr.same_answers(entry, "str-em", "toc") == "met"
    # Diva asks n >= 60; a zero-width interval over 6 questions decides nothing either
    assert throughput_dr.same_answers(entry, "str-em", "diva") == \
        "undecided at n = 30 (asks n >= 60)"
    few = {"n": 6, "str-em": {"ci95": [0.0, 0.0]}}
    assert throughput_dr.same_answers(few, "str-em", "verdict").startswith("undecided at n = 6")


def test_unknown_question_or_missing_rows_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no rows.jsonl"):
        throughput_dr.read_question_rows(tmp_path)
    run = _rows(tmp_path)
    with pytest.raises(ConfigError, match="not in ASQA dev"):
        throughput_dr.as_eval_rows(throughput_dr.read_question_rows(run), {}, WordReader())
