"""benchmarks/writer_pool.py: what Diva's writer was handed and what the writer signal made of
it, on hand-made trace records (the real pass replays a compile's calls)."""

from __future__ import annotations

import dspy

from ambiqa.optimizers.signals import Step, TraceRecord
from benchmarks import writer_pool

EX = dspy.Example(question="Who played the Weasley twins?",
                  qa_pairs=[{"question": "Fred?", "short_answers": ["James Phelps"]},
                            {"question": "George?", "short_answers": ["Oliver Phelps"]}],
                  long_answers=["Fred was played by James Phelps and George by Oliver Phelps, "
                                "his twin brother."]).with_inputs("question")


def _record(interpretations: str, answer: str) -> TraceRecord:
    step = Step("long_answer.write", "WriteLongAnswer",
                {"question": EX.question, "interpretations": interpretations, "passages": ""},
                {"long_answer": answer})
    return TraceRecord(EX, dspy.Prediction(answer=answer), 0.5, [step])


def test_one_confident_reading_is_no_demo_and_both_readings_are():
    both = "Fred was played by James Phelps and George by Oliver Phelps, twin brothers."
    one = "The twins were played by James Phelps, a well-known fact known to all of us."
    rows = writer_pool.pool_rows([
        _record("- Who played Fred? -> James Phelps", one),
        _record("- Who played Fred? -> James Phelps\n- Who played George? -> Oliver Phelps",
                both)])
    assert [r["given"] for r in rows] == [2, 1]  # best signal first
    assert rows[0]["right"] and rows[0]["str_em"] == 1.0
    # given one reading and stating it whole: half the gold pairs, so below the bar
    assert not rows[1]["right"] and rows[1]["str_em"] == 0.5
    text = writer_pool.render({"command": "c", "train": "t", "questions": 2, "traced": 2,
                               "writer_calls": 2, "given_one": 1, "gold_several": 2,
                               "right": 1, "rows": rows})
    assert "Given one reading: **1 of 2**" in text and text.count("| yes |") == 1


def test_clarify_rows_count_pairs_that_only_restate_the_question():
    pairs = [{"question": "Who played the Weasley twins?", "answer": "James Phelps"},
             {"question": "Who played George Weasley?", "answer": "Oliver Phelps"}]
    step = Step("clarify", "ClarifyFromPassages", {"question": EX.question, "passages": ""},
                {"pairs": pairs})
    rows = writer_pool.clarify_rows([TraceRecord(EX, dspy.Prediction(answer=""), 0.4, [step])])
    assert len(rows) == 1 and rows[0]["restating"] == 1 and rows[0]["distinct_answers"] == 2
    assert rows[0]["signal"] == 0.5  # both gold answers covered, one of two pairs specific
    text = writer_pool.render_clarify({"command": "c", "train": "t", "questions": 1,
                                       "traced": 1, "clarify_calls": 1, "right": 1,
                                       "restating_calls": 1, "rows": rows})
    assert "only restates the asked question: **1**" in text
    assert "Who played George Weasley? -> Oliver Phelps" in text
